"""The identity part of bench/bench.py: what token validation and list filtering cost per
request, against the same requests without them, on one mcp-edge in the same run.

- One edge (the bench's production defaults: access log and metrics on, one worker thread)
  with three routes to the same upstream (examples/bench_upstream):
  - `/mcp`: no `auth`;
  - `/auth/mcp`: `auth = "required"`, a JWT checked against a JWKS file (an RSA-2048 key made
    with `openssl` here, RS256, the most common issuer key), no policy;
  - `/policy/mcp`: the same, plus a policy whose rule shows half of the 20 tools;
  - `/exchange/mcp`: as `/auth/mcp`, to a pool whose `[pools.credential]` exchanges the
    caller's token (RFC 8693) at a token endpoint this script serves (the token lasts a day:
    after the first request every one takes the cached exchange).
- Token exchange, cached: the tools/call with its token through `/auth/mcp` against
  `/exchange/mcp` (the difference is the cache lookup and the header swap).
- Token validation: the 1 KiB tools/call through `/mcp` without a token against `/auth/mcp`
  with one (the same request otherwise).
- List filtering: a `tools/list` whose answer (20 tools, about 4 KiB) comes as JSON, and as an
  SSE event, through `/auth/mcp` against `/policy/mcp` (both validate the token: the
  difference is the filtering). The filtered answers are checked to hold 10 tools.
- wrk, one thread, 64 connections; medians over the bench's rounds, targets alternated.

Called from bench.py with bench's own module (`h`) for its helpers."""

import http.server
import json
import os
import threading
import statistics
import subprocess
import sys
import urllib.request

ISSUER = "https://issuer.bench"
AUDIENCE = "https://edge.bench/mcp"
CONNS = 64


class TokenEndpoint(http.server.BaseHTTPRequestHandler):
    """RFC 8693 answers: one token for everyone, valid a day; counts the exchanges."""
    exchanges = 0

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        TokenEndpoint.exchanges += 1
        body = json.dumps({"access_token": "bench-exchanged", "token_type": "Bearer", "expires_in": 86400,
                           "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


def token_endpoint():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), TokenEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def start_edge(h, d, upstream):
    key = os.path.join(d, "issuer-key.pem")
    subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                    "-out", key], check=True, capture_output=True)
    made = json.loads(subprocess.run([os.path.join(h.REL, "examples", "bench_token"), key, ISSUER, AUDIENCE, "a"],
                                     check=True, capture_output=True, text=True).stdout)
    jwks = os.path.join(d, "jwks.json")
    with open(jwks, "w") as f:
        json.dump(made["jwks"], f)
    keys = os.path.join(d, "keys")
    with open(keys, "w") as f:
        f.write("1:" + __import__("base64").b64encode(os.urandom(32)).decode() + "\n")
    port, admin = h.free_port(), h.free_port()
    conf = os.path.join(d, "edge.toml")
    route = lambda prefix, extra: (f'[[routes]]\npath = "/mcp"\nprefix = "{prefix}"\npool = "bench"\n{extra}\n')
    with open(conf, "w") as f:
        f.write(f"""[server]\nthreads = 1\n\n[[listeners]]\naddress = "127.0.0.1:{port}"\n
[metrics]\naddress = "127.0.0.1:{admin}"\n\n[sessions]\nkeys_file = "{keys}"\n
[identity]\n[identity.jwt]\nissuer = "{ISSUER}"\naudience = ["{AUDIENCE}"]\njwks_file = "{jwks}"\ntenant_claim = "tenant"\n
[[pools]]\nname = "bench"\nmembers = ["127.0.0.1:{upstream}"]\n
[[pools]]\nname = "bench-exchange"\nmembers = ["127.0.0.1:{upstream}"]\n[pools.credential]\nkind = "exchange"
token_endpoint = "http://127.0.0.1:{token_endpoint()}/token"\nclient_id = "bench"\nclient_secret_env = "BENCH_EXCHANGE_SECRET"
audience = "bench-tools"\n
[[routes]]\npath = "/mcp"\npool = "bench"\n
[[routes]]\npath = "/mcp"\nprefix = "/exchange"\npool = "bench-exchange"\nauth = "required"\n
""" + route("/auth", 'auth = "required"') + route("/policy", 'auth = "required"\n[[routes.policy]]\nname = "team-a"\n'
                                                  'tenants = ["a"]\ntools = ["team_a_*"]'))
    env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
    env["BENCH_EXCHANGE_SECRET"] = "bench-secret"
    proc = h.start([os.path.join(h.REL, "mcp-edge"), "--config", conf], env=env)
    h.wait_port(port)
    return port, proc, made["token"]


def check(url, token, sse):
    """A filtered answer really is filtered (and a bench of refusals would measure nothing)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                       "params": {"_meta": json.loads("{" + META + "}")["_meta"]}}).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list",
               "Authorization": f"Bearer {token}"}
    if sse:
        headers["x-bench-sse"] = "1"
    text = urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers)).read().decode()
    if sse:
        text = "".join(line[len("data: "):] for line in text.splitlines() if line.startswith("data: "))
    return len(json.loads(text)["result"]["tools"])


META = '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
LIST = '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{%s}}' % META


def run(h, work, upstream):
    d = os.path.join(work, "identity")
    os.makedirs(d)
    port, proc, token = start_edge(h, d, upstream)
    base = f"http://127.0.0.1:{port}"
    for sse in (False, True):
        shown = (check(f"{base}/auth/mcp", token, sse), check(f"{base}/policy/mcp", token, sse))
        if shown != (20, 10):
            sys.exit(f"identity bench: tools/list shows {shown} tools (sse={sse}), expected (20, 10)")
    call = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"}
    bearer = {"Authorization": f"Bearer {token}"}
    lst = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list", **bearer}
    scripts = {
        "call": h.lua(os.path.join(d, "call.lua"), h.CALL, call),
        "call+token": h.lua(os.path.join(d, "call-token.lua"), h.CALL, {**call, **bearer}),
        "list json": h.lua(os.path.join(d, "list.lua"), LIST, lst),
        "list sse": h.lua(os.path.join(d, "list-sse.lua"), LIST, {**lst, "x-bench-sse": "1"}),
    }
    pairs = {
        "token validation (tools/call)": (("/mcp", "call"), ("/auth/mcp", "call+token")),
        "token exchange, cached (tools/call)": (("/auth/mcp", "call+token"), ("/exchange/mcp", "call+token")),
        "list filtering, JSON (tools/list)": (("/auth/mcp", "list json"), ("/policy/mcp", "list json")),
        "list filtering, SSE (tools/list)": (("/auth/mcp", "list sse"), ("/policy/mcp", "list sse")),
    }
    pid = h.serving_pid(proc)
    runs = {k: ([], []) for k in pairs}
    for _ in range(h.ROUNDS):
        for k, sides in pairs.items():
            for i, (path, script) in enumerate(sides):
                runs[k][i].append(h.wrk(base + path, scripts[script], CONNS, pid))
    if TokenEndpoint.exchanges != 1:
        sys.exit(f"identity bench: {TokenEndpoint.exchanges} token exchanges, expected 1 (the cache)")
    return {k: [{m: statistics.median(r[m] for r in side) for m in ("rps", "p50", "p99", "cpu_us")}
                for side in sides] for k, sides in runs.items()}


def block(r):
    lines = ["Identity in this run: one mcp-edge (production defaults), the same request with and without "
             f"the feature, {CONNS} conn (throughput: higher is better; p99 and CPU: lower is better). "
             "Token: RS256, RSA-2048, from a JWKS file. Lists: 20 tools (about 4 KiB), a policy showing 10.", "",
             "| cost of | without: req/s, p99 µs, CPU µs/req | with: req/s, p99 µs, CPU µs/req "
             "| with / without throughput | added CPU per request (µs) |",
             "|---|---|---|---|---|"]
    for k, (a, b) in r.items():
        cell = lambda x: f"{x['rps']:.0f}, {x['p99']:.0f}, {x['cpu_us']:.1f}"
        lines.append(f"| {k} | {cell(a)} | {cell(b)} | {b['rps'] / a['rps']:.2f}× | {b['cpu_us'] - a['cpu_us']:+.1f} |")
    return "\n".join(lines)
