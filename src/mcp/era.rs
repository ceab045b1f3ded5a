//! The 2025 revisions and 2026-07-28 on one wire, both ways: what changes in a message that
//! crosses from one to the other, and only that (every other byte as written).
//!
//! A legacy client served by a 2026-07-28 server (`bridge_legacy`):
//! - its requests gain the per-request envelope in `params._meta` ([`with_envelope`]); its
//!   `initialize` becomes a `server/discover` ([`discover_body`]); what it declared there
//!   ([`Declared`]) travels with it in its session id;
//! - the answers lose what a 2025 client does not know ([`to_legacy`], as a [`ToLegacy`]
//!   rewrite): `resultType`, `ttlMs`, `cacheScope`; a `DiscoverResult` answers `initialize`;
//!   an `input_required` result, which a 2025 client cannot answer, becomes an error.
//!
//! A 2026-07-28 client served by a process initialised in a 2025 revision (stdio pools):
//! - its requests lose the envelope ([`strip_envelope`]); `server/discover` is answered from
//!   the process's `initialize` result ([`discover_answer`]);
//! - the results gain `resultType` and, on cacheable ones, the cache hints ([`mark_modern`]).
//!
//! What does not cross: server-to-client requests (elicitation, sampling, roots: the
//! forwarded capabilities omit them), list-change and resource-update notifications (no
//! standalone stream: `listChanged` and `subscribe` are withheld), batches.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::json::{self, member};
use super::rewrite::{Rewritten, Transform};
use super::MODERN_VERSION;
use crate::error::{code, EdgeError};

/// `params._meta` keys of the per-request envelope.
pub const ENVELOPE_PREFIX: &str = "io.modelcontextprotocol/";

/// What a legacy client declared at `initialize`, as the bridge carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Declared {
    /// The negotiated legacy revision.
    pub v: String,
    /// Client capabilities, as forwarded (what can be bridged).
    pub c: Value,
    /// `clientInfo` (name, version, title).
    pub i: Value,
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

/// The most of an `initialize`'s params read (what it declares is sealed into a token of at
/// most 4 KiB anyway).
const MAX_INITIALIZE_PARAMS: usize = 16 * 1024;

fn invalid(detail: &str) -> EdgeError {
    EdgeError::InvalidRequest {
        detail: detail.into(),
    }
}

/// What an `initialize` declares: the revision (the client's when `legacy` has it, else the
/// newest of `legacy`), the capabilities that bridge (`askable`: the client can be asked for
/// input, see [`client_capabilities`]), `clientInfo`'s name, version and title.
pub fn declare(
    params: Option<&RawValue>,
    legacy: &[&str],
    askable: bool,
) -> Result<Declared, EdgeError> {
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
    let version = match params.protocol_version {
        Some(r) if legacy.contains(&r.as_str()) => r,
        // The newest legacy revision the route accepts (the client then decides).
        _ => legacy
            .iter()
            .max()
            .map_or(super::LEGACY_VERSIONS[0], |v| *v)
            .to_string(),
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
        c: client_capabilities(params.capabilities.as_ref(), askable),
        i: Value::Object(kept),
    })
}

/// What a client declared that bridges: `experimental`; and `elicitation`, `sampling` and
/// `roots` when the client can be asked (`askable`: an HTTP+SSE client, whose stream the
/// edge holds, gets a 2026-07-28 server's `input_required` questions as requests on it; a
/// Streamable HTTP client's answer could not be matched to its question). Extensions
/// (tasks) would mint ids nobody seals.
fn client_capabilities(declared: Option<&Value>, askable: bool) -> Value {
    let mut caps = Map::new();
    let bridged: &[&str] = match askable {
        true => &["experimental", "elicitation", "sampling", "roots"],
        false => &["experimental"],
    };
    for name in bridged {
        if let Some(c) = declared.and_then(|d| d.get(*name)) {
            caps.insert((*name).into(), c.clone());
        }
    }
    Value::Object(caps)
}

/// A server's capabilities, less the notifications a bridged client cannot receive.
fn server_capabilities(discovered: Option<&Value>) -> Value {
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

/// The envelope's `_meta` keys (without braces).
fn envelope(declared: &Declared) -> Result<String, EdgeError> {
    let text = |v: &Value| {
        serde_json::to_string(v).map_err(|e| EdgeError::Internal {
            detail: e.to_string(),
        })
    };
    Ok(format!(
        r#""{ENVELOPE_PREFIX}protocolVersion":"{MODERN_VERSION}","{ENVELOPE_PREFIX}clientCapabilities":{},"{ENVELOPE_PREFIX}clientInfo":{}"#,
        text(&declared.c)?,
        text(&declared.i)?
    ))
}

/// The `server/discover` an `initialize` with `id` becomes.
pub fn discover_body(id: &RawValue, declared: &Declared) -> Result<Vec<u8>, EdgeError> {
    let params = format!(r#"{{"_meta":{{{}}}}}"#, envelope(declared)?);
    Ok(super::jsonrpc::request(id.get(), "server/discover", &params).into_bytes())
}

/// The message with the envelope written at the end of `params._meta` (created as needed).
/// Keys the client sent stay; the envelope's come last, so they are the ones a server reads.
/// Every other byte is as the client sent it. `params` is the message's own (a slice of it).
pub fn with_envelope(
    body: &[u8],
    params: Option<&RawValue>,
    declared: &Declared,
) -> Result<Vec<u8>, EdgeError> {
    let env = envelope(declared)?;
    let appended = match params.map(RawValue::get) {
        None => {
            let text = std::str::from_utf8(body).map_err(|_| invalid("message"))?;
            let message = text.trim();
            json::append_member(body, message, &format!(r#""params":{{"_meta":{{{env}}}}}"#))
        }
        Some(p) if json::is_object(p) => {
            let meta = member(p, "_meta")
                .map_err(|_| invalid("a key appears more than once in params"))?;
            match meta.map(RawValue::get) {
                Some(m) if json::is_object(m) => json::append_member(body, m, &env),
                Some(_) => return Err(invalid("params._meta must be an object")),
                None => json::append_member(body, p, &format!(r#""_meta":{{{env}}}"#)),
            }
        }
        Some(_) => return Err(invalid("params must be an object")),
    };
    appended.ok_or_else(|| invalid("message"))
}

/// The answer in a legacy client's revision, or `None` when it needs no change.
/// `initialize`: the revision an answered `initialize` negotiated (the answer is a
/// `DiscoverResult` to turn into its `InitializeResult`).
/// `asks`: the client can be asked (see [`client_capabilities`]): an `input_required` result
/// stays as it is, for the bridge to ask.
pub fn to_legacy(mut message: Value, initialize: Option<&str>, asks: bool) -> Option<Value> {
    let result = message.get_mut("result")?.as_object_mut()?;
    if let Some(version) = initialize {
        if result.get("supportedVersions").is_some() {
            let mut init = json!({
                "protocolVersion": version,
                "capabilities": server_capabilities(result.get("capabilities")),
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
        if asks {
            return None;
        }
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        return Some(json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": code::INTERNAL,
            "message": "The server asked for input from the client (elicitation, sampling or roots), which cannot be bridged to this client's protocol revision"
        }}));
    }
    let mut changed = false;
    for field in ["resultType", "ttlMs", "cacheScope"] {
        changed |= result.remove(field).is_some();
    }
    changed.then_some(message)
}

/// The most of one message held for conversion.
pub const MAX_CONVERTED: usize = 64 * 1024;

/// [`to_legacy`] over an answer's messages (`initialize`: see there).
pub struct ToLegacy {
    pub initialize: Option<String>,
    /// The client can be asked for input (`input_required` passes as it is).
    pub asks: bool,
}

impl Transform for ToLegacy {
    fn limit(&self) -> usize {
        MAX_CONVERTED
    }

    fn message(&mut self, data: &[u8]) -> Rewritten {
        serde_json::from_slice::<Value>(data)
            .ok()
            .and_then(|m| to_legacy(m, self.initialize.as_deref(), self.asks))
            .map_or(Rewritten::Same, |m| {
                Rewritten::New(m.to_string().into_bytes())
            })
    }
}

/// What an `input_required` result asks of the client: each key's request (`method`,
/// `params`), and the `requestState` the retry echoes.
#[derive(Debug, Clone, PartialEq)]
pub struct InputRequired {
    pub requests: Vec<(String, Value)>,
    pub state: Option<Value>,
}

/// The methods a 2026-07-28 server may ask a client in `inputRequests`.
const ASKED: &[&str] = &["elicitation/create", "sampling/createMessage", "roots/list"];

/// The questions of an `input_required` result (`None`: another message, or a question
/// that is not a request a legacy client knows).
pub fn input_required(message: &Value) -> Option<InputRequired> {
    let result = message.get("result")?;
    if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
        return None;
    }
    let mut requests = Vec::new();
    for (key, request) in result.get("inputRequests")?.as_object()? {
        let method = request.get("method").and_then(Value::as_str)?;
        if !ASKED.contains(&method) {
            return None;
        }
        let params = request.get("params").cloned().unwrap_or_else(|| json!({}));
        requests.push((key.clone(), json!({"method": method, "params": params})));
    }
    Some(InputRequired {
        requests,
        state: result.get("requestState").cloned(),
    })
}

/// The retry of a request answered `input_required`: the request (`body`, as it was sent)
/// with `params.inputResponses` and the `requestState` echoed; every other member as it was.
pub fn with_input_responses(
    body: &[u8],
    responses: Map<String, Value>,
    state: Option<Value>,
) -> Result<Vec<u8>, EdgeError> {
    let mut message: Value = serde_json::from_slice(body).map_err(|_| invalid("message"))?;
    let params = message
        .get_mut("params")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| invalid("params"))?;
    params.insert("inputResponses".into(), Value::Object(responses));
    match state {
        Some(state) => params.insert("requestState".into(), state),
        None => params.remove("requestState"),
    };
    serde_json::to_vec(&message).map_err(|_| invalid("message"))
}

/// A 2026-07-28 request as a process initialised in a 2025 revision takes it: without the
/// envelope in `params._meta` (a Python server refuses a request carrying it on a 2025
/// connection). Only `_meta` is rewritten (its other keys kept, their order not). `params`
/// is the message's own `params` (a slice of `text`). `None` when `params` repeats `_meta`:
/// which copy the process reads is unknown, so the request is refused (`mcp/README.md`).
pub fn strip_envelope<'t>(
    text: &'t str,
    params: Option<&RawValue>,
) -> Option<std::borrow::Cow<'t, str>> {
    let meta = match params.map(|p| member(p.get(), "_meta")) {
        None | Some(Ok(None)) => return Some(text.into()),
        Some(Err(_)) => return None,
        Some(Ok(Some(meta))) => meta,
    };
    // A key may be written with escapes (`io.modelcontextprotocol\/…`, `\u0069o…`).
    let raw = meta.get();
    if !raw.contains("io.modelcontextprotocol") && !raw.contains('\\') {
        return Some(text.into());
    }
    let Ok(mut map) = serde_json::from_str::<Map<String, Value>>(raw) else {
        return Some(text.into());
    };
    map.retain(|k, _| !k.starts_with(ENVELOPE_PREFIX));
    let with = Value::Object(map).to_string();
    Some(json::splice_str(text, &[(raw, &with)]).map_or(text.into(), Into::into))
}

/// `server/discover` (with `id`) answered from an `initialize` result (`init`, JSON text).
pub fn discover_answer(id: &RawValue, init: &str) -> String {
    let get = |key: &str| {
        member(init, key)
            .ok()
            .flatten()
            .map(|v| v.get().to_string())
    };
    let mut out = format!(
        r#"{{"resultType":"complete","supportedVersions":["{MODERN_VERSION}"],"capabilities":{}"#,
        get("capabilities").unwrap_or_else(|| "{}".into())
    );
    if let Some(i) = get("instructions") {
        out.push_str(&format!(r#","instructions":{i}"#));
    }
    out.push_str(r#","ttlMs":0,"cacheScope":"private""#);
    if let Some(info) = get("serverInfo") {
        out.push_str(&format!(
            r#","_meta":{{"io.modelcontextprotocol/serverInfo":{info}}}"#
        ));
    }
    out.push('}');
    super::jsonrpc::result(id.get(), &out)
}

/// Methods whose 2026-07-28 results must carry cache hints (`ttlMs`, `cacheScope`).
pub const CACHEABLE: &[&str] = &[
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// A 2026-07-28 result as the revision requires it, from a server that answered in a 2025
/// one: `resultType: "complete"`, and on cacheable results `ttlMs: 0` and `cacheScope:
/// "private"` (the SDK servers' own defaults), each only where the server left it out.
pub fn mark_modern(answer: String, cacheable: bool) -> String {
    #[derive(Deserialize)]
    struct Answer<'a> {
        #[serde(borrow)]
        result: Option<&'a RawValue>,
    }
    let Ok(Answer {
        result: Some(result),
    }) = serde_json::from_str::<Answer>(&answer)
    else {
        return answer;
    };
    if !json::is_object(result.get()) {
        return answer;
    }
    // A repeated key counts as present: nothing is added beside it.
    let absent = |key: &str| matches!(member(result.get(), key), Ok(None));
    let mut add = Vec::new();
    if absent("resultType") {
        add.push(r#""resultType":"complete""#);
    }
    if cacheable && absent("ttlMs") {
        add.push(r#""ttlMs":0"#);
    }
    if cacheable && absent("cacheScope") {
        add.push(r#""cacheScope":"private""#);
    }
    if add.is_empty() {
        return answer;
    }
    let Some(rest) = result.get().trim_start().strip_prefix('{') else {
        return answer;
    };
    let empty = rest.trim_start().starts_with('}');
    let with = format!("{{{}{}{rest}", add.join(","), if empty { "" } else { "," });
    json::splice_str(&answer, &[(result.get(), &with)]).unwrap_or_else(|| answer.clone())
}

#[cfg(test)]
mod tests;
