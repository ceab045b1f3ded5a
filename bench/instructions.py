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
import os
import re
import subprocess

# wrk connections and seconds under callgrind (the proxy runs ~50x slower there).
CONNS = 16
WARM_UP = 3
MEASURE = 8

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


def measure(h, work, name, cmd, url, script):
    out = os.path.join(work, f"callgrind-{name}")
    for f in glob.glob(out + "*"):
        os.remove(f)
    proc = h.start(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *cmd[0]], **cmd[1])
    h.wait_port(cmd[2], timeout=180)
    wrk = lambda secs: subprocess.run(["wrk", "-t1", f"-c{CONNS}", f"-d{secs}s", "-s", script, url],
                                      capture_output=True, text=True, check=True).stdout
    wrk(WARM_UP)
    subprocess.run(["callgrind_control", "-z", str(proc.pid)], capture_output=True, check=True)
    done = re.search(r"\s(\d+) requests in ", wrk(MEASURE))
    subprocess.run(["callgrind_control", "-d", str(proc.pid)], capture_output=True, check=True)
    proc.terminate()
    proc.wait()
    if not done or int(done.group(1)) == 0:
        raise SystemExit(f"instructions: no request completed through {name}")
    requests = int(done.group(1))
    dump = out + ".1"
    total = int(re.search(r"^summary: (\d+)", open(dump).read(), re.M).group(1))
    annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", "--auto=no", dump],
                               capture_output=True, text=True, check=True).stdout
    parts = {}
    for label, frame in PARTS:
        # A function inlined into several files is listed once per file: its own entry is the largest.
        counts = [int(m.group(1).replace(",", "")) for m in
                  re.finditer(r"^\s*([\d,]+) \([\s\d.]+%\)\s+\S*?:(.*)$", annotated, re.M)
                  if frame in m.group(2) and "drop_in_place" not in m.group(2)]
        parts[label] = max(counts, default=0) / requests
    return {"requests": requests, "per_request": total / requests, "parts": parts}


def run(h, work, upstream):
    """Plain Pingora and the default edge, one after the other (callgrind is the load)."""
    keys = os.path.join(work, "keys-instructions")
    with open(keys, "w") as f:
        f.write("1:" + __import__("base64").b64encode(os.urandom(32)).decode() + "\n")
    script = h.lua(os.path.join(work, "instructions.lua"), h.CALL,
                   {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"})
    results = {}
    port = h.free_port()
    plain = ([os.path.join(h.REL, "examples", "plain_pingora"), str(port), str(upstream)], {}, port)
    results["plain pingora"] = measure(h, work, "plain", plain, f"http://127.0.0.1:{port}/mcp", script)
    port, admin = h.free_port(), h.free_port()
    cmd, env = h.edge_command(work, "instructions", "mcp-edge", upstream, keys, port, admin)
    results["mcp-edge"] = measure(h, work, "edge", (cmd, {"env": env}, port), f"http://127.0.0.1:{port}/mcp", script)
    return results


def block(r):
    plain, edge = r["plain pingora"], r["mcp-edge"]
    lines = [f"Instructions per request under callgrind (all threads of the proxy; the kernel not "
             f"counted), wrk {CONNS} connections for {MEASURE} s after a {WARM_UP} s warm-up, the 1 KiB "
             f"tools/call; {plain['requests']} and {edge['requests']} requests measured.", "",
             "| | instructions per request | edge / plain Pingora |", "|---|---|---|",
             f"| plain Pingora | {plain['per_request']:,.0f} | – |",
             f"| mcp-edge, production defaults | {edge['per_request']:,.0f} | "
             f"{edge['per_request'] / plain['per_request']:.2f}× (+{edge['per_request'] - plain['per_request']:,.0f}) |",
             "", "| where the edge's run spends them (inclusive, per request) | instructions |", "|---|---|"]
    for label, _ in PARTS:
        lines.append(f"| {label} | {edge['parts'][label]:,.0f} |")
    return "\n".join(lines)
