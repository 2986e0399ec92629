"""A broker's security wiring: client-port TLS, token authentication with ACLs, and TLS for the
calls it makes to other brokers' client ports. Built once from ``config.security``.

The raft port needs nothing here: MuxEndpoint authenticates peers with the cluster secret and
seals every frame (transport/raft/mux.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from raftq.config import BrokerConfig, load_auth_policy
from raftq.metadata.table import MemberInfo, Table
from raftq.transport.auth import AuthInterceptor, MemberLookup
from raftq.transport.tls import ChannelSecurity, open_channel, server_credentials


def members_of(table: Callable[[], Table]) -> MemberLookup:
    """``(group, member_id, wait_s) -> the member`` from this broker's copy of the metadata
    table, None for an unknown member after waiting up to ``wait_s`` for the copy to learn a
    member that joined through another broker (broker/handlers/groups.py waits as long before
    UNKNOWN_MEMBER)."""

    def lookup(group: str, member_id: str, wait_s: float) -> MemberInfo | None:
        deadline = time.monotonic() + wait_s
        while True:
            info = table().group(group)
            member = info.members.get(member_id) if info is not None else None
            if member is not None or time.monotonic() >= deadline:
                return member
            time.sleep(0.02)

    return lookup


def peer_security(config: BrokerConfig) -> ChannelSecurity | None:
    """How a broker reaches other brokers' client ports: TLS with ``security.tls_ca_file``,
    presenting its own certificate under mutual TLS. None when TLS is off."""
    sec = config.security
    if not sec.tls:
        return None
    mutual = bool(sec.tls_client_ca_file)
    return ChannelSecurity.from_files(
        tls_ca_file=sec.tls_ca_file,
        tls_cert_file=sec.tls_cert_file if mutual else None,
        tls_key_file=sec.tls_key_file if mutual else None,
    )


def peer_channels(config: BrokerConfig) -> Callable[[str], grpc.Channel]:
    """The ``channel_factory`` for an InternalClient made outside a Broker (e.g. joining)."""
    security = peer_security(config)
    limit = config.message_bytes_max
    return lambda address: open_channel(address, security, message_bytes_max=limit)


@dataclass(frozen=True)
class BrokerSecurity:
    credentials: grpc.ServerCredentials | None  # the client port's TLS; None = plaintext
    peers: ChannelSecurity | None  # how this broker reaches other brokers' client ports
    interceptor: AuthInterceptor | None  # None: no token needed
    message_bytes_max: int  # the gRPC message limit of calls to other brokers

    @classmethod
    def from_config(cls, config: BrokerConfig, table: Callable[[], Table]) -> BrokerSecurity:
        """Raises ConfigError (auth file) or InvalidArgument (unreadable PEM files)."""
        sec = config.security
        credentials = None
        if sec.tls:
            credentials = server_credentials(
                sec.tls_cert_file, sec.tls_key_file, sec.tls_client_ca_file
            )
        peers = peer_security(config)
        interceptor = None
        if sec.auth_required:
            policy = load_auth_policy(sec.auth_file)
            interceptor = AuthInterceptor(policy, members_of(table))
        return cls(credentials, peers, interceptor, config.message_bytes_max)

    def channel(self, address: str) -> grpc.Channel:
        """A channel to another broker's client port (the Internal service rides on it)."""
        return open_channel(address, self.peers, message_bytes_max=self.message_bytes_max)


__all__ = ["BrokerSecurity", "members_of", "peer_channels", "peer_security"]
