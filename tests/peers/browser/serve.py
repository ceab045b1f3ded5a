#!/usr/bin/env python3
"""Origin A for the browser test: serves this directory (page.html) and collects the page's report.

    python3 serve.py [--port N (0 = ephemeral)] [--report-file FILE]

Stdlib only (any python3). Binds 127.0.0.1, prints `LISTENING <port>` on stdout, then for every
POST /report one line `REPORT <the body as one JSON line>` on stdout (and, with --report-file, writes
the body to FILE atomically). Each request is logged as `REQ <METHOD> <path>` on stderr.
"""

import argparse
import json
import os
import sys
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

p = argparse.ArgumentParser()
p.add_argument("--port", type=int, default=0)
p.add_argument("--report-file")
args = p.parse_args()
HERE = os.path.dirname(os.path.abspath(__file__))


class Handler(SimpleHTTPRequestHandler):
    def log_message(self, format, *a):  # noqa: A002 - stdlib signature
        pass

    def end_headers(self):
        self.send_header("cache-control", "no-store")
        super().end_headers()

    def do_GET(self):
        print(f"REQ GET {self.path}", file=sys.stderr, flush=True)
        super().do_GET()

    def do_POST(self):
        print(f"REQ POST {self.path}", file=sys.stderr, flush=True)
        if self.path.split("?")[0] != "/report":
            self.send_error(404)
            return
        body = self.rfile.read(int(self.headers.get("content-length") or 0)).decode("utf-8", "replace")
        try:
            line = json.dumps(json.loads(body))  # normalise to one line
        except ValueError:
            line = json.dumps({"unparsable": body})
        if args.report_file:
            tmp = args.report_file + ".tmp"
            with open(tmp, "w") as f:
                f.write(line + "\n")
            os.replace(tmp, args.report_file)
        print(f"REPORT {line}", flush=True)
        self.send_response(204)
        self.end_headers()


server = ThreadingHTTPServer(("127.0.0.1", args.port), partial(Handler, directory=HERE))
print(f"LISTENING {server.server_address[1]}", flush=True)
try:
    server.serve_forever()
except KeyboardInterrupt:
    pass
