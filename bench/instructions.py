"""Instructions per request under callgrind: plain Pingora against mcp-edge (production
defaults), the bench's 1 KiB `tools/call`, and where the edge's extra instructions go, hook by
hook. Part of `bash bench/run.sh`; alone with `bash bench/run.sh --instructions`.

Why: on this shared 2-core machine CPU time per request moves by ±3-5 µs between rounds, more
than most single changes to the request path. An instruction count does not move with the
neighbours: callgrind counts every instruction the proxy executes (all threads) between a
zeroing after the warm-up and a dump after a fixed wrk run, divided by the requests wrk
completed. It is not time (cache misses and system calls are not in it; the kernel's side is
not counted at all), so it complements the CPU figures, it does not replace them.
"""

import glob
import json
import os
import re
import subprocess
import urllib.request

import peers

# wrk connections and seconds under callgrind (the proxy runs ~50x slower there).
CONNS = 16
WARM_UP = 3
MEASURE = 8

# The priced build of the edge (Cargo feature `price-tags`, v0 symbol names; bench/run.sh).
PRICED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "target", "price-tags", "release", "mcp-edge")

# The edge's work, by the frames callgrind names (inclusive instructions per request).
PARTS = [
    ("request_filter (admission, body read, MCP checks)", "ProxyHttp>::request_filter::{{closure}}"),
    ("… reading the body", "mcp_edge::proxy::stages::method::read_all::{{closure}}"),
    ("… the JSON-RPC peek at the body", "<mcp_edge::mcp::peek::Message as serde_core::de::Deserialize>::deserialize"),
    ("… the MCP header checks", "mcp_edge::mcp::rules::header"),
    ("upstream_request_filter (forwarding headers)", "ProxyHttp>::upstream_request_filter::{{closure}}"),
    ("upstream_peer", "ProxyHttp>::upstream_peer::{{closure}}"),
    ("upstream_response_filter", "ProxyHttp>::upstream_response_filter::{{closure}}"),
    ("the replay session's idle watch", "Replay as pingora_core::protocols::http::custom::server::Session>::read_body_or_idle::{{closure}}"),
    ("logging (metrics, access-log line, session hand-back)", "ProxyHttp>::logging::{{closure}}"),
]


def measure(h, work, name, cmd, url, scripts):
    """One proxy under callgrind: for each `(label, script)` of `scripts(port)`, a warm-up, then
    the counters zeroed, a measured wrk run, and a dump. Returns label -> figures (`scripts` a
    single script: its figures)."""
    out = os.path.join(work, f"callgrind-{name}")
    for f in glob.glob(out + "*"):
        os.remove(f)
    proc = h.start(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *cmd[0]], **cmd[1])
    h.wait_port(cmd[2], timeout=180)
    results = {}
    if isinstance(scripts, str):
        # One script (bench/tracing.py): its figures alone.
        script = scripts
        return measure(h, work, name, cmd, url, lambda _port: [("one", script)])["one"]
    for k, (label, script) in enumerate(scripts(cmd[2]), start=1):
        def wrk(secs):
            r = subprocess.run(["wrk", "-t1", f"-c{CONNS}", f"-d{secs}s", "-s", script, url],
                               capture_output=True, text=True, check=True).stdout
            if "Non-2xx" in r:
                raise SystemExit(f"instructions: {name} ({label}) answered non-2xx\n{r}")
            return r
        wrk(WARM_UP)
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], capture_output=True, check=True)
        done = re.search(r"\s(\d+) requests in ", wrk(MEASURE))
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], capture_output=True, check=True)
        if not done or int(done.group(1)) == 0:
            raise SystemExit(f"instructions: no request completed through {name} ({label})")
        results[label] = (f"{out}.{k}", int(done.group(1)))
    # A dump is complete once the process has ended (callgrind_control may return first).
    proc.terminate()
    proc.wait()
    return {label: figures(dump, requests) for label, (dump, requests) in results.items()}


def figures(dump, requests):
    total = int(re.search(r"^summary: (\d+)", open(dump).read(), re.M).group(1))
    annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", "--auto=no", dump],
                               capture_output=True, text=True, check=True).stdout
    entries = [(int(m.group(1).replace(",", "")), m.group(2)) for m in
               re.finditer(r"^\s*([\d,]+) \([\s\d.]+%\)\s+\S*?:(.*)$", annotated, re.M)]
    parts = {}
    for label, frame in PARTS:
        # A function inlined into several files is listed once per file: its own entry is the largest.
        counts = [n for n, name in entries if frame in name and "drop_in_place" not in name]
        parts[label] = max(counts, default=0) / requests
    return {"requests": requests, "per_request": total / requests, "parts": parts,
            "stages": stage_prices(entries, requests)}


def stage_prices(entries, requests):
    """The priced build's stages (src/proxy/pipeline/priced.rs): `(phase, stage)` -> inclusive
    instructions per request. v0 names: `…::pipeline::priced::<phase>::<…::stages::<file>::<Stage>>`,
    a request stage's future `<…::priced::tagged::Request<…::stages::<file>::<Stage>, …> as …Future>::poll`."""
    prices = {}
    for n, name in entries:
        name = re.sub(r"\[[0-9a-f]+\]", "", name)
        m = re.search(r"pipeline::priced::(\w+)::<([\w:]+)>", name)
        if m:
            phase, stage = m.group(1), m.group(2)
        else:
            m = re.search(r"pipeline::priced::tagged::Request<([\w:]+),.*>::poll", name)
            if not m:
                continue
            phase, stage = "request", m.group(1)
        stage = "::".join(stage.split("::")[-2:])
        # A function listed once per file it was inlined into: its own entry is the largest.
        prices[(phase, stage)] = max(prices.get((phase, stage), 0), n / requests)
    return prices


def run(h, work, upstream):
    """Plain Pingora and the default edge, one after the other (callgrind is the load)."""
    keys = os.path.join(work, "keys-instructions")
    with open(keys, "w") as f:
        f.write("1:" + __import__("base64").b64encode(os.urandom(32)).decode() + "\n")
    script = h.lua(os.path.join(work, "instructions.lua"), h.CALL,
                   {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"})
    results = {}
    modern = lambda _port: [("modern", script)]
    port = h.free_port()
    plain = ([os.path.join(h.REL, "examples", "plain_pingora"), str(port), str(upstream)], {}, port)
    results["plain pingora"] = measure(h, work, "plain", plain, f"http://127.0.0.1:{port}/mcp", modern)["modern"]
    port = h.free_port()
    fair = (peers.fair_command(h, work, "instructions", port, upstream), {}, port)
    results["fair pingora"] = measure(h, work, "fair", fair, f"http://127.0.0.1:{port}/mcp", modern)["modern"]

    def both(port):
        """The modern call, then a legacy one carrying a session token this edge issued."""
        init = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", method="POST", data=json.dumps({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "bench", "version": "1"}}}).encode(),
            headers={"Content-Type": "application/json"})
        token = urllib.request.urlopen(init, timeout=60).headers["Mcp-Session-Id"]
        legacy = h.lua(os.path.join(work, "instructions-legacy.lua"), h.LEGACY_CALL,
                       {"MCP-Protocol-Version": "2025-11-25", "Mcp-Session-Id": token})
        return [("modern", script), ("legacy", legacy)]

    for label, binary in (("mcp-edge", None), ("priced", PRICED)):
        if binary and not os.path.exists(binary):
            raise SystemExit(f"instructions: {binary} is missing (bash bench/run.sh builds it)")
        port, admin = h.free_port(), h.free_port()
        cmd, env = h.edge_command(work, f"instructions-{label}", "mcp-edge", upstream, keys, port, admin)
        cmd = [binary or cmd[0], *cmd[1:]]
        r = measure(h, work, label, (cmd, {"env": env}, port), f"http://127.0.0.1:{port}/mcp", both)
        results[label], results[f"{label} legacy"] = r["modern"], r["legacy"]
    return results


def block(r):
    plain, fair, edge, priced = r["plain pingora"], r["fair pingora"], r["mcp-edge"], r["priced"]
    legacy, priced_legacy = r["mcp-edge legacy"], r["priced legacy"]
    ratio = lambda a, b: f"{a['per_request'] / b['per_request']:.2f}× (+{a['per_request'] - b['per_request']:,.0f})"
    lines = [f"Instructions per request under callgrind (all threads of the proxy; the kernel not "
             f"counted), wrk {CONNS} connections for {MEASURE} s after a {WARM_UP} s warm-up, the 1 KiB "
             f"tools/call (and its legacy form with a session token); "
             + ", ".join(f"{x['requests']}" for x in (plain, fair, edge, legacy, priced, priced_legacy))
             + " requests measured.", "",
             "| | instructions per request | mcp-edge / this |", "|---|---|---|",
             f"| plain Pingora | {plain['per_request']:,.0f} | {ratio(edge, plain)} |",
             f"| fair Pingora (forwarding headers, access log off the request path) | "
             f"{fair['per_request']:,.0f} | {ratio(edge, fair)} |",
             f"| mcp-edge, production defaults | {edge['per_request']:,.0f} | – |",
             f"| mcp-edge, the legacy call with a session token | {legacy['per_request']:,.0f} | "
             f"legacy / modern {legacy['per_request'] / edge['per_request']:.3f}× |",
             "", "| where the runs spend them (inclusive, per request; a hook the fair floor runs too "
             "shows its figure) | mcp-edge | fair Pingora |", "|---|---|---|"]
    for label, _ in PARTS:
        theirs = fair["parts"][label]
        lines.append(f"| {label} | {edge['parts'][label]:,.0f} | {f'{theirs:,.0f}' if theirs else '–'} |")
    stages, stages_legacy = priced["stages"], priced_legacy["stages"]
    if not stages:
        raise SystemExit("instructions: the priced build shows no stage (were its symbols v0?)")
    lines += ["", f"Every stage's price tag: the priced build (each stage's call out of line; "
                  f"{priced['per_request']:,.0f} instructions per modern request in all, "
                  f"{priced_legacy['per_request']:,.0f} per legacy one), inclusive, per request; "
                  f"stages under 10 instructions in both left out:", "",
              "| phase | stage | modern | legacy (session token) |", "|---|---|---|---|"]
    phases = ["request", "attempt", "attempt_failed", "upstream_request", "response", "response_body",
              "answer", "logging"]
    keys = sorted(set(stages) | set(stages_legacy),
                  key=lambda k: (phases.index(k[0]) if k[0] in phases else 99, -stages.get(k, 0)))
    for key in keys:
        m, l = stages.get(key, 0), stages_legacy.get(key, 0)
        if max(m, l) >= 10:
            lines.append(f"| {key[0]} | {key[1]} | {m:,.0f} | {l:,.0f} |")
    for label, fig, st in (("modern", priced, stages), ("legacy", priced_legacy, stages_legacy)):
        lines.append(f"| all stages, {label} | | {sum(st.values()):,.0f} | |" if label == "modern" else
                     f"| all stages, {label} | | | {sum(st.values()):,.0f} |")
    lines.append(f"| the rest (Pingora, the hooks, the replay session, the allocator) | | "
                 f"{priced['per_request'] - sum(stages.values()):,.0f} | "
                 f"{priced_legacy['per_request'] - sum(stages_legacy.values()):,.0f} |")
    return "\n".join(lines)
