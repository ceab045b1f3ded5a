"""The balancing part of bench/bench.py (issue 41): how mcp-edge spreads uneven MCP work over
three members, against HAProxy in front of the same members, in one run.

- Three official TypeScript SDK servers (tests/peers/ts-server.mjs `--mode modern`), each with
  the `work{ms}` tool and its load control (`/__load`: a slow factor, 500 to everything, no
  answer at all; the POSTs it holds at once, at most, in all, counted where the work happens).
  Member m1 is the one a scenario breaks; a fourth, m4, joins by a reload in the slow-start
  scenario.
- The load: 32 closed-loop keep-alive connections (Python asyncio, stdlib only), each sending
  2026-07-28 `tools/call`s of `work`, 90 % short (20 ms) and 10 % long (1000 ms), drawn from a
  seeded generator per connection (the same sequence through every balancer). A run lasts
  DURATION, then the calls in flight finish (bounded by the client's timeout) and are counted.
- Per run: calls/s (calls that ended within the run's time, over that time), each member's share
  of the calls it received and the most it held at once (its own `/__load` counts), calls slower
  than 1 s, and calls *late* by more than 1 s (latency minus the call's own work: a long call
  works 1 s by design, so "slower than 1 s" counts every long call wherever it went), p50/p99 of
  every call (errors included: the client waited for them), errors (an HTTP status other than
  200, a JSON-RPC error, a connection that failed or the client's timeout).
- The balancers, each started fresh for its run (no ejection or state carried over), one worker
  thread each, on their defaults otherwise: mcp-edge `round_robin` and `least_request` (TCP
  health checks, so no check reaches the members' counters; outlier ejection on its defaults:
  5 failures in a row, 10 s doubling), HAProxy `balance roundrobin` and `leastconn` with
  `check` (TCP), `observe layer7 error-limit 5 on-error mark-down` (HAProxy's closest match to
  the edge's outlier ejection) and `timeout server` equal to the edge's `upstream_read_ms`.
- Scenarios: (1) m1 slowed 5x; (2) m1 answers 500 to everything; (3) m1 never answers, both
  timeouts 2000 ms; (4) m1 slowed 5x with `max_in_flight = 4` on the edge (`least_request`)
  against HAProxy `leastconn` with `maxconn 4` (both queue the rest, 5 s at most): each member's
  most held at once and the queue's refusals; (5) slow start: m4 added by a reload (the config
  file written, SIGHUP) with `slow_start_ms = 10000`, against the same without slow start and
  HAProxy `slowstart 10s` (m4 configured `disabled`, enabled on the runtime API): m4's share in
  its first 3 s against its share once the ramp is over.

`MCP_EDGE_BIN` runs another mcp-edge binary than target/release's (a debug build while the
harness is developed). Called from bench.py with bench's own module (`h`) for its helpers."""

import asyncio
import base64
import json
import os
import random
import signal
import socket
import statistics
import time
import urllib.request

CONNS = 32
SHORT_MS, LONG_MS, LONG_SHARE = 20, 1000, 0.10
SLOW_FACTOR = 5
READ_MS = 2000          # scenario 3: the edge's upstream_read_ms = HAProxy's timeout server
DEFAULT_READ_MS = 60000  # the edge's default, and HAProxy's timeout server elsewhere
LIMIT = 4
QUEUE_MS = 5000
CLIENT_TIMEOUT = 30.0
BALANCERS = ("edge round_robin", "edge least_request", "haproxy roundrobin", "haproxy leastconn")


def params(quick):
    """Run lengths: the full run about 20 s per run; --quick a few seconds (the harness only)."""
    if quick:
        return {"quick": True, "duration": 1.5, "drain": 0.5, "slow_start_ms": 2000, "before_join": 0.5,
                "after_join": 2.5, "first_s": 0.6, "steady_from": 2.0}
    return {"quick": False, "duration": 20.0, "drain": CLIENT_TIMEOUT + 1, "slow_start_ms": 10000,
            "before_join": 4.0, "after_join": 20.0, "first_s": 3.0, "steady_from": 11.0}


# ---------------------------------------------------------------- members

def load(port, query=None):
    """A member's `/__load` (GET), or set it (POST with `query`)."""
    url = f"http://127.0.0.1:{port}/__load" + (f"?{query}" if query else "")
    req = urllib.request.Request(url, method="POST" if query else "GET", data=b"" if query else None)
    return json.loads(urllib.request.urlopen(req, timeout=5).read())


def settle(members, timeout=15.0):
    """Wait until no member holds a call (the previous run's hung or slow ones are gone), then
    restart their counts."""
    end = time.time() + timeout
    while time.time() < end and any(load(p)["inFlight"] for p in members):
        time.sleep(0.1)
    for p in members:
        load(p, "factor=1&fail=0&hang=0&reset=1")


# ---------------------------------------------------------------- load

def request_bytes(port, rid, ms):
    body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {
        "name": "work", "arguments": {"ms": ms}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}}, separators=(",", ":")).encode()
    head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\nMcp-Protocol-Version: 2026-07-28\r\n"
            f"Mcp-Method: tools/call\r\nMcp-Name: work\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    return head + body


async def exchange(conn, port, data):
    """One request on a kept-alive connection (opened when None); (status, body, keep)."""
    reader, writer = conn
    writer.write(data)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip().lower()
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding") == "chunked":
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(parts)
    else:
        body = await reader.read()
        return status, body, False
    return status, body, headers.get("connection") != "close"


def answer_ok(status, body):
    """200 and a JSON-RPC result (the answer as JSON or the last `data:` of an event stream)."""
    if status != 200:
        return False
    text = body.decode("utf-8", "replace")
    if not text.lstrip().startswith("{"):
        data = [l[5:].strip() for l in text.splitlines() if l.startswith("data:")]
        text = data[-1] if data else ""
    try:
        msg = json.loads(text)
    except ValueError:
        return False
    return "result" in msg and "error" not in msg


async def worker(port, seed, t0, deadline, calls):
    rng = random.Random(seed)
    conn = None
    rid = 0
    while time.monotonic() < deadline:
        rid += 1
        ms = LONG_MS if rng.random() < LONG_SHARE else SHORT_MS
        start = time.monotonic()
        ok = False
        try:
            if conn is None:
                conn = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
            status, body, keep = await asyncio.wait_for(exchange(conn, port, request_bytes(port, rid, ms)),
                                                        CLIENT_TIMEOUT)
            ok = answer_ok(status, body)
            if not keep:
                conn[1].close()
                conn = None
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ValueError,
                IndexError):
            if conn is not None:
                conn[1].close()
            conn = None
            await asyncio.sleep(0.01)
        end = time.monotonic()
        calls.append((start - t0, end - t0, ms, ok))
    if conn is not None:
        conn[1].close()


async def drive(port, duration, drain, during=None):
    """The closed loop for `duration` s, then `drain` s at most for the calls still out (the
    quick run abandons them: they are not counted); `during(t0)`, if given, runs beside it
    (the reload)."""
    calls = []
    t0 = time.monotonic()
    tasks = [asyncio.ensure_future(worker(port, 1000 + i, t0, t0 + duration, calls)) for i in range(CONNS)]
    side = asyncio.ensure_future(during(t0)) if during else None
    _, pending = await asyncio.wait(tasks, timeout=duration + drain)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return calls, (await side) if side else None


def summarise(calls, duration, members, counts):
    lat = sorted(end - start for start, end, _, _ in calls)
    n = len(calls)
    q = lambda p: lat[min(n - 1, int(p * n))] * 1000 if n else 0.0
    total = sum(c["calls"] for c in counts) or 1
    return {
        "calls": n,
        "calls_per_s": sum(1 for _, end, _, _ in calls if end <= duration) / duration,
        "share": [c["calls"] / total for c in counts],
        "member_calls": [c["calls"] for c in counts],
        "max_in_flight": [c["maxInFlight"] for c in counts],
        "over_1s": sum(1 for start, end, _, _ in calls if end - start > 1.0),
        "late_1s": sum(1 for start, end, ms, _ in calls if end - start - ms / 1000 > 1.0),
        "p50_ms": q(0.50),
        "p99_ms": q(0.99),
        "errors": sum(1 for *_, ok in calls if not ok),
        "members": len(members),
    }


# ---------------------------------------------------------------- balancers

def edge_conf(path, port, admin, keys, members, policy, read_ms, extra=""):
    member_list = ", ".join(f'"127.0.0.1:{p}"' for p in members)
    with open(path, "w") as f:
        f.write(f"""[server]\nthreads = 1\n\n[[listeners]]\naddress = "127.0.0.1:{port}"\n
[metrics]\naddress = "127.0.0.1:{admin}"\n\n[sessions]\nkeys_file = "{keys}"\n
[timeouts]\nupstream_read_ms = {read_ms}\n
[[pools]]\nname = "bench"\nmembers = [{member_list}]\nbalance = "{policy}"\n{extra}
[pools.health]\ncheck = "tcp"\n
[[routes]]\npath = "/mcp"\npool = "bench"\n""")


def start_edge(h, d, tag, members, policy, read_ms, extra=""):
    port, admin = h.free_port(), h.free_port()
    keys = os.path.join(d, "keys")
    if not os.path.exists(keys):
        with open(keys, "w") as f:
            f.write("1:" + base64.b64encode(os.urandom(32)).decode() + "\n")
    conf = os.path.join(d, f"edge-{tag}.toml")
    edge_conf(conf, port, admin, keys, members, policy, read_ms, extra)
    binary = os.environ.get("MCP_EDGE_BIN") or os.path.join(h.REL, "mcp-edge")
    env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
    proc = h.start([binary, "--config", conf], env=env)
    h.wait_port(port)
    h.wait_port(admin)
    for _ in range(300):
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=2).status == 200:
                break
        except OSError:
            pass
        time.sleep(0.1)
    else:
        raise SystemExit(f"balance bench: the edge ({tag}) never became ready")
    return {"port": port, "admin": admin, "proc": proc, "conf": conf, "keys": keys,
            "args": (conf, port, admin, keys, policy, read_ms)}


def haproxy_conf(path, port, sock, members, policy, read_ms, server_extra="", disabled=()):
    lines = ["global", "  nbthread 1", "  maxconn 4000", f"  stats socket {sock} level admin",
             "defaults", "  mode http", "  timeout connect 2s", "  timeout client 60s",
             f"  timeout server {read_ms}ms", f"  timeout queue {QUEUE_MS}ms", "  http-reuse always",
             "frontend f", f"  bind 127.0.0.1:{port}", "  default_backend b",
             "backend b", f"  balance {policy}",
             f"  default-server check inter 2s rise 2 fall 3 observe layer7 error-limit 5 on-error mark-down"
             + (f" {server_extra}" if server_extra else "")]
    for i, p in enumerate(members):
        lines.append(f"  server m{i + 1} 127.0.0.1:{p}" + (" disabled" if i in disabled else ""))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def start_haproxy(h, d, tag, members, policy, read_ms, server_extra="", disabled=()):
    port = h.free_port()
    sock = os.path.join(d, f"haproxy-{tag}.sock")
    conf = os.path.join(d, f"haproxy-{tag}.cfg")
    haproxy_conf(conf, port, sock, members, policy, read_ms, server_extra, disabled)
    proc = h.start(["haproxy", "-f", conf, "-db"])
    h.wait_port(port)
    return {"port": port, "proc": proc, "sock": sock, "conf": conf}


def haproxy_cmd(sock, cmd):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(sock)
    s.sendall(cmd.encode() + b"\n")
    out = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    s.close()
    return out.decode()


def stop(b):
    p = b["proc"]
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=10)
        except Exception:
            p.kill()
            p.wait()


def edge_metrics(admin):
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5).read().decode()
    rejections, ejections, wait_sum, wait_count, reloads = {}, 0.0, 0.0, 0.0, 0.0
    for line in text.splitlines():
        if line.startswith("mcp_edge_pool_rejections_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            rejections[reason] = rejections.get(reason, 0) + float(line.rsplit(" ", 1)[1])
        elif line.startswith("mcp_edge_upstream_ejections_total{"):
            ejections += float(line.rsplit(" ", 1)[1])
        elif line.startswith("mcp_edge_pool_queue_wait_seconds_sum"):
            wait_sum += float(line.rsplit(" ", 1)[1])
        elif line.startswith("mcp_edge_pool_queue_wait_seconds_count"):
            wait_count += float(line.rsplit(" ", 1)[1])
        elif line.startswith('mcp_edge_config_reloads_total{result="success"}'):
            reloads += float(line.rsplit(" ", 1)[1])
    return {"rejections": rejections, "ejections": ejections, "reloads_ok": reloads,
            "queue_wait_mean_ms": wait_sum / wait_count * 1000 if wait_count else 0.0}


def start_balancer(h, d, tag, name, members, read_ms, edge_extra="", haproxy_extra=""):
    kind, policy = name.split(" ", 1)
    if kind == "edge":
        return start_edge(h, d, tag, members, policy, read_ms, edge_extra)
    return start_haproxy(h, d, tag, members, policy, read_ms, haproxy_extra)


def one_run(h, d, tag, name, members, fault, p, read_ms=DEFAULT_READ_MS, edge_extra="", haproxy_extra=""):
    settle(members)
    if fault:
        load(members[0], fault)
    b = start_balancer(h, d, tag, name, members, read_ms, edge_extra, haproxy_extra)
    try:
        calls, _ = asyncio.run(drive(b["port"], p["duration"], p["drain"]))
        counts = [load(m) for m in members]
        r = summarise(calls, p["duration"], members, counts)
        if "admin" in b:
            r.update(edge_metrics(b["admin"]))
            del r["reloads_ok"]
    finally:
        stop(b)
    load(members[0], "factor=1&fail=0&hang=0")
    if r["calls"] == 0 or r["errors"] == r["calls"]:
        raise SystemExit(f"balance bench: {tag} {name}: no call answered ({r})")
    return r


# ---------------------------------------------------------------- slow start

def join_run(h, d, tag, name, members, p, slow_start_ms):
    """Three members serve; after `before_join` s a fourth joins (edge: config written, SIGHUP;
    HAProxy: `enable server` on the runtime API). m4's share per interval from its counts."""
    three, four = members[:3], members
    settle(four)
    kind, policy = name.split(" ", 1)
    if kind == "edge":
        extra = f"slow_start_ms = {slow_start_ms}\n" if slow_start_ms else ""
        b = start_edge(h, d, tag, three, policy, DEFAULT_READ_MS, extra)
    else:
        b = start_haproxy(h, d, tag, four, policy, DEFAULT_READ_MS,
                          f"slowstart {slow_start_ms}ms" if slow_start_ms else "", disabled=(3,))
    samples = []

    async def during(t0):
        loop = asyncio.get_running_loop()
        await asyncio.sleep(p["before_join"])
        if kind == "edge":
            conf, port, admin, keys, pol, read_ms = b["args"]
            edge_conf(conf, port, admin, keys, four, pol, read_ms, extra)
            b["proc"].send_signal(signal.SIGHUP)
        else:
            await loop.run_in_executor(None, haproxy_cmd, b["sock"], "enable server b/m4")
        joined = time.monotonic() - t0
        end = t0 + p["before_join"] + p["after_join"]
        while time.monotonic() < end:
            counts = await loop.run_in_executor(None, lambda: [load(m)["calls"] for m in four])
            samples.append((time.monotonic() - t0 - joined, counts))
            await asyncio.sleep(0.2)
        return joined

    try:
        duration = p["before_join"] + p["after_join"]
        calls, joined = asyncio.run(drive(b["port"], duration, p["drain"], during))
        counts = [load(m) for m in four]
        r = summarise(calls, duration, four, counts)
        if "admin" in b:
            r.update(edge_metrics(b["admin"]))
            r["reloads"] = r.pop("reloads_ok")
            if r["reloads"] != 1:
                raise SystemExit(f"balance bench: {tag}: the edge counted {r['reloads']:.0f} good reloads, not 1")
        if counts[3]["calls"] == 0:
            raise SystemExit(f"balance bench: {tag}: m4 never got a call")
    finally:
        stop(b)

    # The join counts from the last sample before m4's first call (the reload is not instant:
    # SIGHUP to the first call is reported apart).
    first = next((k for k, (_, c) in enumerate(samples) if c[3] > 0), 0)
    base = samples[first - 1][0] if first > 0 else 0.0

    def share(a, z):
        """m4's share of the calls the members received between `a` and `z` s after the join."""
        before = [c for t, c in samples if t - base <= a]
        after = [c for t, c in samples if t - base <= z]
        lo = before[-1] if before else [0, 0, 0, 0]
        hi = after[-1] if after else lo
        diff = [y - x for x, y in zip(lo, hi)]
        return diff[3] / max(1, sum(diff))
    left = p["after_join"] - base
    r["first_share"] = share(0.0, p["first_s"])
    r["steady_share"] = share(p["steady_from"], left)
    r["ramp"] = [round(share(t, t + 1.0), 3) for t in range(int(left) - 1)]
    r["joined_at"] = joined
    r["first_call_after_s"] = samples[first][0] if samples else None
    r["window_from_s"] = base
    return r


# ---------------------------------------------------------------- the part

SCENARIOS = (
    ("slow", "m1 slowed 5×", f"factor={SLOW_FACTOR}", DEFAULT_READ_MS),
    ("fail", "m1 answers 500", "fail=1", DEFAULT_READ_MS),
    ("hang", f"m1 never answers (timeouts {READ_MS} ms)", "hang=1", READ_MS),
)


def run(h, work):
    d = os.path.join(work, "balance")
    os.makedirs(d)
    p = params(h.QUICK)
    node_dir = os.path.join(h.ROOT, "tests", "peers")
    members = []
    for i in range(4):
        proc = h.start(["node", "ts-server.mjs", "--mode", "modern", "--instance", f"m{i + 1}", "--port", "0"],
                       cwd=node_dir)
        members.append(int(proc.stdout.readline().split()[1]))
    for m in members:
        h.wait_port(m)
    three = members[:3]
    out = {"params": p, "runs": {}}
    for key, _, fault, read_ms in SCENARIOS:
        for name in BALANCERS:
            out["runs"][f"{key} {name}"] = one_run(h, d, f"{key}-{name.replace(' ', '-')}", name, three, fault, p,
                                                   read_ms)
    limit_extra = f"max_in_flight = {LIMIT}\nqueue_ms = {QUEUE_MS}\n"
    out["runs"]["limit edge least_request"] = one_run(h, d, "limit-edge", "edge least_request", three,
                                                      f"factor={SLOW_FACTOR}", p, edge_extra=limit_extra)
    out["runs"]["limit haproxy leastconn"] = one_run(h, d, "limit-haproxy", "haproxy leastconn", three,
                                                     f"factor={SLOW_FACTOR}", p, haproxy_extra=f"maxconn {LIMIT}")
    ss = p["slow_start_ms"]
    for name, ms in (("edge least_request", ss), ("edge round_robin", ss), ("edge least_request", 0),
                     ("haproxy roundrobin", ss)):
        tag = f"join-{name.replace(' ', '-')}-{ms}"
        out["runs"][f"join {name} {ms}"] = join_run(h, d, tag, name, members, p, ms)
    return out


# ---------------------------------------------------------------- the report

def pct(x):
    return f"{100 * x:.1f} %"


def row(label, name, r):
    n = max(1, r["calls"])
    shares = " / ".join(f"{100 * s:.0f}" for s in r["share"])
    held = " / ".join(str(x) for x in r["max_in_flight"])
    note = ""
    if "ejections" in r:
        rej = sum(r["rejections"].values())
        note = f"ejections {r['ejections']:.0f}, queue refusals {rej:.0f}"
        if r["queue_wait_mean_ms"]:
            note += f", mean queue wait {r['queue_wait_mean_ms']:.0f} ms"
    return (f"| {label} | {name} | {r['calls_per_s']:.0f} | {shares} | {r['over_1s']} ({pct(r['over_1s'] / n)}) "
            f"| {r['late_1s']} ({pct(r['late_1s'] / n)}) | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} "
            f"| {pct(r['errors'] / n)} | {held} | {note} |")


def goals(r):
    """Each goal of issue 41 against this run's figures: (goal, figures, met)."""
    runs = r["runs"]
    out = []
    lr, hl, rr = runs["slow edge least_request"], runs["slow haproxy leastconn"], runs["slow edge round_robin"]
    late = lambda x: x["late_1s"] / max(1, x["calls"])
    out.append(("least_request: the slow member's share ≤ HAProxy leastconn's + 3 points",
                f"{pct(lr['share'][0])} against {pct(hl['share'][0])}", lr["share"][0] <= hl["share"][0] + 0.03))
    out.append(("least_request: calls late by more than 1 s ≤ half of round_robin's",
                f"{pct(late(lr))} against {pct(late(rr))} (half: {pct(late(rr) / 2)})", late(lr) <= late(rr) / 2))
    for key, what in (("fail", "a member answering 500"), ("hang", "a member that never answers")):
        for pol in ("round_robin", "least_request"):
            x = runs[f"{key} edge {pol}"]
            e = x["errors"] / max(1, x["calls"])
            out.append((f"{what}, edge {pol}: errors ≤ 5 % of calls", pct(e), e <= 0.05))
    lim = runs["limit edge least_request"]
    rej = sum(lim["rejections"].values())
    out.append((f"max_in_flight = {LIMIT}: no member ever holds more (the members count it)",
                f"most held per member {' / '.join(map(str, lim['max_in_flight']))}; {rej:.0f} queue refusals",
                max(lim["max_in_flight"]) <= LIMIT))
    for pol in ("least_request", "round_robin"):
        j = runs[f"join edge {pol} {r['params']['slow_start_ms']}"]
        out.append((f"slow start, edge {pol}: a new member's share in its first {r['params']['first_s']:g} s ≤ half its steady share",
                    f"{pct(j['first_share'])} against {pct(j['steady_share'])}",
                    j["first_share"] <= j["steady_share"] / 2))
    return out


def block(r):
    runs = r["runs"]
    p = r["params"]
    lines = [f"Balancing in this run: three TypeScript SDK servers (m1 the one a scenario breaks), {CONNS} "
             f"closed-loop connections, 90 % `work` {SHORT_MS} ms and 10 % `work` {LONG_MS} ms tools/calls, "
             f"{p['duration']:.0f} s per run; shares and most held at once from the members' own counts "
             "(m1 / m2 / m3 [/ m4]); late: latency minus the call's own work.", "",
             "| scenario | balancer | calls/s | share % per member | > 1 s | late > 1 s | p50 ms | p99 ms | errors "
             "| most held at once | edge: ejections, queue |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, label, _, _ in SCENARIOS:
        for name in BALANCERS:
            lines.append(row(label, name, runs[f"{key} {name}"]))
    lines.append(row(f"m1 slowed 5×, at most {LIMIT} per member", f"edge least_request, max_in_flight = {LIMIT}",
                     runs["limit edge least_request"]))
    lines.append(row(f"m1 slowed 5×, at most {LIMIT} per member", f"haproxy leastconn, maxconn {LIMIT}",
                     runs["limit haproxy leastconn"]))
    ss = p["slow_start_ms"]
    lines += ["", f"Slow start in this run: m4 joins after {p['before_join']:g} s (edge: the config file written "
              "and SIGHUP; HAProxy: `enable server` of a `disabled` m4); its share of the calls in its first "
              f"{p['first_s']:g} s, from {p['steady_from']:g} s on (steady), and per second, counted from the last "
              "sample (every 0.2 s) before its first call; the time from the reload (or `enable server`) to "
              "that call apart.", "",
              f"| balancer | slow start | m4's first call after | m4 share, first {p['first_s']:g} s | m4 share, steady "
              "| first / steady | m4 share per second |",
              "|---|---|---|---|---|---|---|"]
    for name, ms in (("edge least_request", ss), ("edge round_robin", ss), ("edge least_request", 0),
                     ("haproxy roundrobin", ss)):
        j = runs[f"join {name} {ms}"]
        lines.append(f"| {name} | {f'{ms} ms' if ms else 'off'} | {j['first_call_after_s']:.1f} s "
                     f"| {pct(j['first_share'])} | {pct(j['steady_share'])} "
                     + (f"| {j['first_share'] / j['steady_share']:.2f} | " if j["steady_share"] else "| – | ")
                     + " ".join(f"{100 * s:.0f}" for s in j["ramp"]) + " |")
    lines += ["", "Goals (issue 41) in this run" + (" (a quick run: the harness checked, nothing measured)"
                                                   if p["quick"] else "") + ":", ""]
    for goal, figures, met in goals(r):
        lines.append(f"- {'met' if met else 'MISSED'}: {goal}: {figures}")
    return "\n".join(lines)
