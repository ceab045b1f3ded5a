"""The hand-off part of bench/bench.py: what the extra hop costs when a request lands on a
replica that does not hold its state, against the same request served on the replica that
does.

- Two edges (the bench's production defaults: access log and metrics on, one worker thread
  each) on 127.0.0.2 and 127.0.0.3, one fleet (`[fleet] handoff_listen`), each with the same
  `per_principal` stdio pool of the TypeScript SDK server (tests/peers/ts-server.mjs, stdio).
  Every request carries the same API key: one caller, whose process one replica keeps
  (rendezvous hashing); the other hands each request to it.
- The bench's 1 KiB `tools/call` (echo) in 2026-07-28 form at 1 and 16 connections; wrk, one
  thread; medians over the bench's rounds, targets alternated. Before measuring, one call
  through each replica must answer with the echo, and the keeper is found from the hand-off
  counters (a bench of refusals or of a local serve would measure nothing).
- CPU per request: the edges' own (the server is a separate process): the keeper's alone
  when it is asked directly; both edges' when the request is handed on.

Called from bench.py with bench's own module (`h`) for its helpers."""

import base64
import hashlib
import json
import os
import socket
import statistics
import time
import urllib.request

CONNS = (1, 16)
KEY = "k-bench-caller"
IPS = ("127.0.0.2", "127.0.0.3")


def wait_at(ip, port, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection((ip, port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"handoff bench: nothing listening on {ip}:{port}")


def metric(ip, admin, series):
    text = urllib.request.urlopen(f"http://{ip}:{admin}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[1])
    return 0.0


def start_edges(h, d, node_dir):
    keys = os.path.join(d, "keys")
    with open(keys, "w") as f:
        f.write("1:" + base64.b64encode(os.urandom(32)).decode() + "\n")
    api_keys = os.path.join(d, "api-keys.toml")
    with open(api_keys, "w") as f:
        f.write(f'[[keys]]\nsha256 = "{hashlib.sha256(KEY.encode()).hexdigest()}"\nsubject = "bench"\n')
    ports = [(h.free_port(), h.free_port(), h.free_port()) for _ in IPS]
    peers = ", ".join(f'"{ip}:{p[1]}"' for ip, p in zip(IPS, ports))
    server = os.path.join(node_dir, "ts-server.mjs")
    env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
    edges = []
    for i, ip in enumerate(IPS):
        port, handoff, admin = ports[i]
        conf = os.path.join(d, f"edge{i}.toml")
        with open(conf, "w") as f:
            f.write(f"""[server]\nthreads = 1\n\n[[listeners]]\naddress = "{ip}:{port}"\n
[metrics]\naddress = "{ip}:{admin}"\n\n[sessions]\nkeys_file = "{keys}"\n
[identity]\napi_keys_file = "{api_keys}"\n
[fleet]\npeers = [{peers}]\nhandoff_listen = "{ip}:{handoff}"\nadvertise = "{ip}:{handoff}"\ninterval_ms = 500\ntimeout_ms = 200\n
[[pools]]\nname = "stdio"\ncommand = ["node", "{server}", "--mode", "stdio", "--instance", "b"]\nisolation = "per_principal"\n
[[routes]]\npath = "/mcp"\npool = "stdio"\nauth = "required"\n""")
        proc = h.start([os.path.join(h.REL, "mcp-edge"), "--config", conf], env=env)
        wait_at(ip, port)
        wait_at(ip, admin)
        edges.append({"ip": ip, "port": port, "admin": admin, "proc": proc})
    for e in edges:
        for _ in range(600):
            if metric(e["ip"], e["admin"], 'mcp_edge_fleet_replicas{state="live"}') == len(IPS):
                break
            time.sleep(0.1)
        else:
            raise SystemExit(f"handoff bench: {e['ip']} never saw the fleet live")
    return edges


def run(h, work):
    d = os.path.join(work, "handoff")
    os.makedirs(d)
    node_dir = os.path.join(h.ROOT, "tests", "peers")
    edges = start_edges(h, d, node_dir)
    headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo",
               "Authorization": "Bearer " + KEY}
    sent = 'mcp_edge_handoffs_total{outcome="sent"}'
    for e in edges:
        req = urllib.request.Request(f"http://{e['ip']}:{e['port']}/mcp", data=h.CALL.encode(), headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers})
        answer = json.loads(urllib.request.urlopen(req, timeout=60).read())
        text = answer["result"]["content"][0]["text"]
        if text != "b:" + "x" * 900:
            raise SystemExit(f"handoff bench: {e['ip']} answered {answer}")
    handing = [e for e in edges if metric(e["ip"], e["admin"], sent) > 0]
    keeping = [e for e in edges if metric(e["ip"], e["admin"], sent) == 0]
    if len(handing) != 1 or len(keeping) != 1:
        raise SystemExit("handoff bench: expected one replica to keep the caller and one to hand on")
    keeper, other = keeping[0], handing[0]
    script = h.lua(os.path.join(d, "call.lua"), h.CALL, headers)
    targets = {"owner": keeper, "handed off": other}
    runs = {(name, conns): [] for name in targets for conns in CONNS}
    for _ in range(h.ROUNDS):
        for (name, conns), rs in runs.items():
            e = targets[name]
            pids = [keeper["proc"].pid] + ([other["proc"].pid] if e is other else [])
            before = sum(h.cpu_ticks(p) for p in pids)
            r = h.wrk(f"http://{e['ip']}:{e['port']}/mcp", script, conns, env=dict(os.environ))
            r["cpu_us"] = (sum(h.cpu_ticks(p) for p in pids) - before) * 1e6 / h.TICK / r["requests"]
            rs.append(r)
    handed = metric(other["ip"], other["admin"], sent)
    if handed < sum(r["requests"] for (name, _), rs in runs.items() if name == "handed off" for r in rs):
        raise SystemExit(f"handoff bench: only {handed:.0f} requests were handed on")
    return {f"{name} c{conns}": {m: statistics.median(r[m] for r in rs) for m in ("rps", "p50", "p99", "cpu_us")}
            for (name, conns), rs in runs.items()}


def block(r):
    lines = ["Hand-off in this run: a per_principal stdio pool (the TypeScript SDK server) behind two replicas; "
             "the same caller's 1 KiB tools/call sent to the replica keeping its process (owner) and to the other "
             "one, which hands it on (throughput: higher is better; latency and CPU: lower is better).", "",
             "| conn | owner: req/s, p50 µs, p99 µs | handed off: req/s, p50 µs, p99 µs | added p50, p99 (µs) "
             "| edge CPU µs/req: owner, both replicas handed off |",
             "|---|---|---|---|---|"]
    for conns in CONNS:
        a, b = r[f"owner c{conns}"], r[f"handed off c{conns}"]
        cell = lambda x: f"{x['rps']:.0f}, {x['p50']:.0f}, {x['p99']:.0f}"
        lines.append(f"| {conns} | {cell(a)} | {cell(b)} | {b['p50'] - a['p50']:+.0f}, {b['p99'] - a['p99']:+.0f} "
                     f"| {a['cpu_us']:.1f}, {b['cpu_us']:.1f} |")
    return "\n".join(lines)
