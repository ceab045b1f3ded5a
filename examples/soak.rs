//! Soak: mixed load through an in-process mcp-edge for N seconds (default 600) while upstream
//! members are killed and restarted and the configuration is reloaded 10 times. Reports
//! requests sent, succeeded and failed, classifies every failure, and exits non-zero unless
//! evidence explains each one as a kill's doing.
//!
//! Load: 2026-07-28 `tools/call`s, 2025 Streamable HTTP sessions (initialize, then calls with
//! the token) and 2024-11-05 HTTP+SSE streams (POST a message, wait for the reply on the
//! stream). Members are small mock MCP servers here, so the soak needs nothing installed.
//! Beside them, hand-off traffic ([`handoff`]): a second replica of the edge in one fleet,
//! stdio pools of a stdio server of the soak's own, legacy sessions and a principal's calls
//! going through both replicas in turn, and HTTP+SSE clients bridged to a 2026-07-28 pool
//! whose stream one replica holds while they post through both. No kill touches it: every
//! failure of it is the edge's.
//!
//! What counts as evidence (anything else is filed under EDGE):
//! - Timing: every kill is recorded from the moment the member dies to the moment it listens
//!   again. Session traffic fails for a kill of its own member only, overlapping that window
//!   (± [`MARGIN`]); other traffic only when in flight at the moment of a kill (the edge sends
//!   later requests to the live members). An upstream 404 for a session is a kill's only if
//!   its member was killed after the session began.
//! - Who answered: an upstream answer carries no `x-mcp-edge-error`; an edge answer counts
//!   only with a kind a kill can cause ([`KILL_KINDS`]). Every member names itself (and the
//!   session it saw) in every reply and 404, so session workers check that they reached the
//!   member and the upstream session their token stands for, and HTTP+SSE workers check that
//!   the `endpoint` event carries a token, not the member's raw session id.
//! - Count: a kill explains at most one failure per connection its member had open when it
//!   died (the request in flight on it, or the next one sent on it while pooled) plus one per
//!   session worker finding its session gone ([`Kill::cap`]).
//!
//! Every request, read, restart and the final join has a deadline, and a panicking worker
//! fails the soak.
//!
//! Usage: `cargo run --release --example soak -- [seconds]`

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mcp_edge::config::Config;
use mcp_edge::{EdgeHandle, Options};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

#[path = "../tests/common/http1.rs"]
mod http1;

#[path = "soak/handoff.rs"]
mod handoff;

/// The soak's requests are small; anything bigger is a bug worth an error.
const MAX_BODY_BYTES: usize = 1024 * 1024;

/// How far around a kill (and its restart) a failure still counts as the kill's. A member's
/// death fails what was in flight on it (and a pooled connection found dead just after)
/// within milliseconds; the rest is room for a loaded machine.
const MARGIN: Duration = Duration::from_millis(250);

/// Longest wait for anything (a response, the next stream event, a port, the workers to
/// finish): a healthy edge needs milliseconds, a broken one must not hang CI.
const DEADLINE: Duration = Duration::from_secs(10);

/// Edge error kinds a member dying can cause; any other edge answer is the edge's fault.
const KILL_KINDS: &[&str] = &[
    "connect_failed",
    "upstream_error",
    "upstream_timeout",
    "session_member_gone",
    "no_healthy_member",
];

const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

// ---------- mock member ----------

/// Lives of members so far: ids a member mints name its port and life, so a restarted member
/// never mistakes an old session for one of its own.
static LIVES: AtomicU64 = AtomicU64::new(0);

#[derive(Default)]
struct MemberState {
    /// Connections open now (the edge's in use and pooled ones): each can fail at most one
    /// request when the member dies.
    open: AtomicU64,
    sessions: Mutex<std::collections::HashSet<String>>,
    streams: Mutex<HashMap<String, mpsc::UnboundedSender<String>>>,
    next: AtomicU64,
}

struct Member {
    port: u16,
    kill: watch::Sender<bool>,
    state: Arc<MemberState>,
}

/// A member on `port` (0: any), or why its port could not be bound within [`DEADLINE`].
async fn start_member(port: u16) -> Result<Member, String> {
    let deadline = Instant::now() + DEADLINE;
    let listener = loop {
        match TcpListener::bind(("127.0.0.1", port)).await {
            Ok(l) => break l,
            // The old life's sockets may hold the port for a moment.
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("port {port} not free within {DEADLINE:?}: {e}"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(port);
    let life = LIVES.fetch_add(1, Ordering::Relaxed);
    let (kill, killed) = watch::channel(false);
    let state = Arc::new(MemberState::default());
    let shared = state.clone();
    tokio::spawn(async move {
        let mut stop = killed.clone();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { return };
                    let (state, mut stop) = (state.clone(), killed.clone());
                    state.open.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(async move {
                        tokio::select! {
                            _ = serve(stream, state.clone(), port, life) => {}
                            _ = stop.changed() => {}
                        }
                        state.open.fetch_sub(1, Ordering::SeqCst);
                    });
                }
                _ = stop.changed() => return,
            }
        }
    });
    Ok(Member {
        port,
        kill,
        state: shared,
    })
}

fn chunk(text: &str) -> String {
    format!("{:x}\r\n{text}\r\n", text.len())
}

fn sse_event(name: &str, data: &str) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// A JSON-RPC error naming the member, for an id it does not know.
fn unknown(id: &Value, port: u16, session: &str) -> String {
    json!({"jsonrpc":"2.0","id":id,"error":{"code":-32001,"message":"unknown session","data":{"member":port,"session":session}}}).to_string()
}

async fn serve(
    stream: TcpStream,
    state: Arc<MemberState>,
    port: u16,
    life: u64,
) -> std::io::Result<()> {
    let mut r = BufReader::new(stream);
    loop {
        let Some(head) = http1::read_head(&mut r).await? else {
            return Ok(());
        };
        let body = http1::read_body(&mut r, &head, MAX_BODY_BYTES).await?;
        let target = head.target().to_string();
        let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let mint = |kind: char| {
            format!(
                "{kind}{port}l{life}n{}",
                state.next.fetch_add(1, Ordering::Relaxed)
            )
        };
        let w = r.get_mut();
        if head.method() == "GET" && target.starts_with("/sse") {
            let sid = mint('s');
            let (tx, mut rx) = mpsc::unbounded_channel();
            state.streams.lock().unwrap().insert(sid.clone(), tx);
            // The endpoint, then a note naming the member and the raw id (the client checks
            // the endpoint carries a token instead).
            let hello = json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":{"member":port,"session":sid}}});
            let first = sse_event("endpoint", &format!("/messages?sessionId={sid}"))
                + &sse_event("message", &hello.to_string());
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
            let out = stream_replies(w, format!("{head}{}", chunk(&first)), &mut rx).await;
            state.streams.lock().unwrap().remove(&sid);
            return out;
        }
        if target.starts_with("/messages") {
            let sid = target.split("sessionId=").nth(1).unwrap_or("").to_string();
            let tx = state.streams.lock().unwrap().get(&sid).cloned();
            let reply = json!({"jsonrpc":"2.0","id":id,"result":{"member":port,"session":sid}});
            let answer = match tx {
                Some(tx) if tx.send(reply.to_string()).is_ok() => {
                    "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n".to_string()
                }
                _ => {
                    let body = unknown(&id, port, &sid);
                    format!("HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len())
                }
            };
            w.write_all(answer.as_bytes()).await?;
            continue;
        }
        let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
        let session = head.header("mcp-session-id").map(str::to_string);
        let (status, extra, out) = if method == "initialize" {
            let sid = mint('m');
            state.sessions.lock().unwrap().insert(sid.clone());
            let out = json!({"jsonrpc":"2.0","id":id,"result":{"member":port,"session":sid}});
            (
                "200 OK",
                format!("mcp-session-id: {sid}\r\n"),
                out.to_string(),
            )
        } else {
            match session {
                Some(s) if !state.sessions.lock().unwrap().contains(&s) => {
                    ("404 Not Found", String::new(), unknown(&id, port, &s))
                }
                s => {
                    let out = json!({"jsonrpc":"2.0","id":id,"result":{"member":port,"session":s}});
                    ("200 OK", String::new(), out.to_string())
                }
            }
        };
        w.write_all(format!("HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n{out}", out.len()).as_bytes()).await?;
    }
}

/// Hold an event stream: write `first`, then each reply, until the edge closes it (noticed
/// at once, not at the next write, so the member's count of open connections stays true).
async fn stream_replies(
    w: &mut TcpStream,
    first: String,
    replies: &mut mpsc::UnboundedReceiver<String>,
) -> std::io::Result<()> {
    w.write_all(first.as_bytes()).await?;
    let mut buf = [0u8; 64];
    loop {
        tokio::select! {
            reply = replies.recv() => {
                let Some(m) = reply else { return Ok(()) };
                w.write_all(chunk(&sse_event("message", &m)).as_bytes()).await?;
            }
            // Nothing more comes on this connection: a read ends only with the edge closing.
            read = w.read(&mut buf) => {
                if !matches!(read, Ok(n) if n > 0) {
                    return Ok(());
                }
            }
        }
    }
}

// ---------- the record of kills ----------

struct Kill {
    port: u16,
    /// When the member died, and when it listened again (`None` while down).
    from: Instant,
    to: Option<Instant>,
    /// Connections the member had open when it died.
    open: u64,
    /// Failures this kill was taken to explain, by kind.
    explained: BTreeMap<Kind, u64>,
    /// The latest of them, after the kill and after the restart (for choosing [`MARGIN`]).
    last: Option<(Duration, Duration)>,
}

impl Kill {
    /// Most failures one kill can explain: one per connection the member had open (the
    /// request in flight on it, or the next one sent on it while pooled) and one per session
    /// worker finding its session gone.
    fn cap(&self) -> u64 {
        self.open + (Kind::Legacy.workers() + Kind::Sse.workers()) as u64
    }
}

#[derive(Default)]
struct Chaos {
    kills: Mutex<Vec<Kill>>,
}

impl Chaos {
    fn begin(&self, port: u16, open: u64) -> usize {
        let mut kills = self.kills.lock().unwrap();
        kills.push(Kill {
            port,
            from: Instant::now(),
            to: None,
            open,
            explained: BTreeMap::new(),
            last: None,
        });
        kills.len() - 1
    }

    /// Take `kill` as the cause of one more failure of `kind`; false when that would be more
    /// than it can explain.
    fn explain(&self, kill: usize, kind: Kind) -> bool {
        let mut kills = self.kills.lock().unwrap();
        let k = &mut kills[kill];
        let total: u64 = k.explained.values().sum();
        if total >= k.cap() {
            return false;
        }
        *k.explained.entry(kind).or_default() += 1;
        let now = Instant::now();
        let at = (
            now - k.from,
            k.to.map(|to| now.saturating_duration_since(to))
                .unwrap_or_default(),
        );
        k.last = Some(k.last.map_or(at, |(a, b)| (a.max(at.0), b.max(at.1))));
        true
    }

    fn end(&self, kill: usize) {
        self.kills.lock().unwrap()[kill].to = Some(Instant::now());
    }

    /// The kill that explains a request sent at `sent` failing at `done`: for a session on
    /// `port`, a kill of that member whose window (death to restart, widened by [`MARGIN`])
    /// overlaps the request; for a request that may go to any member (`None`), a kill it
    /// was in flight at, since the edge sends later ones to the members still alive.
    fn during(&self, port: Option<u16>, sent: Instant, done: Instant) -> Option<usize> {
        self.kills.lock().unwrap().iter().position(|k| {
            let until = match port {
                Some(p) if p != k.port => return false,
                Some(_) => k.to.unwrap_or(done),
                None => k.from,
            };
            sent <= until + MARGIN && done + MARGIN >= k.from
        })
    }

    /// The first kill of `port` after `since`: the member's sessions died with it.
    fn since(&self, port: u16, since: Instant) -> Option<usize> {
        self.kills
            .lock()
            .unwrap()
            .iter()
            .position(|k| k.port == port && k.from >= since)
    }
}

// ---------- the tally ----------

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    Modern,
    Legacy,
    Sse,
    /// Through both replicas to stdio pools ([`handoff`]).
    Handoff,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::Modern, Kind::Legacy, Kind::Sse, Kind::Handoff];

    fn workers(self) -> usize {
        match self {
            Kind::Modern => 4,
            Kind::Legacy => 3,
            Kind::Sse => 3,
            Kind::Handoff => handoff::workers().count() + handoff::BRIDGED_WORKERS,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    Expected,
    Edge,
}

/// How often a class of failure happened, and its first instance.
struct Count {
    n: u64,
    example: String,
}

#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    ok: Mutex<BTreeMap<Kind, u64>>,
    failures: Mutex<BTreeMap<(Verdict, String), Count>>,
}

impl Tally {
    fn sent(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    fn ok(&self, kind: Kind) {
        *self.ok.lock().unwrap().entry(kind).or_default() += 1;
    }

    fn file(&self, verdict: Verdict, class: String, example: String) {
        let mut failures = self.failures.lock().unwrap();
        failures
            .entry((verdict, class))
            .or_insert(Count { n: 0, example })
            .n += 1;
    }

    /// A failure the edge must answer for: its class, and what exactly happened.
    fn edge(&self, class: &str, example: impl std::fmt::Display) {
        self.file(Verdict::Edge, class.to_string(), example.to_string());
    }
}

impl World {
    /// A failure a kill may explain: `kill` is the evidence (`None`: there is none).
    fn killed(&self, kind: Kind, kill: Option<usize>, class: String) {
        match kill {
            None => self
                .tally
                .edge(&format!("{class}, outside every kill window"), ""),
            Some(k) if !self.chaos.explain(k, kind) => self.tally.edge(
                &format!("{class}, more than the kill of its member can explain"),
                format!("kill #{k}"),
            ),
            Some(k) => self
                .tally
                .file(Verdict::Expected, class, format!("kill #{k}")),
        }
    }
}

// ---------- answers and streams ----------

/// An answer read whole within [`DEADLINE`].
struct Answer {
    status: u16,
    /// `x-mcp-edge-error`: present only on answers the edge made.
    kind: Option<String>,
    session: Option<String>,
    json: Value,
}

impl Answer {
    fn describe(&self) -> String {
        match &self.kind {
            Some(kind) => format!("{} {kind}", self.status),
            None => format!("{} from the upstream", self.status),
        }
    }

    /// An edge answer a member dying can cause.
    fn kill_kind(&self) -> bool {
        self.kind
            .as_deref()
            .is_some_and(|k| KILL_KINDS.contains(&k))
    }

    /// The member named by a reply (`result`) or by an upstream 404 (`error.data`).
    fn member(&self) -> Option<u64> {
        self.json["result"]["member"]
            .as_u64()
            .or(self.json["error"]["data"]["member"].as_u64())
    }

    fn upstream_session(&self) -> Option<&str> {
        self.json["result"]["session"]
            .as_str()
            .or(self.json["error"]["data"]["session"].as_str())
    }
}

async fn answer(rb: reqwest::RequestBuilder) -> Result<Answer, String> {
    let resp = rb.timeout(DEADLINE).send().await.map_err(|e| short(&e))?;
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let (kind, session) = (header("x-mcp-edge-error"), header("mcp-session-id"));
    let status = resp.status().as_u16();
    let text = resp.text().await.map_err(|e| short(&e))?;
    // JSON, or the first message of an event stream.
    let json = serde_json::from_str(&text).unwrap_or_else(|_| {
        text.lines()
            .find_map(|l| l.strip_prefix("data: "))
            .and_then(|d| serde_json::from_str(d).ok())
            .unwrap_or(Value::Null)
    });
    Ok(Answer {
        status,
        kind,
        session,
        json,
    })
}

/// The innermost cause of a client error, for classification.
fn short(e: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    if e.is_timeout() {
        format!("no answer within {DEADLINE:?}")
    } else {
        cause.to_string().chars().take(80).collect()
    }
}

/// An event stream read one event at a time, each within [`DEADLINE`].
struct Events<S> {
    stream: S,
    buf: String,
}

enum Next {
    Event { name: String, data: String },
    Ended,
    Silent,
}

impl<S> Events<S>
where
    S: futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
{
    async fn next(&mut self) -> Next {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let event: String = self.buf.drain(..end + 2).collect();
                let field = |key: &str| {
                    event
                        .lines()
                        .find_map(|l| l.strip_prefix(key))
                        .unwrap_or("")
                        .to_string()
                };
                return Next::Event {
                    name: field("event: "),
                    data: field("data: "),
                };
            }
            match tokio::time::timeout(DEADLINE, self.stream.next()).await {
                Ok(Some(Ok(bytes))) => self.buf.push_str(&String::from_utf8_lossy(&bytes)),
                Ok(_) => return Next::Ended,
                Err(_) => return Next::Silent,
            }
        }
    }
}

// ---------- workers ----------

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("HTTP client")
}

struct World {
    base: String,
    /// Both replicas (the first is `base`).
    bases: Vec<String>,
    tally: Arc<Tally>,
    chaos: Arc<Chaos>,
    members: Vec<u16>,
    /// The bridged pool's member (`handoff`).
    bridged: u16,
    until: Instant,
}

async fn modern_worker(w: Arc<World>) {
    let c = client();
    let mut id = 0u64;
    while Instant::now() < w.until {
        id += 1;
        w.tally.sent();
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"x"}},{META}}}}}"#
        );
        let rb = c
            .post(format!("{}/mcp", w.base))
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "echo")
            .body(body);
        let sent = Instant::now();
        let a = match answer(rb).await {
            Ok(a) => a,
            Err(e) => {
                w.tally.edge("modern: client error", e);
                continue;
            }
        };
        let done = Instant::now();
        let served_by_member = a.member().is_some_and(|m| w.members.contains(&(m as u16)));
        if a.status == 200 && a.kind.is_none() && served_by_member && a.json["id"] == id {
            w.tally.ok(Kind::Modern);
        } else if a.kill_kind() {
            let kill = w.chaos.during(None, sent, done);
            w.killed(Kind::Modern, kill, format!("modern: {}", a.describe()));
        } else {
            w.tally.edge(&format!("modern: {}", a.describe()), &a.json);
        }
    }
}

/// A legacy session as its client knows it.
struct Session {
    token: String,
    member: u16,
    upstream: String,
    since: Instant,
}

async fn legacy_worker(w: Arc<World>) {
    let c = client();
    let url = format!("{}/mcp", w.base);
    let post = |token: Option<&str>, body: Value| {
        let mut rb = c.post(&url).header("content-type", "application/json");
        if let Some(t) = token {
            rb = rb
                .header("mcp-session-id", t)
                .header("mcp-protocol-version", "2025-11-25");
        }
        rb.body(body.to_string())
    };
    let mut session: Option<Session> = None;
    while Instant::now() < w.until {
        w.tally.sent();
        let sent = Instant::now();
        let Some(s) = &session else {
            let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}});
            session = initialize(&w, answer(post(None, init)).await, sent);
            continue;
        };
        let call = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo"}});
        let a = match answer(post(Some(&s.token), call)).await {
            Ok(a) => a,
            Err(e) => {
                w.tally.edge("legacy: client error", e);
                continue;
            }
        };
        let done = Instant::now();
        let (member, upstream) = (a.member(), a.upstream_session());
        let own = member == Some(u64::from(s.member)) && upstream == Some(s.upstream.as_str());
        match (a.status, a.kind.as_deref()) {
            (200, None) if own => w.tally.ok(Kind::Legacy),
            (200 | 404, None) if !own => {
                w.tally.edge(
                    &format!(
                        "legacy: {} from another member or session than the token's",
                        a.describe()
                    ),
                    format!(
                        "member {member:?} session {upstream:?}; the token's: member {} session {}",
                        s.member, s.upstream
                    ),
                );
                session = None;
            }
            (404, None) => {
                // The member forgot the session: it must have been restarted since.
                let kill = w.chaos.since(s.member, s.since);
                w.killed(
                    Kind::Legacy,
                    kill,
                    "legacy: session gone with its restarted member (upstream 404)".into(),
                );
                session = None;
            }
            (_, Some(_)) if a.kill_kind() => {
                let kill = w.chaos.during(Some(s.member), sent, done);
                w.killed(
                    Kind::Legacy,
                    kill,
                    format!(
                        "legacy: {} while the session's member was down",
                        a.describe()
                    ),
                );
                // A session whose member refuses connections is gone; after a 502/504 the
                // client retries on the same session.
                if a.status == 404 {
                    session = None;
                }
            }
            _ => {
                w.tally.edge(&format!("legacy: {}", a.describe()), &a.json);
                session = None;
            }
        }
    }
}

/// Classify an initialize; the session it opened, if any.
fn initialize(w: &World, a: Result<Answer, String>, sent: Instant) -> Option<Session> {
    let a = match a {
        Ok(a) => a,
        Err(e) => {
            w.tally.edge("legacy: initialize client error", e);
            return None;
        }
    };
    let done = Instant::now();
    if a.status == 200 && a.kind.is_none() {
        let (Some(token), Some(member), Some(upstream)) =
            (a.session.clone(), a.member(), a.upstream_session())
        else {
            w.tally
                .edge("legacy: initialize without a session", &a.json);
            return None;
        };
        if token == upstream {
            w.tally.edge(
                "legacy: the upstream's raw session id reached the client",
                token,
            );
            return None;
        }
        w.tally.ok(Kind::Legacy);
        return Some(Session {
            token,
            member: member as u16,
            upstream: upstream.to_string(),
            since: sent,
        });
    }
    if a.kill_kind() {
        let kill = w.chaos.during(None, sent, done);
        w.killed(
            Kind::Legacy,
            kill,
            format!("legacy: initialize {}", a.describe()),
        );
    } else {
        w.tally
            .edge(&format!("legacy: initialize {}", a.describe()), &a.json);
    }
    None
}

/// An HTTP+SSE stream as its client knows it.
struct Stream<S> {
    events: Events<S>,
    /// Where to POST (through the edge), the member holding the stream, its raw id.
    endpoint: String,
    member: u16,
    upstream: String,
    opened: Instant,
}

/// Open a stream: its endpoint event and the member's note.
async fn open_stream(
    w: &World,
    c: &reqwest::Client,
) -> Option<Stream<impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin>> {
    let opened = Instant::now();
    let resp = match tokio::time::timeout(DEADLINE, c.get(format!("{}/sse", w.base)).send()).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            w.tally.edge("sse: GET failed", short(&e));
            return None;
        }
        Err(_) => {
            w.tally
                .edge(&format!("sse: GET unanswered within {DEADLINE:?}"), "");
            return None;
        }
    };
    if resp.status() != 200 {
        let kind = resp
            .headers()
            .get("x-mcp-edge-error")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let class = format!("sse: GET {} {kind:?}", resp.status());
        if kind.is_some_and(|k| KILL_KINDS.contains(&k.as_str())) {
            let kill = w.chaos.during(None, opened, Instant::now());
            w.killed(Kind::Sse, kill, class);
        } else {
            w.tally.edge(&class, "");
        }
        return None;
    }
    let mut events = Events {
        stream: resp.bytes_stream(),
        buf: String::new(),
    };
    let (mut endpoint, mut note) = (None, None);
    while endpoint.is_none() || note.is_none() {
        match events.next().await {
            Next::Event { name, data } if name == "endpoint" => endpoint = Some(data),
            Next::Event { name, data } if name == "message" => {
                note = serde_json::from_str::<Value>(&data).ok()
            }
            Next::Event { .. } => {}
            Next::Ended => {
                let kill = w.chaos.during(None, opened, Instant::now());
                w.killed(
                    Kind::Sse,
                    kill,
                    "sse: stream ended before its endpoint".into(),
                );
                return None;
            }
            Next::Silent => {
                w.tally
                    .edge(&format!("sse: no endpoint event within {DEADLINE:?}"), "");
                return None;
            }
        }
    }
    let (endpoint, note) = (endpoint?, note?);
    let data = &note["params"]["data"];
    let (Some(member), Some(upstream)) = (data["member"].as_u64(), data["session"].as_str()) else {
        w.tally.edge("sse: the member's note is not first", note);
        return None;
    };
    if endpoint.contains(upstream) || !endpoint.starts_with("/messages?sessionId=") {
        w.tally.edge(
            "sse: the endpoint event is not rewritten to a token",
            endpoint,
        );
        return None;
    }
    Some(Stream {
        events,
        endpoint: format!("{}{endpoint}", w.base),
        member: member as u16,
        upstream: upstream.to_string(),
        opened,
    })
}

async fn sse_worker(w: Arc<World>) {
    let c = client();
    while Instant::now() < w.until {
        w.tally.sent();
        let Some(mut s) = open_stream(&w, &c).await else {
            continue;
        };
        w.tally.ok(Kind::Sse);
        let mut id = 0u64;
        while Instant::now() < w.until {
            id += 1;
            w.tally.sent();
            if !sse_call(&w, &c, &mut s, id).await {
                break;
            }
        }
    }
}

/// One POST and its reply on the stream; false when the stream is done for.
async fn sse_call<S>(w: &World, c: &reqwest::Client, s: &mut Stream<S>, id: u64) -> bool
where
    S: futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
{
    let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/list"});
    let sent = Instant::now();
    let rb = c
        .post(&s.endpoint)
        .header("content-type", "application/json")
        .body(body.to_string());
    let a = match answer(rb).await {
        Ok(a) => a,
        Err(e) => {
            w.tally.edge("sse: POST client error", e);
            return false;
        }
    };
    let done = Instant::now();
    match (a.status, a.kind.as_deref()) {
        (202, None) => {}
        (404, None)
            if a.member() == Some(u64::from(s.member))
                && a.upstream_session() == Some(s.upstream.as_str()) =>
        {
            let kill = w.chaos.since(s.member, s.opened);
            w.killed(
                Kind::Sse,
                kill,
                "sse: POST 404 from the stream's restarted member".into(),
            );
            return false;
        }
        (_, Some(_)) if a.kill_kind() => {
            let kill = w.chaos.during(Some(s.member), sent, done);
            w.killed(
                Kind::Sse,
                kill,
                format!(
                    "sse: POST {} while the stream's member was down",
                    a.describe()
                ),
            );
            return false;
        }
        _ => {
            w.tally.edge(
                &format!("sse: POST {}", a.describe()),
                format!("{} (the stream is on member {})", a.json, s.member),
            );
            return false;
        }
    }
    loop {
        match s.events.next().await {
            Next::Event { data, .. } => {
                let Ok(reply) = serde_json::from_str::<Value>(&data) else {
                    continue;
                };
                if reply["id"] != id {
                    continue;
                }
                let r = &reply["result"];
                if r["member"] == s.member && r["session"] == s.upstream.as_str() {
                    w.tally.ok(Kind::Sse);
                    return true;
                }
                w.tally.edge(
                    "sse: a reply from another member or session than the stream's",
                    format!(
                        "{reply}; the stream's: member {} session {}",
                        s.member, s.upstream
                    ),
                );
                return false;
            }
            Next::Ended => {
                let kill = w.chaos.during(Some(s.member), sent, Instant::now());
                w.killed(
                    Kind::Sse,
                    kill,
                    "sse: stream cut before the reply (its member was killed)".into(),
                );
                return false;
            }
            Next::Silent => {
                w.tally.edge(
                    &format!("sse: reply not on the stream within {DEADLINE:?}"),
                    "",
                );
                return false;
            }
        }
    }
}

// ---------- the run ----------

fn config_text(port: u16, keys: &str, members: &[u16], round: u32) -> String {
    let list: Vec<String> = members
        .iter()
        .map(|p| format!("\"127.0.0.1:{p}\""))
        .collect();
    format!(
        "[server]\nthreads = 2\n\n[[listeners]]\naddress = \"127.0.0.1:{port}\"\n\n[sessions]\nkeys_file = \"{keys}\"\n\n\
         [[pools]]\nname = \"soak\"\nmembers = [{}]\n[pools.health]\ncheck = \"tcp\"\ninterval_ms = {}\neject_ms = 1000\n\n\
         [[routes]]\npath = \"/mcp\"\npool = \"soak\"\nsse_path = \"/sse\"\nmessages_path = \"/messages\"\n",
        list.join(", "),
        200 + round
    )
}

fn main() -> std::process::ExitCode {
    if std::env::args().nth(1).as_deref() == Some(handoff::STDIO_FLAG) {
        return handoff::stdio_server();
    }
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("off")).init();
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    match rt.block_on(soak(secs)) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("soak: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn soak(secs: u64) -> Result<bool, String> {
    let dir = std::env::temp_dir().join(format!("mcp-edge-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("temp dir: {e}"))?;
    let outcome = run(secs, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

async fn run(secs: u64, dir: &std::path::Path) -> Result<bool, String> {
    let keys = dir.join("keys");
    std::fs::write(&keys, "1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n")
        .map_err(|e| format!("keys: {e}"))?;
    let keys = keys.display().to_string();
    let mut members = Vec::new();
    for _ in 0..3 {
        members.push(start_member(0).await?);
    }
    // The bridged pool's member (never killed: hand-off traffic fails only by the edge).
    let bridged = start_member(0).await?;
    let ports: Vec<u16> = members.iter().map(|m| m.port).collect();
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| format!("a free port: {e}"))
    };
    // Two replicas of one fleet: their listeners and hand-off listeners.
    let edge_ports = [free()?, free()?];
    let handoff_ports = [free()?, free()?];
    let api_keys = handoff::api_keys(dir)?;
    let paths = [dir.join("edge-a.toml"), dir.join("edge-b.toml")];
    let write = |round| -> Result<(), String> {
        for i in 0..2 {
            let text = config_text(edge_ports[i], &keys, &ports, round)
                + &handoff::config(handoff_ports[i], &handoff_ports, &api_keys, bridged.port)?;
            std::fs::write(&paths[i], text).map_err(|e| format!("config: {e}"))?;
        }
        Ok(())
    };
    write(0)?;
    let mut edges = Vec::new();
    for path in &paths {
        let config = Config::load(path).map_err(|e| format!("soak config: {e:?}"))?;
        edges.push(EdgeHandle::start_with(
            config,
            Options {
                config_path: Some(path.clone()),
                signals: false,
            },
        ));
    }
    for edge_port in edge_ports {
        let ready = Instant::now() + DEADLINE;
        while TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], edge_port)))
            .await
            .is_err()
        {
            if Instant::now() >= ready {
                return Err(format!("the edge did not listen within {DEADLINE:?}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // The replicas see each other and their stdio pools run before any traffic.
    let ready = Instant::now() + DEADLINE * 3;
    while !edges.iter().all(|e| {
        let r = e.runtime.load();
        r.fleet.as_ref().is_some_and(|f| f.live() == 2) && r.pools.values().all(|p| p.ready())
    }) {
        if Instant::now() >= ready {
            return Err(
                "the replicas did not see each other or their stdio pools did not start".into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let edge_port = edge_ports[0];

    let run = Duration::from_secs(secs);
    let world = Arc::new(World {
        base: format!("http://127.0.0.1:{edge_port}"),
        bases: edge_ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect(),
        tally: Arc::new(Tally::default()),
        chaos: Arc::new(Chaos::default()),
        members: ports.clone(),
        bridged: bridged.port,
        until: Instant::now() + run,
    });
    let mut tasks = Vec::new();
    for kind in [Kind::Modern, Kind::Legacy, Kind::Sse] {
        for _ in 0..kind.workers() {
            let w = world.clone();
            tasks.push(match kind {
                Kind::Modern => tokio::spawn(modern_worker(w)),
                Kind::Legacy => tokio::spawn(legacy_worker(w)),
                _ => tokio::spawn(sse_worker(w)),
            });
        }
    }
    for (n, session) in handoff::workers() {
        let w = world.clone();
        tasks.push(match session {
            true => tokio::spawn(handoff::session_worker(w, n)),
            false => tokio::spawn(handoff::caller_worker(w, n)),
        });
    }
    for n in 0..handoff::BRIDGED_WORKERS {
        tasks.push(tokio::spawn(handoff::bridged_worker(world.clone(), n)));
    }

    // Chaos: 10 rounds of a kill and restart, then a reload half a round later (so what a
    // reload breaks is never inside a kill window); all within the run, a calm end.
    let down = Duration::from_millis((secs * 1000 / 60).clamp(200, 2000));
    let round = run.saturating_sub(down * 10) / 11;
    let reloaders: Vec<_> = edges
        .iter()
        .map(|e| e.reloader.clone().ok_or("no reloader"))
        .collect::<Result<_, _>>()?;
    let mut reloads = 0;
    for r in 1..=10u32 {
        tokio::time::sleep(round / 2).await;
        let victim = (r as usize) % members.len();
        let port = members[victim].port;
        let open = members[victim].state.open.load(Ordering::SeqCst);
        let kill = world.chaos.begin(port, open);
        let _ = members[victim].kill.send(true);
        tokio::time::sleep(down).await;
        members[victim] = start_member(port).await?;
        world.chaos.end(kill);
        tokio::time::sleep(round / 2).await;
        write(r)?;
        let results: Vec<_> = reloaders.iter().map(|reloader| reloader.reload()).collect();
        match results.iter().find_map(|r| r.as_ref().err()) {
            None => reloads += 1,
            Some(e) => eprintln!("soak: reload {r} failed: {e:?}"),
        }
    }

    // Each worker ends its last request within DEADLINE of the end; a panic fails the soak.
    let mut panics = Vec::new();
    let joined = tokio::time::timeout(run + DEADLINE * 3, async {
        for t in tasks {
            if let Err(e) = t.await {
                panics.push(e.to_string());
            }
        }
    })
    .await;
    drop(edges);
    if joined.is_err() {
        return Err(format!(
            "workers still running {:?} after the end",
            DEADLINE * 3
        ));
    }
    Ok(report(secs, &world, reloads, &panics))
}

/// Print the tally; whether the soak passed.
fn report(secs: u64, w: &World, reloads: u32, panics: &[String]) -> bool {
    let failures = w.tally.failures.lock().unwrap();
    let ok = w.tally.ok.lock().unwrap().clone();
    let sent = w.tally.sent.load(Ordering::Relaxed);
    let kills = w.chaos.kills.lock().unwrap();
    let succeeded: u64 = ok.values().sum();
    let failed: u64 = failures.values().map(|c| c.n).sum();
    println!(
        "soak: {secs}s, {} member kills and restarts, {reloads} reloads",
        kills.len()
    );
    println!("requests sent {sent}, succeeded {succeeded} {ok:?}, failed {failed}");
    for ((verdict, class), c) in failures.iter() {
        let whose = match verdict {
            Verdict::Expected => "expected: a kill explains it",
            Verdict::Edge => "EDGE",
        };
        println!("  {:>7}  {class}  [{whose}]", c.n);
        if *verdict == Verdict::Edge && !c.example.is_empty() {
            let example: String = c.example.chars().take(300).collect();
            println!("           first: {example}");
        }
    }
    for (i, k) in kills.iter().enumerate() {
        let down = k.to.map(|to| to - k.from).unwrap_or_default();
        let total: u64 = k.explained.values().sum();
        println!(
            "  kill #{i}: member {} down {down:?} with {} connections open; explains {total} of at most {}: {:?}, the last {:?} after the kill, {:?} after the restart",
            k.port,
            k.open,
            k.cap(),
            k.explained,
            k.last.map(|l| l.0).unwrap_or_default(),
            k.last.map(|l| l.1).unwrap_or_default(),
        );
    }
    for p in panics {
        println!("  worker failed: {p}  [EDGE]");
    }
    let edge_caused: u64 = failures
        .iter()
        .filter(|((v, _), _)| *v == Verdict::Edge)
        .map(|(_, c)| c.n)
        .sum();
    let idle: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|k| !ok.contains_key(k))
        .collect();
    println!("failures caused by the edge: {edge_caused}");
    if !idle.is_empty() {
        println!("no success at all for {idle:?}  [EDGE]");
    }
    edge_caused == 0 && panics.is_empty() && idle.is_empty() && reloads == 10
}
