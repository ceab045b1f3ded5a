//! What a client is told of an [`EdgeError`]: its message, its `data`, the JSON-RPC body with
//! the request's id, and the headers of its response (the marker and the condition's own).

use bytes::Bytes;
use serde_json::{json, Value};

use super::{EdgeError, ERROR_HEADER};
use crate::mcp::jsonrpc;

impl EdgeError {
    #[allow(clippy::too_many_lines)] // One arm per condition: the catalogue of messages.
    pub fn message(&self) -> String {
        match self {
            EdgeError::HeaderMismatch { detail, .. } => format!("Header mismatch: {detail}"),
            EdgeError::UnsupportedVersion { requested, .. } => match requested {
                Some(v) => format!("Unsupported protocol version: {v}"),
                None => "Unsupported protocol version".to_string(),
            },
            EdgeError::OriginRejected { origin } => format!("Invalid Origin: {origin}"),
            EdgeError::ParseError { detail } => format!("Parse error: {detail}"),
            EdgeError::InvalidRequest { detail } => format!("Invalid Request: {detail}"),
            EdgeError::InvalidMeta { detail } => format!("Invalid params: {detail}"),
            EdgeError::BodyTooLarge { limit } => {
                format!("Request body exceeds the edge limit of {limit} bytes")
            }
            EdgeError::HeadersTooLarge { limit } => {
                format!("Request headers exceed the edge limit of {limit} bytes")
            }
            EdgeError::UnsupportedMediaType { content_type } => format!(
                "Unsupported Content-Type '{content_type}': MCP requests must be application/json"
            ),
            EdgeError::NoRoute { path } => format!("No MCP endpoint at {path}"),
            EdgeError::MethodNotAllowed { method, .. } => {
                format!("HTTP method {method} is not allowed on this MCP endpoint")
            }
            EdgeError::ConnectFailed { detail } => {
                format!("No upstream member accepted the connection: {detail}")
            }
            EdgeError::UpstreamTimeout { detail } => format!("Upstream timed out: {detail}"),
            EdgeError::UpstreamError { detail } => format!("Upstream failed: {detail}"),
            EdgeError::ClientError { detail } => format!("Bad request body: {detail}"),
            EdgeError::Internal { detail } => format!("Internal edge error: {detail}"),
            EdgeError::SessionUnknown { reason } => {
                format!("Session not found: the session token is not valid ({reason}); initialize a new session")
            }
            EdgeError::SessionExpired => {
                "Session not found: the session token has expired; initialize a new session".to_string()
            }
            EdgeError::SessionForeign => {
                "Session not found: the session belongs to another credential; initialize a new session".to_string()
            }
            EdgeError::SessionMemberGone { member } => format!(
                "Session not found: the server holding it ({member}) is gone; initialize a new session"
            ),
            EdgeError::SessionMissing => "Missing session parameter on the messages endpoint".to_string(),
            EdgeError::NoHealthyMember { pool } => format!("No healthy upstream member in pool '{pool}'"),
            EdgeError::HostRejected { host } => format!("Host '{host}' is not served here"),
            EdgeError::Overloaded { limit } => format!("The edge is at its {limit} limit; retry later"),
            EdgeError::BodyTimeout => "The request body was not received in time".to_string(),
            EdgeError::TaskUnknown { reason } => {
                format!("Failed to retrieve task: Task not found ({reason})")
            }
            EdgeError::TlsRequired => {
                "This port speaks TLS: send the request over https://".to_string()
            }
            EdgeError::Unauthorized { reason, .. } => format!("Unauthorized: {reason}"),
            EdgeError::InsufficientScope { missing, .. } => {
                format!("Forbidden: the call needs the scopes '{missing}' the token does not have")
            }
            EdgeError::RateLimited { retry_after_ms, .. } => {
                format!("Rate limit exceeded: retry in {retry_after_ms} ms")
            }
            EdgeError::BatchRefused => {
                "Invalid Request: batches are not accepted on this route (its policy or scopes check each call)".to_string()
            }
            EdgeError::StdioBusy => {
                "mcp-edge: the stdio server is not reading its input; try again later".to_string()
            }
            EdgeError::StdioUnavailable { detail } if detail.is_empty() => {
                "mcp-edge: the stdio pool has no process for the request; try again later".to_string()
            }
            EdgeError::StdioUnavailable { detail } => detail.clone(),
            EdgeError::StdioExited => STDIO_EXITED.to_string(),
            EdgeError::StdioUnresponsive => STDIO_UNRESPONSIVE.to_string(),
            EdgeError::ReplicaUnknown => {
                "mcp-edge: the session's replica is not known here yet; try again shortly".to_string()
            }
            EdgeError::PoolBusy { pool, waited_ms: 0 } => format!(
                "Every member of pool '{pool}' is at its limit and the queue is full; retry later"
            ),
            EdgeError::PoolBusy { pool, waited_ms } => format!(
                "Every member of pool '{pool}' stayed at its limit for {waited_ms} ms; retry later"
            ),
            EdgeError::ExchangeFailed { pool } => format!(
                "The authorization server did not exchange the caller's token for pool '{pool}'; retry later"
            ),
            EdgeError::ExchangeTimeout { pool } => format!(
                "The authorization server did not exchange the caller's token for pool '{pool}' in time; retry later"
            ),
            EdgeError::HopRefused { reason } => {
                format!("Forbidden: this listener serves only requests other replicas of the fleet signed ({reason})")
            }
        }
    }

    fn data(&self) -> Option<Value> {
        match self {
            EdgeError::UnsupportedVersion {
                supported,
                requested,
            } => {
                let mut data = json!({ "supported": supported });
                if let Some(r) = requested {
                    data["requested"] = json!(r);
                }
                Some(data)
            }
            EdgeError::HeaderMismatch { header, .. } => Some(json!({ "header": header.name() })),
            EdgeError::RateLimited {
                retry_after_ms,
                limit,
            } => Some(json!({ "retryAfterMs": retry_after_ms, "limit": limit, "remaining": 0 })),
            _ => None,
        }
    }

    /// The JSON-RPC error body. `id` is the request's id, or `null` when the edge could not
    /// read one (or, for Origin rejections, deliberately: the spec's example carries no id).
    pub fn body(&self, id: Option<&Value>) -> Bytes {
        let id = match self {
            EdgeError::OriginRejected { .. } => None,
            _ => id,
        };
        self.body_with_id_text(&jsonrpc::id_text(id))
    }

    /// [`EdgeError::body`] with the id as JSON text (as a stdio server has it).
    pub fn body_with_id_text(&self, id: &str) -> Bytes {
        let id = match self {
            EdgeError::OriginRejected { .. } => "null",
            _ => id,
        };
        let data = self.data().map(|d| d.to_string());
        Bytes::from(jsonrpc::error(
            id,
            self.code(),
            &self.message(),
            data.as_deref(),
        ))
    }

    /// The response headers of this error besides its framing (`Content-Type`,
    /// `Content-Length`): the marker, and `Allow`, `Retry-After` or `WWW-Authenticate`
    /// where the condition has one. Every writer of an edge error sets exactly these.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = vec![(ERROR_HEADER, self.kind().as_str().to_string())];
        match self {
            EdgeError::MethodNotAllowed { allow, .. } => headers.push(("allow", allow.to_string())),
            // Load or a start that passes: a client may try again shortly.
            EdgeError::Overloaded { .. }
            | EdgeError::PoolBusy { .. }
            | EdgeError::StdioBusy
            | EdgeError::ReplicaUnknown
            | EdgeError::ExchangeFailed { .. }
            | EdgeError::ExchangeTimeout { .. }
            | EdgeError::StdioUnavailable { .. } => headers.push(("retry-after", "1".into())),
            EdgeError::RateLimited {
                retry_after_ms,
                limit,
            } => {
                // Whole seconds, rounded up (HTTP has no finer `Retry-After`).
                let seconds = retry_after_ms.div_ceil(1000).max(1);
                headers.push(("retry-after", seconds.to_string()));
                headers.push(("ratelimit-limit", limit.to_string()));
                headers.push(("ratelimit-remaining", "0".into()));
            }
            EdgeError::Unauthorized { challenge, .. }
            | EdgeError::InsufficientScope { challenge, .. } => {
                headers.push(("www-authenticate", challenge.clone()))
            }
            _ => {}
        }
        headers
    }
}

/// What a client hears when a stdio server's process ended before answering it.
pub const STDIO_EXITED: &str =
    "mcp-edge: the stdio server process ended before answering; the request may have run";
/// What a client hears when a stdio server stopped answering while it waited.
pub const STDIO_UNRESPONSIVE: &str =
    "mcp-edge: the stdio server did not answer a ping and is restarted; the request may have run";
