"""A fake OpenTelemetry collector for tests/tests/traces.rs: OTLP/HTTP with protobuf bodies,
decoded with the official protobufs (PyPI `opentelemetry-proto`).

It listens on 127.0.0.1 at a free port and prints `listening PORT` first. `POST /v1/traces`
takes an `ExportTraceServiceRequest` and answers an empty `ExportTraceServiceResponse`;
`GET /spans` answers every span received so far as JSON: trace and span ids in hex, the
parent's, the name, the kind, the attributes and the resource's, plus `raw`, every request
body as Latin-1 text, so a test can look for text in what was sent, decoded or not.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

LOCK = threading.Lock()
SPANS = []
RAW = []


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind) if kind else None


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_response(400)
            self.end_headers()
            return
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        found = []
        for rs in request.resource_spans:
            resource = attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                for span in ss.spans:
                    found.append({
                        "traceId": span.trace_id.hex(),
                        "spanId": span.span_id.hex(),
                        "parentSpanId": span.parent_span_id.hex(),
                        "name": span.name,
                        "kind": span.kind,
                        "attributes": attributes(span.attributes),
                        "resource": resource,
                    })
        with LOCK:
            SPANS.extend(found)
            RAW.append(body.decode("latin-1"))
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def do_GET(self):
        with LOCK:
            answer = json.dumps({"spans": SPANS, "raw": "".join(RAW)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening {server.server_address[1]}", flush=True)
    # Stops when the test closes its stdin (or dies).
    threading.Thread(target=lambda: (sys.stdin.read(), server.shutdown()), daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
