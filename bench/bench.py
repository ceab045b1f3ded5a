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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REL = os.path.join(ROOT, "target", "release")
QUICK = "--quick" in sys.argv
# Under CI a part that could not run fails the run instead of being left out.
IN_CI = os.environ.get("CI", "") not in ("", "0", "false", "False", "FALSE")
DURATION = 2 if QUICK else 10
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


def wrk(url, script, conns):
    out = subprocess.run(["wrk", "-t1", f"-c{conns}", f"-d{DURATION}s", "--latency", "-s", script, url],
                         capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = to_us(re.search(r"\s50%\s+(\S+)", out).group(1))
    p99 = to_us(re.search(r"\s99%\s+(\S+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        sys.exit(f"{url}: {errors.group(1)} non-2xx responses\n{out}")
    socket_errors = re.search(r"Socket errors: connect (\d+)", out)
    if socket_errors and int(socket_errors.group(1)) > 0:
        sys.exit(f"{url}: {socket_errors.group(1)} connections refused\n{out}")
    if not re.search(r"\s([1-9]\d*) requests in ", out):
        sys.exit(f"{url}: no request completed\n{out}")
    return {"rps": rps, "p50": p50, "p99": p99}


def measure(targets, script, conns):
    """Alternate targets for ROUNDS rounds; median of each figure per target."""
    runs = {name: [] for name in targets}
    for _ in range(ROUNDS):
        for name, url in targets.items():
            runs[name].append(wrk(url, script, conns))
    return {name: {k: statistics.median(r[k] for r in rs) for k in ("rps", "p50", "p99")}
            for name, rs in runs.items()}


def terminated(*_):
    cleanup()
    sys.exit("bench: terminated")


def main():
    signal.signal(signal.SIGTERM, terminated)
    work = tempfile.mkdtemp(prefix="mcp-edge-bench-")
    results = {"meta": {
        "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": command_out(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]),
        "command": "bash bench/run.sh" + (" --quick" if QUICK else ""),
        "cpu": command_out(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"]),
        "cores": os.cpu_count(),
        "load_start": loadavg(),
        "nginx": command_out(["nginx", "-v"]),
        "haproxy": command_out(["haproxy", "-v"]),
        "wrk": command_out(["wrk", "-v"]),
    }}
    try:
        run(work, results)
    finally:
        cleanup()
        shutil.rmtree(work, ignore_errors=True)
    results["meta"]["load_end"] = loadavg()
    report(results)


def start_upstream():
    up = start([os.path.join(REL, "examples", "bench_upstream"), "0", "1"])
    port = int(up.stdout.readline().split()[1])
    wait_port(port)
    return port


def start_proxies(work, upstream, tag):
    ports = {name: free_port() for name in ("edge", "admin", "nginx", "haproxy", "pingora")}
    keys = os.path.join(work, "keys")
    with open(keys, "w") as f:
        f.write("1:" + __import__("base64").b64encode(os.urandom(32)).decode() + "\n")
    conf = os.path.join(work, f"edge-{tag}.toml")
    with open(conf, "w") as f:
        # Production defaults except one worker thread (like the other proxies) and an admin
        # listener, read during P4 for the memory budget.
        f.write(f"""[server]\nthreads = 1\n\n[[listeners]]\naddress = "127.0.0.1:{ports['edge']}"\n
[metrics]\naddress = "127.0.0.1:{ports['admin']}"\n
[sessions]\nkeys_file = "{keys}"\n\n[[pools]]\nname = "bench"\nmembers = ["127.0.0.1:{upstream}"]\n
[[routes]]\npath = "/mcp"\npool = "bench"\n""")
    edge = start([os.path.join(REL, "mcp-edge"), "--config", conf], env={**os.environ, "RUST_LOG": "warn"})
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
    pingora = start([os.path.join(REL, "examples", "plain_pingora"), str(ports["pingora"]), str(upstream)])
    for p in ports.values():
        wait_port(p)
    return ports, {"edge": edge, "nginx": nginx, "haproxy": haproxy, "pingora": pingora}


def run(work, results):
    upstream = start_upstream()
    ports, pids = start_proxies(work, upstream, "mock")
    url = lambda port: f"http://127.0.0.1:{port}/mcp"
    targets = {"direct": url(upstream), "mcp-edge": url(ports["edge"]),
               "nginx": url(ports["nginx"]), "haproxy": url(ports["haproxy"]),
               "plain pingora": url(ports["pingora"])}
    modern = lua(os.path.join(work, "modern.lua"), CALL,
                 {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"})
    # P1 / P2: a 1 KiB tools/call at concurrency 1 and 64.
    for conns in (1, 64):
        results[f"c{conns}"] = measure(targets, modern, conns)

    # P6: a legacy request carrying a session token vs the same call in 2026-07-28 form.
    init = urllib.request.Request(url(ports["edge"]), method="POST", data=json.dumps({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}).encode(),
        headers={"Content-Type": "application/json"})
    token = urllib.request.urlopen(init).headers["Mcp-Session-Id"]
    legacy = lua(os.path.join(work, "legacy.lua"), LEGACY_CALL,
                 {"MCP-Protocol-Version": "2025-11-25", "Mcp-Session-Id": token})
    p6 = {"modern": [], "legacy": []}
    for _ in range(ROUNDS):
        for conns in (1, 64):
            p6["modern"].append((conns, wrk(url(ports["edge"]), modern, conns)))
            p6["legacy"].append((conns, wrk(url(ports["edge"]), legacy, conns)))
    results["p6"] = {kind: {conns: {k: statistics.median(r[k] for c, r in rs if c == conns) for k in ("rps", "p50", "p99")}
                            for conns in (1, 64)} for kind, rs in p6.items()}

    # P4: idle SSE streams held through each proxy; resident memory per stream.
    results["meta"]["load_p4"] = loadavg()
    results["p4"] = {}
    for name, key in (("mcp-edge", "edge"), ("nginx", "nginx"), ("haproxy", "haproxy"),
                      ("plain pingora", "pingora")):
        pid = pids[key].pid
        if name == "nginx":
            # The worker holds the connections.
            kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
            pid = int(kids[0]) if kids else pid
        before = rss_kib(pid)
        holder = start([os.path.join(REL, "examples", "sse_hold"), f"127.0.0.1:{ports[key]}",
                        "/mcp", str(STREAMS), "600"])
        # A stream the proxy refuses can leave sse_hold waiting: bound the wait.
        ready, _, _ = select.select([holder.stdout], [], [], 180)
        line = holder.stdout.readline() if ready else "(no answer within 180 s)"
        held = int(line.split()[1]) if line.startswith("HOLDING") else 0
        if held != STREAMS:
            sys.exit(f"P4 {name}: held {held} of {STREAMS} streams ({line.strip()!r})")
        time.sleep(1)
        after = rss_kib(pid)
        results["p4"][name] = {"streams": held, "kib_per_stream": (after - before) / held}
        if name == "mcp-edge":
            used = metric(ports["admin"], "mcp_edge_memory_budget_used_bytes")
            limit = metric(ports["admin"], "mcp_edge_memory_budget_bytes")
            refused = metric_sum(ports["admin"], "mcp_edge_memory_budget_refusals_total")
            if used is None or limit is None:
                sys.exit("P4 mcp-edge: the memory budget series are missing from /metrics")
            results["p4"][name].update(budget_used_mib=used / 2**20, budget_mib=limit / 2**20,
                                       budget_refusals=refused)
        holder.send_signal(signal.SIGINT)
        holder.wait()
        time.sleep(1)

    # Realism: the official TypeScript SDK server behind each proxy.
    node_dir = os.path.join(ROOT, "tests", "peers")
    if os.path.isdir(os.path.join(node_dir, "node_modules")):
        ts = start(["node", "ts-server.mjs", "--mode", "modern", "--instance", "ts", "--port", "0"], cwd=node_dir)
        ts_port = int(ts.stdout.readline().split()[1])
        ts_ports, _ = start_proxies(work, ts_port, "ts")
        ts_targets = {"direct": url(ts_port), "mcp-edge": url(ts_ports["edge"]),
                      "nginx": url(ts_ports["nginx"]), "haproxy": url(ts_ports["haproxy"]),
                      "plain pingora": url(ts_ports["pingora"])}
        results["ts"] = measure(ts_targets, modern, 16)
    elif IN_CI:
        sys.exit("TS SDK server: tests/peers/node_modules is missing (bash scripts/setup.sh installs it)")
    else:
        print("skipped: the TS SDK server row (tests/peers/node_modules is missing; bash scripts/setup.sh installs it)")


def report(r):
    def added(c, name, k):
        return r[c][name][k] - r[c]["direct"][k]
    names = ("mcp-edge", "nginx", "haproxy", "plain pingora")
    out = ["| measure | direct | mcp-edge | nginx | haproxy | plain pingora | mcp-edge / nginx |",
           "|---|---|---|---|---|---|---|"]
    for c in ("c1", "c64"):
        for k in ("p50", "p99"):
            row = [f"P1 added {k} latency, {c[1:]} conn (µs)", "–"]
            row += [f"{added(c, n, k):.0f}" for n in names]
            row.append(f"{added(c, 'mcp-edge', k) / max(added(c, 'nginx', k), 1e-9):.2f}×")
            out.append("| " + " | ".join(row) + " |")
    c = r["c64"]
    out.append(f"| P2 throughput, 64 conn (req/s) | {c['direct']['rps']:.0f} | "
               + " | ".join(f"{c[n]['rps']:.0f}" for n in names)
               + f" | {c['mcp-edge']['rps'] / c['nginx']['rps']:.2f}× |")
    p4 = r["p4"]
    out.append("| P4 idle SSE streams: KiB per stream (streams held) | – | "
               + " | ".join(f"{p4[n]['kib_per_stream']:.1f} ({p4[n]['streams']})" for n in names)
               + f" | {p4['mcp-edge']['kib_per_stream'] / max(p4['nginx']['kib_per_stream'], 1e-9):.2f}× |")
    p6 = r["p6"]
    for conns in (1, 64):
        m, l = p6["modern"][conns], p6["legacy"][conns]
        out.append(f"| P6 legacy (token) / modern, {conns} conn | – | p50 {l['p50'] / m['p50']:.3f}×, "
                   f"throughput {m['rps'] / l['rps']:.3f}× | – | – | – | – |")
    if "ts" in r:
        t = r["ts"]
        out.append(f"| TS SDK server, 16 conn (req/s) | {t['direct']['rps']:.0f} | "
                   + " | ".join(f"{t[n]['rps']:.0f}" for n in names)
                   + f" | {t['mcp-edge']['rps'] / t['nginx']['rps']:.2f}× |")
    table = "\n".join(out)
    m = r["meta"]
    e4 = p4["mcp-edge"]
    head = (f"`{m['command']}` at commit {m['commit']}, started {m['started']}\n"
            f"machine: {m['cores']} cores, {m['cpu']}; load average (1, 5, 15 min) at the start "
            f"{m['load_start']}, before P4 {m['load_p4']}, at the end {m['load_end']}\n"
            f"{m['nginx']}; {m['haproxy']}; {m['wrk']}\n"
            f"rounds={ROUNDS} duration={DURATION}s streams={STREAMS}; P4 mcp-edge memory budget: "
            f"{e4['budget_used_mib']:.0f} of {e4['budget_mib']:.0f} MiB reserved while holding, "
            f"{e4['budget_refusals']:.0f} refusals\n")
    micro = os.path.join(ROOT, "bench", "results", "micro.txt")
    if not QUICK and os.path.exists(micro):
        head += "\nmicro-benchmarks (cargo bench --bench tokens, --bench inspect, same run):\n\n```\n" \
            + open(micro).read().strip() + "\n```\n"
    print(head)
    print(table)
    print("\nraw medians:", json.dumps(r, indent=1))
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "latest.md"), "w") as f:
        f.write(f"{head}\n{table}\n\n```json\n{json.dumps(r, indent=1)}\n```\n")


if __name__ == "__main__":
    main()
