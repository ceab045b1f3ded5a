//! Errors the edge raises itself, and the one place that turns them into a response.
//!
//! Upstream errors never pass through here: they reach the client byte for byte. Every
//! variant names a condition and maps to exactly one HTTP status, JSON-RPC code, message,
//! set of headers and `x-mcp-edge-error` kind; a [`Rejection`] adds the JSON-RPC id of the
//! request it answers, when the edge could read one. Three writers put them on the wire, all
//! through [`EdgeError::body`] and [`EdgeError::headers`]: the proxy's error boundary
//! (`proxy/respond.rs`), the responder that runs before Pingora has the connection
//! (`net/connections.rs`), and a stdio pool's server (`stdio/server.rs`).

use bytes::Bytes;
use serde_json::{json, Value};
use strum::{EnumIter, IntoStaticStr};

use crate::mcp::jsonrpc;

/// Response header that marks a response the edge produced (not the upstream).
pub const ERROR_HEADER: &str = "x-mcp-edge-error";

/// JSON-RPC error codes (defined with the JSON-RPC writer, [`crate::mcp::jsonrpc`]).
pub use crate::mcp::jsonrpc::code;

/// The routing headers the 2026-07-28 rules compare with the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, EnumIter)]
pub enum RoutingHeader {
    #[default]
    ProtocolVersion,
    Method,
    Name,
}

impl RoutingHeader {
    /// The header's name on the wire (lower case).
    pub const fn name(self) -> &'static str {
        match self {
            RoutingHeader::ProtocolVersion => "mcp-protocol-version",
            RoutingHeader::Method => "mcp-method",
            RoutingHeader::Name => "mcp-name",
        }
    }

    /// The header's name, parsed (at compile time: a name given as text is parsed again at
    /// every lookup).
    pub fn header(self) -> http::header::HeaderName {
        use http::header::HeaderName;
        const PROTOCOL_VERSION: HeaderName =
            HeaderName::from_static(RoutingHeader::ProtocolVersion.name());
        const METHOD: HeaderName = HeaderName::from_static(RoutingHeader::Method.name());
        const NAME: HeaderName = HeaderName::from_static(RoutingHeader::Name.name());
        match self {
            RoutingHeader::ProtocolVersion => PROTOCOL_VERSION,
            RoutingHeader::Method => METHOD,
            RoutingHeader::Name => NAME,
        }
    }

    /// The spec's spelling, for messages.
    pub const fn display(self) -> &'static str {
        match self {
            RoutingHeader::ProtocolVersion => "MCP-Protocol-Version",
            RoutingHeader::Method => "Mcp-Method",
            RoutingHeader::Name => "Mcp-Name",
        }
    }
}

/// The bounded name of an [`EdgeError`]: the `x-mcp-edge-error` value and the `kind` label
/// of `mcp_edge_errors_total`. Every variant is pre-registered as a metric series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum ErrorKind {
    HeaderMismatchProtocolVersion,
    HeaderMismatchMethod,
    HeaderMismatchName,
    UnsupportedVersion,
    OriginRejected,
    ParseError,
    InvalidRequest,
    InvalidMeta,
    BodyTooLarge,
    HeadersTooLarge,
    UnsupportedMediaType,
    NoRoute,
    MethodNotAllowed,
    ConnectFailed,
    UpstreamTimeout,
    UpstreamError,
    ClientError,
    Internal,
    SessionUnknown,
    SessionExpired,
    SessionForeign,
    SessionMemberGone,
    SessionMissing,
    NoHealthyMember,
    HostRejected,
    Overloaded,
    BodyTimeout,
    TlsRequired,
    TaskUnknown,
    Unauthorized,
    RateLimited,
    StdioBusy,
    StdioUnavailable,
    StdioProcessExited,
    StdioUnresponsive,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// An error the edge answers itself: what went wrong and the JSON-RPC id of the request it
/// answers (`None` when the edge could not read one). The one value that travels from any
/// step to the one place that writes the response ([`crate::proxy`]'s `respond`).
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub error: EdgeError,
    pub id: Option<Value>,
}

impl From<EdgeError> for Rejection {
    fn from(error: EdgeError) -> Self {
        Rejection { error, id: None }
    }
}

impl Rejection {
    pub fn with_id(error: EdgeError, id: Option<Value>) -> Self {
        Rejection { error, id }
    }
}

/// Every kind of error the edge can raise; [`EdgeError::kind`] names it.
#[derive(Debug, Clone, PartialEq, EnumIter)]
pub enum EdgeError {
    /// A routing header is missing, duplicated, undecodable or differs from the body.
    HeaderMismatch {
        header: RoutingHeader,
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
    MethodNotAllowed {
        method: String,
        /// The `Allow` header: the methods this endpoint serves.
        allow: &'static str,
    },
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
    /// Plain HTTP sent to a TLS listener.
    TlsRequired,
    /// A task id the edge sealed that no longer leads anywhere (forged, expired, another
    /// pool's, or its member left the pool): what a server says of an unknown task.
    TaskUnknown { reason: &'static str },
    /// A route with `auth` got no valid credential: 401 with this `WWW-Authenticate`.
    Unauthorized {
        challenge: String,
        reason: &'static str,
    },
    /// The caller is over the route's rate limit: 429, with when to retry and the size of
    /// the bucket that refused (the draft SEP's `data.retryAfterMs`, `RateLimit-*` headers).
    RateLimited { retry_after_ms: u64, limit: u32 },
    /// A batch on a route with a policy (its calls could not each be checked).
    BatchRefused,
    /// A stdio server does not read its input (its queue is full): nothing was sent to it.
    StdioBusy,
    /// A stdio pool has no process for the request (starting, failing to start, at
    /// `max_processes`): nothing was sent. `detail` is the whole message.
    StdioUnavailable { detail: String },
    /// The stdio server's process ended before it answered: the request may have run.
    StdioExited,
    /// The stdio server stopped answering (a ping went unanswered): it is restarted; the
    /// request may have run.
    StdioUnresponsive,
}

impl EdgeError {
    /// Stable, bounded name: metric label and marker header value.
    pub fn kind(&self) -> ErrorKind {
        match self {
            EdgeError::HeaderMismatch { header, .. } => match header {
                RoutingHeader::ProtocolVersion => ErrorKind::HeaderMismatchProtocolVersion,
                RoutingHeader::Method => ErrorKind::HeaderMismatchMethod,
                RoutingHeader::Name => ErrorKind::HeaderMismatchName,
            },
            EdgeError::UnsupportedVersion { .. } => ErrorKind::UnsupportedVersion,
            EdgeError::OriginRejected { .. } => ErrorKind::OriginRejected,
            EdgeError::ParseError { .. } => ErrorKind::ParseError,
            EdgeError::InvalidRequest { .. } => ErrorKind::InvalidRequest,
            EdgeError::InvalidMeta { .. } => ErrorKind::InvalidMeta,
            EdgeError::BodyTooLarge { .. } => ErrorKind::BodyTooLarge,
            EdgeError::HeadersTooLarge { .. } => ErrorKind::HeadersTooLarge,
            EdgeError::UnsupportedMediaType { .. } => ErrorKind::UnsupportedMediaType,
            EdgeError::NoRoute { .. } => ErrorKind::NoRoute,
            EdgeError::MethodNotAllowed { .. } => ErrorKind::MethodNotAllowed,
            EdgeError::ConnectFailed { .. } => ErrorKind::ConnectFailed,
            EdgeError::UpstreamTimeout { .. } => ErrorKind::UpstreamTimeout,
            EdgeError::UpstreamError { .. } => ErrorKind::UpstreamError,
            EdgeError::ClientError { .. } => ErrorKind::ClientError,
            EdgeError::Internal { .. } => ErrorKind::Internal,
            EdgeError::SessionUnknown { .. } => ErrorKind::SessionUnknown,
            EdgeError::SessionExpired => ErrorKind::SessionExpired,
            EdgeError::SessionForeign => ErrorKind::SessionForeign,
            EdgeError::SessionMemberGone { .. } => ErrorKind::SessionMemberGone,
            EdgeError::SessionMissing => ErrorKind::SessionMissing,
            EdgeError::NoHealthyMember { .. } => ErrorKind::NoHealthyMember,
            EdgeError::HostRejected { .. } => ErrorKind::HostRejected,
            EdgeError::Overloaded { .. } => ErrorKind::Overloaded,
            EdgeError::BodyTimeout => ErrorKind::BodyTimeout,
            EdgeError::TlsRequired => ErrorKind::TlsRequired,
            EdgeError::TaskUnknown { .. } => ErrorKind::TaskUnknown,
            EdgeError::Unauthorized { .. } => ErrorKind::Unauthorized,
            EdgeError::RateLimited { .. } => ErrorKind::RateLimited,
            EdgeError::BatchRefused => ErrorKind::InvalidRequest,
            EdgeError::StdioBusy => ErrorKind::StdioBusy,
            EdgeError::StdioUnavailable { .. } => ErrorKind::StdioUnavailable,
            EdgeError::StdioExited => ErrorKind::StdioProcessExited,
            EdgeError::StdioUnresponsive => ErrorKind::StdioUnresponsive,
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            EdgeError::HeaderMismatch { .. }
            | EdgeError::UnsupportedVersion { .. }
            | EdgeError::ParseError { .. }
            | EdgeError::InvalidRequest { .. }
            | EdgeError::InvalidMeta { .. }
            | EdgeError::SessionMissing
            | EdgeError::TlsRequired
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
            EdgeError::NoHealthyMember { .. }
            | EdgeError::Overloaded { .. }
            | EdgeError::StdioBusy
            | EdgeError::StdioUnavailable { .. } => 503,
            EdgeError::StdioExited => 502,
            EdgeError::StdioUnresponsive => 504,
            EdgeError::HostRejected { .. } => 403,
            EdgeError::BodyTimeout => 408,
            EdgeError::Internal { .. } => 500,
            // In-band, as the TypeScript SDK answers an unknown task.
            EdgeError::TaskUnknown { .. } => 200,
            EdgeError::Unauthorized { .. } => 401,
            EdgeError::RateLimited { .. } => 429,
            EdgeError::BatchRefused => 400,
        }
    }

    pub fn code(&self) -> i64 {
        match self {
            EdgeError::HeaderMismatch { .. } => code::HEADER_MISMATCH,
            EdgeError::UnsupportedVersion { .. } => code::UNSUPPORTED_VERSION,
            EdgeError::ParseError { .. } => code::PARSE_ERROR,
            EdgeError::InvalidRequest { .. }
            | EdgeError::BatchRefused
            | EdgeError::ClientError { .. }
            | EdgeError::SessionMissing => code::INVALID_REQUEST,
            EdgeError::SessionUnknown { .. }
            | EdgeError::SessionExpired
            | EdgeError::SessionForeign
            | EdgeError::SessionMemberGone { .. } => code::SESSION_NOT_FOUND,
            EdgeError::InvalidMeta { .. } | EdgeError::TaskUnknown { .. } => code::INVALID_PARAMS,
            EdgeError::ConnectFailed { .. }
            | EdgeError::NoHealthyMember { .. }
            | EdgeError::Internal { .. }
            | EdgeError::UpstreamTimeout { .. }
            | EdgeError::UpstreamError { .. }
            | EdgeError::StdioBusy
            | EdgeError::StdioUnavailable { .. }
            | EdgeError::StdioExited
            | EdgeError::StdioUnresponsive => code::INTERNAL,
            EdgeError::RateLimited { .. } => code::RATE_LIMITED,
            EdgeError::OriginRejected { .. }
            | EdgeError::HostRejected { .. }
            | EdgeError::Overloaded { .. }
            | EdgeError::BodyTimeout
            | EdgeError::Unauthorized { .. }
            | EdgeError::TlsRequired
            | EdgeError::BodyTooLarge { .. }
            | EdgeError::HeadersTooLarge { .. }
            | EdgeError::UnsupportedMediaType { .. }
            | EdgeError::NoRoute { .. }
            | EdgeError::MethodNotAllowed { .. } => code::SERVER_ERROR,
        }
    }

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
            EdgeError::RateLimited { retry_after_ms, .. } => {
                format!("Rate limit exceeded: retry in {retry_after_ms} ms")
            }
            EdgeError::BatchRefused => {
                "Invalid Request: batches are not accepted on this route (its policy checks each call)".to_string()
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
            | EdgeError::StdioBusy
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
            EdgeError::Unauthorized { challenge, .. } => {
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

impl std::fmt::Display for EdgeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message(), self.kind().as_str())
    }
}

impl std::error::Error for EdgeError {}

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::HashSet;
    use strum::IntoEnumIterator;

    /// Every variant, with every routing header for the mismatch.
    fn every_error() -> Vec<EdgeError> {
        let mut all: Vec<EdgeError> = EdgeError::iter().collect();
        all.extend(
            RoutingHeader::iter().map(|header| EdgeError::HeaderMismatch {
                header,
                detail: String::new(),
            }),
        );
        all
    }

    #[test]
    fn every_error_has_a_kind_and_every_kind_an_error() {
        let produced: HashSet<ErrorKind> = every_error().iter().map(EdgeError::kind).collect();
        let declared: HashSet<ErrorKind> = ErrorKind::iter().collect();
        assert_eq!(produced, declared);
    }

    #[test]
    fn every_error_body_is_json_rpc_with_its_code() {
        for e in every_error() {
            let v: Value = serde_json::from_slice(&e.body(Some(&json!(1)))).unwrap();
            assert_eq!(v["jsonrpc"], "2.0", "{e:?}");
            assert_eq!(v["error"]["code"], e.code(), "{e:?}");
            assert!(v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()));
            // An unknown task is answered in-band, as the server would.
            let in_band = matches!(e, EdgeError::TaskUnknown { .. });
            assert!(in_band || (400..600).contains(&e.status()), "{e:?}");
            let label = e.kind().as_str();
            assert!(
                !label.is_empty() && label.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{label}"
            );
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
