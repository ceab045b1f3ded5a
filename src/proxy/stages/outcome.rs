//! How a request ended, for the trace, the MCP operation metric and the access log: the
//! JSON-RPC error code or tool error the answer carried (`ctx.response.ended`), read as the
//! member's answer streams by (before any rewrite) or from the answer the edge wrote itself;
//! and, with the edge's own errors and the member's status, the request's [`Failure`].
//!
//! Only the answer to a request (a POST with an id) is read, and not a long-lived stream or
//! a compressed body; the scan keeps a few bytes of state ([`crate::mcp::outcome`]).

use bytes::Bytes;
use pingora::http::ResponseHeader;

use crate::error::EdgeError;
use crate::mcp::media::Media;
use crate::mcp::outcome::Outcome as Scan;
use crate::proxy::ctx::Ctx;
use crate::proxy::edge::Edge;
use crate::proxy::stage::Stage;

/// The scan of the member's answer, while it streams.
#[derive(Default)]
pub struct State {
    scan: Option<Box<(Scan, Media)>>,
    /// A JSON answer's `Content-Length`, until its first chunk: a first chunk that is the
    /// whole answer may be read at once ([`crate::mcp::outcome::whole_json`]).
    whole: Option<usize>,
}

pub struct Outcome;

impl Stage for Outcome {
    const NAME: &'static str = "outcome";

    fn response(head: &mut ResponseHeader, ctx: &mut Ctx, _edge: &Edge) -> pingora::Result<()> {
        let media = ctx.response.media;
        let readable = matches!(media, Media::Json | Media::EventStream) && !ctx.response.encoded;
        if readable && answers_request(ctx) && !ctx.stages.limits.long_lived() {
            ctx.stages.outcome.scan = Some(Box::new((Scan::new(), media)));
            if media == Media::Json {
                ctx.stages.outcome.whole = head
                    .headers
                    .get(http::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok()?.parse().ok());
            }
        }
        Ok(())
    }

    fn response_body(body: &mut Option<Bytes>, _end: bool, ctx: &mut Ctx) -> pingora::Result<()> {
        let (Some(scan), Some(chunk)) = (ctx.stages.outcome.scan.as_deref_mut(), body.as_ref())
        else {
            return Ok(());
        };
        let (scan, media) = scan;
        let whole = ctx.stages.outcome.whole.take();
        if whole == Some(chunk.len()) {
            if let Some(ended) = crate::mcp::outcome::whole_json(chunk) {
                // The whole answer in one chunk, and nothing in it the scan looks for.
                ctx.stages.outcome.scan = None;
                if ended != ctx.response.ended {
                    ctx.response.ended = ended;
                }
                return Ok(());
            }
        }
        match media {
            Media::EventStream => scan.feed_event_stream(chunk),
            _ => scan.feed_json(chunk),
        }
        if *scan.ended() != ctx.response.ended {
            ctx.response.ended = scan.ended().clone();
        }
        Ok(())
    }

    fn answer(head: &mut ResponseHeader, body: &mut Bytes, ctx: &mut Ctx) -> pingora::Result<()> {
        if ctx.error.is_some() || body.is_empty() {
            return Ok(());
        }
        let mut scan = Scan::new();
        match Media::of_headers(&head.headers) {
            Media::EventStream => scan.feed_event_stream(body),
            _ => scan.feed_json(body),
        }
        ctx.response.ended = scan.ended().clone();
        Ok(())
    }
}

/// A POST carrying a request (an id): its answer says how it ended.
fn answers_request(ctx: &Ctx) -> bool {
    ctx.request
        .message
        .as_deref()
        .is_some_and(|m| m.has_id && m.method.is_some() && !m.batch)
}

/// How a request failed, as the trace and the operation metric name it (`error.type`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Failure<'a> {
    /// The edge's own error (its kind).
    Edge(&'a EdgeError),
    /// A JSON-RPC error response (its code).
    Code(&'a str),
    /// A tool result with `isError: true`.
    ToolError,
    /// The client closed its connection or stream before the answer ended.
    Cancelled,
    /// The member answered with an HTTP error status and no JSON-RPC error.
    Status(u16),
}

impl Failure<'_> {
    /// The request's failure, if it failed: the edge's error first, then what the answer
    /// said, then the member's status.
    pub fn of(ctx: &Ctx) -> Option<Failure<'_>> {
        if let Some(e) = &ctx.error {
            return Some(Failure::Edge(e));
        }
        if let Some(code) = ctx.response.ended.error_code.as_deref() {
            return Some(Failure::Code(code));
        }
        if ctx.response.ended.tool_error {
            return Some(Failure::ToolError);
        }
        if ctx.client_closed {
            return Some(Failure::Cancelled);
        }
        match ctx.upstream.status {
            Some(status) if status >= 500 => Some(Failure::Status(status)),
            _ => None,
        }
    }

    /// The `error.type` of a span: the edge's error kind, the JSON-RPC code, `tool_error`,
    /// `cancelled`, or the HTTP status.
    pub fn error_type(&self) -> String {
        match self {
            Failure::Edge(e) => e.kind().as_str().to_string(),
            Failure::Code(code) => (*code).to_string(),
            Failure::ToolError => "tool_error".to_string(),
            Failure::Cancelled => "cancelled".to_string(),
            Failure::Status(status) => status.to_string(),
        }
    }

    /// The `error_type` label: as [`Failure::error_type`], with codes outside the JSON-RPC
    /// reserved ones as `_OTHER` (a server chooses its own codes: the label stays bounded).
    pub fn label(&self) -> std::borrow::Cow<'static, str> {
        match self {
            Failure::Code(code) => match code.parse::<i64>() {
                Ok(c) if (-32768..=-32000).contains(&c) => c.to_string().into(),
                _ => "_OTHER".into(),
            },
            Failure::Edge(e) => e.kind().as_str().into(),
            Failure::ToolError => "tool_error".into(),
            Failure::Cancelled => "cancelled".into(),
            Failure::Status(status) => status.to_string().into(),
        }
    }

    /// The JSON-RPC code the answer carried (`rpc.response.status_code`).
    pub fn code(&self) -> Option<String> {
        match self {
            Failure::Edge(e) => Some(e.code().to_string()),
            Failure::Code(code) => Some((*code).to_string()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_stay_bounded() {
        assert_eq!(Failure::Code("-32603").label(), "-32603");
        assert_eq!(Failure::Code("-32042").label(), "-32042");
        assert_eq!(Failure::Code("7").label(), "_OTHER");
        assert_eq!(Failure::Code("-99999999999").label(), "_OTHER");
        let limited = EdgeError::RateLimited {
            retry_after_ms: 1,
            limit: 1,
        };
        assert_eq!(Failure::Edge(&limited).label(), "rate_limited");
        assert_eq!(Failure::Status(503).error_type(), "503");
    }
}
