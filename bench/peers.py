"""The proxies a platform team would deploy instead of mcp-edge, and the floor it is held to
(docs/benchmarks.md, "Against what users would run instead"): the fair Pingora floor
(examples/plain_pingora.rs --fair), the MCP gateway mcp-proxy 0.6.0 (built once by
bench/run.sh), and their table beside the edge. Part of bench/bench.py's run."""

import json
import os
import sys
import urllib.request

# The path each target serves MCP on (mcp-proxy: its root).
PATHS = {"mcp-proxy": "/"}
MCP_PROXY = os.path.expanduser("~/.cache/mcp-edge-bench/mcp-proxy-0.6.0/bin/mcp-proxy")


def url_of(ports, name):
    return f"http://127.0.0.1:{ports[name]}{PATHS.get(name, '/mcp')}"


def start_mcp_proxy(h, work, tag, port, upstream):
    """mcp-proxy in front of `upstream`, as a platform team would run it for this: one backend,
    tools under their own names (no namespace), its logging at `error`, metrics and access log
    off, one Tokio worker like the other proxies. The bench's mock server has no `echo` tool: an
    alias names one of its tools so (mcp-proxy refuses a tool its backend did not list)."""
    conf = os.path.join(work, f"mcp-proxy-{tag}.toml")
    alias = '[[backends.aliases]]\nfrom = "team_a_tool_0"\nto = "echo"\n' if tag == "mock" else ""
    with open(conf, "w") as f:
        f.write(f"""[proxy]\nname = "bench"\nseparator = ""\n\n[proxy.listen]\nhost = "127.0.0.1"\nport = {port}\n
[[backends]]\nname = ""\ntransport = "http"\nurl = "http://127.0.0.1:{upstream}/mcp"\n{alias}
[observability]\nlog_level = "error"\naudit = false\njson_logs = false\n
[observability.metrics]\nenabled = false\n\n[observability.access_log]\nenabled = false\n""")
    if not os.path.exists(MCP_PROXY):
        sys.exit(f"mcp-proxy: {MCP_PROXY} is missing (bash bench/run.sh installs it)")
    return h.start([MCP_PROXY, "-c", conf], env={**os.environ, "TOKIO_WORKER_THREADS": "1"})


def fair_command(h, work, tag, port, upstream):
    """Plain Pingora with the edge's non-MCP work: its access log a file, as the edge's."""
    return [os.path.join(h.REL, "examples", "plain_pingora"), str(port), str(upstream),
            "--fair", os.path.join(h.LOGS, f"fair-pingora-{tag}-access.log")]


def legacy_session(url):
    """A 2025-11-25 session at `url` (initialize, then `notifications/initialized`): its id."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    init = urllib.request.Request(url, method="POST", headers=headers, data=json.dumps({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}}}).encode())
    with urllib.request.urlopen(init, timeout=30) as r:
        session = r.headers["Mcp-Session-Id"]
        r.read()
    if not session:
        sys.exit(f"{url}: initialize gave no Mcp-Session-Id")
    note = urllib.request.Request(url, method="POST", data=json.dumps(
        {"jsonrpc": "2.0", "method": "notifications/initialized"}).encode(),
        headers={**headers, "MCP-Protocol-Version": "2025-11-25", "Mcp-Session-Id": session})
    urllib.request.urlopen(note, timeout=30).read()
    return session


def block(r):
    """mcp-edge (production defaults) beside what a platform team would deploy instead, at
    each concurrency, against both upstreams: throughput, added p50 and p99, CPU per request."""
    names = ("mcp-edge", "mcp-proxy", "nginx", "haproxy", "fair pingora")
    out = ["mcp-edge beside the peers a user would pick (req/s · added p50 · added p99 · proxy CPU per "
           "request; added = the proxy's percentile minus direct's in the same run)", "",
           "| upstream, connections | " + " | ".join(names) + " | mcp-edge / mcp-proxy throughput | "
           "mcp-edge / mcp-proxy CPU |", "|---|" + "---|" * (len(names) + 2)]
    rows = [("fast mock", c, r[c]) for c in ("c1", "c16", "c64")]
    rows += [("TS SDK server", c, t) for c, t in r.get("ts", {}).items()]
    for upstream, c, t in rows:
        cell = lambda n: (f"{t[n]['rps']:,.0f} · {t[n]['p50'] - t['direct']['p50']:+,.0f} µs · "
                          f"{t[n]['p99'] - t['direct']['p99']:+,.0f} µs · {t[n]['cpu_us']:.1f} µs")
        out.append(f"| {upstream}, {c[1:]} | " + " | ".join(cell(n) for n in names)
                   + f" | {t['mcp-edge']['rps'] / t['mcp-proxy']['rps']:.2f}× "
                   f"| {t['mcp-edge']['cpu_us'] / t['mcp-proxy']['cpu_us']:.2f}× |")
    if "ts_session" in r:
        out += ["", "The TS SDK server, the same call in a 2025-11-25 session (what mcp-proxy sends it "
                "whatever its client speaks): direct and through mcp-edge", "",
                "| connections | direct req/s | mcp-edge req/s · added p50 · CPU per request |", "|---|---|---|"]
        for c, t in r["ts_session"].items():
            e = t["mcp-edge"]
            out.append(f"| {c[1:]} | {t['direct']['rps']:,.0f} | {e['rps']:,.0f} · "
                       f"{e['p50'] - t['direct']['p50']:+,.0f} µs · {e['cpu_us']:.1f} µs |")
    return "\n".join(out)


def run(h, work):
    """`bash bench/run.sh --peers`: P1/P2 through every proxy at 1, 16 and 64 connections
    against the fast mock, then the TS SDK server's rows (the full run's parts, alone)."""
    upstream = h.start_upstream()
    ports, pids = h.start_proxies(work, upstream, "mock")
    targets = {"direct": f"http://127.0.0.1:{upstream}/mcp", **{n: url_of(ports, n) for n in h.PROXIES}}
    modern = h.lua(os.path.join(work, "modern.lua"), h.CALL,
                   {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"})
    r = {f"c{conns}": h.measure(targets, modern, conns, {n: h.serving_pid(pids[n]) for n in h.PROXIES})
         for conns in (1, 16, 64)}
    h.ts_rows(work, r, modern)
    r["ratios"] = h.ratios(r)
    return r


def part(r):
    """The `--peers` part's report: the ratios, then the peers' table."""
    return r["ratios"] + "\n\n" + block(r)
