//! Hand-off traffic for the soak: two replicas of one fleet (`[fleet] handoff_listen`), each
//! running the same stdio pools of a stdio server of the soak's own (this binary, run with
//! [`STDIO_FLAG`]), and workers that go through both replicas in turn:
//! - session workers open a legacy session on a `per_session` pool through one replica and
//!   call through both, then delete it through either;
//! - caller workers call a `per_principal` pool as their own principal through both;
//! - bridged workers are HTTP+SSE clients of a `bridge_legacy` route on a pool of one
//!   2026-07-28 member (a mock of the soak's, never killed): the stream is held by one
//!   replica, the POSTs go through both in turn, and each answer must arrive on the stream.
//!
//! The server's `note` answers how many notes its process holds, so every answer says
//! whether the request reached the process the session (or the caller) lives in. No kill
//! touches this traffic: every failure of it is the edge's.

use super::*;

/// The argument that makes this binary the soak's stdio MCP server.
pub const STDIO_FLAG: &str = "--stdio-server";
/// Callers with API keys (`k-soak-<n>`): one per caller worker.
pub const CALLERS: usize = 2;
const SESSION_WORKERS: usize = 2;
/// HTTP+SSE clients bridged to a 2026-07-28 pool.
pub const BRIDGED_WORKERS: usize = 2;
/// Calls on one session before it is deleted and another opened.
const CALLS_PER_SESSION: usize = 20;

/// The soak's stdio MCP server: one JSON-RPC message per line; `note` counts the notes this
/// process holds and answers `<count>:<text>`.
pub fn stdio_server() -> std::process::ExitCode {
    use std::io::{BufRead, Write};
    let mut notes = 0u64;
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let (Some(id), Some(method)) = (msg.get("id"), msg["method"].as_str()) else {
            continue;
        };
        let result = match method {
            "initialize" => Ok(json!({
                "protocolVersion": msg["params"]["protocolVersion"].as_str().unwrap_or("2025-11-25"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "soak-stdio", "version": "1.0.0"}})),
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({"tools": [{"name": "note",
                "description": "count a note in this process",
                "inputSchema": {"type": "object"}}]})),
            "tools/call" if msg["params"]["name"] == "note" => {
                notes += 1;
                let text = msg["params"]["arguments"]["text"].as_str().unwrap_or("");
                Ok(json!({"content": [{"type": "text", "text": format!("{notes}:{text}")}]}))
            }
            _ => Err(json!({"code": -32601, "message": "Method not found"})),
        };
        let reply = match result {
            Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
            Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e}),
        };
        if writeln!(out, "{reply}").and_then(|_| out.flush()).is_err() {
            break;
        }
    }
    std::process::ExitCode::SUCCESS
}

/// The API keys file of the caller workers.
pub fn api_keys(dir: &std::path::Path) -> Result<String, String> {
    use sha2::Digest;
    let keys: String = (0..CALLERS)
        .map(|n| {
            let digest = sha2::Sha256::digest(format!("k-soak-{n}").as_bytes());
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            format!("[[keys]]\nsha256 = \"{hex}\"\nsubject = \"soak-{n}\"\n\n")
        })
        .collect();
    let path = dir.join("api-keys.toml");
    std::fs::write(&path, keys).map_err(|e| format!("api keys: {e}"))?;
    Ok(path.display().to_string())
}

/// A replica's `[fleet]`, identity and stdio pools: `me` is its hand-off port, `peers` every
/// replica's.
pub fn config(me: u16, peers: &[u16], api_keys: &str, bridged: u16) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| format!("soak binary: {e}"))?;
    let command = format!("[\"{}\", \"{STDIO_FLAG}\"]", exe.display());
    let peers: Vec<String> = peers.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
    Ok(format!(
        "\n[identity]\napi_keys_file = \"{api_keys}\"\n\n\
         [fleet]\npeers = [{}]\nhandoff_listen = \"127.0.0.1:{me}\"\nadvertise = \"127.0.0.1:{me}\"\ninterval_ms = 1000\ntimeout_ms = 900\n\n\
         [[pools]]\nname = \"sessions\"\ncommand = {command}\nisolation = \"per_session\"\n\n\
         [[routes]]\npath = \"/sessions\"\npool = \"sessions\"\n\n\
         [[pools]]\nname = \"callers\"\ncommand = {command}\nisolation = \"per_principal\"\n\n\
         [[routes]]\npath = \"/callers\"\npool = \"callers\"\nauth = \"required\"\n\n\
         [[pools]]\nname = \"bridged\"\nmembers = [\"127.0.0.1:{bridged}\"]\n[pools.health]\ncheck = \"tcp\"\n\n\
         [[routes]]\npath = \"/bridged\"\npool = \"bridged\"\nbridge_legacy = true\nsse_path = \"/bsse\"\nmessages_path = \"/bmessages\"\n",
        peers.join(", ")
    ))
}

/// The hand-off workers: (worker, is it a session worker).
pub fn workers() -> impl Iterator<Item = (usize, bool)> {
    (0..SESSION_WORKERS)
        .map(|n| (n, true))
        .chain((0..CALLERS).map(|n| (n, false)))
}

fn post(
    c: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    body: &Value,
) -> reqwest::RequestBuilder {
    let mut rb = c
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(t) = token {
        rb = rb
            .header("mcp-session-id", t)
            .header("mcp-protocol-version", "2025-11-25");
    }
    rb.body(body.to_string())
}

fn note(id: u64, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "note", "arguments": {"text": text}}})
}

/// What a `note` answered: the process's count, when the answer is one.
fn counted(a: &Answer, text: &str) -> Option<u64> {
    let reply = a.json["result"]["content"][0]["text"].as_str()?;
    let (count, said) = reply.split_once(':')?;
    (said == text).then(|| count.parse().ok())?
}

/// Legacy sessions on the `per_session` pool, through both replicas in turn.
pub async fn session_worker(w: Arc<World>, n: usize) {
    let c = client();
    let mut turn = n;
    while Instant::now() < w.until {
        let urls: Vec<String> = w.bases.iter().map(|b| format!("{b}/sessions")).collect();
        turn += 1;
        w.tally.sent();
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "soak", "version": "1"}}});
        let opened = match answer(post(&c, &urls[turn % 2], None, &init)).await {
            Ok(a) if a.status == 200 && a.kind.is_none() => a.session,
            Ok(a) => {
                w.tally
                    .edge(&format!("handoff: initialize {}", a.describe()), &a.json);
                continue;
            }
            Err(e) => {
                w.tally.edge("handoff: initialize client error", e);
                continue;
            }
        };
        let Some(token) = opened else {
            w.tally.edge("handoff: initialize without a session", "");
            continue;
        };
        w.tally.ok(Kind::Handoff);
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        w.tally.sent();
        match answer(post(&c, &urls[(turn + 1) % 2], Some(&token), &initialized)).await {
            Ok(a) if a.status == 202 => w.tally.ok(Kind::Handoff),
            Ok(a) => w
                .tally
                .edge(&format!("handoff: initialized {}", a.describe()), &a.json),
            Err(e) => w.tally.edge("handoff: initialized client error", e),
        }
        for k in 1..=CALLS_PER_SESSION as u64 {
            if Instant::now() >= w.until {
                return;
            }
            w.tally.sent();
            let text = format!("s{n}-{k}");
            let url = &urls[(turn + k as usize) % 2];
            match answer(post(&c, url, Some(&token), &note(k, &text))).await {
                Ok(a) if a.status == 200 && counted(&a, &text) == Some(k) => {
                    w.tally.ok(Kind::Handoff)
                }
                Ok(a) => w.tally.edge(
                    &format!(
                        "handoff: a session's call {} (not its own process's count)",
                        a.describe()
                    ),
                    format!("expected {k}:{text}: {}", a.json),
                ),
                Err(e) => w.tally.edge("handoff: session call client error", e),
            }
        }
        w.tally.sent();
        let url = &urls[turn % 2];
        let delete = c
            .delete(url)
            .header("mcp-session-id", &token)
            .header("mcp-protocol-version", "2025-11-25");
        match answer(delete).await {
            Ok(a) if (200..300).contains(&a.status) => w.tally.ok(Kind::Handoff),
            Ok(a) => w
                .tally
                .edge(&format!("handoff: DELETE {}", a.describe()), &a.json),
            Err(e) => w.tally.edge("handoff: DELETE client error", e),
        }
    }
}

/// One principal's 2026-07-28 calls on the `per_principal` pool, through both replicas: its
/// process counts every one of them.
pub async fn caller_worker(w: Arc<World>, n: usize) {
    let c = client();
    let key = format!("Bearer k-soak-{n}");
    let mut count = None::<u64>;
    let mut id = 0u64;
    while Instant::now() < w.until {
        id += 1;
        w.tally.sent();
        let text = format!("c{n}-{id}");
        let url = format!("{}/callers", w.bases[id as usize % 2]);
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"note","arguments":{{"text":"{text}"}},{META}}}}}"#
        );
        let rb = c
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("authorization", &key)
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "note")
            .body(body);
        let a = match answer(rb).await {
            Ok(a) => a,
            Err(e) => {
                w.tally.edge("handoff: caller client error", e);
                continue;
            }
        };
        let got = counted(&a, &text);
        // The first answer sets the count (a process started earlier may hold notes).
        let expected = count.map(|c| c + 1);
        match (a.status, got) {
            (200, Some(g)) if expected.is_none_or(|e| e == g) => {
                count = Some(g);
                w.tally.ok(Kind::Handoff);
            }
            _ => {
                w.tally.edge(
                    &format!(
                        "handoff: a caller's call {} (not its own process's count)",
                        a.describe()
                    ),
                    format!("expected {expected:?}:{text}: {}", a.json),
                );
                count = got;
            }
        }
    }
}

/// An HTTP+SSE client bridged to the 2026-07-28 pool: its stream on one replica, its
/// `initialize` and calls posted through both in turn, every answer on the stream and from
/// the pool's member.
pub async fn bridged_worker(w: Arc<World>, n: usize) {
    let c = client();
    let mut turn = n;
    while Instant::now() < w.until {
        turn += 1;
        w.tally.sent();
        let holder = &w.bases[turn % 2];
        let get = c.get(format!("{holder}/bsse")).send();
        let resp = match tokio::time::timeout(DEADLINE, get).await {
            Ok(Ok(r)) if r.status() == 200 => r,
            Ok(Ok(r)) => {
                w.tally
                    .edge(&format!("handoff: bridged GET {}", r.status()), "");
                continue;
            }
            Ok(Err(e)) => {
                w.tally.edge("handoff: bridged GET failed", short(&e));
                continue;
            }
            Err(_) => {
                w.tally.edge("handoff: bridged GET unanswered", "");
                continue;
            }
        };
        let mut events = Events {
            stream: resp.bytes_stream(),
            buf: String::new(),
        };
        let endpoint = match events.next().await {
            Next::Event { name, data }
                if name == "endpoint" && data.starts_with("/bmessages?sessionId=") =>
            {
                data
            }
            _ => {
                w.tally
                    .edge("handoff: a bridged stream without its endpoint event", "");
                continue;
            }
        };
        w.tally.ok(Kind::Handoff);
        for k in 0..=CALLS_PER_SESSION as u64 {
            if Instant::now() >= w.until {
                return;
            }
            w.tally.sent();
            if !bridged_call(&w, &c, &mut events, &endpoint, turn, k).await {
                break;
            }
        }
    }
}

/// One POST of a bridged HTTP+SSE client (`initialize` first) through the replica whose
/// turn it is, and its answer on the stream; false when the stream is done for.
async fn bridged_call<S>(
    w: &World,
    c: &reqwest::Client,
    events: &mut Events<S>,
    endpoint: &str,
    turn: usize,
    k: u64,
) -> bool
where
    S: futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
{
    let body = match k {
        0 => json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2024-11-05", "capabilities": {},
            "clientInfo": {"name": "soak", "version": "1"}}}),
        _ => json!({"jsonrpc": "2.0", "id": k, "method": "tools/list"}),
    };
    let url = format!("{}{endpoint}", w.bases[(turn + k as usize) % 2]);
    let rb = c
        .post(&url)
        .header("content-type", "application/json")
        .body(body.to_string());
    match answer(rb).await {
        Ok(a) if a.status == 202 => {}
        Ok(a) => {
            let class = format!("handoff: bridged POST {}", a.describe());
            w.tally.edge(&class, &a.json);
            return false;
        }
        Err(e) => {
            w.tally.edge("handoff: bridged POST client error", e);
            return false;
        }
    }
    loop {
        match events.next().await {
            Next::Event { name, data } if name == "message" => {
                let Ok(reply) = serde_json::from_str::<Value>(&data) else {
                    continue;
                };
                if reply["id"] != k {
                    continue;
                }
                if reply["result"]["member"].as_u64() == Some(u64::from(w.bridged)) {
                    w.tally.ok(Kind::Handoff);
                    return true;
                }
                w.tally
                    .edge("handoff: a bridged answer not the member's", reply);
                return false;
            }
            Next::Event { .. } => {}
            Next::Ended => {
                w.tally
                    .edge("handoff: a bridged stream ended before its answer", "");
                return false;
            }
            Next::Silent => {
                let class =
                    format!("handoff: a bridged answer not on the stream within {DEADLINE:?}");
                w.tally.edge(&class, "");
                return false;
            }
        }
    }
}
