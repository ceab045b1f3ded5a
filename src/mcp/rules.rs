//! Era classification and the 2026-07-28 header/body rules (`mcp-protocol.md` §A–B).
//!
//! The era comes from the body: a request whose `params._meta` carries
//! `io.modelcontextprotocol/protocolVersion` is modern, whatever its headers say, so a proxy
//! that stripped a header cannot move it to the legacy path. Headers are then cross-checked
//! against the body. A body without a claim is legacy unless its `MCP-Protocol-Version`
//! header names a non-legacy revision, in which case header and body disagree.

use http::HeaderMap;
use serde_json::Value;

use super::headers::{self, HeaderProblem};
use super::peek::{self, Body, Field, Message};
use super::target::{Kind, Target};
pub use super::versions::VersionPolicy;
use super::EraLabel;
use crate::error::RoutingHeader::{
    self, Method as METHOD, Name as NAME, ProtocolVersion as PROTOCOL_VERSION,
};
pub use crate::error::{EdgeError, Rejection};

/// Which protocol generation a request belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Era {
    /// 2026-07-28 (or a later stateless revision the route accepts).
    Modern(String),
    /// 2024-11-05 … 2025-11-25: `initialize`, sessions, HTTP+SSE.
    Legacy,
}

impl Era {
    pub fn label(&self) -> EraLabel {
        match self {
            Era::Modern(_) => EraLabel::Modern,
            Era::Legacy => EraLabel::Legacy,
        }
    }
}

/// What the edge learned from a valid POST body.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub era: Era,
    pub method: Option<String>,
    pub id: Option<Value>,
    /// The decoded `Mcp-Name` subject (tool, prompt, resource URI, task id), for logs.
    pub name: Option<String>,
    /// A modern request whose client declared the Tasks extension.
    pub tasks: bool,
    /// The tool, prompt or resource the request names (for the route's policy).
    pub target: Option<Target>,
    /// The body is a batch.
    pub batch: bool,
    /// The message has an `id`, readable or not (one over 1 KiB is not kept).
    pub has_id: bool,
}

/// The entry a request names: `tools/call` and `prompts/get` their `name`,
/// `resources/read` and `resources/subscribe` their `uri`, `completion/complete` its
/// `ref`. A name that is not a string names nothing (the server refuses such a request).
fn target(method: Option<&str>, m: &Message<'_>) -> Option<Target> {
    let text = |f: Option<&Field<'_>>| f.and_then(Field::as_str).map(str::to_owned);
    let (kind, value) = match method? {
        "tools/call" => (Kind::Tool, text(m.params.name.as_ref())),
        "prompts/get" => (Kind::Prompt, text(m.params.name.as_ref())),
        "resources/read" | "resources/subscribe" => (Kind::Resource, text(m.params.uri.as_ref())),
        "completion/complete" => {
            let [kind, name, uri] = &**m.params.reference.as_ref()?;
            match kind.as_ref().and_then(Field::as_str)? {
                "ref/prompt" => (Kind::Prompt, text(name.as_ref())),
                "ref/resource" => (Kind::Resource, text(uri.as_ref())),
                _ => return None,
            }
        }
        _ => return None,
    };
    Some(Target {
        kind,
        value: value?,
    })
}

/// Which body field `Mcp-Name` mirrors for a method (spec table; `taskId` from the Tasks
/// extension).
pub fn name_source<'m, 'a>(method: &str, m: &'m Message<'a>) -> Option<&'m Field<'a>> {
    match method {
        "tools/call" | "prompts/get" => m.params.name.as_ref(),
        "resources/read" => m.params.uri.as_ref(),
        "tasks/get" | "tasks/update" | "tasks/cancel" => m.params.task_id.as_ref(),
        _ => None,
    }
}

/// Classify and validate one POST body against its headers.
pub fn check_post(
    headers: &HeaderMap,
    body: &[u8],
    policy: &VersionPolicy,
) -> Result<Verdict, Rejection> {
    if peek::is_batch(body) {
        let header_version = header(headers, PROTOCOL_VERSION, None)?;
        refuse_batch_unread(header_version.as_deref(), policy)?;
    }
    let parsed = peek::peek(body).map_err(|e| Rejection {
        error: EdgeError::ParseError {
            detail: e.to_string(),
        },
        id: None,
    })?;
    match parsed {
        Body::Batch(batch) => {
            let header_version = header(headers, PROTOCOL_VERSION, None)?;
            let modern_header = header_version
                .as_deref()
                .filter(|v| !super::is_legacy_version(v));
            check_batch(&batch, modern_header, header_version.as_deref(), policy)
        }
        Body::Single(m) => {
            // The id goes into the refusal only: not built for a request that passes.
            let header_version = header(headers, PROTOCOL_VERSION, None).map_err(|mut r| {
                r.id = m.id_value();
                r
            })?;
            check_single(headers, &m, header_version.as_deref(), policy)
        }
    }
}

/// What a single message the rules refused still says, so the refusal's record (span,
/// access log, operation metric) names what was refused: its method, id and the entry it
/// names, and its era (the body's claim; without one, the header's revision when it is not
/// a legacy one). Nothing for a body that is no readable single message, or whose claim is
/// not a string (its revision unknown). Runs only on the refusal's path: a second peek.
pub fn refused(headers: &HeaderMap, body: &[u8]) -> Option<Verdict> {
    let Ok(Body::Single(m)) = peek::peek(body) else {
        return None;
    };
    if m.not_an_object {
        return None;
    }
    let era = match &m.params.claim {
        Some(claim) => Era::Modern(claim.as_str()?.to_owned()),
        None => match header(headers, PROTOCOL_VERSION, None).ok().flatten() {
            Some(v) if !super::is_legacy_version(&v) => Era::Modern(v),
            _ => Era::Legacy,
        },
    };
    let method = m.method();
    Some(Verdict {
        era,
        method: method.map(str::to_owned),
        id: m.id_value(),
        name: None,
        tasks: false,
        target: target(method, &m),
        batch: false,
        has_id: m.id.is_some(),
    })
}

fn check_batch(
    batch: &peek::Batch,
    modern_header: Option<&str>,
    header_version: Option<&str>,
    policy: &VersionPolicy,
) -> Result<Verdict, Rejection> {
    if batch.len == 0 {
        return Err(invalid_batch("empty batch"));
    }
    if modern_header.is_some() || batch.any_claim {
        return Err(invalid_batch(BATCH_IS_LEGACY));
    }
    if !policy.accepts_legacy() {
        return Err(policy.unsupported(header_version.map(str::to_owned)).into());
    }
    Ok(Verdict {
        era: Era::Legacy,
        method: None,
        id: None,
        name: None,
        tasks: false,
        target: None,
        batch: true,
        has_id: false,
    })
}

const BATCH_IS_LEGACY: &str = "batches are not allowed in protocol revision 2026-07-28";

fn invalid_batch(detail: &str) -> Rejection {
    EdgeError::InvalidRequest {
        detail: detail.into(),
    }
    .into()
}

/// A batch the route would refuse whatever its content is refused before it is parsed:
/// a 2026-07-28 header, or a route that admits no legacy revision.
fn refuse_batch_unread(
    header_version: Option<&str>,
    policy: &VersionPolicy,
) -> Result<(), Rejection> {
    if header_version.is_some_and(|v| !super::is_legacy_version(v)) {
        return Err(invalid_batch(BATCH_IS_LEGACY));
    }
    if !policy.accepts_legacy() {
        return Err(policy.unsupported(header_version.map(str::to_owned)).into());
    }
    Ok(())
}

fn check_single(
    headers: &HeaderMap,
    m: &Message<'_>,
    header_version: Option<&str>,
    policy: &VersionPolicy,
) -> Result<Verdict, Rejection> {
    let id = m.id_value();
    let reject = |error: EdgeError| Rejection {
        error,
        id: id.clone(),
    };
    let modern_header = header_version.filter(|v| !super::is_legacy_version(v));

    if m.not_an_object {
        return Err(reject(EdgeError::InvalidRequest {
            detail: "body is not a JSON-RPC object".into(),
        }));
    }
    if m.is_response && m.method.is_none() {
        if m.params.claim.is_some() || modern_header.is_some() {
            return Err(reject(EdgeError::InvalidRequest {
                detail: "JSON-RPC responses cannot be posted in protocol revision 2026-07-28"
                    .into(),
            }));
        }
        return legacy(m, header_version, policy, id);
    }

    let Some(claim) = &m.params.claim else {
        if let Some(v) = modern_header {
            if !policy.accepts_modern(v) {
                return Err(reject(policy.unsupported(Some(v.to_owned()))));
            }
            // What a 2026-07-28 server answers: the envelope is missing (-32602).
            let missing = if m.params.has_meta {
                peek::META_PROTOCOL_VERSION
            } else {
                "_meta"
            };
            return Err(reject(EdgeError::InvalidMeta {
                detail: format!("the MCP-Protocol-Version header names protocol revision {v}, but the request is missing the required per-request envelope key(s): {missing}"),
            }));
        }
        return legacy(m, header_version, policy, id);
    };

    modern(headers, m, claim, header_version, policy, id)
}

/// A 2026-07-28 message: its envelope, then its routing headers against the body.
fn modern(
    headers: &HeaderMap,
    m: &Message<'_>,
    claim: &Field<'_>,
    header_version: Option<&str>,
    policy: &VersionPolicy,
    id: Option<Value>,
) -> Result<Verdict, Rejection> {
    let reject = |error: EdgeError| Rejection {
        error,
        id: id.clone(),
    };
    let (version, method) = envelope(m, claim, id.is_some()).map_err(reject)?;
    match header_version {
        None => return Err(reject(missing(PROTOCOL_VERSION))),
        Some(h) if h != version => {
            return Err(reject(mismatch(
                PROTOCOL_VERSION,
                format!("header value '{h}' does not match body value '{version}'"),
            )))
        }
        Some(_) => {}
    }
    if !policy.accepts_modern(version) {
        return Err(reject(policy.unsupported(Some(version.to_owned()))));
    }
    let name = routing_headers(headers, m, method, id.as_ref())?;
    Ok(Verdict {
        era: Era::Modern(version.to_owned()),
        method: Some(method.to_owned()),
        id,
        name,
        tasks: m.params.tasks,
        target: target(Some(method), m),
        batch: false,
        has_id: m.id.is_some(),
    })
}

/// The version claim, `jsonrpc`, `method` and `id` of a modern message: (version, method).
fn envelope<'m>(
    m: &'m Message<'_>,
    claim: &'m Field<'_>,
    id_readable: bool,
) -> Result<(&'m str, &'m str), EdgeError> {
    let invalid = |detail: &str| EdgeError::InvalidRequest {
        detail: detail.into(),
    };
    let Some(version) = claim.as_str() else {
        return Err(EdgeError::InvalidMeta {
            detail: format!("{}: not a string", peek::META_PROTOCOL_VERSION),
        });
    };
    if m.jsonrpc.as_ref().and_then(Field::as_str) != Some("2.0") {
        return Err(invalid("jsonrpc must be \"2.0\""));
    }
    let Some(method) = m.method() else {
        return Err(invalid("method must be a string"));
    };
    if m.id.is_some() && !id_readable {
        return Err(invalid("id must be a string or a number"));
    }
    Ok((version, method))
}

/// `Mcp-Method` and `Mcp-Name` against the body; returns the name for the logs.
/// Notifications have no header requirements in 2026-07-28; what is present is checked.
fn routing_headers(
    headers: &HeaderMap,
    m: &Message<'_>,
    method: &str,
    id: Option<&Value>,
) -> Result<Option<String>, Rejection> {
    let reject = |error: EdgeError| Rejection {
        error,
        id: id.cloned(),
    };
    let is_request = m.id.is_some();
    match header(headers, METHOD, id)? {
        None if is_request => return Err(reject(missing(METHOD))),
        Some(h) if h != method => {
            return Err(reject(mismatch(
                METHOD,
                format!("header value '{h}' does not match body value '{method}'"),
            )))
        }
        _ => {}
    }
    let Some(body_name) = name_source(method, m).and_then(Field::as_str) else {
        return Ok(None);
    };
    match header(headers, NAME, id)? {
        None if is_request => Err(reject(missing(NAME))),
        None => Ok(None),
        Some(h) if h != body_name => Err(reject(mismatch(
            NAME,
            format!("header value '{h}' does not match body value '{body_name}'"),
        ))),
        Some(_) => Ok(Some(body_name.to_owned())),
    }
}

fn legacy(
    m: &Message<'_>,
    header_version: Option<&str>,
    policy: &VersionPolicy,
    id: Option<Value>,
) -> Result<Verdict, Rejection> {
    if !policy.accepts_legacy() {
        let requested = match m.method() {
            Some("initialize") => m.params.protocol_version.as_ref().and_then(Field::as_str),
            _ => header_version,
        };
        return Err(Rejection {
            error: policy.unsupported(requested.map(str::to_owned)),
            id,
        });
    }
    Ok(Verdict {
        era: Era::Legacy,
        method: m.method().map(str::to_owned),
        id,
        name: None,
        tasks: false,
        target: target(m.method(), m),
        batch: false,
        has_id: m.id.is_some(),
    })
}

/// A decoded single header value, or the -32020 rejection for a repeated or undecodable one.
fn header(
    headers: &HeaderMap,
    name: RoutingHeader,
    id: Option<&Value>,
) -> Result<Option<String>, Rejection> {
    let to_rejection = |p: HeaderProblem| Rejection {
        error: mismatch(name, format!("{} header {}", name.display(), p.describe())),
        id: id.cloned(),
    };
    let Some(raw) = headers::single(headers, name.header()).map_err(to_rejection)? else {
        return Ok(None);
    };
    let value = match name {
        NAME => headers::decode_value(raw).map(|v| v.into_owned()),
        PROTOCOL_VERSION | METHOD => headers::plain_value(raw).map(str::to_owned),
    };
    value.map(Some).map_err(to_rejection)
}

fn mismatch(header: RoutingHeader, detail: String) -> EdgeError {
    let detail = if detail.starts_with(header.display()) {
        detail
    } else {
        format!("{} {detail}", header.display())
    };
    EdgeError::HeaderMismatch { header, detail }
}

fn missing(header: RoutingHeader) -> EdgeError {
    mismatch(header, "header is missing".into())
}

#[cfg(test)]
mod tests;
