//! Answers rewritten message by message on their way to the client: the one rewrite
//! ([`crate::mcp::rewrite`]) a response's stages give their transforms to (the policy's list
//! filter, the bridge's conversion, in the order of the response list), and the memory it
//! holds, reserved in the budget as it grows; an answer the budget has no room for is cut.

use bytes::Bytes;
use pingora::http::ResponseHeader;

use crate::error::EdgeError;
use crate::mcp::media::Media;
use crate::mcp::rewrite::Transform;
use crate::net::budget::Holder;
use crate::proxy::ctx::{Ctx, Rewriting};
use crate::proxy::edge::Edge;
use crate::proxy::stage::Stage;

/// Rewrite this answer's messages with `transform` too (after those added before). The
/// body changes length, so Pingora re-frames it. False when the answer is neither JSON nor
/// an event stream (nothing to rewrite).
pub fn add(
    head: &mut ResponseHeader,
    ctx: &mut Ctx,
    edge: &Edge,
    transform: Box<dyn Transform>,
) -> bool {
    let rewriting = match ctx.rewrite.as_deref_mut() {
        Some(r) => r,
        None => {
            let sse = match ctx.response.media {
                Media::EventStream => true,
                Media::Json => false,
                Media::Other => return false,
            };
            head.remove_header(&http::header::CONTENT_LENGTH);
            ctx.rewrite.insert(Box::new(Rewriting {
                engine: crate::mcp::rewrite::Rewrite::new(sse),
                room: edge.load.budget.force(Holder::Body, 0),
            }))
        }
    };
    rewriting.engine.push(transform);
    true
}

/// The rewrite, as the body streams.
pub struct Rewrite;

impl Stage for Rewrite {
    const NAME: &'static str = "rewrite";

    fn response_body(body: &mut Option<Bytes>, end: bool, ctx: &mut Ctx) -> pingora::Result<()> {
        let Some(r) = ctx.rewrite.as_deref_mut() else {
            return Ok(());
        };
        let mut out = match body.take() {
            Some(chunk) => r.engine.feed(&chunk).to_vec(),
            None => Vec::new(),
        };
        if end {
            out.extend_from_slice(&r.engine.finish());
        }
        // An empty chunk holds back a partial event; `None` would mean end of body.
        *body = Some(Bytes::from(out));
        if r.room.try_fit(r.engine.held()) {
            return Ok(());
        }
        Err(pingora::Error::because(
            pingora::ErrorType::HTTPStatus(503),
            "rewriting an answer",
            EdgeError::Overloaded {
                limit: "memory budget",
            },
        ))
    }
}
