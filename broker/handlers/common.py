"""What every request handler shares: a call's time budget, an answer's byte budget."""

from __future__ import annotations

DEFAULT_TIMEOUT_S = 10.0  # a call whose client set no deadline


def timeout(timeout_s: float | None) -> float:
    """A call's seconds: the client's deadline, DEFAULT_TIMEOUT_S when it set none."""
    return DEFAULT_TIMEOUT_S if timeout_s is None else max(0.0, timeout_s)


class ByteBudget:
    """The record bytes a Poll/Fetch answer may carry (client.fetch_bytes_max: the default and
    the cap of a request's max_bytes) and the gRPC message limit the answer must fit."""

    def __init__(self, fetch_bytes_max: int, message_bytes_max: int) -> None:
        self.fetch_bytes_max = fetch_bytes_max
        self.message_bytes_max = message_bytes_max

    def __call__(self, max_bytes: int) -> int:
        """The request's ``max_bytes``, 0 = ``fetch_bytes_max``, never more than that (a lone
        larger record still goes alone)."""
        return min(max_bytes or self.fetch_bytes_max, self.fetch_bytes_max)
