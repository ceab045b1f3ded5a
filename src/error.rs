//! Errors the edge raises itself, and the one place that turns them into a response.
//!
//! Upstream errors never pass through here: they reach the client byte for byte. Every
//! variant names a condition, carries the JSON-RPC id of the request when the edge could read
//! it, and maps to exactly one HTTP status, JSON-RPC code and `x-mcp-edge-error` kind.

use bytes::Bytes;
use serde_json::{json, Value};

/// Response header that marks a response the edge produced (not the upstream).
pub const ERROR_HEADER: &str = "x-mcp-edge-error";

/// JSON-RPC error codes used by the edge (MCP 2026-07-28 numbering).
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    pub const SERVER_ERROR: i64 = -32000;
    /// "Session not found", as the TypeScript SDK answers it.
    pub const SESSION_NOT_FOUND: i64 = -32001;
    pub const HEADER_MISMATCH: i64 = -32020;
    pub const UNSUPPORTED_VERSION: i64 = -32022;
}

/// Every kind of error the edge can raise. The `kind()` string is the metric label and the
/// value of the marker header, so it is bounded and stable.
#[derive(Debug, Clone, PartialEq)]
pub enum EdgeError {
    /// A routing header is missing, duplicated, undecodable or differs from the body.
    HeaderMismatch {
        header: &'static str,
        detail: String,
    },
    /// The body's protocol version is not accepted by the route.
    UnsupportedVersion {
        supported: Vec<String>,
        requested: Option<String>,
    },
    /// `Origin` present and not on the route's allowlist.
    OriginRejected { origin: String },
    /// Body is not JSON.
    ParseError { detail: String },
    /// JSON but not an acceptable JSON-RPC message (batch or response on the modern path,
    /// missing `jsonrpc`/`method`, bad id).
    InvalidRequest { detail: String },
    /// The `_meta` envelope of a modern request is malformed.
    InvalidMeta { detail: String },
    /// Body larger than `limits.max_body_bytes`.
    BodyTooLarge { limit: usize },
    /// Request headers larger than `limits.max_header_bytes`.
    HeadersTooLarge { limit: usize },
    /// `Content-Type` of a POST is not JSON.
    UnsupportedMediaType { content_type: String },
    /// No route matches the request path.
    NoRoute { path: String },
    /// HTTP method the MCP endpoint does not serve.
    MethodNotAllowed { method: String },
    /// Every pool member refused or could not be reached.
    ConnectFailed { detail: String },
    /// The upstream did not answer within `timeouts.upstream_read_ms`.
    UpstreamTimeout { detail: String },
    /// The upstream failed in another way (reset, garbage, closed early).
    UpstreamError { detail: String },
    /// The client went away or sent a broken request body.
    ClientError { detail: String },
    /// A bug or resource failure inside the edge.
    Internal { detail: String },
    /// A session token that does not open (malformed, forged, unknown key, other pool).
    SessionUnknown { reason: &'static str },
    /// A session token older than `sessions.max_age_seconds`.
    SessionExpired,
    /// A session token bound to another credential.
    SessionForeign,
    /// The token's member left the pool or no longer accepts connections.
    SessionMemberGone { member: String },
    /// An HTTP+SSE message POST without its session parameter.
    SessionMissing,
    /// Every member of the pool is unhealthy (or the pool is empty).
    NoHealthyMember { pool: String },
    /// `Host` is not on the route's allowlist (DNS rebinding).
    HostRejected { host: String },
    /// `limits.max_concurrent_requests` or `limits.max_streams` reached.
    Overloaded { limit: &'static str },
    /// The client stopped sending its body for longer than `timeouts.request_body_ms`.
    BodyTimeout,
}

impl EdgeError {
    /// Stable, bounded name: metric label and marker header value.
    pub fn kind(&self) -> &'static str {
        match self {
            EdgeError::HeaderMismatch { header, .. } => match *header {
                crate::mcp::headers::PROTOCOL_VERSION => "header_mismatch_protocol_version",
                crate::mcp::headers::METHOD => "header_mismatch_method",
                crate::mcp::headers::NAME => "header_mismatch_name",
                _ => "header_mismatch",
            },
            EdgeError::UnsupportedVersion { .. } => "unsupported_version",
            EdgeError::OriginRejected { .. } => "origin_rejected",
            EdgeError::ParseError { .. } => "parse_error",
            EdgeError::InvalidRequest { .. } => "invalid_request",
            EdgeError::InvalidMeta { .. } => "invalid_meta",
            EdgeError::BodyTooLarge { .. } => "body_too_large",
            EdgeError::HeadersTooLarge { .. } => "headers_too_large",
            EdgeError::UnsupportedMediaType { .. } => "unsupported_media_type",
            EdgeError::NoRoute { .. } => "no_route",
            EdgeError::MethodNotAllowed { .. } => "method_not_allowed",
            EdgeError::ConnectFailed { .. } => "connect_failed",
            EdgeError::UpstreamTimeout { .. } => "upstream_timeout",
            EdgeError::UpstreamError { .. } => "upstream_error",
            EdgeError::ClientError { .. } => "client_error",
            EdgeError::Internal { .. } => "internal",
            EdgeError::SessionUnknown { .. } => "session_unknown",
            EdgeError::SessionExpired => "session_expired",
            EdgeError::SessionForeign => "session_foreign",
            EdgeError::SessionMemberGone { .. } => "session_member_gone",
            EdgeError::SessionMissing => "session_missing",
            EdgeError::NoHealthyMember { .. } => "no_healthy_member",
            EdgeError::HostRejected { .. } => "host_rejected",
            EdgeError::Overloaded { .. } => "overloaded",
            EdgeError::BodyTimeout => "body_timeout",
        }
    }

    /// Every kind, for pre-registering metric series and for docs/tests.
    pub const KINDS: &'static [&'static str] = &[
        "header_mismatch_protocol_version",
        "header_mismatch_method",
        "header_mismatch_name",
        "unsupported_version",
        "origin_rejected",
        "parse_error",
        "invalid_request",
        "invalid_meta",
        "body_too_large",
        "headers_too_large",
        "unsupported_media_type",
        "no_route",
        "method_not_allowed",
        "connect_failed",
        "upstream_timeout",
        "upstream_error",
        "client_error",
        "internal",
        "session_unknown",
        "session_expired",
        "session_foreign",
        "session_member_gone",
        "session_missing",
        "no_healthy_member",
        "host_rejected",
        "overloaded",
        "body_timeout",
    ];

    pub fn status(&self) -> u16 {
        match self {
            EdgeError::HeaderMismatch { .. }
            | EdgeError::UnsupportedVersion { .. }
            | EdgeError::ParseError { .. }
            | EdgeError::InvalidRequest { .. }
            | EdgeError::InvalidMeta { .. }
            | EdgeError::SessionMissing
            | EdgeError::ClientError { .. } => 400,
            EdgeError::SessionUnknown { .. }
            | EdgeError::SessionExpired
            | EdgeError::SessionForeign
            | EdgeError::SessionMemberGone { .. } => 404,
            EdgeError::OriginRejected { .. } => 403,
            EdgeError::NoRoute { .. } => 404,
            EdgeError::MethodNotAllowed { .. } => 405,
            EdgeError::BodyTooLarge { .. } => 413,
            EdgeError::UnsupportedMediaType { .. } => 415,
            EdgeError::HeadersTooLarge { .. } => 431,
            EdgeError::ConnectFailed { .. } | EdgeError::UpstreamError { .. } => 502,
            EdgeError::UpstreamTimeout { .. } => 504,
            EdgeError::NoHealthyMember { .. } | EdgeError::Overloaded { .. } => 503,
            EdgeError::HostRejected { .. } => 403,
            EdgeError::BodyTimeout => 408,
            EdgeError::Internal { .. } => 500,
        }
    }

    pub fn code(&self) -> i64 {
        match self {
            EdgeError::HeaderMismatch { .. } => code::HEADER_MISMATCH,
            EdgeError::UnsupportedVersion { .. } => code::UNSUPPORTED_VERSION,
            EdgeError::ParseError { .. } => code::PARSE_ERROR,
            EdgeError::InvalidRequest { .. }
            | EdgeError::ClientError { .. }
            | EdgeError::SessionMissing => code::INVALID_REQUEST,
            EdgeError::SessionUnknown { .. }
            | EdgeError::SessionExpired
            | EdgeError::SessionForeign
            | EdgeError::SessionMemberGone { .. } => code::SESSION_NOT_FOUND,
            EdgeError::InvalidMeta { .. } => code::INVALID_PARAMS,
            EdgeError::ConnectFailed { .. }
            | EdgeError::NoHealthyMember { .. }
            | EdgeError::Internal { .. }
            | EdgeError::UpstreamTimeout { .. }
            | EdgeError::UpstreamError { .. } => code::INTERNAL,
            EdgeError::OriginRejected { .. }
            | EdgeError::HostRejected { .. }
            | EdgeError::Overloaded { .. }
            | EdgeError::BodyTimeout
            | EdgeError::BodyTooLarge { .. }
            | EdgeError::HeadersTooLarge { .. }
            | EdgeError::UnsupportedMediaType { .. }
            | EdgeError::NoRoute { .. }
            | EdgeError::MethodNotAllowed { .. } => code::SERVER_ERROR,
        }
    }

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
            EdgeError::InvalidMeta { detail } => format!("Invalid _meta envelope: {detail}"),
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
            EdgeError::MethodNotAllowed { method } => {
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
            EdgeError::HeaderMismatch { header, .. } => Some(json!({ "header": header })),
            _ => None,
        }
    }

    /// The JSON-RPC error body. `id` is the request's id, or `null` when the edge could not
    /// read one (or, for Origin rejections, deliberately: the spec's example carries no id).
    pub fn body(&self, id: Option<&Value>) -> Bytes {
        let id = match self {
            EdgeError::OriginRejected { .. } => Value::Null,
            _ => id.cloned().unwrap_or(Value::Null),
        };
        let mut error = json!({ "code": self.code(), "message": self.message() });
        if let Some(data) = self.data() {
            error["data"] = data;
        }
        let body = json!({ "jsonrpc": "2.0", "id": id, "error": error });
        Bytes::from(body.to_string())
    }
}

impl std::fmt::Display for EdgeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message(), self.kind())
    }
}

impl std::error::Error for EdgeError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed() {
        let samples = [
            EdgeError::HeaderMismatch {
                header: crate::mcp::headers::NAME,
                detail: String::new(),
            },
            EdgeError::UnsupportedVersion {
                supported: vec![],
                requested: None,
            },
            EdgeError::OriginRejected {
                origin: String::new(),
            },
            EdgeError::BodyTooLarge { limit: 1 },
            EdgeError::UpstreamTimeout {
                detail: String::new(),
            },
        ];
        for e in samples {
            assert!(EdgeError::KINDS.contains(&e.kind()), "{} missing", e.kind());
        }
    }

    #[test]
    fn unsupported_version_body_has_schema_fields() {
        let e = EdgeError::UnsupportedVersion {
            supported: vec!["2026-07-28".into()],
            requested: Some("1900-01-01".into()),
        };
        let v: Value = serde_json::from_slice(&e.body(Some(&json!(7)))).unwrap();
        assert_eq!(v["id"], 7);
        assert_eq!(v["error"]["code"], -32022);
        assert_eq!(v["error"]["data"]["supported"][0], "2026-07-28");
        assert_eq!(v["error"]["data"]["requested"], "1900-01-01");
    }

    #[test]
    fn origin_rejection_has_null_id() {
        let e = EdgeError::OriginRejected {
            origin: "https://evil.example".into(),
        };
        let v: Value = serde_json::from_slice(&e.body(Some(&json!(3)))).unwrap();
        assert_eq!(v["id"], Value::Null);
        assert_eq!(e.status(), 403);
    }
}
