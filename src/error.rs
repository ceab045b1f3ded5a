//! Errors the edge raises itself, and the one place that turns them into a response.
//!
//! Upstream errors never pass through here: they reach the client byte for byte. Every
//! variant names a condition and maps to exactly one HTTP status, JSON-RPC code, message,
//! set of headers and `x-mcp-edge-error` kind; a [`Rejection`] adds the JSON-RPC id of the
//! request it answers, when the edge could read one. Three writers put them on the wire, all
//! through [`EdgeError::body`] and [`EdgeError::headers`]: the proxy's error boundary
//! (`proxy/respond.rs`), the responder that runs before Pingora has the connection
//! (`net/connections.rs`), and a stdio pool's server (`stdio/server.rs`).

use serde_json::Value;
use strum::{EnumIter, IntoStaticStr};

mod answer;

pub use answer::{STDIO_EXITED, STDIO_UNRESPONSIVE};

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
    InsufficientScope,
    RateLimited,
    StdioBusy,
    StdioUnavailable,
    StdioProcessExited,
    StdioUnresponsive,
    HopRefused,
    ReplicaUnknown,
    PoolBusy,
    ExchangeFailed,
    ExchangeTimeout,
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
    /// The call needs scopes the caller's token lacks (`[[routes.scopes]]`): 403 with this
    /// `WWW-Authenticate` (`error="insufficient_scope"`, the scopes to ask for).
    /// `missing`: the scopes the call needs and the token lacks (the message names them).
    InsufficientScope { challenge: String, missing: String },
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
    /// The hand-off listener takes only requests another replica of the fleet signed, each
    /// once: this one was not (`reason`: the `mcp_edge_handoffs_refused_total` label).
    HopRefused { reason: &'static str },
    /// A legacy session token names a replica this one has never known (too new to have
    /// been resolved yet): nothing was sent; the client may retry shortly.
    ReplicaUnknown,
    /// Every member the request may go to holds `max_in_flight` (or
    /// `max_streams_per_member`), and the pool's queue was full or the wait ran out
    /// (`waited_ms`: 0 when it could not queue): nothing was sent.
    PoolBusy { pool: String, waited_ms: u64 },
    /// The pool's token exchange failed (the authorization server down, answering 5xx or
    /// garbage, refusing the edge, or issuing a token for another audience): nothing was sent.
    ExchangeFailed { pool: String },
    /// The pool's token exchange did not end within its `timeout_ms`: nothing was sent.
    ExchangeTimeout { pool: String },
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
            EdgeError::InsufficientScope { .. } => ErrorKind::InsufficientScope,
            EdgeError::RateLimited { .. } => ErrorKind::RateLimited,
            EdgeError::BatchRefused => ErrorKind::InvalidRequest,
            EdgeError::StdioBusy => ErrorKind::StdioBusy,
            EdgeError::StdioUnavailable { .. } => ErrorKind::StdioUnavailable,
            EdgeError::StdioExited => ErrorKind::StdioProcessExited,
            EdgeError::StdioUnresponsive => ErrorKind::StdioUnresponsive,
            EdgeError::HopRefused { .. } => ErrorKind::HopRefused,
            EdgeError::ReplicaUnknown => ErrorKind::ReplicaUnknown,
            EdgeError::PoolBusy { .. } => ErrorKind::PoolBusy,
            EdgeError::ExchangeFailed { .. } => ErrorKind::ExchangeFailed,
            EdgeError::ExchangeTimeout { .. } => ErrorKind::ExchangeTimeout,
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
            | EdgeError::ReplicaUnknown
            | EdgeError::PoolBusy { .. }
            | EdgeError::ExchangeFailed { .. }
            | EdgeError::StdioUnavailable { .. } => 503,
            EdgeError::StdioExited => 502,
            EdgeError::StdioUnresponsive | EdgeError::ExchangeTimeout { .. } => 504,
            EdgeError::HostRejected { .. } | EdgeError::HopRefused { .. } => 403,
            EdgeError::BodyTimeout => 408,
            EdgeError::Internal { .. } => 500,
            // In-band, as the TypeScript SDK answers an unknown task.
            EdgeError::TaskUnknown { .. } => 200,
            EdgeError::Unauthorized { .. } => 401,
            EdgeError::InsufficientScope { .. } => 403,
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
            | EdgeError::ReplicaUnknown
            | EdgeError::StdioUnavailable { .. }
            | EdgeError::StdioExited
            | EdgeError::ExchangeFailed { .. }
            | EdgeError::ExchangeTimeout { .. }
            | EdgeError::StdioUnresponsive => code::INTERNAL,
            EdgeError::RateLimited { .. } => code::RATE_LIMITED,
            EdgeError::OriginRejected { .. }
            | EdgeError::HostRejected { .. }
            | EdgeError::HopRefused { .. }
            | EdgeError::Overloaded { .. }
            | EdgeError::PoolBusy { .. }
            | EdgeError::BodyTimeout
            | EdgeError::Unauthorized { .. }
            | EdgeError::InsufficientScope { .. }
            | EdgeError::TlsRequired
            | EdgeError::BodyTooLarge { .. }
            | EdgeError::HeadersTooLarge { .. }
            | EdgeError::UnsupportedMediaType { .. }
            | EdgeError::NoRoute { .. }
            | EdgeError::MethodNotAllowed { .. } => code::SERVER_ERROR,
        }
    }
}

impl std::fmt::Display for EdgeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message(), self.kind().as_str())
    }
}

impl std::error::Error for EdgeError {}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
