//! Era bridging (`bridge_legacy = true`): legacy (2025) Streamable HTTP clients served by
//! 2026-07-28 members, which know no `initialize` and no sessions.
//!
//! - `initialize` is answered by the edge from the pool's `server/discover` (capabilities,
//!   `serverInfo`, instructions). The session id it hands out is a sealed token (kind
//!   `Bridge`) carrying what the client declared: its revision, capabilities and
//!   `clientInfo`. Any replica opens it; nothing is stored.
//! - Every later request becomes a stateless 2026-07-28 request: the `_meta` envelope
//!   (revision, capabilities, `clientInfo`) goes into its params, the `MCP-Protocol-Version`,
//!   `Mcp-Method` and `Mcp-Name` headers are set, and it goes to any member.
//! - `ping`, `logging/setLevel`, notifications, posted responses, `DELETE` are answered by the
//!   edge; `GET` (the standalone stream) gets 405, which clients take as "no stream".
//! - Answers pass through; a JSON-RPC error a member answers with 400 or 404 reaches the
//!   client with 200, as legacy servers answer errors.
//!
//! What does not bridge: server-to-client requests (elicitation, sampling, roots: the
//! forwarded capabilities omit them, so a server that needs them answers -32021), list-change
//! and resource-update notifications (no standalone stream; the `listChanged` and `subscribe`
//! capabilities are withheld), `resources/subscribe`, batches, and HTTP+SSE clients.

use bytes::Bytes;
use pingora::http::RequestHeader;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::body::Body;
use crate::error::EdgeError;
use crate::mcp::headers::{self, NAME, SESSION_ID};
use crate::mcp::MODERN_VERSION;
use crate::metrics::{self, TokenFailure, TokenOp};
use crate::runtime::{Route, Runtime};
use crate::session::affinity::now_secs;
use crate::session::token::{self, Claims, Kind, TokenError};
use crate::session::{credential_digest, Sessions};

/// An answer the edge gives itself.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    /// JSON, or empty.
    pub body: Bytes,
    /// A session id to hand out (`initialize`).
    pub session: Option<String>,
}

/// A request forwarded as a 2026-07-28 one.
#[derive(Debug)]
pub struct Forward {
    pub method: String,
    /// The `Mcp-Name` subject (`params.name` / `params.uri`).
    pub name: Option<String>,
    pub body_len: usize,
}

#[derive(Debug)]
pub enum Bridged {
    Answer(Answer),
    Forward(Box<Forward>),
}

/// What the client declared at `initialize`, carried in its session id.
#[derive(Debug, Serialize, Deserialize)]
struct Declared {
    /// The negotiated legacy revision.
    v: String,
    /// Client capabilities, as forwarded (without what cannot be bridged).
    c: Value,
    /// `clientInfo`.
    i: Value,
}

/// A legacy POST on a bridged route.
pub fn post(
    req: &RequestHeader,
    snapshot: &Runtime,
    route: &Route,
    body: &mut Body,
) -> Result<Bridged, EdgeError> {
    let sessions = snapshot.sessions.as_deref().ok_or(EdgeError::Internal {
        detail: "bridging needs the session key ring".into(),
    })?;
    let message: Value =
        serde_json::from_slice(&body.bytes).map_err(|e| EdgeError::ParseError {
            detail: e.to_string(),
        })?;
    let Value::Object(message) = message else {
        return Err(EdgeError::InvalidRequest {
            detail: "batches are not bridged to 2026-07-28 servers".into(),
        });
    };
    let id = message.get("id").cloned();
    let method = message.get("method").and_then(Value::as_str);
    let credential = credential_digest(
        req.headers
            .get(http::header::AUTHORIZATION)
            .map(|v| v.as_bytes()),
    );
    if method == Some("initialize") {
        return initialize(sessions, route, &message, id, credential);
    }
    let declared = open(sessions, route, req, credential)?;
    let (Some(method), Some(id)) = (method, id) else {
        // A notification, or a response to a request the edge never sent.
        return Ok(Bridged::Answer(accepted()));
    };
    let answer = |body: Value| {
        Ok(Bridged::Answer(Answer {
            status: 200,
            body: Bytes::from(body.to_string()),
            session: None,
        }))
    };
    match method {
        "ping" | "logging/setLevel" => answer(json!({"jsonrpc": "2.0", "id": id, "result": {}})),
        "resources/subscribe" | "resources/unsubscribe" => answer(json!({
            "jsonrpc": "2.0", "id": id,
            "error": {"code": -32601, "message": format!("Method not found: {method} is not bridged to 2026-07-28 servers")}
        })),
        _ => {
            let name = message
                .get("params")
                .and_then(|p| match method {
                    "tools/call" | "prompts/get" => p.get("name"),
                    "resources/read" => p.get("uri"),
                    _ => None,
                })
                .and_then(Value::as_str)
                .map(str::to_owned);
            let method = method.to_owned();
            body.bytes = modern_body(message, &declared)?;
            Ok(Bridged::Forward(Box::new(Forward {
                method,
                name,
                body_len: body.bytes.len(),
            })))
        }
    }
}

/// `DELETE` of a bridged session: nothing is held, nothing to end.
pub fn delete() -> Answer {
    Answer {
        status: 200,
        body: Bytes::new(),
        session: None,
    }
}

fn accepted() -> Answer {
    Answer {
        status: 202,
        body: Bytes::new(),
        session: None,
    }
}

/// Answer `initialize` from the pool's `server/discover`, and seal what the client declared.
fn initialize(
    sessions: &Sessions,
    route: &Route,
    message: &Map<String, Value>,
    id: Option<Value>,
    credential: Option<[u8; 16]>,
) -> Result<Bridged, EdgeError> {
    let spoken = route.pool.spoken.load();
    let Some(discover) = spoken.discover.as_deref() else {
        return Err(EdgeError::NoHealthyMember {
            pool: route.pool.name.clone(),
        });
    };
    let params = message.get("params");
    let requested = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    let legacy: Vec<&String> = route
        .versions
        .accepted
        .iter()
        .filter(|v| crate::mcp::is_legacy_version(v))
        .collect();
    let version = match requested {
        Some(r) if legacy.iter().any(|v| *v == r) => r.to_string(),
        // The newest legacy revision the route accepts (the client then decides).
        _ => legacy
            .iter()
            .max()
            .map_or(crate::mcp::LEGACY_VERSIONS[0].to_string(), |v| {
                v.to_string()
            }),
    };
    let declared = Declared {
        v: version.clone(),
        c: bridged_client_capabilities(params.and_then(|p| p.get("capabilities"))),
        i: params
            .and_then(|p| p.get("clientInfo"))
            .cloned()
            .unwrap_or_else(|| json!({"name": "unknown", "version": "0"})),
    };
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": bridged_server_capabilities(discover.get("capabilities")),
        "serverInfo": discover
            .pointer("/_meta/io.modelcontextprotocol~1serverInfo")
            .cloned()
            .unwrap_or_else(|| json!({"name": route.pool.name, "version": "unknown"})),
    });
    if let Some(instructions) = discover.get("instructions").filter(|i| i.is_string()) {
        result["instructions"] = instructions.clone();
    }
    let session = seal(sessions, route, &declared, credential)?;
    Ok(Bridged::Answer(Answer {
        status: 200,
        body: Bytes::from(json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()),
        session: Some(session),
    }))
}

/// What the client declared, less what cannot be bridged: a 2026-07-28 server reaches a
/// client only with `input_required` results, which a legacy client cannot answer.
fn bridged_client_capabilities(declared: Option<&Value>) -> Value {
    let mut caps = declared
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for unbridged in ["sampling", "elicitation", "roots", "tasks"] {
        caps.remove(unbridged);
    }
    Value::Object(caps)
}

/// The members' capabilities, less the notifications a bridged client cannot receive.
fn bridged_server_capabilities(discovered: Option<&Value>) -> Value {
    let mut caps = discovered
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    caps.remove("extensions");
    for (name, fields) in [
        ("tools", &["listChanged"][..]),
        ("prompts", &["listChanged"][..]),
        ("resources", &["listChanged", "subscribe"][..]),
    ] {
        if let Some(Value::Object(c)) = caps.get_mut(name) {
            for f in fields {
                c.remove(*f);
            }
        }
    }
    Value::Object(caps)
}

fn seal(
    sessions: &Sessions,
    route: &Route,
    declared: &Declared,
    credential: Option<[u8; 16]>,
) -> Result<String, EdgeError> {
    let internal = |detail: String| EdgeError::Internal { detail };
    let carried = serde_json::to_string(declared).map_err(|e| internal(e.to_string()))?;
    let claims = Claims {
        pool: route.pool.name.clone(),
        member: String::new(),
        upstream_id: carried,
        issued_at: now_secs(),
        credential: credential.filter(|_| sessions.bind_credential),
    };
    let t = token::seal_kind(&sessions.ring, &claims, Kind::Bridge)
        .map_err(|e| internal(format!("sealing a bridged session: {e}")))?;
    if t.len() > token::MAX_TOKEN_CHARS {
        return Err(EdgeError::InvalidRequest {
            detail: "the client's capabilities and clientInfo are too large to bridge".into(),
        });
    }
    metrics::get().token(TokenOp::Sealed);
    Ok(t)
}

/// The bridged session a request names in `Mcp-Session-Id`.
fn open(
    sessions: &Sessions,
    route: &Route,
    req: &RequestHeader,
    credential: Option<[u8; 16]>,
) -> Result<Declared, EdgeError> {
    let refuse = |reason: TokenFailure, error: EdgeError| {
        metrics::get().token_failure(reason);
        error
    };
    let raw = headers::single(&req.headers, SESSION_ID)
        .map_err(|_| EdgeError::SessionUnknown {
            reason: "Mcp-Session-Id appears more than once",
        })?
        .ok_or_else(|| EdgeError::InvalidRequest {
            detail: "no valid session ID provided (Mcp-Session-Id)".into(),
        })?;
    let text = String::from_utf8_lossy(raw);
    let claims = token::open_kind(
        &sessions.ring,
        &text,
        now_secs(),
        sessions.max_age_secs,
        Kind::Bridge,
    )
    .map_err(|e| match e {
        TokenError::Expired => refuse(TokenFailure::Expired, EdgeError::SessionExpired),
        other => refuse(
            other.into(),
            EdgeError::SessionUnknown {
                reason: other.reason(),
            },
        ),
    })?;
    if claims.pool != route.pool.name {
        return Err(refuse(
            TokenFailure::OtherPool,
            EdgeError::SessionUnknown {
                reason: "issued for another pool",
            },
        ));
    }
    if sessions.bind_credential && claims.credential != credential {
        return Err(refuse(
            TokenFailure::ForeignCredential,
            EdgeError::SessionForeign,
        ));
    }
    metrics::get().token(TokenOp::Opened);
    serde_json::from_str(&claims.upstream_id).map_err(|_| EdgeError::SessionUnknown {
        reason: "malformed",
    })
}

/// The message as a 2026-07-28 request: the `_meta` envelope added to its params (an
/// envelope key the client sent itself is replaced).
fn modern_body(mut message: Map<String, Value>, declared: &Declared) -> Result<Bytes, EdgeError> {
    let params = message
        .entry("params")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(params) = params else {
        return Err(EdgeError::InvalidRequest {
            detail: "params must be an object".into(),
        });
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else {
        return Err(EdgeError::InvalidRequest {
            detail: "params._meta must be an object".into(),
        });
    };
    meta.insert(
        "io.modelcontextprotocol/protocolVersion".into(),
        json!(MODERN_VERSION),
    );
    meta.insert(
        "io.modelcontextprotocol/clientCapabilities".into(),
        declared.c.clone(),
    );
    meta.insert(
        "io.modelcontextprotocol/clientInfo".into(),
        declared.i.clone(),
    );
    serde_json::to_vec(&message)
        .map(Bytes::from)
        .map_err(|e| EdgeError::Internal {
            detail: e.to_string(),
        })
}

/// Upstream request head of a bridged request: the 2026-07-28 headers, no session.
pub fn restore_head(upstream: &mut RequestHeader, forward: &Forward) -> pingora::Result<()> {
    upstream.remove_header(SESSION_ID);
    // The answer is converted: plain bytes, please.
    upstream.remove_header(&http::header::ACCEPT_ENCODING);
    upstream.insert_header(headers::PROTOCOL_VERSION, MODERN_VERSION)?;
    upstream.insert_header(headers::METHOD, forward.method.as_str())?;
    match &forward.name {
        Some(name) => upstream.insert_header(NAME, headers::encode_value(name))?,
        None => {
            upstream.remove_header(NAME);
        }
    }
    if upstream.headers.contains_key(http::header::CONTENT_LENGTH) {
        upstream.insert_header(http::header::CONTENT_LENGTH, forward.body_len.to_string())?;
    }
    Ok(())
}

/// A member's JSON-RPC error answered with 400 or 404 reaches a bridged client with 200:
/// legacy clients read error bodies of successful responses, and take a 404 for a lost
/// session.
pub fn legacy_status(resp: &mut pingora::http::ResponseHeader) -> pingora::Result<()> {
    let json = resp
        .headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if json && matches!(resp.status.as_u16(), 400 | 404) {
        resp.set_status(200)?;
    }
    Ok(())
}

/// The answer to a bridged request, in the client's revision: a result's 2026-07-28-only
/// fields (`resultType`, `ttlMs`, `cacheScope`) are dropped, and an `input_required` result
/// (the server asks the client for input, which cannot be bridged) becomes an error the
/// client can read. JSON bodies and the events of a stream are converted whole, up to
/// [`MAX_CONVERTED`]; past that the rest of the answer passes as it is (such a body is no
/// `input_required` result, and clients let the extra fields through).
#[derive(Debug)]
pub struct Convert {
    sse: bool,
    held: Vec<u8>,
    /// Given up converting: everything passes.
    passing: bool,
}

/// The most of one body or event held for conversion.
pub const MAX_CONVERTED: usize = 64 * 1024;

impl Convert {
    /// For an answer of this content type (JSON or an event stream), if any.
    pub fn new(content_type: Option<&[u8]>) -> Option<Convert> {
        let starts = |t: &[u8], with: &[u8]| {
            t.len() >= with.len() && t[..with.len()].eq_ignore_ascii_case(with)
        };
        let sse = match content_type {
            Some(t) if starts(t, b"text/event-stream") => true,
            Some(t) if starts(t, b"application/json") => false,
            _ => return None,
        };
        Some(Convert {
            sse,
            held: Vec::new(),
            passing: false,
        })
    }

    pub fn feed(&mut self, chunk: &[u8]) -> Bytes {
        if self.passing {
            return Bytes::copy_from_slice(chunk);
        }
        self.held.extend_from_slice(chunk);
        let mut out = Vec::new();
        if self.sse {
            while let Some(end) = crate::sse::event_end(&self.held) {
                let event: Vec<u8> = self.held.drain(..end).collect();
                out.extend_from_slice(&convert_event(&event));
            }
        }
        if self.held.len() > MAX_CONVERTED {
            self.passing = true;
            out.append(&mut self.held);
        }
        Bytes::from(out)
    }

    pub fn finish(&mut self) -> Bytes {
        let held = std::mem::take(&mut self.held);
        if self.passing || self.sse {
            return Bytes::from(held);
        }
        match serde_json::from_slice::<Value>(&held)
            .ok()
            .and_then(convert_message)
        {
            Some(converted) => Bytes::from(converted.to_string()),
            None => Bytes::from(held),
        }
    }
}

/// One event with its data converted (as one `data:` line), or as it came.
fn convert_event(event: &[u8]) -> Vec<u8> {
    let Ok(text) = std::str::from_utf8(event) else {
        return event.to_vec();
    };
    let lines: Vec<&str> = text.split_inclusive(['\n', '\r']).collect();
    let data: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| {
            d.strip_prefix(' ')
                .unwrap_or(d)
                .trim_end_matches(['\r', '\n'])
        })
        .collect();
    let Some(converted) = serde_json::from_str::<Value>(&data.join("\n"))
        .ok()
        .and_then(convert_message)
    else {
        return event.to_vec();
    };
    let mut out = String::with_capacity(event.len());
    let mut written = false;
    for line in lines {
        if line.starts_with("data:") {
            if !written {
                out.push_str(&format!("data: {converted}\n"));
                written = true;
            }
        } else {
            out.push_str(line);
        }
    }
    out.into_bytes()
}

/// The message in the client's revision, or `None` when it needs no change.
fn convert_message(mut message: Value) -> Option<Value> {
    let result = message.get_mut("result")?.as_object_mut()?;
    if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        return Some(json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": -32603,
            "message": "The server asked for input from the client (elicitation, sampling or roots), which cannot be bridged to this client's protocol revision"
        }}));
    }
    let mut changed = false;
    for field in ["resultType", "ttlMs", "cacheScope"] {
        changed |= result.remove(field).is_some();
    }
    changed.then_some(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_keep_what_bridges() {
        let client = json!({"sampling": {}, "elicitation": {"form": {}}, "roots": {"listChanged": true}, "experimental": {"x": {}}});
        assert_eq!(
            bridged_client_capabilities(Some(&client)),
            json!({"experimental": {"x": {}}})
        );
        let server = json!({"tools": {"listChanged": true}, "resources": {"subscribe": true, "listChanged": true}, "logging": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}});
        assert_eq!(
            bridged_server_capabilities(Some(&server)),
            json!({"tools": {}, "resources": {}, "logging": {}})
        );
    }

    #[test]
    fn answers_come_back_in_the_legacy_shape() {
        let mut c = Convert::new(Some(b"text/event-stream")).unwrap();
        let stream = "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\r\n\r\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"content\":[],\"resultType\":\"complete\",\"ttlMs\":0}}\n\n";
        let mut out = Vec::new();
        for chunk in stream.as_bytes().chunks(7) {
            out.extend_from_slice(&c.feed(chunk));
        }
        out.extend_from_slice(&c.finish());
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with("event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\r\n\r\n"), "{out}");
        assert!(out.ends_with("event: message\ndata: {\"id\":3,\"jsonrpc\":\"2.0\",\"result\":{\"content\":[]}}\n\n"), "{out}");

        let mut c = Convert::new(Some(b"Application/JSON")).unwrap();
        let asked = br#"{"jsonrpc":"2.0","id":"x","result":{"resultType":"input_required","inputRequests":{}}}"#;
        let mut out = c.feed(asked).to_vec();
        out.extend_from_slice(&c.finish());
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], "x");
        assert_eq!(v["error"]["code"], -32603);
        // An answer needing no change keeps its bytes.
        let mut c = Convert::new(Some(b"application/json")).unwrap();
        let plain = br#"{"jsonrpc":"2.0", "id":1,"result":{"content":[]}}"#;
        let mut out = c.feed(plain).to_vec();
        out.extend_from_slice(&c.finish());
        assert_eq!(out, plain);
        assert!(Convert::new(Some(b"text/plain")).is_none());
    }

    #[test]
    fn the_envelope_goes_into_the_params() {
        let declared = Declared {
            v: "2025-06-18".into(),
            c: json!({}),
            i: json!({"name": "c", "version": "1"}),
        };
        let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "_meta": {"progressToken": 7, "io.modelcontextprotocol/protocolVersion": "forged"}}});
        let Value::Object(m) = message else { panic!() };
        let out: Value = serde_json::from_slice(&modern_body(m, &declared).unwrap()).unwrap();
        assert_eq!(out["params"]["name"], "echo");
        assert_eq!(out["params"]["_meta"]["progressToken"], 7);
        assert_eq!(
            out["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
            MODERN_VERSION
        );
        assert_eq!(
            out["params"]["_meta"]["io.modelcontextprotocol/clientInfo"]["name"],
            "c"
        );
        let bare = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
        let Value::Object(m) = bare else { panic!() };
        let out: Value = serde_json::from_slice(&modern_body(m, &declared).unwrap()).unwrap();
        assert_eq!(
            out["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"],
            json!({})
        );
    }
}
