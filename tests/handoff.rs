//! Any replica serves any client: three edge processes on 127.0.0.2–127.0.0.4 (`[fleet]`
//! with `handoff_listen`) behind HAProxy from Debian (per-request round-robin), with stdio
//! pools of the official TypeScript SDK server. State written through one replica is read
//! through the others: legacy sessions (`per_session`), a caller's process
//! (`per_principal`, both eras); an elicitation answered through the session's stream;
//! HTTP+SSE clients bridged to 2026-07-28 servers, posting through every replica.
//! Then the hand-off listener's door (unsigned, forged, replayed, altered: refused, counted,
//! never served) and the faults (the owner killed: its sessions 404, the others go on; the
//! owner stalled: 504, never 404).

mod common;

use std::net::{IpAddr, SocketAddr};
use std::process::{Child, Command, Stdio};

use common::edge_process::{spawn_at, Proc};
use common::peers::{dir, py_client, ts_client, ts_server};
use common::*;
use serde_json::{json, Value};

const IPS: [[u8; 4]; 4] = [
    [127, 0, 0, 2],
    [127, 0, 0, 3],
    [127, 0, 0, 4],
    [127, 0, 0, 5],
];
/// Callers with API keys (`k-<name>`): alice, bob and `u0`…`u63`.
fn callers() -> Vec<String> {
    let mut all = vec!["alice".to_string(), "bob".to_string()];
    all.extend((0..64).map(|i| format!("u{i}")));
    all
}

struct Replica {
    proc: Proc,
    ip: IpAddr,
    port: u16,
    handoff: u16,
    metrics: u16,
}

impl Replica {
    fn url(&self, path: &str) -> String {
        format!("http://{}:{}{path}", self.ip, self.port)
    }
    async fn metric(&self, name_and_labels: &str) -> f64 {
        let url = format!("http://{}:{}/metrics", self.ip, self.metrics);
        let text = client()
            .get(&url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
            .unwrap_or(0.0)
    }
}

struct Fleet {
    replicas: Vec<Replica>,
    ring: String,
    /// Every replica's configuration (listed in the others' `peers`), started or not.
    configs: Vec<(std::path::PathBuf, IpAddr, (u16, u16, u16))>,
}

/// A TOML command running `ts-server.mjs` over stdio.
fn ts_stdio(instance: &str) -> String {
    format!(
        r#"["node", "{}", "--mode", "stdio", "--instance", "{instance}"]"#,
        dir().join("ts-server.mjs").display()
    )
}

/// An API key for each of [`CALLERS`].
fn api_keys() -> String {
    let digest = |k: &str| {
        use sha2::Digest;
        sha2::Sha256::digest(k.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let path = std::env::temp_dir().join(format!(
        "mcp-edge-handoff-keys-{}-{}",
        std::process::id(),
        free_port()
    ));
    let keys: String = callers()
        .iter()
        .map(|c| {
            format!(
                "[[keys]]\nsha256 = \"{}\"\nsubject = \"{c}\"\n\n",
                digest(&format!("k-{c}"))
            )
        })
        .collect();
    std::fs::write(&path, keys).unwrap();
    format!("[identity]\napi_keys_file = \"{}\"\n\n", path.display())
}

/// The pools every replica runs: `/sess` (a process per legacy session) and `/tenant` (a
/// process per caller, behind API keys).
fn pools() -> String {
    format!(
        "{}[[pools]]\nname = \"sess\"\ncommand = {}\nisolation = \"per_session\"\n\n[[routes]]\npath = \"/sess\"\npool = \"sess\"\n\n[[pools]]\nname = \"tenant\"\ncommand = {}\nisolation = \"per_principal\"\n\n[[routes]]\npath = \"/tenant\"\npool = \"tenant\"\nauth = \"required\"\n\n",
        api_keys(),
        ts_stdio("sess"),
        ts_stdio("tenant"),
    )
}

fn config(
    fleet_ring: &str,
    me: usize,
    ports: &[(u16, u16, u16)],
    body: &str,
    interval_ms: u64,
) -> String {
    let ip = |i: usize| IpAddr::from(IPS[i]);
    let (port, handoff, metrics) = ports[me];
    let peers: Vec<String> = (0..ports.len())
        .map(|i| format!("\"{}:{}\"", ip(i), ports[i].1))
        .collect();
    format!(
        "[server]\nthreads = 2\n\n[[listeners]]\naddress = \"{ip}:{port}\"\n\n[metrics]\naddress = \"{ip}:{metrics}\"\n\n[timeouts]\nupstream_read_ms = 15000\n\n[sessions]\nkeys_file = \"{fleet_ring}\"\n\n[fleet]\npeers = [{peers}]\nhandoff_listen = \"{ip}:{handoff}\"\nadvertise = \"{ip}:{handoff}\"\ninterval_ms = {interval_ms}\ntimeout_ms = 500\n\n{body}",
        ip = ip(me),
        peers = peers.join(", "),
    )
}

/// Three replicas, each ready and seeing the other two live.
async fn start_fleet() -> Fleet {
    start_fleet_of(3, 3).await
}

/// `listed` replicas in every `peers`, the first `started` of them running, each ready and
/// seeing those live.
async fn start_fleet_of(listed: usize, started: usize) -> Fleet {
    start_fleet_with(listed, started, None, 1_000, "").await
}

/// [`start_fleet_of`]; `odd`: a replica whose key ring is another (a rotation gone wrong);
/// `interval_ms`: how often replicas look at each other.
async fn start_fleet_with(
    listed: usize,
    started: usize,
    odd: Option<usize>,
    interval_ms: u64,
    extra: &str,
) -> Fleet {
    let ring = key_file(&format!("1:{KEY_A}"));
    let other_ring = key_file(&format!("1:{KEY_B}"));
    let ports: Vec<(u16, u16, u16)> = IPS[..listed]
        .iter()
        .map(|_| (free_port(), free_port(), free_port()))
        .collect();
    let body = format!("{}{extra}", pools());
    let configs = (0..listed)
        .map(|i| {
            let path = std::env::temp_dir().join(format!(
                "mcp-edge-handoff-{}-{}-{i}.toml",
                std::process::id(),
                ports[i].0
            ));
            let ring = if odd == Some(i) { &other_ring } else { &ring };
            std::fs::write(&path, config(ring, i, &ports, &body, interval_ms)).unwrap();
            (path, IpAddr::from(IPS[i]), ports[i])
        })
        .collect();
    let mut fleet = Fleet {
        replicas: Vec::new(),
        ring: std::fs::read_to_string(&ring).unwrap(),
        configs,
    };
    for i in 0..started {
        fleet.start(i);
    }
    fleet.settled(started).await;
    fleet
}

impl Fleet {
    /// Start the `i`th listed replica.
    fn start(&mut self, i: usize) {
        let (path, ip, (port, handoff, metrics)) = self.configs[i].clone();
        let proc = spawn_at(&path, SocketAddr::new(ip, port), &[]);
        self.replicas.push(Replica {
            proc,
            ip,
            port,
            handoff,
            metrics,
        });
    }

    /// Every running replica ready and seeing `live` replicas live.
    async fn settled(&self, live: usize) {
        for r in &self.replicas {
            let ready = format!("http://{}:{}/readyz", r.ip, r.metrics);
            wait_until(PATIENCE, "the replica is ready", async || {
                client()
                    .get(&ready)
                    .send()
                    .await
                    .is_ok_and(|x| x.status().as_u16() == 200)
            })
            .await;
            wait_until(PATIENCE, "every replica sees the others live", async || {
                r.metric("mcp_edge_fleet_replicas{state=\"live\"}").await == live as f64
            })
            .await;
        }
    }
}

/// HAProxy in front of the replicas, choosing one per request.
struct Haproxy {
    child: Child,
    port: u16,
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn haproxy(fleet: &Fleet) -> Haproxy {
    let port = free_port();
    let servers: String = fleet
        .replicas
        .iter()
        .enumerate()
        .map(|(i, r)| format!("  server r{i} {}:{}\n", r.ip, r.port))
        .collect();
    let cfg = format!(
        "global\n  maxconn 512\n\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 60s\n  timeout server 60s\n\nfrontend front\n  bind 127.0.0.1:{port}\n  default_backend edges\n\nbackend edges\n  balance roundrobin\n{servers}"
    );
    let path = std::env::temp_dir().join(format!(
        "mcp-edge-haproxy-{}-{port}.cfg",
        std::process::id()
    ));
    std::fs::write(&path, cfg).unwrap();
    let child = Command::new("haproxy")
        .args(["-db", "-f", &path.display().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("haproxy (Debian's; scripts/setup.sh installs it)");
    wait_listening(SocketAddr::from(([127, 0, 0, 1], port)));
    Haproxy { child, port }
}

/// The first JSON-RPC message of an answer (JSON or an event stream).
async fn message(r: reqwest::Response) -> (u16, Option<String>, Value) {
    let status = r.status().as_u16();
    let session = r
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    let text = r.text().await.unwrap();
    let v = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .map_or_else(
            || serde_json::from_str(&text),
            serde_json::from_str::<Value>,
        )
        .unwrap_or_else(|_| json!({ "raw": text }));
    (status, session, v)
}

fn text_of(v: &Value) -> &str {
    v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "handoff-test", "version": "1"}}})
}

fn call(id: u64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": args}})
}

/// Open a legacy session through `r`: its token.
async fn open_session(r: &Replica, path: &str) -> String {
    let c = client();
    let (status, token, v) = message(
        legacy_request(&c, &r.url(path), None, &initialize())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let token = token.expect("a session token");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let s = legacy_request(&c, &r.url(path), Some(&token), &note)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(s.as_u16(), 202);
    token
}

async fn legacy_call(
    r: &Replica,
    path: &str,
    token: &str,
    id: u64,
    tool: &str,
    args: Value,
) -> (u16, Value) {
    let (status, _, v) = message(
        legacy_request(&client(), &r.url(path), Some(token), &call(id, tool, args))
            .send()
            .await
            .unwrap(),
    )
    .await;
    (status, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_session_of_a_stdio_pool_goes_on_through_every_replica() {
    let fleet = start_fleet().await;
    let [a, b, c] = &fleet.replicas[..] else {
        unreachable!()
    };
    let token = open_session(a, "/sess").await;
    let mut pids = Vec::new();
    let mut expected = String::new();
    for (i, r) in [b, c, a, c, b].into_iter().enumerate() {
        let word = format!("w{i}");
        let (status, v) = legacy_call(
            r,
            "/sess",
            &token,
            10 + i as u64,
            "note",
            json!({"text": word}),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        if !expected.is_empty() {
            expected.push(',');
        }
        expected.push_str(&word);
        assert_eq!(text_of(&v), expected, "one process, whichever replica: {v}");
        let (_, v) = legacy_call(r, "/sess", &token, 100 + i as u64, "pid", json!({})).await;
        pids.push(text_of(&v).to_string());
    }
    pids.dedup();
    assert_eq!(pids.len(), 1, "{pids:?}");
    // Another session, opened through c, is c's own process.
    let other = open_session(c, "/sess").await;
    let (_, v) = legacy_call(a, "/sess", &other, 1, "note", json!({"text": "o"})).await;
    assert_eq!(text_of(&v), "o", "{v}");
    let sent = b.metric("mcp_edge_handoffs_total{outcome=\"sent\"}").await;
    let received = a
        .metric("mcp_edge_handoffs_total{outcome=\"received\"}")
        .await;
    assert!(
        sent >= 2.0 && received >= 4.0,
        "sent {sent}, received {received}"
    );
    // The official TS client behind HAProxy: its requests, its standalone stream and its
    // answer to the server's elicitation land on any replica.
    let lb = haproxy(&fleet);
    let url = format!("http://127.0.0.1:{}/sess", lb.port);
    let before = sent_by_each(&fleet).await;
    let out = ts_client(
        &url,
        &[
            "--mode",
            "legacy",
            "--policy-probe",
            "--call",
            "note,ask,pid",
        ],
    );
    assert_eq!(out["ok"], true, "{out}");
    assert_eq!(out["calls"]["note"]["text"], "x", "{out}");
    assert_eq!(
        out["calls"]["ask"]["text"], "asked:accept:{\"ok\":true}",
        "{out}"
    );
    // Per request, not per connection: two replicas that did not hold the session handed
    // requests on.
    let after = sent_by_each(&fleet).await;
    let handing = before.iter().zip(&after).filter(|(b, a)| a > b).count();
    assert!(
        handing >= 2,
        "replicas that handed requests on: {before:?} -> {after:?}"
    );
    // The official Python client too.
    let out = common::peers::py_client(&url, &["--mode", "legacy"]);
    assert_eq!(out["ok"], true, "{out}");
}

/// `mcp_edge_handoffs_total{outcome="sent"}` of each replica.
async fn sent_by_each(fleet: &Fleet) -> Vec<f64> {
    let mut out = Vec::new();
    for r in &fleet.replicas {
        out.push(r.metric("mcp_edge_handoffs_total{outcome=\"sent\"}").await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_process_is_the_same_whichever_replica_and_era() {
    let fleet = start_fleet().await;
    let c = client();
    let mut notes = Vec::new();
    for (i, r) in fleet.replicas.iter().chain(&fleet.replicas).enumerate() {
        let body = modern_body(
            json!(i),
            "tools/call",
            json!({"name": "note", "arguments": {"text": "a"}}),
        );
        let resp = modern_request(&c, &r.url("/tenant"), &body)
            .header("authorization", "Bearer k-alice")
            .send()
            .await
            .unwrap();
        let (status, _, v) = message(resp).await;
        assert_eq!(status, 200, "{v}");
        notes.push(text_of(&v).to_string());
    }
    let expected: Vec<String> = (1..=6).map(|n| vec!["a"; n].join(",")).collect();
    assert_eq!(notes, expected, "alice's one process");
    // Bob's is another; alice's legacy session is her process too, through HAProxy.
    let body = modern_body(
        json!(1),
        "tools/call",
        json!({"name": "note", "arguments": {"text": "b"}}),
    );
    let resp = modern_request(&c, &fleet.replicas[1].url("/tenant"), &body)
        .header("authorization", "Bearer k-bob")
        .send()
        .await
        .unwrap();
    let (_, _, v) = message(resp).await;
    assert_eq!(text_of(&v), "b", "{v}");
    let lb = haproxy(&fleet);
    let url = format!("http://127.0.0.1:{}/tenant", lb.port);
    let out = ts_client(
        &url,
        &[
            "--mode",
            "legacy",
            "--bearer",
            "k-alice",
            "--policy-probe",
            "--call",
            "note",
        ],
    );
    assert_eq!(out["ok"], true, "{out}");
    assert_eq!(out["calls"]["note"]["text"], "a,a,a,a,a,a,x", "{out}");
}

/// A request signed as a replica would sign it, for the replica `to`'s hand-off listener.
fn signed(fleet: &Fleet, to: &Replica, body: &str) -> (String, Vec<(String, String)>) {
    let ring = mcp_edge::session::KeyRing::parse(&fleet.ring).unwrap();
    let host = format!("{}:{}", to.ip, to.handoff);
    let mut head = pingora::http::RequestHeader::build("POST", b"/tenant", None).unwrap();
    let headers = [
        ("host", host.as_str()),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("authorization", "Bearer k-bob"),
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/call"),
        ("mcp-name", "note"),
    ];
    for (k, v) in headers {
        head.insert_header(k, v).unwrap();
    }
    let now = mcp_edge::session::token::now_secs();
    let client = Some("10.9.8.7".parse().unwrap());
    let forward = mcp_edge::fleet::hop::Forward {
        to: SocketAddr::new(to.ip, to.handoff),
        client,
        tls: false,
        body: body.as_bytes(),
    };
    let sig = mcp_edge::fleet::hop::sign(&ring, &head, forward, now);
    let mut out: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    out.push((mcp_edge::fleet::hop::HEADER.to_string(), sig));
    (format!("http://{}/tenant", host), out)
}

async fn send(url: &str, headers: &[(String, String)], body: &str) -> (u16, Value) {
    let mut rb = client().post(url).body(body.to_string());
    for (k, v) in headers {
        rb = rb.header(k.as_str(), v.as_str());
    }
    let (status, _, v) = message(rb.send().await.unwrap()).await;
    (status, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handoff_listener_serves_only_what_a_replica_signed_and_only_once() {
    let fleet = start_fleet().await;
    let r = &fleet.replicas[0];
    let body = modern_body(
        json!(1),
        "tools/call",
        json!({"name": "note", "arguments": {"text": "n"}}),
    )
    .to_string();
    let refused = |reason: &str| format!("mcp_edge_handoffs_refused_total{{reason=\"{reason}\"}}");
    // A client's request, as it would reach the listener: unsigned.
    let (url, headers) = signed(&fleet, r, &body);
    let unsigned: Vec<_> = headers
        .iter()
        .filter(|(k, _)| k != mcp_edge::fleet::hop::HEADER)
        .cloned()
        .collect();
    let (status, v) = send(&url, &unsigned, &body).await;
    assert_eq!(status, 403, "{v}");
    assert_eq!(r.metric(&refused("unsigned")).await, 1.0);
    // A forged one: the signature of another request (another caller).
    let mut forged = headers.clone();
    for (k, v) in forged.iter_mut() {
        if k == "authorization" {
            *v = "Bearer k-alice".into();
        }
    }
    let (status, _) = send(&url, &forged, &body).await;
    assert_eq!(status, 403);
    assert_eq!(r.metric(&refused("forged")).await, 1.0);
    // Another body under a signature.
    let other = body.replace("\"n\"", "\"m\"");
    let (status, _) = send(&url, &headers, &other).await;
    assert_eq!(status, 403);
    assert_eq!(r.metric(&refused("body_altered")).await, 1.0);
    // A forward for replica 0, sent to replica 1 instead: not for it.
    let (_, headers) = signed(&fleet, r, &body);
    let other = &fleet.replicas[1];
    let elsewhere = format!("http://{}:{}/tenant", other.ip, other.handoff);
    let (status, _) = send(&elsewhere, &headers, &body).await;
    assert_eq!(status, 403);
    assert_eq!(other.metric(&refused("forged")).await, 1.0);
    // Signed, new: served once; the same forward again is refused.
    let (url, headers) = signed(&fleet, r, &body);
    let (status, v) = send(&url, &headers, &body).await;
    assert_eq!(status, 200, "{v}");
    let first = text_of(&v).to_string();
    let (status, _) = send(&url, &headers, &body).await;
    assert_eq!(status, 403);
    assert_eq!(r.metric(&refused("replayed")).await, 1.0);
    // Bob's process ran the one that was served, and only it (a signed request is
    // served where it lands: never handed on).
    assert_eq!(first, "n", "bob's first note");
    let (url, headers) = signed(&fleet, r, &body);
    let (_, v) = send(&url, &headers, &body).await;
    assert_eq!(text_of(&v), "n,n", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_gone_ends_its_sessions_only_and_a_stalled_one_is_a_timeout() {
    let mut fleet = start_fleet().await;
    let a_token = open_session(&fleet.replicas[0], "/sess").await;
    let b_token = open_session(&fleet.replicas[1], "/sess").await;
    let c_token = open_session(&fleet.replicas[2], "/sess").await;
    // The owner stalled: the request waits for it, then 504 (it may still hold the session).
    fleet.replicas[1].proc.signal("-STOP");
    let (status, v) = legacy_call(
        &fleet.replicas[0],
        "/sess",
        &b_token,
        1,
        "note",
        json!({"text": "s"}),
    )
    .await;
    fleet.replicas[1].proc.signal("-CONT");
    assert_eq!(status, 504, "{v}");
    // The owner killed: its sessions are gone (404, the client initializes again); the
    // sessions of the others go on through any replica, the dead one's peers included.
    let mut c = fleet.replicas.remove(2);
    c.proc.child.kill().unwrap();
    c.proc.child.wait().unwrap();
    let (status, v) = legacy_call(
        &fleet.replicas[0],
        "/sess",
        &c_token,
        2,
        "note",
        json!({"text": "c"}),
    )
    .await;
    assert_eq!(status, 404, "{v}");
    assert_eq!(v["error"]["code"], -32001, "{v}");
    for (r, token, word) in [(1, &a_token, "a"), (0, &b_token, "b")] {
        let (status, v) = legacy_call(
            &fleet.replicas[r],
            "/sess",
            token,
            3,
            "note",
            json!({"text": word}),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        assert!(text_of(&v).ends_with(word), "{v}");
    }
    // The stalled request never ran on the owner after all? It may have: at most once.
    let (_, v) = legacy_call(
        &fleet.replicas[0],
        "/sess",
        &b_token,
        4,
        "note",
        json!({"text": "t"}),
    )
    .await;
    let notes = text_of(&v).to_string();
    assert!(notes == "s,b,t" || notes == "b,t", "{notes}");
    let unreachable = fleet.replicas[0]
        .metric("mcp_edge_handoffs_total{outcome=\"unreachable\"}")
        .await;
    assert_eq!(unreachable, 1.0);
    // A token naming a replica a static fleet does not list (it names every replica there
    // is): gone, and nothing is sent there.
    let ring = mcp_edge::session::KeyRing::parse(&fleet.ring).unwrap();
    let claims = mcp_edge::session::Claims {
        pool: "sess".into(),
        member: "127.0.0.1:1".into(),
        upstream_id: "s".into(),
        issued_at: mcp_edge::session::token::now_secs(),
        credential: None,
        owner: Some(mcp_edge::session::Owner {
            addr: "127.0.0.9:7444".into(),
            boot: 7,
        }),
    };
    let token = mcp_edge::session::token::seal(&ring, &claims).unwrap();
    let url = fleet.replicas[0].url("/sess");
    let body = call(5, "note", json!({"text": "u"}));
    let r = legacy_request(&client(), &url, Some(&token), &body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    assert_eq!(r.headers()["x-mcp-edge-error"], "session_member_gone");
    let unreachable = fleet.replicas[0]
        .metric("mcp_edge_handoffs_total{outcome=\"unreachable\"}")
        .await;
    assert_eq!(unreachable, 1.0, "no connection was tried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_replica_gone_before_the_fleet_notices_hands_its_callers_on() {
    // Replicas look at each other once a minute: the fleet will not notice within the test.
    let mut fleet = start_fleet_with(3, 3, None, 60_000, "").await;
    let caller = kept_by(&fleet, &[0, 1, 2], 1);
    let c = client();
    let received = "mcp_edge_handoffs_total{outcome=\"received\"}";
    let (status, v) = note_as(&c, &fleet.replicas[0], &caller, 1).await;
    assert_eq!((status, text_of(&v)), (200, "l"), "{v}");
    assert_eq!(
        fleet.replicas[1].metric(received).await,
        1.0,
        "kept by replica 1"
    );
    let mut gone = fleet.replicas.remove(1);
    gone.proc.child.kill().unwrap();
    gone.proc.child.wait().unwrap();
    // Both others still count replica 1 live; its connection is refused, nothing reached it:
    // the caller's next keeper serves, the same for both (a fresh process: the state went).
    let unreachable = "mcp_edge_handoffs_total{outcome=\"unreachable\"}";
    for (i, (r, expected)) in [(0, "l"), (1, "l,l")].into_iter().enumerate() {
        let (status, v) = note_as(&c, &fleet.replicas[r], &caller, 2 + i as u64).await;
        assert_eq!((status, text_of(&v)), (200, expected), "{v}");
        assert_eq!(fleet.replicas[r].metric(unreachable).await, 1.0);
        assert_eq!(
            fleet.replicas[r]
                .metric("mcp_edge_fleet_replicas{state=\"live\"}")
                .await,
            3.0,
            "the fleet has not noticed"
        );
    }
}

/// One `note` for `caller` through `r`: the status.
async fn note_as(c: &reqwest::Client, r: &Replica, caller: &str, id: u64) -> (u16, Value) {
    let body = modern_body(
        json!(id),
        "tools/call",
        json!({"name": "note", "arguments": {"text": "l"}}),
    );
    let resp = modern_request(c, &r.url("/tenant"), &body)
        .header("authorization", format!("Bearer k-{caller}"))
        .send()
        .await
        .unwrap();
    let (status, _, v) = message(resp).await;
    (status, v)
}

/// The caller (of [`callers`]) that rendezvous hashing over `replicas`' hand-off addresses
/// gives to replica `to` first.
fn kept_by(fleet: &Fleet, replicas: &[usize], to: usize) -> String {
    let addrs: Vec<SocketAddr> = replicas
        .iter()
        .map(|i| SocketAddr::new(fleet.configs[*i].1, fleet.configs[*i].2 .1))
        .collect();
    let target = SocketAddr::new(fleet.configs[to].1, fleet.configs[to].2 .1);
    callers()
        .into_iter()
        .find(|c| {
            let p = mcp_edge::identity::Principal {
                issuer: "api-key".into(),
                subject: c.clone(),
                tenant: None,
                groups: Vec::new(),
                scopes: Vec::new(),
            };
            mcp_edge::fleet::handoff::rendezvous(&p.binding(), &addrs) == Some(target)
        })
        .expect("among 66 callers, one for each replica (a miss has odds of 1 in 10^8)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_joining_and_leaving_fail_no_request() {
    let mut fleet = start_fleet_of(4, 3).await;
    // The callers that move: one the fourth replica will keep, one the leaving one keeps.
    let joins = kept_by(&fleet, &[0, 1, 2, 3], 3);
    let leaves = kept_by(&fleet, &[0, 1, 2, 3], 1);
    let load = [joins.as_str(), leaves.as_str(), "alice", "bob"];
    let c = client();
    let mut id = 0u64;
    let mut round = async |fleet: &Fleet, through: &[usize]| {
        for caller in load {
            for &i in through {
                id += 1;
                let (status, v) = note_as(&c, &fleet.replicas[i], caller, id).await;
                assert_eq!(status, 200, "{caller} through replica {i}: {v}");
            }
        }
    };
    round(&fleet, &[0, 1, 2]).await;
    // A replica joins: while the others learn of it (two rounds of a second), callers move to
    // it; every request is served, on whichever replica it lands.
    fleet.start(3);
    let received = "mcp_edge_handoffs_total{outcome=\"received\"}";
    let joined = poll_until(PATIENCE, async || {
        round(&fleet, &[0, 1, 2, 3]).await;
        let mut live = 0;
        for r in &fleet.replicas {
            live += usize::from(r.metric("mcp_edge_fleet_replicas{state=\"live\"}").await == 4.0);
        }
        live == 4
    })
    .await;
    assert!(joined, "every replica saw the fourth join");
    let before = fleet.replicas[3].metric(received).await;
    let (status, v) = note_as(&c, &fleet.replicas[0], &joins, 0).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        fleet.replicas[3].metric(received).await,
        before + 1.0,
        "{joins} moved to the new replica"
    );
    // A replica leaves (SIGTERM, as a scale-in does): the others hand its callers to the
    // next replica the fleet would choose, before and after they notice.
    let leaving = fleet.replicas.remove(1);
    leaving.proc.signal("-TERM");
    let left = poll_until(PATIENCE, async || {
        round(&fleet, &[0, 1, 2]).await;
        let mut live = 0;
        for r in &fleet.replicas {
            live += usize::from(r.metric("mcp_edge_fleet_replicas{state=\"live\"}").await == 3.0);
        }
        live == 3
    })
    .await;
    assert!(left, "every replica saw one leave");
    round(&fleet, &[0, 1, 2]).await;
    drop(leaving);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_key_ring_differs_refuses_forwards_and_the_client_gets_502() {
    let fleet = start_fleet_with(2, 2, Some(1), 1_000, "").await;
    let caller = kept_by(&fleet, &[0, 1], 1);
    let c = client();
    let (status, v) = note_as(&c, &fleet.replicas[0], &caller, 1).await;
    assert_eq!(status, 502, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("hop_refused"),
        "{v}"
    );
    let refused = "mcp_edge_handoffs_total{outcome=\"refused\"}";
    assert_eq!(fleet.replicas[0].metric(refused).await, 1.0);
    let forged = "mcp_edge_handoffs_refused_total{reason=\"forged\"}";
    assert_eq!(fleet.replicas[1].metric(forged).await, 1.0);
    // Served where it is kept: the caller's process never saw the refused one.
    let (status, v) = note_as(&c, &fleet.replicas[1], &caller, 2).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(text_of(&v), "l", "the first note its process holds: {v}");
}

/// HTTP+SSE clients (the official TypeScript v1 and Python ones) bridged to two
/// 2026-07-28-only TypeScript servers: the stream is held by the replica the client's GET
/// reached, its POSTs land on any replica and are handed to that one, and every answer,
/// progress included, arrives on the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_sse_clients_bridged_to_modern_servers_post_through_every_replica() {
    let (a, b) = (ts_server("modern", "m1"), ts_server("modern", "m2"));
    let bridged = format!(
        "[[pools]]\nname = \"modern\"\nmembers = [\"{}\", \"{}\"]\n[pools.health]\ncheck = \"mcp\"\ninterval_ms = 500\n\n[[routes]]\npath = \"/mcp\"\npool = \"modern\"\nbridge_legacy = true\nsse_path = \"/sse\"\nmessages_path = \"/messages\"\n\n",
        a.addr, b.addr
    );
    let fleet = start_fleet_with(3, 3, None, 1_000, &bridged).await;
    for r in &fleet.replicas {
        wait_until(PATIENCE, "both servers are healthy", async || {
            r.metric(&format!(
                "mcp_edge_member_healthy{{member=\"{}\",pool=\"modern\"}}",
                a.addr
            ))
            .await
                == 1.0
                && r.metric(&format!(
                    "mcp_edge_member_healthy{{member=\"{}\",pool=\"modern\"}}",
                    b.addr
                ))
                .await
                    == 1.0
        })
        .await;
    }
    let lb = haproxy(&fleet);
    let url = format!("http://127.0.0.1:{}/sse", lb.port);
    let runs = tokio::task::spawn_blocking(move || {
        vec![
            (
                "ts v1",
                ts_client(&url, &["--sdk", "v1", "--transport", "sse", "--confirm"]),
            ),
            (
                "py",
                py_client(
                    &url,
                    &["--mode", "legacy", "--transport", "sse", "--confirm"],
                ),
            ),
        ]
    })
    .await
    .unwrap();
    for (what, out) in &runs {
        assert_eq!(out["ok"], true, "{what}: {out}");
        let echo = out["echo"].as_str().unwrap_or_default();
        assert!(echo == "m1:hi" || echo == "m2:hi", "{what}: {out}");
        // The TypeScript SDK drops a progress notification read in the same chunk as the
        // result (a busy machine can bring that about): at least one arrived on the stream.
        let progress = out["progress"].as_u64().unwrap_or(0);
        assert!(
            (1..=3).contains(&progress),
            "{what}: progress on the stream: {out}"
        );
        assert!(
            matches!(out["resource"].as_str(), Some("m1" | "m2")),
            "{what}: {out}"
        );
        // The server's elicitation asked on the stream, answered through any replica.
        assert!(
            matches!(
                out["confirm"].as_str(),
                Some("m1:confirmed" | "m2:confirmed")
            ),
            "{what}: confirm {out}"
        );
    }
    let sent: f64 = sent_by_each(&fleet).await.iter().sum();
    let received: f64 = {
        let mut all = 0.0;
        for r in &fleet.replicas {
            all += r
                .metric("mcp_edge_handoffs_total{outcome=\"received\"}")
                .await;
        }
        all
    };
    assert!(
        sent >= 2.0 && received == sent,
        "POSTs handed to the stream's replica: sent {sent}, received {received}"
    );
}
