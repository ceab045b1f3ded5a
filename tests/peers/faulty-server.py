"""A small 2026-07-28 MCP server (Python standard library only) that does everything
`mcp-edge doctor` checks right, except the one defect it is started with
(`--defect NAME`), so a test can see each defect reported once, by the right check.

Defects: no-discover, generic-version-error, no-result-type, empty-session, no-header-check,
no-origin-check, shuffled-list, session-left, bad-resource-metadata, none (the default).

Prints `LISTENING <port>` (the test peers' convention) and serves until killed."""

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODERN = "2026-07-28"
TOOLS = [{"name": n, "inputSchema": {"type": "object"}} for n in ("alpha", "beta", "gamma")]

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, default=0)
parser.add_argument("--defect", default="none")
parser.add_argument("--instance", default="faulty")
args = parser.parse_args()
DEFECT = args.defect
calls = {"list": 0, "session": 0}
lock = threading.Lock()


def error(id_, code, message, data=None):
    e = {"code": code, "message": message}
    if data is not None:
        e["data"] = data
    return {"jsonrpc": "2.0", "id": id_, "error": e}


def result(id_, body, cache=False):
    if DEFECT != "no-result-type":
        body["resultType"] = "complete"
        if cache:
            body["ttlMs"] = 0
            body["cacheScope"] = "private"
    return {"jsonrpc": "2.0", "id": id_, "result": body}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send_json(self, status, message, extra=()):
        body = json.dumps(message).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        if DEFECT == "empty-session":
            self.send_header("Mcp-Session-Id", "")
        if DEFECT == "session-left":
            with lock:
                calls["session"] += 1
                sid = f"s-{calls['session']}"
            self.send_header("Mcp-Session-Id", sid)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.startswith("/.well-known/"):
            # bad-resource-metadata: the challenge names this, and it is not there.
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(405)
        self.send_header("Allow", "POST")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_DELETE = do_GET

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        raw = self.rfile.read(n)
        try:
            msg = json.loads(raw)
        except ValueError:
            return self.send_json(400, error(None, -32700, "Parse error"))
        id_, method, params = msg.get("id"), msg.get("method"), msg.get("params") or {}
        if DEFECT == "bad-resource-metadata" and not self.headers.get("Authorization") and method != "server/discover":
            port = self.server.server_address[1]
            challenge = f'Bearer resource_metadata="http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"'
            return self.send_json(401, error(id_, -32001, "Unauthorized"), [("WWW-Authenticate", challenge)])
        origin = self.headers.get("Origin")
        if origin and DEFECT != "no-origin-check" and origin != f"http://127.0.0.1:{self.server.server_address[1]}":
            return self.send_json(403, error(None, -32000, "Invalid Origin"))
        claim = (params.get("_meta") or {}).get("io.modelcontextprotocol/protocolVersion")
        if claim is None:
            # Legacy: this server is modern-only.
            return self.send_json(400, error(id_, -32022, "Unsupported protocol version",
                                             {"supported": [MODERN], "requested": params.get("protocolVersion", "")}))
        header_version = self.headers.get("MCP-Protocol-Version")
        if claim != MODERN:
            if DEFECT == "generic-version-error":
                return self.send_json(400, error(id_, -32600, "Bad request"))
            return self.send_json(400, error(id_, -32022, "Unsupported protocol version",
                                             {"supported": [MODERN], "requested": claim}))
        if DEFECT != "no-header-check":
            name = params.get("uri") if method == "resources/read" else params.get("name")
            named = method in ("tools/call", "prompts/get", "resources/read")
            if (header_version != claim or self.headers.get("Mcp-Method") != method
                    or (named and self.headers.get("Mcp-Name") != name)):
                return self.send_json(400, error(id_, -32020, "Header mismatch"))
        if method == "server/discover":
            if DEFECT == "no-discover":
                return self.send_json(404, error(id_, -32601, "Method not found"))
            return self.send_json(200, result(id_, {
                "supportedVersions": [MODERN], "capabilities": {"tools": {}},
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": args.instance, "version": "1"}}}, cache=True))
        if method == "tools/list":
            tools = list(TOOLS)
            if DEFECT == "shuffled-list":
                with lock:
                    calls["list"] += 1
                    if calls["list"] % 2 == 0:
                        tools.reverse()
            return self.send_json(200, result(id_, {"tools": tools}, cache=True))
        if method == "tools/call":
            return self.send_json(200, error(id_, -32602, f"Tool {params.get('name')} not found"))
        if method == "subscriptions/listen":
            return self.listen(id_)
        return self.send_json(404, error(id_, -32601, "Method not found"))

    def listen(self, id_):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        ack = {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
               "params": {"notifications": {"toolsListChanged": True},
                          "_meta": {"io.modelcontextprotocol/subscriptionId": id_}}}
        try:
            self.wfile.write(f"event: message\ndata: {json.dumps(ack)}\n\n".encode())
            self.wfile.flush()
            for _ in range(50):
                time.sleep(0.2)
                self.wfile.write(b": keep-alive\n\n")
                self.wfile.flush()
        except OSError:
            pass
        self.close_connection = True


server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
server.daemon_threads = True
print(f"LISTENING {server.server_address[1]}", flush=True)
server.serve_forever()
