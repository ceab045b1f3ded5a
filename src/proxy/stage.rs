//! What a stage is: one capability of the edge, by phase ([`Stage`]), and what the request
//! phase hands it and it decides ([`Admission`], [`Outbound`], [`Flow`]). The order the
//! stages run in is [`super::pipeline`]'s.

use bytes::Bytes;
use futures::future::BoxFuture;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::Session;

use super::answer::Answer;
use super::ctx::Ctx;
use super::edge::{Edge, Listening};
use crate::error::Rejection;
use crate::runtime::{Endpoint, Runtime};

/// What a request stage decided.
pub enum Flow {
    /// On to the next stage (after the last one, to a member).
    Next,
    /// The edge answers now; the stages after this one do not run.
    Answer(Answer),
    /// The edge answers once the stages after this one let the request through: their
    /// checks (the rate limit, the policy) still apply to a message the edge answers itself.
    AnswerOnceAdmitted(Answer),
    /// The stage wrote the answer itself (a CORS preflight).
    Written,
    /// Another replica holds the request's state: the request goes there as it came (the
    /// stages after this one run there).
    HandOff,
    /// The edge holds an event stream for the client (a bridged HTTP+SSE client's), once
    /// the stages after this one let the request through.
    Hold(Box<dyn Held>),
    /// (admitted) The client gets its answer now, a `202` with no body (a bridged HTTP+SSE
    /// POST's, written by the hook); the request still goes to a member, whose answer goes
    /// elsewhere.
    Accepted,
}

/// An event stream the edge holds for the client itself: its head (the hook puts the answer
/// stages' headers on it, [`super::respond::hold`]), then what the stage that opened it
/// writes, until the client goes or the edge stops.
pub trait Held: Send {
    /// The stream's head, before the answer stages.
    fn head(&self, session: &Session) -> pingora::Result<ResponseHeader>;
    /// Write `head` and hold the stream.
    fn hold<'a>(
        self: Box<Self>,
        head: ResponseHeader,
        session: &'a mut Session,
        ctx: &'a mut Ctx,
        edge: &'a Edge,
    ) -> BoxFuture<'a, ()>;
}

/// A request on its way in, before a member is chosen.
pub struct Admission<'a> {
    pub edge: &'a Edge,
    pub session: &'a mut Session,
    pub ctx: &'a mut Ctx,
}

/// The head a member is about to get.
pub struct Outbound<'a> {
    pub edge: &'a Edge,
    /// The client's request (its head as the client sent it).
    pub session: &'a Session,
    pub head: &'a mut RequestHeader,
    pub ctx: &'a mut Ctx,
}

/// The phases a request's plan covers ([`crate::runtime::Plan`]; a hand-off's relay lists
/// always run whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Request,
    Admitted,
    Attempt,
    AttemptFailed,
    UpstreamRequest,
    Response,
    ResponseBody,
    Answer,
    Logging,
}

/// What the configuration says of an endpoint, when its plan is compiled.
pub struct Site<'a> {
    pub endpoint: &'a Endpoint,
    pub runtime: &'a Runtime,
}

/// One capability of the edge, by phase. Every phase does nothing unless the stage says.
#[allow(async_fn_in_trait)]
pub trait Stage {
    /// Its name in the lists and in `src/README.md`.
    const NAME: &'static str;

    /// Whether the stage can act in `phase` on a request to this endpoint: asked once per
    /// endpoint when a snapshot is loaded. `false` only where every such call would return
    /// at its first check; a request the plan leaves it out of does not call it.
    fn serves(_site: &Site<'_>, _phase: Phase) -> bool {
        true
    }

    /// Whether the stage can act on this listener's requests at all (the hand-off
    /// listener's, a traced listener's): asked once, when the listener is built.
    fn listens(_listening: &Listening) -> bool {
        true
    }

    /// `request_filter`: a check or a decision before a member is chosen; a refusal is
    /// answered by the error boundary and the request never reaches a member.
    async fn request(_a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        Ok(Flow::Next)
    }

    /// `request_filter`, once every request stage let the request through to a member of
    /// this replica's: a decision that needs the request admitted (room on a member), or an
    /// early answer while the request still goes on ([`Flow::Accepted`]).
    async fn admitted(_a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        Ok(Flow::Next)
    }

    /// `upstream_peer`: a try at a member begins (`ctx.upstream.member()`); a request sent
    /// again after a failed try begins another.
    fn attempt(_ctx: &mut Ctx, _edge: &Edge) {}

    /// `fail_to_connect`, `error_while_proxy`: the current try failed (another may follow).
    fn attempt_failed(_ctx: &mut Ctx, _error: &pingora::Error) {}

    /// `upstream_request_filter`: the head the member gets.
    fn upstream_request(_o: &mut Outbound<'_>) -> pingora::Result<()> {
        Ok(())
    }

    /// `upstream_response_filter`: the member's response head, on its way to the client.
    fn response(_head: &mut ResponseHeader, _ctx: &mut Ctx, _edge: &Edge) -> pingora::Result<()> {
        Ok(())
    }

    /// `upstream_response_body_filter`: one chunk of the member's response body (`None` and
    /// `end`: the end). A stage holding bytes back leaves `Some(Bytes::new())`: `None` would
    /// end the body.
    fn response_body(_body: &mut Option<Bytes>, _end: bool, _ctx: &mut Ctx) -> pingora::Result<()> {
        Ok(())
    }

    /// The head and body of an answer the edge writes itself (an error, a bridged or hidden
    /// entry's answer, a metadata document); a stage may take the body (the head then says so).
    fn answer(
        _head: &mut ResponseHeader,
        _body: &mut Bytes,
        _ctx: &mut Ctx,
    ) -> pingora::Result<()> {
        Ok(())
    }

    /// `logging`: the request is over, however it ended.
    fn logging(_session: &Session, _ctx: &mut Ctx) {}
}
