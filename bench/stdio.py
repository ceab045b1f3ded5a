"""The stdio part of bench/bench.py: what a call costs through a stdio pool, against the same
server over HTTP, through one mcp-edge in the same run.

- One edge (the bench's production defaults: access log and metrics on, one worker thread)
  with two routes to the same TypeScript SDK server code (tests/peers/ts-server.mjs):
  - `/http/mcp`: the server over HTTP (`--mode modern`, 2026-07-28), one process;
  - `/stdio/mcp`: the server over stdio (`--mode stdio`), a stdio pool of one process
    (`processes = 1`), which the edge runs and initialises itself.
- The bench's 1 KiB `tools/call` (echo) in 2026-07-28 form at 1 and 16 connections; wrk, one
  thread; medians over the bench's rounds, targets alternated. Before measuring, one call on
  each route must answer with the echo (a bench of refusals would measure nothing).
- CPU per request is the edge's alone (the servers are separate processes).

Called from bench.py with bench's own module (`h`) for its helpers."""

import json
import os
import statistics
import urllib.request

CONNS = (1, 16)


def start_edge(h, d, node_dir):
    http = h.start(["node", "ts-server.mjs", "--mode", "modern", "--instance", "b", "--port", "0"], cwd=node_dir)
    http_port = int(http.stdout.readline().split()[1])
    keys = os.path.join(d, "keys")
    with open(keys, "w") as f:
        f.write("1:" + __import__("base64").b64encode(os.urandom(32)).decode() + "\n")
    port, admin = h.free_port(), h.free_port()
    server = os.path.join(node_dir, "ts-server.mjs")
    conf = os.path.join(d, "edge.toml")
    with open(conf, "w") as f:
        f.write(f"""[server]\nthreads = 1\n\n[[listeners]]\naddress = "127.0.0.1:{port}"\n
[metrics]\naddress = "127.0.0.1:{admin}"\n\n[sessions]\nkeys_file = "{keys}"\n
[[pools]]\nname = "http"\nmembers = ["127.0.0.1:{http_port}"]\n
[[pools]]\nname = "stdio"\ncommand = ["node", "{server}", "--mode", "stdio", "--instance", "b"]\nprocesses = 1\n
[[routes]]\npath = "/mcp"\nprefix = "/http"\npool = "http"\n
[[routes]]\npath = "/mcp"\nprefix = "/stdio"\npool = "stdio"\n""")
    env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
    proc = h.start([os.path.join(h.REL, "mcp-edge"), "--config", conf], env=env)
    h.wait_port(port)
    # Ready once the stdio pool's process has answered the edge's initialize.
    h.wait_port(admin)
    for _ in range(600):
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz").status == 200:
                break
        except OSError:
            pass
        __import__("time").sleep(0.1)
    return port, proc


def run(h, work):
    d = os.path.join(work, "stdio")
    os.makedirs(d)
    node_dir = os.path.join(h.ROOT, "tests", "peers")
    port, proc = start_edge(h, d, node_dir)
    base = f"http://127.0.0.1:{port}"
    headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"}
    for route in ("/http/mcp", "/stdio/mcp"):
        req = urllib.request.Request(base + route, data=h.CALL.encode(), headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers})
        answer = json.loads(urllib.request.urlopen(req, timeout=30).read())
        text = answer["result"]["content"][0]["text"]
        if text != "b:" + "x" * 900:
            raise SystemExit(f"stdio bench: {route} answered {answer}")
    script = h.lua(os.path.join(d, "call.lua"), h.CALL, headers)
    pid = h.serving_pid(proc)
    runs = {(route, conns): [] for route in ("/http/mcp", "/stdio/mcp") for conns in CONNS}
    for _ in range(h.ROUNDS):
        for (route, conns), rs in runs.items():
            rs.append(h.wrk(base + route, script, conns, pid))
    return {f"{route} c{conns}": {m: statistics.median(r[m] for r in rs) for m in ("rps", "p50", "p99", "cpu_us")}
            for (route, conns), rs in runs.items()}


def block(r):
    lines = ["stdio pools in this run: the same TypeScript SDK server over HTTP and over stdio (one process each) "
             "behind one mcp-edge (production defaults), the 1 KiB tools/call (throughput: higher is better; "
             "latency and CPU: lower is better).", "",
             "| conn | HTTP: req/s, p50 µs, p99 µs | stdio: req/s, p50 µs, p99 µs | stdio / HTTP throughput "
             "| added p50 per call (µs) | edge CPU µs/req: HTTP, stdio |",
             "|---|---|---|---|---|---|"]
    for conns in CONNS:
        a, b = r[f"/http/mcp c{conns}"], r[f"/stdio/mcp c{conns}"]
        cell = lambda x: f"{x['rps']:.0f}, {x['p50']:.0f}, {x['p99']:.0f}"
        lines.append(f"| {conns} | {cell(a)} | {cell(b)} | {b['rps'] / a['rps']:.2f}× | {b['p50'] - a['p50']:+.0f} "
                     f"| {a['cpu_us']:.1f}, {b['cpu_us']:.1f} |")
    return "\n".join(lines)
