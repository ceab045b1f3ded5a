"""The rate-limit part of bench/bench.py: what a fleet-wide limit in Redis costs per request
against the same limit in the edge's own buckets, in one run.

- Two mcp-edge processes on the bench's production defaults (access log and metrics on, one
  worker thread) in front of the same upstream (examples/bench_upstream), each with a rate
  limit on its route so high that nothing is refused (every request is decided, none is
  answered 429):
  - `local`: the buckets in the edge (no `[rate_limits]`);
  - `redis`: `[rate_limits] redis` to a `redis-server` started here (Debian's, on loopback,
    no persistence), at the default `decision_timeout_ms` (5 ms).
- The 1 KiB tools/call at 64 connections, wrk with one thread, targets alternated over the
  bench's rounds; medians. Throughput, p50, p99 and the edge's CPU per request (Redis's own CPU
  is not in it: it is reported apart, per request).
- Checks that the run measured what it says: every request of `redis` was decided (shared or,
  past the deadline, by this replica's share; both counted), and how many Redis decided.

Called from bench.py with bench's own module (`h`) for its helpers."""

import os
import shutil
import statistics
import sys

import tracing

CONNS = 64
CONFIGS = ("local", "redis")
# Far above what the bench sends: every request passes and is still decided.
LIMIT = 1_000_000


def start_redis(h):
    port = h.free_port()
    server = shutil.which("redis-server") or "/usr/bin/redis-server"
    proc = h.start([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no"])
    h.wait_port(port)
    return port, proc


def run(h, work, upstream):
    d = os.path.join(work, "ratelimit")
    os.makedirs(d)
    keys = os.path.join(d, "keys")
    with open(keys, "w") as f:
        f.write("1:" + __import__("base64").b64encode(os.urandom(32)).decode() + "\n")
    redis_port, redis = start_redis(h)
    limit = f"[routes.rate_limit]\nrequests_per_second = {LIMIT}\nburst = {LIMIT}\n"
    stores = {"local": "", "redis": f'\n[rate_limits]\nredis = "redis://127.0.0.1:{redis_port}/0"\n'}
    edges = {n: tracing.start_edge(h, d, n, upstream, keys, limit + stores[n]) for n in CONFIGS}
    script = h.lua(os.path.join(d, "call.lua"), h.CALL,
                   {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"})
    runs = {n: [] for n in CONFIGS}
    redis_cpu, redis_requests = 0.0, 0
    for _ in range(h.ROUNDS):
        for n, (port, _, proc) in edges.items():
            before = h.cpu_ticks(redis.pid)
            r = h.wrk(f"http://127.0.0.1:{port}/mcp", script, CONNS, h.serving_pid(proc))
            runs[n].append(r)
            if n == "redis":
                redis_cpu += (h.cpu_ticks(redis.pid) - before) / h.TICK
                redis_requests += r["rps"] * h.DURATION
    out = {n: {k: statistics.median(x[k] for x in rs) for k in ("rps", "p50", "p99", "cpu_us")}
           for n, rs in runs.items()}
    admin = edges["redis"][1]
    decided = {s: h.metric(admin, f'mcp_edge_rate_limit_decisions_total{{route="/mcp",store="{s}"}}') or 0
               for s in ("shared", "fallback")}
    limited = sum(h.metric(a, 'mcp_edge_rate_limited_total{route="/mcp"}') or 0 for _, a, _ in edges.values())
    if decided["shared"] == 0 or limited > 0:
        sys.exit(f"rate-limit bench: Redis decided {decided['shared']} requests and {limited} were "
                 "limited; the run did not measure what it says")
    return {"runs": out, "decided": decided,
            "redis_cpu_us": redis_cpu * 1e6 / max(redis_requests, 1)}


def block(r):
    runs, local = r["runs"], r["runs"]["local"]
    total = r["decided"]["shared"] + r["decided"]["fallback"]
    lines = ["Rate limits in this run: two mcp-edge processes (production defaults) with the same "
             f"never-reached limit, the same 1 KiB tools/call, {CONNS} conn; local: the edge's own "
             "buckets; redis: `[rate_limits]` on a loopback Redis (decision_timeout_ms 5). "
             f"Redis decided {r['decided']['shared']:.0f} of {total:.0f} requests "
             f"({100 * r['decided']['shared'] / max(total, 1):.1f} %; the rest by the replica's share, "
             f"past the deadline); Redis's own CPU {r['redis_cpu_us']:.1f} µs per request.", "",
             "| limit | req/s | p50 µs | p99 µs | CPU µs/req | throughput / local | added p50, p99 (µs) | added CPU per request (µs) |",
             "|---|---|---|---|---|---|---|---|"]
    for n in CONFIGS:
        x = runs[n]
        lines.append(f"| {n} | {x['rps']:.0f} | {x['p50']:.0f} | {x['p99']:.0f} | {x['cpu_us']:.1f} "
                     f"| {x['rps'] / local['rps']:.2f}× | {x['p50'] - local['p50']:+.0f}, {x['p99'] - local['p99']:+.0f} "
                     f"| {x['cpu_us'] - local['cpu_us']:+.1f} |")
    return "\n".join(lines)
