"""An OTLP/HTTP trace receiver for the tests: decodes what exporters send (`POST /v1/traces`,
protobuf, as the OpenTelemetry collector takes it) with the official OpenTelemetry protobuf
definitions (`opentelemetry-proto`), and hands the spans to the test as JSON.

    python otlp-receiver.py [--mode ok|refuse] [--stall SECONDS]

It binds 127.0.0.1 on a port of its own and prints `LISTENING <port>` (the test peers'
contract). `GET /spans` answers every span received so far, one JSON object per span: name,
kind (SERVER, CLIENT, INTERNAL), trace_id, span_id, parent (hex, "" for a root), status
(UNSET, OK, ERROR), status_message, attributes (key to value), links ([trace_id, span_id]
pairs), the resource's attributes, and start and end times (ns). `GET /exports` answers how
many export requests came in (counted as they arrive, before any stall).

For the tests of a collector that misbehaves:
- `--mode refuse`: answer every export 503 (a collector that refuses).
- `--stall SECONDS`: read each export, then answer only after SECONDS (a collector that
  hangs); its spans count once it answers.
"""

import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

LOCK = threading.Lock()
SPANS = []
EXPORTS = [0]
MODE = "ok"
STALL = [0.0]
KINDS = {v: k.replace("SPAN_KIND_", "") for k, v in Span.SpanKind.items()}
STATUS = {v: k.replace("STATUS_CODE_", "") for k, v in Status.StatusCode.items()}


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
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        with LOCK:
            if self.path == "/spans":
                body = json.dumps(SPANS).encode()
            elif self.path == "/exports":
                body = json.dumps(EXPORTS[0]).encode()
            else:
                body = None
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.read_body()
        with LOCK:
            EXPORTS[0] += 1
        if STALL[0] > 0:
            threading.Event().wait(STALL[0])
        if MODE == "refuse":
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        if self.headers.get("Content-Encoding", "").lower() == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = []
        for rs in request.resource_spans:
            resource = attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                for sp in ss.spans:
                    spans.append(
                        {
                            "name": sp.name,
                            "kind": KINDS.get(sp.kind, str(sp.kind)),
                            "trace_id": sp.trace_id.hex(),
                            "span_id": sp.span_id.hex(),
                            "parent": sp.parent_span_id.hex(),
                            "status": STATUS.get(sp.status.code, str(sp.status.code)),
                            "status_message": sp.status.message,
                            "attributes": attributes(sp.attributes),
                            "links": [[l.trace_id.hex(), l.span_id.hex()] for l in sp.links],
                            "events": [e.name for e in sp.events],
                            "resource": resource,
                            "start": sp.start_time_unix_nano,
                            "end": sp.end_time_unix_nano,
                        }
                    )
        with LOCK:
            SPANS.extend(spans)
        out = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def read_body(self):
        # The JavaScript exporter sends chunked bodies; http.server does not de-chunk.
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def log_message(self, *args):
        pass


def main():
    global MODE
    args = sys.argv[1:]
    if "--mode" in args:
        MODE = args[args.index("--mode") + 1]
    if "--stall" in args:
        STALL[0] = float(args[args.index("--stall") + 1])
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"LISTENING {server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
