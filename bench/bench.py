#!/usr/bin/env python3
"""Side-by-side benchmark of mcp-edge, nginx and HAProxy (see bench/run.sh and
docs/benchmarks.md). Stdlib only. Every figure is a median over rounds that alternate the
targets, and is reported as a ratio to a baseline measured in the same run."""

import datetime
import json
import os
import select
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import balance
import identity
import instructions
import handoff
import peers
import stdio
import tls
import ratelimit
import tracing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REL = os.path.join(ROOT, "target", "release")
QUICK = "--quick" in sys.argv
# Under CI a part that could not run fails the run instead of being left out.
IN_CI = os.environ.get("CI", "") not in ("", "0", "false", "False", "FALSE")
# `--peers` alone: 5 s rounds (the full run's are 10 s).
DURATION = 2 if QUICK else 5 if "--peers" in sys.argv else 10
ROUNDS = 1 if QUICK else 3
# P4 holds the same number of idle streams through every proxy, with mcp-edge on its
# production defaults: `limits.max_streams` = 4,000 and a 256 MiB memory budget (no container
# limit here) reserving 48 KiB per connection + 32 KiB per stream, room for 3,276 idle streams.
# 3,000 fits both, and fits the 20,000 descriptors a process may hold here (two per stream).
# Every proxy must hold every stream, or the run fails.
STREAMS = 200 if QUICK else 3_000
META = '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
CALL = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"%s"},%s}}' % ("x" * 900, META)
LEGACY_CALL = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"%s"}}}' % ("x" * 900)

procs = []


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    logs = "".join(open(os.path.join(LOGS, f)).read()[-2000:] for f in os.listdir(LOGS))
    sys.exit(f"nothing listening on {port}; logs:\n{logs}")


LOGS = tempfile.mkdtemp(prefix="mcp-edge-bench-logs-")


def start(cmd, **kw):
    log = open(os.path.join(LOGS, os.path.basename(cmd[0]) + f"-{len(procs)}.log"), "w")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, **kw)
    procs.append(p)
    return p


def cleanup(*_):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def command_out(cmd):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return (p.stdout + p.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "?"


def metric(port, name):
    """One unlabelled series from the edge's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    m = re.search(r"^" + re.escape(name) + r"(?:\{\})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def metric_sum(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(v) for v in re.findall(r"^" + re.escape(name) + r"(?:\{[^}]*\})? (\S+)$", text, re.M))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def lua(path, body, headers):
    lines = ['wrk.method = "POST"', 'wrk.headers["Content-Type"] = "application/json"',
             'wrk.headers["Accept"] = "application/json, text/event-stream"']
    lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()]
    lines.append("wrk.body = " + json.dumps(body))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def to_us(v):
    m = re.match(r"([\d.]+)(us|ms|s)", v)
    n, unit = float(m.group(1)), m.group(2)
    return n * {"us": 1, "ms": 1000, "s": 1_000_000}[unit]


def cpu_ticks(pid):
    """User + system CPU time of a process so far, in clock ticks (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


TICK = os.sysconf("SC_CLK_TCK")


def wrk(url, script, conns, pid=None, env=None):
    """One wrk run. With `env` (the TLS part: wrk under its handshake-counting shim), also the
    number of requests completed."""
    before = cpu_ticks(pid) if pid else 0
    out = subprocess.run(["wrk", "-t1", f"-c{conns}", f"-d{DURATION}s", "--latency", "-s", script, url],
                         capture_output=True, text=True, check=True, env=env).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = to_us(re.search(r"\s50%\s+(\S+)", out).group(1))
    p99 = to_us(re.search(r"\s99%\s+(\S+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        sys.exit(f"{url}: {errors.group(1)} non-2xx responses\n{out}")
    socket_errors = re.search(r"Socket errors: connect (\d+)", out)
    if socket_errors and int(socket_errors.group(1)) > 0:
        sys.exit(f"{url}: {socket_errors.group(1)} connections refused\n{out}")
    done = re.search(r"\s([1-9]\d*) requests in ", out)
    if not done:
        sys.exit(f"{url}: no request completed\n{out}")
    r = {"rps": rps, "p50": p50, "p99": p99}
    if env is not None:
        r["requests"] = int(done.group(1))
    if pid:
        # CPU the proxy spent per request: steadier than throughput on a shared machine.
        r["cpu_us"] = (cpu_ticks(pid) - before) * 1e6 / TICK / int(done.group(1))
    return r


def measure(targets, script, conns, pids=None, scripts=None):
    """Alternate targets for ROUNDS rounds; median of each figure per target. With `pids`
    (target name -> process), also the process's CPU time per request; with `scripts`
    (target name -> script), each target's own request."""
    pids, scripts = pids or {}, scripts or {}
    runs = {name: [] for name in targets}
    for _ in range(ROUNDS):
        for name, url in targets.items():
            runs[name].append(wrk(url, scripts.get(name, script), conns, pids.get(name)))
    return {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            for name, rs in runs.items()}


def serving_pid(proc):
    """The process that holds the connections: nginx's worker, else the process itself."""
    kids = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    return int(kids[0]) if proc.args[0] == "nginx" and kids else proc.pid


def terminated(*_):
    cleanup()
    sys.exit("bench: terminated")


def jsonable(value):
    """`value` with every dict key a string (some parts key their figures by tuples)."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else " ".join(map(str, k)) if isinstance(k, tuple) else str(k): jsonable(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def main():
    signal.signal(signal.SIGTERM, terminated)
    work = tempfile.mkdtemp(prefix="mcp-edge-bench-")
    results = {"meta": {
        "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": command_out(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]),
        "command": "bash bench/run.sh" + "".join(f" {a}" for a in sys.argv[1:]),
        "cpu": command_out(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"]),
        "cores": os.cpu_count(),
        "load_start": loadavg(),
        "nginx": command_out(["nginx", "-v"]),
        "haproxy": command_out(["haproxy", "-v"]),
        "wrk": command_out(["wrk", "-v"]),
        "openssl": command_out(["openssl", "version"]),
    }}
    try:
        # One part alone (bench/stdio.py, bench/handoff.py, bench/balance.py, bench/identity.py,
        # bench/tracing.py, bench/ratelimit.py, bench/instructions.py), with the
        # full rounds.
        parts = {"--stdio": ("stdio", stdio, lambda: stdio.run(sys.modules[__name__], work)),
                 "--handoff": ("handoff", handoff, lambda: handoff.run(sys.modules[__name__], work)),
                 "--balance": ("balance", balance, lambda: balance.run(sys.modules[__name__], work)),
                 "--identity": ("identity", identity,
                                lambda: identity.run(sys.modules[__name__], work, start_upstream())),
                 "--tracing": ("tracing", tracing,
                               lambda: tracing.run(sys.modules[__name__], work, start_upstream())),
                 "--rate-limits": ("ratelimit", ratelimit,
                                   lambda: ratelimit.run(sys.modules[__name__], work, start_upstream())),
                 "--peers": ("peers", __import__("types").SimpleNamespace(block=peers.part),
                             lambda: peers.run(sys.modules[__name__], work)),
                 "--instructions": ("instructions", instructions,
                                    lambda: instructions.run(sys.modules[__name__], work, start_upstream()))}
        for flag, (key, module, part) in parts.items():
            if flag in sys.argv:
                results[key] = part()
                cleanup()
                print(f"`{results['meta']['command']}` at commit {results['meta']['commit']}, started "
                      f"{results['meta']['started']}; load average at the start {results['meta']['load_start']}, "
                      f"at the end {loadavg()}; rounds={ROUNDS} duration={DURATION}s\n")
                text = module.block(results[key])
                print(text)
                # Kept beside the full run's latest.md: each run of a part alone appended.
                os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
                with open(os.path.join(ROOT, "bench", "results", f"{key}.md"), "a") as f:
                    f.write(f"`{results['meta']['command']}` at commit {results['meta']['commit']}, started "
                            f"{results['meta']['started']}; load average at the start {results['meta']['load_start']}, at the "
                            f"end {loadavg()}; {results['meta']['cores']} cores, "
                            f"{results['meta']['cpu']}; {results['meta']['haproxy']}\n\n{text}\n\n"
                            f"```json\n{json.dumps(jsonable(results[key]), indent=1)}\n```\n\n")
                return
        run(work, results)
    finally:
        cleanup()
        shutil.rmtree(work, ignore_errors=True)
        # The default edge's access log is here: hundreds of MB after a full run.
        shutil.rmtree(LOGS, ignore_errors=True)
    results["meta"]["load_end"] = loadavg()
    report(results)


def start_upstream():
    up = start([os.path.join(REL, "examples", "bench_upstream"), "0", "1"])
    port = int(up.stdout.readline().split()[1])
    wait_port(port)
    return port


# The edge's two configurations: what ships, and the same with logging off.
EDGES = {"mcp-edge": "", "mcp-edge (log off)": "\n[access_log]\nenabled = false\n"}
# Every target behind a proxy, in table order; P4 leaves the log-off edge out. "fair pingora":
# plain Pingora doing the same non-MCP work as the edge's production defaults (forwarding
# headers, an access-log line per request written off the request path), the floor the edge's
# cost is measured against (examples/plain_pingora.rs).
# "mcp-proxy": the Rust MCP gateway mcp-proxy 0.6.0 from crates.io (it terminates MCP: it
# initializes its backend with 2025-11-25 and calls it in that session), built once by
# bench/run.sh (bench/peers.py).
PROXIES = (*EDGES, "nginx", "haproxy", "plain pingora", "fair pingora", "mcp-proxy")
# The TS SDK server's rows: the proxies a user would pick instead, at 16 and 64 connections
# (the server, not the proxy, is the limit at 1).
TS_PROXIES = ("mcp-edge", "fair pingora", "nginx", "haproxy", "mcp-proxy")
TS_CONNS = (16, 64)
P4_PROXIES = ("mcp-edge", "nginx", "haproxy", "plain pingora")


def start_edge(work, tag, name, upstream, keys, port, admin):
    """One mcp-edge: production defaults except one worker thread (like the other proxies) and
    an admin listener, read during P4 for the memory budget; "log off" adds EDGES' section and
    RUST_LOG=warn. The default edge gets no RUST_LOG at all, and its stderr, where the access
    log goes, is a file, as under a container runtime."""
    cmd, env = edge_command(work, tag, name, upstream, keys, port, admin)
    return start(cmd, env=env)


def edge_command(work, tag, name, upstream, keys, port, admin):
    """The command line and environment `start_edge` runs (bench/instructions.py runs it under
    callgrind)."""
    conf = os.path.join(work, f"edge-{tag}-{'log-off' if EDGES[name] else 'default'}.toml")
    with open(conf, "w") as f:
        f.write(f"""[server]\nthreads = 1\n\n[[listeners]]\naddress = "127.0.0.1:{port}"\n
[metrics]\naddress = "127.0.0.1:{admin}"\n
[sessions]\nkeys_file = "{keys}"\n\n[[pools]]\nname = "bench"\nmembers = ["127.0.0.1:{upstream}"]\n
[[routes]]\npath = "/mcp"\npool = "bench"\n""" + EDGES[name])
    env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
    if EDGES[name]:
        env["RUST_LOG"] = "warn"
    return [os.path.join(REL, "mcp-edge"), "--config", conf], env


def start_proxies(work, upstream, tag):
    """Every proxy in front of `upstream`; ports and processes are keyed by target name, and
    each edge's admin listener by "<name> admin"."""
    ports = {name: free_port() for name in (*PROXIES, *(f"{e} admin" for e in EDGES))}
    keys = os.path.join(work, "keys")
    with open(keys, "w") as f:
        f.write("1:" + __import__("base64").b64encode(os.urandom(32)).decode() + "\n")
    pids = {e: start_edge(work, tag, e, upstream, keys, ports[e], ports[f"{e} admin"]) for e in EDGES}
    nginx_conf = os.path.join(work, f"nginx-{tag}.conf")
    with open(nginx_conf, "w") as f:
        f.write(f"""worker_processes 1;\nworker_rlimit_nofile 20000;\nevents {{ worker_connections 19990; }}
http {{\n  access_log off;\n  upstream u {{ server 127.0.0.1:{upstream}; keepalive 256; }}
  server {{\n    listen 127.0.0.1:{ports['nginx']};\n    location / {{\n      proxy_pass http://u;
      proxy_http_version 1.1;\n      proxy_set_header Connection "";\n      proxy_buffering off;
      proxy_read_timeout 3600s;\n    }}\n  }}\n}}\n""")
    nginx = start(["nginx", "-c", nginx_conf, "-p", work,
                   "-g", f"daemon off; pid {work}/nginx-{tag}.pid; error_log stderr error;"])
    haproxy_conf = os.path.join(work, f"haproxy-{tag}.cfg")
    with open(haproxy_conf, "w") as f:
        f.write(f"""global\n  nbthread 1\n  maxconn 9950\ndefaults\n  mode http\n  timeout connect 5s
  timeout client 1h\n  timeout server 1h\n  http-reuse always\nfrontend f\n  bind 127.0.0.1:{ports['haproxy']}
  default_backend b\nbackend b\n  server s1 127.0.0.1:{upstream}\n""")
    haproxy = start(["haproxy", "-f", haproxy_conf, "-db"])
    pingora = start([os.path.join(REL, "examples", "plain_pingora"), str(ports["plain pingora"]), str(upstream)])
    fair = start(peers.fair_command(sys.modules[__name__], work, tag, ports["fair pingora"], upstream))
    mcp_proxy = peers.start_mcp_proxy(sys.modules[__name__], work, tag, ports["mcp-proxy"], upstream)
    for p in ports.values():
        wait_port(p)
    return ports, {**pids, "nginx": nginx, "haproxy": haproxy, "plain pingora": pingora, "fair pingora": fair,
                   "mcp-proxy": mcp_proxy}


def run(work, results):
    upstream = start_upstream()
    ports, pids = start_proxies(work, upstream, "mock")
    url = lambda port: f"http://127.0.0.1:{port}/mcp"
    targets = {"direct": url(upstream), **{n: peers.url_of(ports, n) for n in PROXIES}}
    modern = lua(os.path.join(work, "modern.lua"), CALL,
                 {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"})
    # P1 / P2: a 1 KiB tools/call at concurrency 1, 16 and 64.
    for conns in (1, 16, 64):
        results[f"c{conns}"] = measure(targets, modern, conns,
                                       {n: serving_pid(pids[n]) for n in PROXIES})
    # The default edge's access log kept up: a line it dropped would make logging look free.
    dropped = metric(ports["mcp-edge admin"], "mcp_edge_access_log_dropped_total")
    if dropped is None:
        sys.exit("mcp-edge: mcp_edge_access_log_dropped_total is missing from /metrics")
    results["meta"]["access_log_dropped"] = dropped

    # P6: a legacy request carrying a session token vs the same call in 2026-07-28 form.
    init = urllib.request.Request(url(ports["mcp-edge"]), method="POST", data=json.dumps({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}).encode(),
        headers={"Content-Type": "application/json"})
    token = urllib.request.urlopen(init).headers["Mcp-Session-Id"]
    legacy = lua(os.path.join(work, "legacy.lua"), LEGACY_CALL,
                 {"MCP-Protocol-Version": "2025-11-25", "Mcp-Session-Id": token})
    p6 = {"modern": [], "legacy": []}
    for _ in range(ROUNDS):
        for conns in (1, 64):
            p6["modern"].append((conns, wrk(url(ports["mcp-edge"]), modern, conns)))
            p6["legacy"].append((conns, wrk(url(ports["mcp-edge"]), legacy, conns)))
    results["p6"] = {kind: {conns: {k: statistics.median(r[k] for c, r in rs if c == conns) for k in ("rps", "p50", "p99")}
                            for conns in (1, 64)} for kind, rs in p6.items()}

    # TLS: mcp-edge's TLS listener against nginx with the same certificate (bench/tls.py).
    missing = tls.missing_tools()
    if not missing:
        results["tls"] = tls.run(sys.modules[__name__], work, upstream)
    elif IN_CI:
        sys.exit(f"TLS: {' and '.join(missing)} missing")
    else:
        print(f"skipped: the TLS part ({' and '.join(missing)} missing)")

    # Identity: token validation and list filtering against the same requests without them.
    results["identity"] = identity.run(sys.modules[__name__], work, upstream)

    # Tracing: off, on at 100 % sampling, and with the collector down (bench/tracing.py).
    results["tracing"] = tracing.run(sys.modules[__name__], work, upstream)

    # Rate limits: the edge's own buckets against Redis's (bench/ratelimit.py).
    results["ratelimit"] = ratelimit.run(sys.modules[__name__], work, upstream)

    # Instructions per request under callgrind (bench/instructions.py): not in the quick run.
    if not QUICK:
        results["instructions"] = instructions.run(sys.modules[__name__], work, upstream)

    # P4: idle SSE streams held through each proxy; resident memory per stream. Only the
    # default edge: an idle stream writes no access-log line until it ends.
    results["meta"]["load_p4"] = loadavg()
    results["p4"] = {}
    for name in P4_PROXIES:
        pid = serving_pid(pids[name])
        # The streams in two batches: the growth per stream from the start depends on what the
        # allocator kept from earlier parts (a proxy that freed heap before P4 reuses it, one
        # whose allocator gave it back faults it in again); the slope between the batches
        # does not, and is the figure the proxies are compared by.
        first = STREAMS // 3
        rss = [rss_kib(pid)]
        holders = []
        for count in (first, STREAMS - first):
            holder = start([os.path.join(REL, "examples", "sse_hold"), f"127.0.0.1:{ports[name]}",
                            "/mcp", str(count), "600"])
            holders.append(holder)
            # A stream the proxy refuses can leave sse_hold waiting: bound the wait.
            ready, _, _ = select.select([holder.stdout], [], [], 180)
            line = holder.stdout.readline() if ready else "(no answer within 180 s)"
            held = int(line.split()[1]) if line.startswith("HOLDING") else 0
            if held != count:
                sys.exit(f"P4 {name}: held {held} of {count} streams ({line.strip()!r})")
            time.sleep(1)
            rss.append(rss_kib(pid))
        results["p4"][name] = {"streams": STREAMS, "kib_per_stream": (rss[2] - rss[0]) / STREAMS,
                               "kib_per_stream_slope": (rss[2] - rss[1]) / (STREAMS - first)}
        if name == "mcp-edge":
            admin = ports["mcp-edge admin"]
            used = metric(admin, "mcp_edge_memory_budget_used_bytes")
            limit = metric(admin, "mcp_edge_memory_budget_bytes")
            refused = metric_sum(admin, "mcp_edge_memory_budget_refusals_total")
            if used is None or limit is None:
                sys.exit("P4 mcp-edge: the memory budget series are missing from /metrics")
            results["p4"][name].update(budget_used_mib=used / 2**20, budget_mib=limit / 2**20,
                                       budget_refusals=refused)
        # SIGTERM: a shell that started the bench in the background leaves SIGINT ignored.
        for holder in holders:
            holder.send_signal(signal.SIGTERM)
            holder.wait()
        time.sleep(1)

    # Realism: the official TypeScript SDK server behind each proxy.
    node_dir = os.path.join(ROOT, "tests", "peers")
    if os.path.isdir(os.path.join(node_dir, "node_modules")):
        ts_rows(work, results, modern)
        # stdio pools: the same server over stdio against over HTTP (bench/stdio.py).
        results["stdio"] = stdio.run(sys.modules[__name__], work)
        # Hand-off: a request handed to the replica holding its state (bench/handoff.py).
        results["handoff"] = handoff.run(sys.modules[__name__], work)
        # Balancing: mcp-edge's policies beside HAProxy's over three members (bench/balance.py).
        results["balance"] = balance.run(sys.modules[__name__], work)
    elif IN_CI:
        sys.exit("TS SDK server: tests/peers/node_modules is missing (bash scripts/setup.sh installs it)")
    else:
        print("skipped: the TS SDK server row (tests/peers/node_modules is missing; bash scripts/setup.sh installs it)")


def ts_rows(work, results, modern):
    """The official TS SDK server behind the proxies a user would pick (`results["ts"]`), and
    the same call in a 2025-11-25 session direct and through the edge (`results["ts_session"]`)."""
    url = lambda port: f"http://127.0.0.1:{port}/mcp"
    # v2-session: 2026-07-28 requests to the strict modern handler, as `modern` does, and
    # 2025-era sessions for mcp-proxy, which initializes its backend in that revision.
    ts = start(["node", "ts-server.mjs", "--mode", "v2-session", "--instance", "ts", "--port", "0"],
               cwd=os.path.join(ROOT, "tests", "peers"))
    ts_port = int(ts.stdout.readline().split()[1])
    ts_ports, ts_pids = start_proxies(work, ts_port, "ts")
    ts_targets = {"direct": url(ts_port), **{n: peers.url_of(ts_ports, n) for n in TS_PROXIES}}
    results["ts"] = {f"c{conns}": measure(ts_targets, modern, conns,
                                          {n: serving_pid(ts_pids[n]) for n in TS_PROXIES})
                     for conns in TS_CONNS}
    # mcp-proxy calls the server in one 2025-11-25 session whatever revision its client
    # speaks; the same calls in a session, direct and through the edge, for comparison.
    ts_legacy = {}
    for name, target in (("direct", url(ts_port)), ("mcp-edge", url(ts_ports["mcp-edge"]))):
        script = lua(os.path.join(work, f"ts-legacy-{name}.lua"), LEGACY_CALL,
                     {"MCP-Protocol-Version": "2025-11-25", "Mcp-Session-Id": peers.legacy_session(target)})
        ts_legacy[name] = (target, script)
    results["ts_session"] = {
        f"c{conns}": measure({n: t for n, (t, _) in ts_legacy.items()}, None, conns,
                             {"mcp-edge": serving_pid(ts_pids["mcp-edge"])},
                             scripts={n: sc for n, (_, sc) in ts_legacy.items()})
        for conns in TS_CONNS}


def ratios(r):
    """The headline figures: each edge configuration against the fair floor (plain Pingora
    doing the same non-MCP work: the goal is ≥ 0.9× its throughput and ≤ 1.15× its p99 at 64
    connections), plain Pingora and nginx. p99 is the proxies' total p99."""
    c1, c64 = r["c1"], r["c64"]
    out = ["ratios in this run (throughput: higher is better; p99 and CPU: lower is better)", "",
           "| config | against | throughput (64 conn) | p99 (64 conn) | p99 (1 conn) "
           "| CPU µs per request, 64 conn |",
           "|---|---|---|---|---|---|"]
    for label, e in (("production defaults (access log on)", "mcp-edge"), ("logging off", "mcp-edge (log off)")):
        for floor in ("fair pingora", "plain pingora", "nginx"):
            f64 = c64[floor]
            cells = (c64[e]["rps"] / f64["rps"], c64[e]["p99"] / f64["p99"], c1[e]["p99"] / c1[floor]["p99"])
            out.append(f"| {label} | {floor} | " + " | ".join(f"{x:.2f}×" for x in cells)
                       + f" | {c64[e]['cpu_us']:.1f} / {f64['cpu_us']:.1f} ({c64[e]['cpu_us'] / f64['cpu_us']:.2f}×) |")
    cost = c64["mcp-edge"]["rps"] / c64["mcp-edge (log off)"]["rps"]
    cpu = c64["mcp-edge"]["cpu_us"] - c64["mcp-edge (log off)"]["cpu_us"]
    out.append(f"| access log cost: default / log off | – | {cost:.2f}× | – | – "
               f"| {cpu:+.1f} µs (writer thread included) |")
    fair = c64["fair pingora"]["cpu_us"] - c64["plain pingora"]["cpu_us"]
    out.append(f"| the fair floor's own work: fair / plain Pingora | – "
               f"| {c64['fair pingora']['rps'] / c64['plain pingora']['rps']:.2f}× | – | – | {fair:+.1f} µs |")
    return "\n".join(out)


def report(r):
    def added(c, name, k):
        return r[c][name][k] - r[c]["direct"][k]
    dash = " | ".join("–" for _ in PROXIES[1:])
    out = ["| measure | direct | " + " | ".join(PROXIES) + " | mcp-edge / nginx |",
           "|---|---|" + "---|" * len(PROXIES) + "---|"]
    for c in ("c1", "c16", "c64"):
        for k in ("p50", "p99"):
            row = [f"P1 added {k} latency, {c[1:]} conn (µs)", "–"]
            row += [f"{added(c, n, k):.0f}" for n in PROXIES]
            row.append(f"{added(c, 'mcp-edge', k) / max(added(c, 'nginx', k), 1e-9):.2f}×")
            out.append("| " + " | ".join(row) + " |")
    c = r["c64"]
    out.append(f"| P2 throughput, 64 conn (req/s) | {c['direct']['rps']:.0f} | "
               + " | ".join(f"{c[n]['rps']:.0f}" for n in PROXIES)
               + f" | {c['mcp-edge']['rps'] / c['nginx']['rps']:.2f}× |")
    out.append("| P2 proxy CPU per request, 64 conn (µs) | – | "
               + " | ".join(f"{c[n]['cpu_us']:.1f}" for n in PROXIES)
               + f" | {c['mcp-edge']['cpu_us'] / c['nginx']['cpu_us']:.2f}× |")
    p4 = r["p4"]
    out.append("| P4 idle SSE streams: KiB per stream from the start (streams held) | – | "
               + " | ".join(f"{p4[n]['kib_per_stream']:.1f} ({p4[n]['streams']})" if n in p4 else "–"
                            for n in PROXIES)
               + f" | {p4['mcp-edge']['kib_per_stream'] / max(p4['nginx']['kib_per_stream'], 1e-9):.2f}× |")
    out.append(f"| P4 idle SSE streams: KiB per stream, slope from {STREAMS // 3:,} to {STREAMS:,} | – | "
               + " | ".join(f"{p4[n]['kib_per_stream_slope']:.1f}" if n in p4 else "–" for n in PROXIES)
               + f" | {p4['mcp-edge']['kib_per_stream_slope'] / max(p4['nginx']['kib_per_stream_slope'], 1e-9):.2f}× |")
    p6 = r["p6"]
    for conns in (1, 64):
        m, l = p6["modern"][conns], p6["legacy"][conns]
        out.append(f"| P6 legacy (token) / modern, {conns} conn | – | p50 {l['p50'] / m['p50']:.3f}×, "
                   f"throughput {l['rps'] / m['rps']:.3f}× | {dash} | – |")
    if "ts" in r:
        for c, t in r["ts"].items():
            out.append(f"| TS SDK server, {c[1:]} conn (req/s) | {t['direct']['rps']:.0f} | "
                       + " | ".join(f"{t[n]['rps']:.0f}" if n in t else "–" for n in PROXIES)
                       + f" | {t['mcp-edge']['rps'] / t['nginx']['rps']:.2f}× |")
    table = "\n".join(out)
    m = r["meta"]
    e4 = p4["mcp-edge"]
    head = (f"`{m['command']}` at commit {m['commit']}, started {m['started']}\n"
            f"machine: {m['cores']} cores, {m['cpu']}; load average (1, 5, 15 min) at the start "
            f"{m['load_start']}, before P4 {m['load_p4']}, at the end {m['load_end']}\n"
            f"{m['nginx']}; {m['haproxy']}; {m['wrk']}; {m['openssl']} (nginx, wrk)\n"
            f"rounds={ROUNDS} duration={DURATION}s streams={STREAMS}; P4 mcp-edge memory budget: "
            f"{e4['budget_used_mib']:.0f} of {e4['budget_mib']:.0f} MiB reserved while holding, "
            f"{e4['budget_refusals']:.0f} refusals; access-log lines the default edge dropped "
            f"in P1/P2: {m['access_log_dropped']:.0f}\n")
    micro = os.path.join(ROOT, "bench", "results", "micro.txt")
    if not QUICK and os.path.exists(micro):
        head += "\nmicro-benchmarks (cargo bench --bench tokens, --bench inspect, same run):\n\n```\n" \
            + open(micro).read().strip() + "\n```\n"
    block = ratios(r) + "\n\n" + peers.block(r)
    if "tls" in r:
        block += "\n\n" + tls.block(r["tls"])
    if "identity" in r:
        block += "\n\n" + identity.block(r["identity"])
    if "tracing" in r:
        block += "\n\n" + tracing.block(r["tracing"])
    if "ratelimit" in r:
        block += "\n\n" + ratelimit.block(r["ratelimit"])
    if "stdio" in r:
        block += "\n\n" + stdio.block(r["stdio"])
    if "handoff" in r:
        block += "\n\n" + handoff.block(r["handoff"])
    if "balance" in r:
        block += "\n\n" + balance.block(r["balance"])
    if "instructions" in r:
        block += "\n\n" + instructions.block(r["instructions"])
    print(head)
    print(block + "\n")
    print(table)
    print("\nraw medians:", json.dumps(r, indent=1))
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "latest.md"), "w") as f:
        f.write(f"{head}\n{block}\n\n{table}\n\n```json\n{json.dumps(r, indent=1)}\n```\n")


if __name__ == "__main__":
    main()
