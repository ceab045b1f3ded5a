//! The Pingora `ProxyHttp` implementation: each hook runs its phase of the
//! [`pipeline`] (the stages of [`stages`], in the order the pipeline lists them) and hands
//! what goes wrong to the error boundary ([`respond`]); `src/README.md` maps the whole flow.
//!
//! What is not a stage is the plumbing every request shares: the replay session that holds
//! the body for Pingora ([`replay`]), choosing a member and what its failures mean
//! ([`upstream`]), the rewrite of answers message by message ([`rewrite`]), and the error
//! boundary.

pub mod answer;
pub mod body;
pub mod ctx;
pub mod edge;
pub mod pipeline;
pub mod replay;
pub mod respond;
pub mod rewrite;
pub mod stage;
pub mod stages;
pub mod upstream;

use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::HttpPeer;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::{Error, ErrorSource, ErrorType, Result};

use ctx::Ctx;
pub use edge::{Edge, Listening, Load};
use stage::{Admission, Flow, Outbound};

#[async_trait]
impl ProxyHttp for Edge {
    /// Boxed: Pingora moves the context by value through nested futures of the exchange, and
    /// each keeps room for it for an idle event stream's whole life (three copies of 576 bytes
    /// unboxed, measured in docs/benchmarks.md).
    type CTX = Box<Ctx>;

    fn new_ctx(&self) -> Box<Ctx> {
        Box::new(Ctx::new(self.runtime.load_full(), self.plan))
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        crate::net::connections::request_started();
        let admission = &mut Admission {
            edge: self,
            session,
            ctx,
        };
        match pipeline::request(admission).await {
            Ok(Flow::Next | Flow::HandOff) => self.install_replay(session, ctx, false),
            // The client has its answer; the member's goes elsewhere.
            Ok(Flow::Accepted) => {
                respond::accepted(session, ctx).await;
                self.install_replay(session, ctx, true)
            }
            Ok(Flow::Hold(held)) => respond::hold(session, ctx, self, held).await,
            Ok(Flow::Answer(answer) | Flow::AnswerOnceAdmitted(answer)) => {
                respond::answer(session, ctx, answer).await
            }
            Ok(Flow::Written) => {}
            Err(rejection) => respond::reject(session, ctx, rejection).await,
        }
        // Pingora goes on to a member only when no answer was written.
        Ok(ctx.handback.is_none())
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut Self::CTX,
    ) -> Result<Box<HttpPeer>> {
        let member = upstream::choose(ctx).await?;
        let peer = upstream::peer(ctx, member);
        pipeline::attempt(ctx, self);
        Ok(peer)
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        if end_of_stream && body.is_some() {
            upstream::body_sent(ctx);
        }
        Ok(())
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        peer: &HttpPeer,
        ctx: &mut Self::CTX,
        e: Box<Error>,
    ) -> Box<Error> {
        pipeline::attempt_failed(ctx, &e);
        upstream::connect_failed(ctx, peer, e)
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        let outbound = &mut Outbound {
            edge: self,
            session,
            head: upstream,
            ctx,
        };
        pipeline::upstream_request(outbound)
    }

    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        pipeline::response(resp, ctx, self)
    }

    fn upstream_response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end: bool,
        ctx: &mut Self::CTX,
    ) -> Result<Option<std::time::Duration>> {
        pipeline::response_body(body, end, ctx)?;
        Ok(None)
    }

    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        _session: &mut Session,
        e: Box<Error>,
        ctx: &mut Self::CTX,
        client_reused: bool,
    ) -> Box<Error> {
        pipeline::attempt_failed(ctx, &e);
        upstream::proxy_failed(ctx, e, client_reused).more_context(format!("Peer: {peer}"))
    }

    fn suppress_error_log(&self, _session: &Session, _ctx: &Self::CTX, e: &Error) -> bool {
        if e.etype() == &replay::STREAM_CUT {
            return true;
        }
        // A client closing its stream is how MCP cancels; not an error worth a log line.
        e.esource() == &ErrorSource::Downstream
            && matches!(
                e.etype(),
                ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError
            )
    }

    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut Self::CTX,
    ) -> FailToProxy {
        if e.etype() == &replay::STREAM_CUT {
            // An event stream ended by shutdown: `logging` closes it cleanly.
            return FailToProxy {
                error_code: 0,
                can_reuse_downstream: false,
            };
        }
        // Keep-alive and the response are the real session's: put it back first.
        replay::restore(session, &mut ctx.handback).await;
        FailToProxy {
            error_code: respond::fail(session, ctx, e).await,
            can_reuse_downstream: false,
        }
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Self::CTX) {
        replay::restore(session, &mut ctx.handback).await;
        if e.is_some_and(|e| e.etype() == &replay::STREAM_CUT) {
            // The edge is shutting down: end the event stream properly (final chunk or h2
            // END_STREAM) so the client sees a closed stream, not a broken connection.
            let _ = session.downstream_session.finish_body().await;
        }
        pipeline::logging(session, ctx);
        crate::net::connections::request_ended();
    }
}
