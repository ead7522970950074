"""An OTLP/HTTP trace receiver, independent of the operator's Rust code: it decodes each
`POST /v1/traces` with the `opentelemetry-proto` package's own messages and prints every span
as one JSON line on standard output.

The first line printed is `listening on PORT` (port 0 is asked for, so the system picks one).
Each span line holds: name, traceId, spanId, parentSpanId (hex), attributes (a mapping of
strings), links (trace ids in hex), events (name and attributes) and the resource's
service.name. The receiver runs until it is killed.
"""

import http.server
import json
import sys

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def text(any_value):
    """The value of an OTLP AnyValue as text."""
    kind = any_value.WhichOneof("value")
    if kind is None:
        return ""
    value = getattr(any_value, kind)
    if kind == "bool_value":
        return "true" if value else "false"
    return str(value)


def attributes(key_values):
    return {kv.key: text(kv.value) for kv in key_values}


class Receiver(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            service = attributes(resource_spans.resource.attributes).get("service.name", "")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    print(
                        json.dumps(
                            {
                                "name": span.name,
                                "traceId": span.trace_id.hex(),
                                "spanId": span.span_id.hex(),
                                "parentSpanId": span.parent_span_id.hex(),
                                "attributes": attributes(span.attributes),
                                "links": [link.trace_id.hex() for link in span.links],
                                "events": [
                                    {"name": e.name, "attributes": attributes(e.attributes)}
                                    for e in span.events
                                ],
                                "service": service,
                            }
                        ),
                        flush=True,
                    )
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format, *args):
        # Standard output carries the spans alone.
        pass


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
