"""A tiny OTLP/HTTP trace receiver for tests and benches: ``POST /v1/traces`` bodies (protobuf
``ExportTraceServiceRequest``) decoded into ``ReceivedSpan``s, on a free port the OS picks."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    service: str
    attributes: dict[str, Any]


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class OtlpReceiver:
    """``with OtlpReceiver() as receiver:`` serves ``receiver.endpoint`` (what ``OTEL_EXPORTER_OTLP_ENDPOINT``
    takes) until the block ends; ``spans()`` is what arrived so far."""

    def __init__(self) -> None:
        self._spans: list[ReceivedSpan] = []
        self._arrived = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                receiver._add(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: a test's output is its own."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def _add(self, request: ExportTraceServiceRequest) -> None:
        received = []
        for resource_spans in request.resource_spans:
            resource = {item.key: _value(item.value) for item in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            service=str(resource.get("service.name", "")),
                            attributes={item.key: _value(item.value) for item in span.attributes},
                        )
                    )
        with self._arrived:
            self._spans.extend(received)
            self._arrived.notify_all()

    def spans(self) -> list[ReceivedSpan]:
        with self._arrived:
            return list(self._spans)

    def wait_for(self, found: Callable[[list[ReceivedSpan]], bool], timeout_s: float = 60.0) -> bool:
        """True once ``found(spans)`` holds (checked as each export arrives), False after ``timeout_s``."""
        with self._arrived:
            return self._arrived.wait_for(lambda: found(list(self._spans)), timeout=timeout_s)


def main() -> None:
    """A receiver in a process of its own (``python -m tests.otlp_receiver``), so decoding what it gets does
    not weigh on the process being measured: prints its endpoint, then, once its standard input closes, how
    many spans it received."""
    with OtlpReceiver() as receiver:
        print(receiver.endpoint, flush=True)
        sys.stdin.read()
        print(len(receiver.spans()), flush=True)


if __name__ == "__main__":
    main()
