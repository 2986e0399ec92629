"""A development PKI and token set: ``raftq dev ca`` and ``raftq dev up --tls``.

Writes, under one directory (``<data-dir>/tls`` by default)::

    ca.pem, ca.key            a self-signed CA (ECDSA P-256), valid DAYS days
    broker.pem, broker.key    one certificate every dev broker serves (SAN 127.0.0.1, ::1,
                              localhost, plus any --host); server and client auth, so brokers
                              present it to each other under mutual TLS
    client.pem, client.key    a client certificate for mutual TLS
    tokens.json               principal -> token (mode 0600): what clients send
    auth.yaml                 principal -> token_sha256 + ACLs: what brokers read
                              (security.auth_file); the tokens themselves are not in it

Dev principals: ``admin`` (every operation on every topic, group and txn app), ``producer``
(produce on every topic and txn app: the Spark writer), ``consumer`` (consume on every topic
and group), ``reader`` (consume on ``public.*`` topics only, in any group).
Existing files are kept, so a restarted dev cluster keeps its CA and tokens; ``force``
replaces them. For development only: the CA key sits next to the certificates.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from raftq.transport.auth import token_digest

DAYS = 365
DEV_HOSTS = ("127.0.0.1", "::1", "localhost")
# principal -> [(auth-file key, globs, operations)]
DEV_PRINCIPALS: dict[str, list[tuple[str, list[str], list[str]]]] = {
    "admin": [
        ("topics", ["*"], ["produce", "consume", "admin"]),
        ("groups", ["*"], ["consume", "admin"]),
        ("txn_apps", ["*"], ["produce", "admin"]),
    ],
    "producer": [("topics", ["*"], ["produce"]), ("txn_apps", ["*"], ["produce"])],
    "consumer": [("topics", ["*"], ["consume"]), ("groups", ["*"], ["consume"])],
    "reader": [("topics", ["public.*"], ["consume"]), ("groups", ["*"], ["consume"])],
}


@dataclass(frozen=True)
class DevPki:
    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    @property
    def ca(self) -> Path:
        return self.path("ca.pem")

    @property
    def broker_cert(self) -> Path:
        return self.path("broker.pem")

    @property
    def broker_key(self) -> Path:
        return self.path("broker.key")

    @property
    def client_cert(self) -> Path:
        return self.path("client.pem")

    @property
    def client_key(self) -> Path:
        return self.path("client.key")

    @property
    def auth_file(self) -> Path:
        return self.path("auth.yaml")

    def tokens(self) -> dict[str, str]:
        tokens: dict[str, str] = json.loads(self.path("tokens.json").read_text())
        return tokens

    def broker_env(self, *, mutual: bool = False) -> dict[str, str]:
        """RAFTQ_SECURITY__* for a dev broker: TLS with this CA, tokens and ACLs on."""
        env = {
            "RAFTQ_SECURITY__TLS_CERT_FILE": str(self.broker_cert),
            "RAFTQ_SECURITY__TLS_KEY_FILE": str(self.broker_key),
            "RAFTQ_SECURITY__TLS_CA_FILE": str(self.ca),
            "RAFTQ_SECURITY__AUTH_REQUIRED": "true",
            "RAFTQ_SECURITY__AUTH_FILE": str(self.auth_file),
        }
        if mutual:
            env["RAFTQ_SECURITY__TLS_CLIENT_CA_FILE"] = str(self.ca)
        return env


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write_private(path, data)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "raftq development"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _san(hosts: tuple[str, ...]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _issue(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    common_name: str,
    hosts: tuple[str, ...],
    usages: list[x509.ObjectIdentifier],
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    if hosts:
        builder = builder.add_extension(_san(hosts), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _auth_yaml(tokens: dict[str, str]) -> str:
    lines = [
        "# raftq dev principals (raftq dev ca): token SHA-256 digests and ACLs.",
        "# The tokens are in tokens.json next to this file; brokers only need this one.",
        "principals:",
    ]
    for name, rules in DEV_PRINCIPALS.items():
        lines += [f"  {name}:", f'    token_sha256: "{token_digest(tokens[name])}"', "    acls:"]
        for key, names, operations in rules:
            lines.append(f"      - {key}: {json.dumps(names)}")
            lines.append(f"        operations: [{', '.join(operations)}]")
    return "\n".join(lines) + "\n"


def ensure_dev_pki(
    directory: str | os.PathLike[str], *, hosts: tuple[str, ...] = (), force: bool = False
) -> DevPki:
    """Create the dev CA, certificates, tokens and auth file under ``directory`` unless they
    all exist already (``force``: replace them). An existing auth file is rewritten from the
    existing tokens when this release's dev ACLs differ (a dev CA made before groups and txn
    apps had ACLs keeps working). ``hosts`` are added to the broker SAN."""
    pki = DevPki(Path(directory).resolve())
    names = ("ca.pem", "ca.key", "broker.pem", "broker.key", "client.pem", "client.key")
    wanted = (*names, "tokens.json", "auth.yaml")
    if not force and all(pki.path(n).is_file() for n in wanted):
        acls = _auth_yaml(pki.tokens())  # the dev ACLs of this release, same tokens
        if pki.auth_file.read_text() != acls:
            pki.auth_file.write_text(acls)
        return pki
    pki.directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    now = datetime.datetime.now(datetime.UTC)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("raftq dev CA"))
        .issuer_name(_name("raftq dev CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(pki.path("ca.key"), ca_key)
    _write_cert(pki.ca, ca_cert)
    both = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    all_hosts = tuple(dict.fromkeys((*DEV_HOSTS, *hosts)))
    key, cert = _issue(ca_key, ca_cert, "raftq dev broker", all_hosts, both)
    _write_key(pki.broker_key, key)
    _write_cert(pki.broker_cert, cert)
    key, cert = _issue(ca_key, ca_cert, "raftq dev client", (), [ExtendedKeyUsageOID.CLIENT_AUTH])
    _write_key(pki.client_key, key)
    _write_cert(pki.client_cert, cert)
    tokens = {name: secrets.token_urlsafe(32) for name in DEV_PRINCIPALS}
    _write_private(pki.path("tokens.json"), (json.dumps(tokens, indent=2) + "\n").encode())
    pki.auth_file.write_text(_auth_yaml(tokens))
    return pki


__all__ = ["DEV_PRINCIPALS", "DevPki", "ensure_dev_pki"]
