"""A small 2026-07-28 MCP server (Python standard library only) that does everything
`mcp-edge doctor` checks right, except the one defect it is started with
(`--defect NAME`), so a test can see each defect reported once, by the right check.

Defects (one a flag; `none`, the default, has none):
  no-discover, discover-no-capabilities            server/discover absent, or lacking a required field
  generic-version-error                            -32600 instead of -32022
  no-result-type, uncached-prompts-list            resultType missing; prompts/list without ttlMs/cacheScope
  empty-session, session-left                      an empty Mcp-Session-Id; a session per stateless answer
  no-header-check, missing-header-accepted,        no header/body check; only headers present are checked;
  name-unchecked-on-read                           Mcp-Name checked on tools/call only
  no-origin-check, origin-null-allowed,            no Origin check; `null` taken as no Origin; a prefix
  origin-prefix-match, origin-suffix-match         match (http://127.0.0.1.evil passes); a suffix match
                                                   (http://evil127.0.0.1:PORT passes)
  task-name-unchecked                              Mcp-Name not checked on tasks/* (the tasks extension)
  shuffled-list                                    tools/list in another order every other time
  bad-resource-metadata                            a 401 naming metadata that is not there
  absent-tool-bare-404                             an absent tool: a bare HTTP 404, no JSON-RPC error
  unknown-method-result                            an unknown method answered with an empty result
  batch-served                                     a JSON-RPC batch of 2026-07-28 requests served
  session-guard                                    tools/call and resources/read need a legacy session
  legacy-session-lost                              a legacy session issued, then not found on the next request
  no-base64-names                                  an =?base64?…?= Mcp-Name compared undecoded
  meta-unchecked                                   a _meta without clientCapabilities served
  json-wrong-id, sse-wrong-id                      answers carrying another id (JSON; an event stream)
  no-jsonrpc-version, result-and-error,            answers without "jsonrpc"; with result and error;
  wrong-media-type                                 JSON answers labelled text/plain
  flood-prompts-list, stall-resources-list,        prompts/list an endless stream; resources/list never
  truncated-templates-list                         answered; resources/templates/list closed mid-body

Prints `LISTENING <port>` (the test peers' convention) and serves until killed."""

import argparse
import base64
import binascii
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODERN = "2026-07-28"
TOOLS = [{"name": n, "inputSchema": {"type": "object"}} for n in ("alpha", "beta", "gamma")]
NAMED = ("tools/call", "prompts/get", "resources/read")
TASKS = ("tasks/get", "tasks/update", "tasks/cancel")
LISTS = {"tools/list": "tools", "prompts/list": "prompts", "resources/list": "resources",
         "resources/templates/list": "resourceTemplates"}

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


def framed(message):
    """The answer as the framing defects spoil it."""
    if DEFECT == "json-wrong-id" and "id" in message and message["id"] is not None:
        message["id"] = "not-the-request-id"
    if DEFECT == "no-jsonrpc-version":
        message.pop("jsonrpc", None)
    if DEFECT == "result-and-error" and "result" in message:
        message["error"] = {"code": -32603, "message": "and an error"}
    return message


def origin_refused(origin, port):
    if origin is None or DEFECT == "no-origin-check":
        return False
    if origin == "null" and DEFECT == "origin-null-allowed":
        return False
    if DEFECT == "origin-prefix-match":
        return not origin.startswith("http://127.0.0.1")
    if DEFECT == "origin-suffix-match":
        return not origin.endswith(f"127.0.0.1:{port}")
    return origin != f"http://127.0.0.1:{port}"


def decoded(value):
    """A header value as servers must read it: `=?base64?…?=` decoded (unless the defect)."""
    if value is None or DEFECT == "no-base64-names":
        return value
    if value.startswith("=?base64?") and value.endswith("?="):
        try:
            return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
    return value


def headers_disagree(headers, method, params, claim):
    if DEFECT == "no-header-check":
        return False
    named = method in NAMED and not (DEFECT == "name-unchecked-on-read" and method != "tools/call")
    named = named or (method in TASKS and DEFECT != "task-name-unchecked")
    name = {"resources/read": params.get("uri")}.get(method, params.get("name"))
    if method in TASKS:
        name = params.get("taskId")
    expected = [("MCP-Protocol-Version", claim), ("Mcp-Method", method)]
    if named:
        expected.append(("Mcp-Name", name))
    for header, value in expected:
        seen = decoded(headers.get(header))
        if seen is None and DEFECT == "missing-header-accepted":
            continue
        if seen != value:
            return True
    return False


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send_json(self, status, message, extra=()):
        body = json.dumps(framed(message)).encode()
        self.send_response(status)
        media = "text/plain" if DEFECT == "wrong-media-type" else "application/json"
        self.send_header("Content-Type", media)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        if DEFECT == "empty-session":
            self.send_header("Mcp-Session-Id", "")
        if DEFECT == "session-left" and not any(k == "Mcp-Session-Id" for k, _ in extra):
            with lock:
                calls["session"] += 1
                sid = f"s-{calls['session']}"
            self.send_header("Mcp-Session-Id", sid)
        self.end_headers()
        self.wfile.write(body)

    def send_events(self, messages, keep_open=False):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        try:
            for m in messages:
                self.wfile.write(f"event: message\ndata: {json.dumps(m)}\n\n".encode())
            self.wfile.flush()
            while keep_open:
                time.sleep(0.2)
                self.wfile.write(b": keep-alive\n\n")
                self.wfile.flush()
        except OSError:
            pass
        self.close_connection = True

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
        if isinstance(msg, list):
            return self.batch(msg)
        id_, method, params = msg.get("id"), msg.get("method"), msg.get("params") or {}
        if DEFECT == "bad-resource-metadata" and not self.headers.get("Authorization") and method != "server/discover":
            port = self.server.server_address[1]
            challenge = f'Bearer resource_metadata="http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"'
            return self.send_json(401, error(id_, -32001, "Unauthorized"), [("WWW-Authenticate", challenge)])
        if origin_refused(self.headers.get("Origin"), self.server.server_address[1]):
            return self.send_json(403, error(None, -32000, "Invalid Origin"))
        meta = params.get("_meta") or {}
        claim = meta.get("io.modelcontextprotocol/protocolVersion")
        if claim is None and self.headers.get("MCP-Protocol-Version") == MODERN:
            return self.send_json(400, error(id_, -32602, "Invalid params: _meta lacks protocolVersion"))
        if claim is None:
            return self.legacy(id_, method, params)
        if "io.modelcontextprotocol/clientCapabilities" not in meta and DEFECT != "meta-unchecked":
            return self.send_json(400, error(id_, -32602, "Invalid params: _meta lacks clientCapabilities"))
        if claim != MODERN:
            if DEFECT == "generic-version-error":
                return self.send_json(400, error(id_, -32600, "Bad request"))
            return self.send_json(400, error(id_, -32022, "Unsupported protocol version",
                                             {"supported": [MODERN], "requested": claim}))
        if headers_disagree(self.headers, method, params, claim):
            return self.send_json(400, error(id_, -32020, "Header mismatch"))
        return self.modern(id_, method, params)

    def modern(self, id_, method, params):
        if method == "server/discover":
            return self.discover(id_)
        if method in LISTS:
            return self.listed(id_, method)
        if DEFECT == "session-guard" and method in ("tools/call", "resources/read"):
            return self.send_json(400, error(id_, -32600, "Bad Request: Session not initialized"))
        if method == "tools/call":
            if DEFECT == "absent-tool-bare-404":
                self.send_response(404)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "9")
                self.end_headers()
                self.wfile.write(b"not found")
                return None
            return self.send_json(200, error(id_, -32602, f"Tool {params.get('name')} not found"))
        if method == "prompts/get":
            return self.send_json(200, error(id_, -32602, f"Prompt {params.get('name')} not found"))
        if method == "resources/read":
            return self.send_json(200, error(id_, -32602, f"Resource {params.get('uri')} not found"))
        if method == "subscriptions/listen":
            return self.listen(id_)
        if method in TASKS:
            return self.send_json(200, error(id_, -32602, f"Task {params.get('taskId')} not found"))
        if DEFECT == "unknown-method-result":
            return self.send_json(200, result(id_, {}))
        return self.send_json(404, error(id_, -32601, "Method not found"))

    def discover(self, id_):
        if DEFECT == "no-discover":
            return self.send_json(404, error(id_, -32601, "Method not found"))
        caps = {"tools": {}, "prompts": {}, "resources": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
        body = {"supportedVersions": [MODERN], "capabilities": caps,
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": args.instance, "version": "1"}}}
        if DEFECT == "discover-no-capabilities":
            del body["capabilities"]
        return self.send_json(200, result(id_, body, cache=True))

    def listed(self, id_, method):
        if method == "prompts/list" and DEFECT == "flood-prompts-list":
            note = {"jsonrpc": "2.0", "method": "notifications/message",
                    "params": {"level": "info", "data": "x" * 4096}}
            return self.send_events([note] * 100000)
        if method == "resources/list" and DEFECT == "stall-resources-list":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b'{"jsonrpc":')
            self.wfile.flush()
            time.sleep(60)
            return None
        if method == "resources/templates/list" and DEFECT == "truncated-templates-list":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b'{"jsonrpc":"2.0","id":')
            self.close_connection = True
            return None
        items = list(TOOLS) if method == "tools/list" else []
        if DEFECT == "shuffled-list" and method == "tools/list":
            with lock:
                calls["list"] += 1
                if calls["list"] % 2 == 0:
                    items.reverse()
        cache = not (DEFECT == "uncached-prompts-list" and method == "prompts/list")
        answer = result(id_, {LISTS[method]: items}, cache=cache)
        if DEFECT == "sse-wrong-id" and method == "tools/list":
            answer["id"] = "not-the-request-id"
            return self.send_events([answer])
        return self.send_json(200, answer)

    def batch(self, messages):
        if DEFECT == "batch-served":
            answers = [result(m.get("id"), {"tools": list(TOOLS)}, cache=True) for m in messages]
            body = json.dumps(answers).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return None
        return self.send_json(400, error(None, -32600, "A batch is not a 2026-07-28 request"))

    def legacy(self, id_, method, params):
        """This server is modern-only, unless it (wrongly) keeps legacy sessions."""
        if DEFECT != "legacy-session-lost":
            return self.send_json(400, error(id_, -32022, "Unsupported protocol version",
                                             {"supported": [MODERN], "requested": params.get("protocolVersion", "")}))
        if method == "initialize":
            return self.send_json(200, result(id_, {
                "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                "serverInfo": {"name": args.instance, "version": "1"}}), [("Mcp-Session-Id", "lost-1")])
        if id_ is None:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        return self.send_json(404, error(id_, -32001, "Session not found"))

    def listen(self, id_):
        ack = {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
               "params": {"notifications": {"toolsListChanged": True},
                          "_meta": {"io.modelcontextprotocol/subscriptionId": id_}}}
        self.send_events([ack], keep_open=True)


server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
server.daemon_threads = True
print(f"LISTENING {server.server_address[1]}", flush=True)
server.serve_forever()
