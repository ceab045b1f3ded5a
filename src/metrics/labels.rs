//! The fixed label sets of the edge's metrics (every value pre-registered by
//! [`super::build`], so a series exists before its first event).

use strum::{EnumIter, IntoStaticStr};

/// Why spans were dropped (the `reason` label of `mcp_edge_trace_spans_dropped_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum SpanDrop {
    /// The export queue was full: the collector is slower than the traffic, or down.
    QueueFull,
    /// The collector refused the export, failed, or did not answer in time.
    ExportFailed,
}

/// How a stdio server process ended (the `how` label of `mcp_edge_stdio_stops_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum StdioStop {
    /// It ended on its own (a crash, a signal from outside).
    Exited,
    /// Stopped by the edge; everything was gone within the grace of SIGTERM.
    Sigterm,
    /// Stopped by the edge; something (the server or what it started) needed SIGKILL.
    Sigkill,
    /// It did not answer a ping.
    Hung,
    /// It passed `memory_limit_bytes`.
    MemoryLimit,
    /// It passed `cpu_seconds_limit` (SIGXCPU).
    CpuLimit,
}

/// The `event` label of `mcp_edge_bridged_streams_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum BridgedStream {
    /// A bridged HTTP+SSE client's stream opened here.
    Opened,
    /// The client left 256 events or 8 MiB unread: its stream is let go.
    Lost,
}

/// The `outcome` label of `mcp_edge_handoffs_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Handoff {
    /// Handed to the replica holding its state.
    Sent,
    /// Taken from another replica (signed, served here).
    Received,
    /// The replica holding its state could not be reached.
    Unreachable,
    /// The replica holding its state refused the signed request (its key ring or clock
    /// disagrees with this one's).
    Refused,
}

/// Why the hand-off listener refused a request: the `reason` label of
/// `mcp_edge_handoffs_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum HopRefused {
    /// No signature, or one that does not parse.
    Unsigned,
    /// Signed with a key the ring does not hold.
    UnknownKey,
    /// Outside the window.
    Stale,
    /// The signature does not match the request.
    Forged,
    /// Its nonce was seen: a forward sent again.
    Replayed,
    /// The body is not the one signed.
    BodyAltered,
    /// Too many forwards within a generation to remember them all (refused, not served).
    Busy,
}

/// Why a client's TLS handshake failed (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum HandshakeFailure {
    /// Plain HTTP sent to a TLS port (answered 400).
    PlainHttp,
    /// Not complete within `timeouts.request_head_ms`.
    Timeout,
    /// Closed to make room in the memory budget.
    Evicted,
    /// The handshake itself failed (no common version or cipher, bad record, the client left).
    Failed,
}

/// Why the edge refused a session token: the `reason` label of
/// `mcp_edge_session_token_failures_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum TokenFailure {
    Malformed,
    UnknownKey,
    Forged,
    Expired,
    OtherPool,
    ForeignCredential,
    MemberGone,
}

/// What happened to a task id: the `op` label of `mcp_edge_task_ids_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum TaskIdOp {
    /// An answer named a task: its id was sealed.
    Sealed,
    /// A request followed one.
    Opened,
    /// A request named one that leads nowhere.
    Refused,
}

/// What happened to a token: the `op` label of `mcp_edge_session_tokens_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum TokenOp {
    Sealed,
    Opened,
}

/// The `result` label of `mcp_edge_config_reloads_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum ReloadResult {
    Success,
    Failure,
}

/// What holds a part of the memory budget (the `what` label of its refusals).
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Holder {
    Connection,
    Body,
    Stream,
}

/// Why a holder was closed to make room in the budget (the `reason` label of evictions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Eviction {
    /// A connection that had not completed its first request head.
    StalledHead,
    /// An upload that stopped making progress.
    StalledUpload,
    /// A kept-alive HTTP/1 connection between requests.
    IdleConnection,
}

/// How a request ended: the `outcome` label of `mcp_edge_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr, strum::EnumCount)]
#[strum(serialize_all = "snake_case")]
pub enum Outcome {
    Forwarded,
    ClientError,
    /// The client closed the connection or its stream (how MCP cancels; no error).
    ClientClosed,
    Rejected,
    Failed,
    /// The edge answered it itself (a CORS preflight).
    Answered,
}

/// Label value of any of the label enums here.
pub(crate) fn label<L: Into<&'static str>>(l: L) -> &'static str {
    l.into()
}

/// Why Redis did not give a rate-limit decision: the `cause` label of
/// `mcp_edge_rate_limit_redis_failures_total` (`identity/rate/cause.rs` names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum RedisCause {
    /// Refused for its credential: `NOAUTH`, `WRONGPASS`, `NOPERM` (a password changed).
    Authentication,
    /// Out of memory (`OOM`, `maxmemory` reached with no eviction).
    Oom,
    /// No answer in time.
    Timeout,
    /// The connection was refused (nothing listens).
    Refused,
    /// The connection broke (reset, closed, broken pipe).
    Reset,
    /// Anything else Redis or the connection said.
    Other,
}
