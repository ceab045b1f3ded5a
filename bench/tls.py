"""The TLS part of bench/bench.py: mcp-edge's TLS listener against nginx terminating TLS with
the same certificate, both in front of the same upstream, in the same run.

- A throwaway CA and an ECDSA P-256 server certificate for localhost / 127.0.0.1, made with
  `openssl` in the run's temp dir; mcp-edge and nginx load the same certificate and key.
- mcp-edge: the bench's default edge configuration (production defaults, one worker thread)
  with `[listeners.tls]`; nginx: one worker, `ssl_protocols TLSv1.2 TLSv1.3`, upstream
  keep-alive, as the plain nginx baseline.
- wrk (one thread, 64 connections, the same 1 KiB tools/call) over https, three ways:
  keep-alive connections; a new connection per request (`Connection: close`) with wrk's
  default session resumption; and a new connection per request with a full handshake each.
  wrk 4.1.0 keeps one SSL object per connection slot and `SSL_clear` keeps its session, so its
  reconnects resume the previous session (TLS 1.3 PSK). A small LD_PRELOAD shim, built here
  with `cc`, counts wrk's handshakes (full and resumed, from `SSL_session_reused`) and, for
  the full-handshake runs, drops the session on close. The counts are checked: a full-handshake
  run must resume nothing, a new-connection run must do one handshake per request.
- wrk sends no ALPN, so every run is HTTP/1.1; the h2 negotiation is only checked once.

Called from bench.py with bench's own module (`h`) for its helpers, so started processes are
stopped by its cleanup."""

import json
import os
import resource
import shutil
import ssl
import statistics
import subprocess
import sys
import urllib.request

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
static unsigned long full, resumed;
static const char *version = "?";
static int (*real_connect)(void *), (*real_clear)(void *), (*reused)(void *);
static int (*set_session)(void *, void *);
static const char *(*get_version)(const void *);
static void init(void) {
    if (real_connect) return;
    real_connect = dlsym(RTLD_NEXT, "SSL_connect");
    real_clear = dlsym(RTLD_NEXT, "SSL_clear");
    reused = dlsym(RTLD_NEXT, "SSL_session_reused");
    set_session = dlsym(RTLD_NEXT, "SSL_set_session");
    get_version = dlsym(RTLD_NEXT, "SSL_get_version");
}
/* wrk calls SSL_connect until it returns 1: one completed handshake. */
int SSL_connect(void *s) {
    init();
    int r = real_connect(s);
    if (r == 1) { if (reused(s)) resumed++; else full++; version = get_version(s); }
    return r;
}
/* wrk closes with SSL_shutdown + SSL_clear, which keeps the session for the next connect. */
int SSL_clear(void *s) {
    init();
    int r = real_clear(s);
    const char *fresh = getenv("MCP_BENCH_TLS_FRESH");
    if (fresh && *fresh == '1') set_session(s, NULL);
    return r;
}
__attribute__((destructor)) static void report(void) {
    const char *path = getenv("MCP_BENCH_TLS_STATS");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f) { fprintf(f, "%lu %lu %s\n", full, resumed, version); fclose(f); }
}
"""

CONNS = 64
# name -> (script, drop the session on close)
KINDS = {
    "keep-alive": ("keepalive", False),
    "new connection, full handshake": ("close", True),
    "new connection, resumed": ("close", False),
}
TARGETS = ("mcp-edge", "nginx")


def missing_tools():
    return [t for t in ("openssl", "cc") if shutil.which(t) is None]


def certificates(d):
    """A throwaway CA and an ECDSA P-256 certificate for localhost and 127.0.0.1 signed by it."""
    def ossl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n")
    ec = ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
    ossl("genpkey", *ec, "-out", "ca.key")
    ossl("req", "-x509", "-new", "-key", "ca.key", "-sha256", "-days", "2",
         "-subj", "/CN=mcp-edge bench CA", "-out", "ca.crt")
    ossl("genpkey", *ec, "-out", "server.key")
    ossl("req", "-new", "-key", "server.key", "-subj", "/CN=localhost", "-out", "server.csr")
    ossl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
         "-days", "2", "-sha256", "-extfile", "server.ext", "-out", "server.crt")
    return tuple(os.path.join(d, n) for n in ("ca.crt", "server.crt", "server.key"))


def build_shim(d):
    src, so = os.path.join(d, "wrk_tls_shim.c"), os.path.join(d, "wrk_tls_shim.so")
    with open(src, "w") as f:
        f.write(SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", so, src, "-ldl"], check=True,
                   capture_output=True)
    return so


def start_servers(h, d, upstream, cert, key):
    ports = {"mcp-edge": h.free_port(), "admin": h.free_port(), "nginx": h.free_port()}
    keys = os.path.join(d, "keys")
    with open(keys, "w") as f:
        f.write("1:" + __import__("base64").b64encode(os.urandom(32)).decode() + "\n")
    conf = os.path.join(d, "edge-tls.toml")
    # The bench's default edge (production defaults, one thread), on a TLS listener.
    with open(conf, "w") as f:
        f.write(f"""[server]\nthreads = 1\n\n[[listeners]]\naddress = "127.0.0.1:{ports['mcp-edge']}"
[listeners.tls]\ncertificates = [ {{ cert = "{cert}", key = "{key}" }} ]\n
[metrics]\naddress = "127.0.0.1:{ports['admin']}"\n
[sessions]\nkeys_file = "{keys}"\n\n[[pools]]\nname = "bench"\nmembers = ["127.0.0.1:{upstream}"]\n
[[routes]]\npath = "/mcp"\npool = "bench"\n""")
    env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
    edge = h.start([os.path.join(h.REL, "mcp-edge"), "--config", conf], env=env)
    nginx_conf = os.path.join(d, "nginx-tls.conf")
    # As the plain nginx baseline (one worker, upstream keep-alive), terminating TLS; h2 and
    # HTTP/1.1 by ALPN like the edge (wrk offers no ALPN: it gets HTTP/1.1 from both).
    with open(nginx_conf, "w") as f:
        f.write(f"""worker_processes 1;\nworker_rlimit_nofile 20000;\nevents {{ worker_connections 19990; }}
http {{\n  access_log off;\n  upstream u {{ server 127.0.0.1:{upstream}; keepalive 256; }}
  server {{\n    listen 127.0.0.1:{ports['nginx']} ssl http2;
    ssl_certificate {cert};\n    ssl_certificate_key {key};\n    ssl_protocols TLSv1.2 TLSv1.3;
    location / {{\n      proxy_pass http://u;
      proxy_http_version 1.1;\n      proxy_set_header Connection "";\n      proxy_buffering off;
      proxy_read_timeout 3600s;\n    }}\n  }}\n}}\n""")
    nginx = h.start(["nginx", "-c", nginx_conf, "-p", d,
                     "-g", f"daemon off; pid {d}/nginx-tls.pid; error_log stderr error;"])
    for p in ports.values():
        h.wait_port(p)
    return ports, {"mcp-edge": edge, "nginx": nginx}


def check(h, ca, port, name):
    """One verified handshake offering h2 and HTTP/1.1, and one tools/call over HTTPS."""
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    with ctx.wrap_socket(__import__("socket").create_connection(("127.0.0.1", port), 5),
                         server_hostname="localhost") as s:
        alpn, version = s.selected_alpn_protocol(), s.version()
    req = urllib.request.Request(f"https://127.0.0.1:{port}/mcp", method="POST", data=h.CALL.encode(),
                                 headers={"Content-Type": "application/json",
                                          "Accept": "application/json, text/event-stream",
                                          "MCP-Protocol-Version": "2026-07-28",
                                          "Mcp-Method": "tools/call", "Mcp-Name": "echo"})
    body = urllib.request.urlopen(req, timeout=5, context=ssl.create_default_context(cafile=ca)).read()
    if b'"result"' not in body:
        sys.exit(f"TLS {name}: the tools/call over HTTPS got {body[:200]!r}")
    return {"alpn_offered_h2_h1": alpn, "version": version}


def one(h, url, script, pid, shim, fresh, stats):
    env = dict(os.environ, LD_PRELOAD=shim, MCP_BENCH_TLS_STATS=stats,
               MCP_BENCH_TLS_FRESH="1" if fresh else "0")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = h.wrk(url, script, CONNS, pid, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(stats) as f:
        full, resumed, version = f.read().split()
    r.update(full=int(full), resumed=int(resumed), version=version,
             # wrk's own CPU over the run, in % of one core: near 100, the client was the limit.
             client_cpu_pct=100 * cpu / h.DURATION)
    return r


def run(h, work, upstream):
    """Start the two TLS servers, measure, return the results (medians per kind and target)."""
    d = os.path.join(work, "tls")
    os.makedirs(d)
    ca, cert, key = certificates(d)
    shim = build_shim(d)
    ports, procs = start_servers(h, d, upstream, cert, key)
    meta = {name: check(h, ca, ports[name], name) for name in TARGETS}
    headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"}
    scripts = {"keepalive": h.lua(os.path.join(d, "keepalive.lua"), h.CALL, headers),
               "close": h.lua(os.path.join(d, "close.lua"), h.CALL, {**headers, "Connection": "close"})}
    pids = {name: h.serving_pid(procs[name]) for name in TARGETS}
    stats = os.path.join(d, "wrk-stats")
    runs = {kind: {name: [] for name in TARGETS} for kind in KINDS}
    for _ in range(h.ROUNDS):
        for kind, (script, fresh) in KINDS.items():
            for name in TARGETS:
                url = f"https://127.0.0.1:{ports[name]}/mcp"
                runs[kind][name].append(one(h, url, scripts[script], pids[name], shim, fresh, stats))
    out = {"meta": meta}
    for kind, by_name in runs.items():
        out[kind] = {}
        for name, rs in by_name.items():
            for r in rs:
                shakes = r["full"] + r["resumed"]
                if kind == "keep-alive" and shakes > r["requests"] / 10:
                    sys.exit(f"TLS {kind} {name}: {shakes} handshakes for {r['requests']} requests: "
                             "connections were not kept alive")
                if kind != "keep-alive" and shakes < 0.95 * r["requests"]:
                    sys.exit(f"TLS {kind} {name}: {shakes} handshakes for {r['requests']} requests: "
                             "connections carried more than one request")
                if kind == "new connection, full handshake" and r["resumed"]:
                    sys.exit(f"TLS {kind} {name}: {r['resumed']} handshakes resumed a session")
            m = {k: statistics.median(r[k] for r in rs)
                 for k in ("rps", "p50", "p99", "cpu_us", "client_cpu_pct")}
            m["resumed_share"] = sum(r["resumed"] for r in rs) / max(sum(r["full"] + r["resumed"] for r in rs), 1)
            m["handshakes_per_request"] = sum(r["full"] + r["resumed"] for r in rs) / sum(r["requests"] for r in rs)
            m["version"] = rs[-1]["version"]
            out[kind][name] = m
    return out


def block(t):
    """The TLS ratio block: mcp-edge against nginx with the same certificate."""
    e, n = "mcp-edge", "nginx"
    ve, vn = t["keep-alive"][e]["version"], t["keep-alive"][n]["version"]
    version = ve if ve == vn else f"NOT THE SAME VERSION: {ve} (edge) / {vn} (nginx)"
    alpn = "/".join(str(t["meta"][x]["alpn_offered_h2_h1"]) for x in (e, n))
    lines = [f"TLS in this run: mcp-edge (production defaults) / nginx, same ECDSA P-256 certificate, "
             f"{version}, HTTP/1.1 (wrk offers no ALPN; offered h2 and HTTP/1.1, edge/nginx chose {alpn}), "
             f"{CONNS} conn (throughput: higher is better; p99 and CPU: lower is better). wrk resumes the "
             "previous session on a new connection; the full-handshake rows drop it (a shim, bench/tls.py). "
             "p99: wrk times a request from its first write, after wrk's side of a new connection's "
             "handshake. wrk near 100% of a core: the client was the limit, and the proxies' CPU per "
             "request is the figure to compare.", "",
             "| TLS | mcp-edge | nginx | edge / nginx | wrk CPU, % of a core (edge / nginx) |",
             "|---|---|---|---|---|"]
    for kind, label in (("keep-alive", "keep-alive connections"),
                        ("new connection, full handshake", "new connection per request, full handshake"),
                        ("new connection, resumed", "new connection per request, session resumed")):
        a, b = t[kind][e], t[kind][n]
        client = f"{a['client_cpu_pct']:.0f} / {b['client_cpu_pct']:.0f}"
        unit = "req/s" if kind == "keep-alive" else "handshakes/s"
        if kind == "new connection, resumed":
            label += f" ({100 * a['resumed_share']:.0f}% / {100 * b['resumed_share']:.0f}% resumed)"
        lines.append(f"| {label}: {unit} | {a['rps']:.0f} | {b['rps']:.0f} | {a['rps'] / b['rps']:.2f}× | {client} |")
        lines.append(f"| {label}: p99 (µs) | {a['p99']:.0f} | {b['p99']:.0f} | {a['p99'] / b['p99']:.2f}× | – |")
        lines.append(f"| {label}: proxy CPU per request (µs) | {a['cpu_us']:.1f} | {b['cpu_us']:.1f} "
                     f"| {a['cpu_us'] / b['cpu_us']:.2f}× | – |")
    return "\n".join(lines)
