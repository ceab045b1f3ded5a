"""The tracing part of bench/bench.py: what traces cost per request, in one run.

- Three mcp-edge processes on the bench's production defaults (access log and metrics on, one
  worker thread) in front of the same upstream (examples/bench_upstream):
  - `off`: no `[tracing]` (the default);
  - `on`: `[tracing]` at `sample_ratio = 1.0` to a collector that takes every export (a
    stdlib OTLP/HTTP sink here, `Sink`: it reads each export and answers 200, so the edge's
    export path runs whole and the sink never holds it back);
  - `collector down`: `[tracing]` to a port that refuses connections (every export fails;
    spans are dropped and counted).
- The 1 KiB tools/call at 64 connections, wrk with one thread, targets alternated over the
  bench's rounds; medians. Throughput and the edge's CPU per request.
- Checks that the run measured what it says: `on` exported spans and dropped none, `collector
  down` exported none and counted its drops.

Goal (issue 29): off ≈ free (it is the default build's path: the trace stage does nothing
without a tracer); on at 100 % ≥ 0.9× off.

Called from bench.py with bench's own module (`h`) for its helpers."""

import os
import socket
import statistics
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CONNS = 64
CONFIGS = ("off", "on", "collector down")


class Sink:
    """An OTLP/HTTP collector that takes every export: reads it, answers 200."""

    def __init__(self):
        sink = self
        self.exports = 0
        self.lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                self.rfile.read(n)
                with sink.lock:
                    sink.exports += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def refusing_port():
    """A port bound and never listening: every connection to it is refused."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s, s.getsockname()[1]


def edge_command(h, d, name, upstream, keys, extra):
    """The command line, environment and ports of an edge on the bench's production defaults
    in front of `upstream`, its route `/mcp` followed by `extra` (tables of the route, then
    others: `[tracing]`, `[rate_limits]`)."""
    port, admin = h.free_port(), h.free_port()
    conf = os.path.join(d, f"edge-{name.replace(' ', '-')}.toml")
    with open(conf, "w") as f:
        f.write(f"""[server]\nthreads = 1\n\n[[listeners]]\naddress = "127.0.0.1:{port}"\n
[metrics]\naddress = "127.0.0.1:{admin}"\n\n[sessions]\nkeys_file = "{keys}"\n
[[pools]]\nname = "bench"\nmembers = ["127.0.0.1:{upstream}"]\n
[[routes]]\npath = "/mcp"\npool = "bench"\n{extra}""")
    env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
    return [os.path.join(h.REL, "mcp-edge"), "--config", conf], env, port, admin


def start_edge(h, d, name, upstream, keys, extra):
    """An edge as `edge_command` says, started: its port, admin port and process."""
    cmd, env, port, admin = edge_command(h, d, name, upstream, keys, extra)
    # The access log goes to the edge's stderr: a file (bench.start), as under a container runtime.
    proc = h.start(cmd, env=env)
    h.wait_port(port)
    h.wait_port(admin)
    return port, admin, proc


def run(h, work, upstream):
    d = os.path.join(work, "tracing")
    os.makedirs(d)
    keys = os.path.join(d, "keys")
    with open(keys, "w") as f:
        f.write("1:" + __import__("base64").b64encode(os.urandom(32)).decode() + "\n")
    sink = Sink()
    held, down = refusing_port()
    section = lambda endpoint: (f'\n[tracing]\nendpoint = "{endpoint}"\nsample_ratio = 1.0\n')
    tracing = {"off": "", "on": section(f"http://127.0.0.1:{sink.port}/v1/traces"),
               "collector down": section(f"http://127.0.0.1:{down}/v1/traces")}
    edges = {n: start_edge(h, d, n, upstream, keys, tracing[n]) for n in CONFIGS}
    script = h.lua(os.path.join(d, "call.lua"), h.CALL,
                   {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"})
    runs = {n: [] for n in CONFIGS}
    for _ in range(h.ROUNDS):
        for n, (port, _, proc) in edges.items():
            runs[n].append(h.wrk(f"http://127.0.0.1:{port}/mcp", script, CONNS, h.serving_pid(proc)))
    out = {n: {k: statistics.median(r[k] for r in rs) for k in ("rps", "p50", "p99", "cpu_us")}
           for n, rs in runs.items()}
    spans = {}
    for n, (_, admin, _) in edges.items():
        spans[n] = {"exported": h.metric(admin, "mcp_edge_trace_spans_exported_total") or 0,
                    "dropped": h.metric_sum(admin, "mcp_edge_trace_spans_dropped_total") or 0}
    if spans["on"]["exported"] == 0 or spans["on"]["dropped"] > 0 or sink.exports == 0:
        sys.exit(f"tracing bench: the traced edge did not export every span: {spans['on']}, "
                 f"{sink.exports} exports received")
    if spans["collector down"]["exported"] > 0 or spans["collector down"]["dropped"] == 0:
        sys.exit(f"tracing bench: the edge with its collector down did not drop its spans: {spans['collector down']}")
    held.close()
    counted = None
    if not h.QUICK:
        # The steady figure: instructions per request off and on (all threads, the export's
        # included), under callgrind one after the other (bench/instructions.py).
        import instructions
        counted = {}
        for n in ("off", "on"):
            cmd, env, port, _ = edge_command(h, d, f"callgrind-{n}", upstream, keys, tracing[n])
            counted[n] = instructions.measure(h, d, f"tracing-{n}", (cmd, {"env": env}, port),
                                              f"http://127.0.0.1:{port}/mcp", script)["per_request"]
    return {"runs": out, "spans": spans, "instructions": counted}


def block(r):
    runs, spans = r["runs"], r["spans"]
    off = runs["off"]
    lines = ["Tracing in this run: three mcp-edge processes (production defaults), the same 1 KiB tools/call, "
             f"{CONNS} conn (throughput: higher is better; p99 and CPU: lower is better). on: 100 % sampling "
             "to a collector taking every export; collector down: every export refused.", "",
             "| tracing | req/s | p99 µs | CPU µs/req | throughput / off | added CPU per request (µs) | spans exported, dropped |",
             "|---|---|---|---|---|---|---|"]
    for n in CONFIGS:
        x = runs[n]
        lines.append(f"| {n} | {x['rps']:.0f} | {x['p99']:.0f} | {x['cpu_us']:.1f} | {x['rps'] / off['rps']:.2f}× "
                     f"| {x['cpu_us'] - off['cpu_us']:+.1f} | {spans[n]['exported']:.0f}, {spans[n]['dropped']:.0f} |")
    counted = r.get("instructions")
    if counted:
        lines += ["", f"Instructions per request under callgrind (bench/instructions.py's run, all threads): "
                  f"off {counted['off']:,.0f}, on {counted['on']:,.0f} "
                  f"({counted['on'] / counted['off']:.2f}×, +{counted['on'] - counted['off']:,.0f})."]
    return "\n".join(lines)
