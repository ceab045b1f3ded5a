//! Era bridging (`bridge_legacy = true`): legacy (2025) Streamable HTTP clients served by
//! 2026-07-28 members, which know no `initialize` and no sessions.
//!
//! - `initialize` goes to a member as a `server/discover` (with the client's own headers, so
//!   a member that wants a credential says so), and its `DiscoverResult` comes back as the
//!   `InitializeResult` (capabilities, `serverInfo`, instructions). The session id the edge
//!   adds is a sealed token (kind `Bridge`) carrying what the client declared: its revision,
//!   capabilities and `clientInfo`. Any replica opens it; nothing is stored.
//! - Every later request becomes a stateless 2026-07-28 request: the `_meta` envelope
//!   (revision, capabilities, `clientInfo`) is written into its params, every other byte as
//!   sent; the `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers are set; it goes
//!   to any member.
//! - `ping`, `logging/setLevel`, notifications, posted responses, `DELETE` are answered by the
//!   edge; `GET` (the standalone stream) gets 405, which clients take as "no stream".
//! - Answers come back in the client's revision ([`super::rewrite::Rewrite`]); a JSON-RPC error a member
//!   answers with 400 or 404 reaches the client with 200, as legacy servers answer errors.
//!
//! What does not bridge: server-to-client requests (elicitation, sampling, roots: the
//! forwarded capabilities omit them, so a server that needs them answers -32021, and an
//! `input_required` result becomes an error), list-change and resource-update notifications
//! (no standalone stream; `listChanged` and `subscribe` are withheld), `resources/subscribe`,
//! cancellation, batches, and HTTP+SSE clients.

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};
use pingora::http::RequestHeader;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::body::Body;
use super::rewrite::Rewrite;
use crate::error::EdgeError;
use crate::mcp::headers::{self, NAME, SESSION_ID};
use crate::mcp::MODERN_VERSION;
use crate::metrics::{self, TokenOp};
use crate::runtime::{Route, Runtime};
use crate::session::affinity::now_secs;
use crate::session::token::{self, Claims, Kind};
use crate::session::Sessions;

pub use super::respond::Answer;

/// A request forwarded as a 2026-07-28 one.
#[derive(Debug)]
pub struct Forward {
    pub method: String,
    /// The `Mcp-Name` subject (`params.name` / `params.uri`).
    pub name: Option<String>,
    pub body_len: usize,
    /// An `initialize` sent as `server/discover`: the revision to answer with and the
    /// session id to hand out.
    pub initialize: Option<Initialize>,
}

#[derive(Debug)]
pub struct Initialize {
    pub version: String,
    pub session: String,
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
    /// Client capabilities, as forwarded (what can be bridged).
    c: Value,
    /// `clientInfo` (name, version, title).
    i: Value,
}

/// The parts of a legacy message the bridge reads, borrowed from the body.
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ParamsMeta<'a> {
    #[serde(borrow, rename = "_meta")]
    meta: Option<&'a RawValue>,
}

/// Params of `initialize`, read only when small.
#[derive(Deserialize)]
struct InitializeParams {
    #[serde(rename = "protocolVersion")]
    protocol_version: Option<String>,
    capabilities: Option<Value>,
    #[serde(rename = "clientInfo")]
    client_info: Option<Value>,
}

/// The most of an `initialize`'s params the bridge reads (what it declares is sealed into a
/// token of at most 4 KiB anyway).
const MAX_INITIALIZE_PARAMS: usize = 16 * 1024;

fn invalid(detail: &str) -> EdgeError {
    EdgeError::InvalidRequest {
        detail: detail.into(),
    }
}

/// A legacy POST on a bridged route.
pub fn post(
    req: &RequestHeader,
    snapshot: &Runtime,
    route: &Route,
    body: &mut Body,
    credential: Option<[u8; 16]>,
) -> Result<Bridged, EdgeError> {
    let sessions = snapshot.sessions.as_deref().ok_or(EdgeError::Internal {
        detail: "bridging needs the session key ring".into(),
    })?;
    if body.bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(invalid("batches are not bridged to 2026-07-28 servers"));
    }
    let bytes = body.bytes.clone();
    let message: Message = serde_json::from_slice(&bytes)
        .map_err(|_| invalid("a key appears more than once in the message"))?;
    let method = message.method.as_deref();
    if let (Some("initialize"), Some(id)) = (method, message.id) {
        let declared = declare(route, message.params)?;
        let session = seal(sessions, route, &declared, credential)?;
        body.bytes = discover_body(id, &declared)?;
        return Ok(Bridged::Forward(Box::new(Forward {
            method: "server/discover".into(),
            name: None,
            body_len: body.bytes.len(),
            initialize: Some(Initialize {
                version: declared.v,
                session,
            }),
        })));
    }
    let declared = open(sessions, route, req, credential)?;
    let (Some(method), Some(id)) = (method, message.id) else {
        // A notification, or a response to a request the edge never sent.
        return Ok(Bridged::Answer(accepted()));
    };
    if !method.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(invalid("method must be visible ASCII"));
    }
    let answer = |body: String| Ok(Bridged::Answer(Answer::json(200, Bytes::from(body))));
    let id = id.get();
    match method {
        "ping" | "logging/setLevel" => {
            answer(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#))
        }
        "resources/subscribe" | "resources/unsubscribe" => answer(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"Method not found: {method} is not bridged to 2026-07-28 servers"}}}}"#
        )),
        _ => {
            let name = match (method, message.params) {
                ("tools/call" | "prompts/get", Some(p)) => subject(p, "name"),
                ("resources/read", Some(p)) => subject(p, "uri"),
                _ => None,
            };
            let method = method.to_owned();
            body.bytes = with_envelope(&bytes, message.params, &declared)?;
            Ok(Bridged::Forward(Box::new(Forward {
                method,
                name,
                body_len: body.bytes.len(),
                initialize: None,
            })))
        }
    }
}

/// `params.<key>` when it is a string.
fn subject(params: &RawValue, key: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Named<'a> {
        #[serde(borrow)]
        name: Option<Cow<'a, str>>,
        #[serde(borrow)]
        uri: Option<Cow<'a, str>>,
    }
    let named: Named = serde_json::from_str(params.get()).ok()?;
    match key {
        "name" => named.name.map(Cow::into_owned),
        _ => named.uri.map(Cow::into_owned),
    }
}

/// `DELETE` of a bridged session: nothing is held, nothing to end.
pub fn delete() -> Answer {
    Answer::json(200, Bytes::new())
}

fn accepted() -> Answer {
    Answer::json(202, Bytes::new())
}

/// What an `initialize` declares, as the bridge carries it.
fn declare(route: &Route, params: Option<&RawValue>) -> Result<Declared, EdgeError> {
    let params: InitializeParams = match params {
        Some(p) if p.get().len() > MAX_INITIALIZE_PARAMS => {
            return Err(invalid("initialize params are too large to bridge"))
        }
        Some(p) => serde_json::from_str(p.get()).map_err(|_| invalid("initialize params"))?,
        None => InitializeParams {
            protocol_version: None,
            capabilities: None,
            client_info: None,
        },
    };
    let legacy: Vec<&String> = route
        .versions
        .accepted
        .iter()
        .filter(|v| crate::mcp::is_legacy_version(v))
        .collect();
    let version = match params.protocol_version {
        Some(r) if legacy.iter().any(|v| **v == r) => r,
        // The newest legacy revision the route accepts (the client then decides).
        _ => legacy
            .iter()
            .max()
            .map_or(crate::mcp::LEGACY_VERSIONS[0].to_string(), |v| {
                v.to_string()
            }),
    };
    let info = params.client_info.unwrap_or(Value::Null);
    let mut kept = Map::new();
    for key in ["name", "version", "title"] {
        if let Some(v) = info.get(key).filter(|v| v.is_string()) {
            kept.insert(key.to_string(), v.clone());
        }
    }
    kept.entry("name").or_insert_with(|| json!("unknown"));
    kept.entry("version").or_insert_with(|| json!("0"));
    Ok(Declared {
        v: version,
        c: bridged_client_capabilities(params.capabilities.as_ref()),
        i: Value::Object(kept),
    })
}

/// What the client declared that bridges: only `experimental`. A 2026-07-28 server reaches a
/// client for sampling, elicitation or roots only with `input_required` results, which a
/// legacy client cannot answer; extensions (tasks) would mint ids nobody seals.
fn bridged_client_capabilities(declared: Option<&Value>) -> Value {
    let mut caps = Map::new();
    if let Some(e) = declared.and_then(|d| d.get("experimental")) {
        caps.insert("experimental".into(), e.clone());
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

/// The `_meta` envelope's keys (without braces).
fn envelope(declared: &Declared) -> Result<String, EdgeError> {
    let text = |v: &Value| {
        serde_json::to_string(v).map_err(|e| EdgeError::Internal {
            detail: e.to_string(),
        })
    };
    Ok(format!(
        r#""io.modelcontextprotocol/protocolVersion":"{MODERN_VERSION}","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{}"#,
        text(&declared.c)?,
        text(&declared.i)?
    ))
}

/// The `server/discover` an `initialize` becomes (same id).
fn discover_body(id: &RawValue, declared: &Declared) -> Result<Bytes, EdgeError> {
    Ok(Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":{},"method":"server/discover","params":{{"_meta":{{{}}}}}}}"#,
        id.get(),
        envelope(declared)?
    )))
}

/// Where `inner` starts in `outer`, when it is a slice of it.
fn offset(outer: &[u8], inner: &str) -> Option<usize> {
    let start = (inner.as_ptr() as usize).checked_sub(outer.as_ptr() as usize)?;
    (start + inner.len() <= outer.len()).then_some(start)
}

/// The message with the `_meta` envelope written at the end of `params._meta` (created as
/// needed). Keys the client sent stay; the envelope's keys come last, so they are the ones
/// a server reads. Every other byte is as the client sent it.
fn with_envelope(
    body: &Bytes,
    params: Option<&RawValue>,
    declared: &Declared,
) -> Result<Bytes, EdgeError> {
    let env = envelope(declared)?;
    // Insert `text` just before the closing brace of the object `object` (a slice of body).
    let before_close = |object: &str, text: String| -> Result<Bytes, EdgeError> {
        let start = offset(body, object).ok_or_else(|| invalid("message"))?;
        let close = start + object.len() - 1;
        let empty = object[1..object.len() - 1].trim().is_empty();
        let sep = if empty { "" } else { "," };
        let mut out = BytesMut::with_capacity(body.len() + sep.len() + text.len());
        out.extend_from_slice(&body[..close]);
        out.extend_from_slice(sep.as_bytes());
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(&body[close..]);
        Ok(out.freeze())
    };
    match params.map(RawValue::get) {
        None => {
            let text = std::str::from_utf8(body).map_err(|_| invalid("message"))?;
            let message = text.trim_end();
            before_close(
                message.trim_start(),
                format!(r#""params":{{"_meta":{{{env}}}}}"#),
            )
        }
        Some(p) if p.starts_with('{') => {
            let pm: ParamsMeta = serde_json::from_str(p)
                .map_err(|_| invalid("a key appears more than once in params"))?;
            match pm.meta.map(RawValue::get) {
                Some(m) if m.starts_with('{') => before_close(m, env),
                Some(_) => Err(invalid("params._meta must be an object")),
                None => before_close(p, format!(r#""_meta":{{{env}}}"#)),
            }
        }
        Some(_) => Err(invalid("params must be an object")),
    }
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
    let raw = headers::single(&req.headers, SESSION_ID)
        .map_err(|_| EdgeError::SessionUnknown {
            reason: "Mcp-Session-Id appears more than once",
        })?
        .ok_or_else(|| EdgeError::InvalidRequest {
            detail: "no valid session ID provided (Mcp-Session-Id)".into(),
        })?;
    let text = String::from_utf8_lossy(raw);
    let claims = crate::session::affinity::open_session(
        sessions,
        &route.pool.name,
        &text,
        credential,
        Kind::Bridge,
    )?;
    metrics::get().token(TokenOp::Opened);
    serde_json::from_str(&claims.upstream_id).map_err(|_| EdgeError::SessionUnknown {
        reason: "malformed",
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

/// The head of a bridged answer: never a member's session id; the bridged session id on a
/// successful `initialize`; a member's JSON-RPC error answered with 400 or 404 reaches the
/// client with 200 (legacy clients read error bodies of successful responses, and take a 404
/// for a lost session). Returns the conversion the body needs.
pub fn answer_head(
    resp: &mut pingora::http::ResponseHeader,
    forward: &Forward,
) -> pingora::Result<Option<Rewrite>> {
    resp.remove_header(SESSION_ID);
    let content_type = resp
        .headers
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.as_bytes().to_vec());
    let json = content_type
        .as_deref()
        .is_some_and(|t| starts(t, b"application/json"));
    if json && matches!(resp.status.as_u16(), 400 | 404) {
        resp.set_status(200)?;
    }
    let initialize = match &forward.initialize {
        Some(init) if resp.status.as_u16() == 200 => {
            resp.insert_header(SESSION_ID, init.session.as_str())?;
            Some(init.version.clone())
        }
        _ => None,
    };
    let encoded = resp
        .headers
        .get(http::header::CONTENT_ENCODING)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    if encoded {
        return Ok(None);
    }
    let convert = Rewrite::new(content_type.as_deref(), Some(initialize), None);
    if convert.is_some() {
        resp.remove_header(&http::header::CONTENT_LENGTH);
    }
    Ok(convert)
}

fn starts(t: &[u8], with: &[u8]) -> bool {
    t.len() >= with.len() && t[..with.len()].eq_ignore_ascii_case(with)
}

/// The message in the client's revision, or `None` when it needs no change.
pub(super) fn convert_message(mut message: Value, initialize: Option<&str>) -> Option<Value> {
    let result = message.get_mut("result")?.as_object_mut()?;
    if let Some(version) = initialize {
        if result.get("supportedVersions").is_some() {
            let mut init = json!({
                "protocolVersion": version,
                "capabilities": bridged_server_capabilities(result.get("capabilities")),
                "serverInfo": result
                    .get("_meta")
                    .and_then(|m| m.get("io.modelcontextprotocol/serverInfo"))
                    .cloned()
                    .unwrap_or_else(|| json!({"name": "unknown", "version": "unknown"})),
            });
            if let Some(i) = result.get("instructions").filter(|i| i.is_string()) {
                init["instructions"] = i.clone();
            }
            *result = match init {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            return Some(message);
        }
    }
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
    use crate::proxy::rewrite::MAX_CONVERTED;

    fn declared() -> Declared {
        Declared {
            v: "2025-06-18".into(),
            c: json!({}),
            i: json!({"name": "c", "version": "1"}),
        }
    }

    fn enveloped(body: &str) -> Result<String, EdgeError> {
        let bytes = Bytes::copy_from_slice(body.as_bytes());
        let message: Message = serde_json::from_slice(&bytes).unwrap();
        let out = with_envelope(&bytes, message.params, &declared())?;
        Ok(String::from_utf8(out.to_vec()).unwrap())
    }

    const ENV: &str = r#""io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}"#;

    #[test]
    fn the_envelope_is_written_into_the_params_and_nothing_else_changes() {
        let cases = [
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo", "_meta" : {"progressToken":7} }}"#,
                format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo", "_meta" : {{"progressToken":7,{ENV}}} }}}}"#),
            ),
            (
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{ }}"#,
                format!(r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{{ "_meta":{{{ENV}}}}}}}"#),
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"cursor":"a"}}"#,
                format!(r#"{{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{{"cursor":"a","_meta":{{{ENV}}}}}}}"#),
            ),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\"}\n",
                format!("{{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\",\"params\":{{\"_meta\":{{{ENV}}}}}}}\n"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":5,"method":"x","params":{"_meta":{}}}"#,
                format!(r#"{{"jsonrpc":"2.0","id":5,"method":"x","params":{{"_meta":{{{ENV}}}}}}}"#),
            ),
        ];
        for (body, want) in cases {
            let out = enveloped(body).unwrap();
            assert_eq!(out, want);
            let v: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(
                v["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
                MODERN_VERSION
            );
        }
        assert!(enveloped(r#"{"id":1,"method":"x","params":[1]}"#).is_err());
        assert!(enveloped(r#"{"id":1,"method":"x","params":{"_meta":3}}"#).is_err());
    }

    #[test]
    fn capabilities_keep_what_bridges() {
        let client = json!({"sampling": {}, "elicitation": {"form": {}}, "roots": {"listChanged": true}, "experimental": {"x": {}}, "extensions": {"io.modelcontextprotocol/tasks": {}}});
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

    fn run(c: &mut Rewrite, stream: &[u8], step: usize) -> String {
        let mut out = Vec::new();
        for chunk in stream.chunks(step) {
            out.extend_from_slice(&c.feed(chunk));
        }
        out.extend_from_slice(&c.finish());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn answers_come_back_in_the_legacy_shape() {
        let stream = "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\r\n\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"content\":[],\"resultType\":\"complete\",\"ttlMs\":0}}\r\nid: 7\r\n\r\n";
        for step in 1..=stream.len() {
            let mut c = Rewrite::new(Some(b"text/event-stream"), Some(None), None).unwrap();
            let out = run(&mut c, stream.as_bytes(), step);
            assert_eq!(
                out,
                "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\r\n\r\nevent: message\r\ndata: {\"id\":3,\"jsonrpc\":\"2.0\",\"result\":{\"content\":[]}}\r\nid: 7\r\n\r\n",
                "step {step}"
            );
        }
        let mut c = Rewrite::new(Some(b"Application/JSON"), Some(None), None).unwrap();
        let asked = br#"{"jsonrpc":"2.0","id":"x","result":{"resultType":"input_required","inputRequests":{}}}"#;
        let v: Value = serde_json::from_str(&run(&mut c, asked, 5)).unwrap();
        assert_eq!(v["id"], "x");
        assert_eq!(v["error"]["code"], -32603);
        // An answer needing no change keeps its bytes.
        let mut c = Rewrite::new(Some(b"application/json"), Some(None), None).unwrap();
        let plain = r#"{"jsonrpc":"2.0", "id":1,"result":{"content":[]}}"#;
        assert_eq!(run(&mut c, plain.as_bytes(), 3), plain);
        assert!(Rewrite::new(Some(b"text/plain"), Some(None), None).is_none());
    }

    #[test]
    fn an_oversized_event_passes_and_the_next_one_is_converted() {
        let big = format!("data: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{{\"data\":\"{}\"}}}}\r\n\r\n", "x".repeat(MAX_CONVERTED + 10));
        let after = "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"resultType\":\"input_required\"}}\n\n";
        let stream = format!("{big}{after}");
        for step in [1000, 4096, 70_000, stream.len()] {
            let mut c = Rewrite::new(Some(b"text/event-stream"), Some(None), None).unwrap();
            let out = run(&mut c, stream.as_bytes(), step);
            assert!(out.starts_with(&big), "step {step}");
            let tail = &out[big.len()..];
            assert!(tail.contains("\"error\""), "step {step}: {tail}");
        }
    }

    #[test]
    fn a_discover_result_answers_initialize() {
        let discover = r#"{"jsonrpc":"2.0","id":0,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{"listChanged":true}},"resultType":"complete","ttlMs":0,"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":"2"}},"instructions":"hi"}}"#;
        let mut c = Rewrite::new(
            Some(b"application/json"),
            Some(Some("2025-06-18".into())),
            None,
        )
        .unwrap();
        let v: Value = serde_json::from_str(&run(&mut c, discover.as_bytes(), 9)).unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "2"},
                "instructions": "hi"}})
        );
    }
}
