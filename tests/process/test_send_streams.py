"""SendStreams against a real gRPC server on 127.0.0.1 that refuses every stream at once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from raftq.client.streams import SendStreams
from raftq.proto import api_pb2, api_pb2_grpc


class _RefusingProducer(api_pb2_grpc.ProducerServicer):
    """A broker with no send stream slot free: every SendStream ends RESOURCE_EXHAUSTED
    before reading a request."""

    def SendStream(self, request_iterator: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "no send stream slot free")


@pytest.fixture
def refusing_address() -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    api_pb2_grpc.add_ProducerServicer_to_server(_RefusingProducer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(0)


def test_a_stream_refused_before_its_first_request_marks_the_broker_refused(
    refusing_address: str,
) -> None:
    """The refusal can arrive before a request is queued on the new stream: the sender then
    goes unary AND remembers the refusal (it used to open two more streams per send, each
    refused, and never said so)."""
    with grpc.insecure_channel(refusing_address) as channel:
        opened: list[Any] = []

        def open_call(requests: Any) -> Any:
            call = api_pb2_grpc.ProducerStub(channel).SendStream(requests)
            opened.append(call)
            deadline = time.monotonic() + 10
            while call.done() is False:  # the refusal has arrived before anything is sent
                assert time.monotonic() < deadline, "the server never refused the stream"
                time.sleep(0.01)
            return call

        streams = SendStreams(lambda _address: open_call)
        try:
            answers: list[Any] = []
            request = api_pb2.SendRequest(topic="t", values=[b"x"], request_id=1)
            deadline = time.monotonic() + 10
            sent = True
            while sent:  # until the stream's reader has seen the refusal
                assert time.monotonic() < deadline, "the refused stream was never found broken"
                sent = streams.send(refusing_address, request, 5.0, lambda *a: answers.append(a))
                if sent:
                    answers.clear()
            calls = len(opened)
            # Refused lately: no stream is opened for the next sends, they go unary.
            for request_id in range(2, 6):
                request = api_pb2.SendRequest(topic="t", values=[b"x"], request_id=request_id)
                assert not streams.send(refusing_address, request, 5.0, lambda *a: None)
            assert len(opened) == calls
        finally:
            streams.close()
