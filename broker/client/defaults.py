"""The Python client's defaults (Kafka's producer/consumer defaults where they have a twin).

The broker's ``client`` settings section (raftq.config.ClientSettings: YAML and ``RAFTQ_CLIENT__*``,
validated) starts from these values and uses them for broker-to-broker forwarding; the
client reads them here, so it needs neither the broker's configuration nor dynaconf.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClientDefaults:
    request_timeout_ms: int = 30_000
    linger_ms: int = 5
    batch_records_max: int = 10_000
    # Encoded bytes of the records in one Send: at most what one raft entry carries.
    batch_bytes_max: int = 1_048_576
    # Record bytes in one Poll/PollStream/Fetch answer (Kafka's fetch.max.bytes).
    fetch_bytes_max: int = 4 * 1024 * 1024
    send_streams: bool = True
    # Kafka's buffer.memory and max.block.ms.
    buffer_memory_bytes: int = 33_554_432
    max_block_ms: int = 60_000
    # Kafka's delivery.timeout.ms and metadata.max.age.ms.
    delivery_timeout_ms: int = 120_000
    metadata_max_age_ms: int = 300_000


CLIENT_DEFAULTS = ClientDefaults()
