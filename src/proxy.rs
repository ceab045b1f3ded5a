//! The Pingora `ProxyHttp` implementation. Each hook is a short sequence of named steps that
//! live in the child modules; `src/README.md` maps the whole request flow.
//!
//! - `request_filter`: [`admit`] (limits, route, Origin, Host, body, MCP rules, legacy
//!   token), then the body goes into a [`replay`] session; a rejection goes to [`respond`].
//! - `upstream_peer` / `fail_to_connect` / `error_while_proxy`: [`upstream`].
//! - `upstream_request_filter` / `upstream_response_filter` /
//!   `upstream_response_body_filter`: [`legacy`] translation of session identifiers.
//! - `fail_to_proxy`: the error boundary, [`respond`]; `logging`: [`access_log`].

pub mod access;
pub mod access_log;
pub mod admit;
pub mod body;
pub mod bridge;
pub mod cors;
pub mod ctx;
pub mod forwarding;
pub mod legacy;
pub mod limits;
pub mod replay;
pub mod respond;
pub mod rewrite;
pub mod tasks;
pub mod upstream;

use std::sync::Arc;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::HttpPeer;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::{Error, ErrorSource, ErrorType, Result};
use tokio::sync::watch;

use crate::budget::{Holder, STREAM_COST};
use crate::runtime::{EndpointKind, Runtime};
use ctx::Ctx;
pub use limits::Load;

/// The edge: one per listener, sharing the runtime snapshot, the cutoff switch for event
/// streams and the process-wide load counters.
pub struct Edge {
    runtime: Arc<ArcSwap<Runtime>>,
    /// Turns `true` when the edge shuts down: open event streams end.
    cutoff: watch::Receiver<bool>,
    load: Load,
    /// This listener speaks TLS (`X-Forwarded-Proto: https`).
    tls: bool,
}

impl Edge {
    pub fn new(
        runtime: Arc<ArcSwap<Runtime>>,
        cutoff: watch::Receiver<bool>,
        load: Load,
        tls: bool,
    ) -> Self {
        Edge {
            runtime,
            cutoff,
            load,
            tls,
        }
    }
}

/// The admitted request state, or the internal error a hook past admission reports.
fn admitted(ctx: &Ctx) -> Result<&ctx::Admitted> {
    ctx.admitted
        .as_ref()
        .ok_or_else(|| Error::explain(ErrorType::InternalError, "request was not admitted"))
}

#[async_trait]
impl ProxyHttp for Edge {
    /// Boxed: Pingora moves the context by value through nested futures of the exchange, and
    /// each keeps room for it for an idle event stream's whole life (three copies of 576 bytes
    /// unboxed, measured in docs/benchmarks.md).
    type CTX = Box<Ctx>;

    fn new_ctx(&self) -> Box<Ctx> {
        Box::new(Ctx::new(self.runtime.load_full()))
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        crate::connections::request_started();
        ctx.tls = self.tls;
        match admit::admit(session, ctx, &self.load).await {
            Ok(admit::Admission::Preflight {
                methods,
                max_age,
                any_header,
            }) => {
                cors::answer_preflight(session, ctx, methods, max_age, any_header).await;
                Ok(true)
            }
            Ok(admit::Admission::Answer(answer)) => {
                respond::answer(session, ctx, answer).await;
                Ok(true)
            }
            Ok(admit::Admission::Proxy { admitted, body }) => {
                ctx.admitted = Some(admitted);
                let cutoff = self.cutoff.clone();
                let t = ctx.snapshot.timeouts;
                let silence = replay::Silence {
                    head: t.upstream_read,
                    gap: t.upstream_read,
                    stream_idle: t.stream_idle,
                };
                let (handback, stored) = replay::install(session, body, cutoff, silence);
                ctx.handback = Some(handback);
                ctx.body = stored;
                Ok(false)
            }
            Err(rejection) => {
                respond::reject(session, ctx, rejection).await;
                Ok(true)
            }
        }
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut Self::CTX,
    ) -> Result<Box<HttpPeer>> {
        let member = upstream::choose(ctx, admitted(ctx)?)?;
        Ok(upstream::peer(ctx, member))
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        if end_of_stream && body.is_some() {
            // The whole body is on its way upstream, and a request is never sent twice:
            // the edge's copy can go.
            ctx.body.release();
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
        upstream::connect_failed(ctx, peer, e)
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        if ctx.answered_continue {
            upstream.remove_header(&http::header::EXPECT);
        }
        if ctx.body.is_empty() {
            // Nothing will follow the head (a body of a GET, DELETE or OPTIONS was read and
            // dropped): no framing header may promise bytes.
            upstream.remove_header(&http::header::CONTENT_LENGTH);
            upstream.remove_header(&http::header::TRANSFER_ENCODING);
        }
        let admitted = admitted(ctx)?;
        if !admitted.route.access.forward_credential {
            // The token's audience is the edge, not the server (MCP security guidance).
            upstream.remove_header(&http::header::AUTHORIZATION);
        }
        if ctx.grant.is_some() {
            // List answers are filtered: they must come uncompressed.
            upstream.remove_header(&http::header::ACCEPT_ENCODING);
        }
        if let Some(len) = admitted.body_len {
            if upstream.headers.contains_key(http::header::CONTENT_LENGTH) {
                upstream.insert_header(http::header::CONTENT_LENGTH, len.to_string())?;
            }
        }
        legacy::restore_upstream_target(upstream, admitted)?;
        if let Some(role) = &admitted.task {
            tasks::restore_head(upstream, role)?;
        }
        if let Some(forward) = &admitted.bridge {
            bridge::restore_head(upstream, forward)?;
        }
        // HTTP/2 clients send :authority instead of Host; an HTTP/1.1 upstream needs Host.
        let req = session.req_header();
        let host = req
            .headers
            .get(http::header::HOST)
            .filter(|h| h.to_str().is_ok())
            .cloned()
            .or_else(|| {
                let authority = req.uri.authority()?;
                http::HeaderValue::from_str(authority.as_str()).ok()
            });
        let client = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        forwarding::apply(
            upstream,
            &ctx.snapshot.forwarding,
            client,
            self.tls,
            host.as_ref(),
        )?;
        match (&admitted.route.pool.host, host) {
            // A remote server behind its own name (`[[pools]] host`).
            (Some(pool_host), _) => upstream.insert_header(http::header::HOST, pool_host)?,
            (None, Some(host)) if upstream.headers.get(http::header::HOST).is_none() => {
                upstream.insert_header(http::header::HOST, host)?
            }
            _ => {}
        }
        if let Some(group) = admitted.route.pool.stdio.get() {
            let binding = crate::session::binding(session.req_header(), ctx.principal.as_deref());
            crate::stdio::mark(upstream, group, binding)?;
        }
        Ok(())
    }

    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        if admitted(ctx)?.bridge.is_some() {
            // A bridged client's session is the edge's, never a member's.
            resp.remove_header(crate::mcp::headers::SESSION_ID);
        }
        legacy::seal_session_header(resp, ctx)?;
        match &ctx.cors {
            Some(origin) => cors::apply(resp, origin)?,
            None if admitted(ctx)?.route.origins.grants_any() => cors::vary_only(resp)?,
            None => {}
        }
        record_upstream_response(resp, ctx);
        let is_sse = resp
            .headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|v| {
                v.as_bytes()
                    .get(..17)
                    .is_some_and(|t| t.eq_ignore_ascii_case(b"text/event-stream"))
            });
        if is_sse && !ctx.sse {
            ctx.sse = true;
            crate::metrics::get().sse_streams(ctx.labels.era, 1);
            if !ctx.slots.iter().any(limits::Slot::is_stream) {
                // A POST answered with an event stream lives as long as the upstream keeps
                // it: count what it holds.
                let room = self.load.budget.force(Holder::Stream, STREAM_COST);
                ctx.stream_room = Some(room);
            }
        }
        let content_type = resp
            .headers
            .get(http::header::CONTENT_TYPE)
            .map(|v| v.as_bytes());
        // A compressed body is not scanned: its task ids stay the server's (round-robin).
        let encoded = resp
            .headers
            .get(http::header::CONTENT_ENCODING)
            .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
        if !encoded && tasks::watch(ctx, content_type) {
            // Task ids change length; let Pingora re-frame the body.
            resp.remove_header(&http::header::CONTENT_LENGTH);
        }
        if let Some(forward) = &admitted(ctx)?.bridge {
            // After the metrics: they count the member's own status.
            ctx.convert = bridge::answer_head(resp, forward)?.map(Box::new);
        }
        access::filter_lists(resp, ctx)?;
        if ctx.convert.is_some() {
            // What a rewrite holds counts in the budget as it holds it (`rewrite::account`).
            ctx.convert_room = Some(self.load.budget.force(Holder::Body, 0));
        }
        let endpoint = ctx.admitted.as_ref().map(|a| a.endpoint);
        if is_sse && endpoint == Some(EndpointKind::SseStream) {
            // The endpoint event changes length; let Pingora re-frame the stream.
            resp.remove_header(&http::header::CONTENT_LENGTH);
            ctx.rewriter = Some(Box::new(crate::sse::EndpointRewriter::new()));
        }
        Ok(())
    }

    fn upstream_response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end: bool,
        ctx: &mut Self::CTX,
    ) -> Result<Option<std::time::Duration>> {
        if ctx.tasks.is_some() {
            tasks::rewrite_chunk(body, end, ctx)?;
        }
        if let Some(convert) = ctx.convert.as_mut() {
            let mut out = match body.take() {
                Some(chunk) => convert.feed(&chunk).to_vec(),
                None => Vec::new(),
            };
            if end {
                out.extend_from_slice(&convert.finish());
            }
            // An empty chunk holds back a partial event; `None` would mean end of body.
            *body = Some(Bytes::from(out));
            access::count_hidden(ctx);
            rewrite::account(ctx)?;
        }
        if ctx.rewriter.as_ref().is_none_or(|r| r.is_done() && !end) {
            return Ok(None);
        }
        legacy::rewrite_sse_chunk(body, end, ctx)?;
        Ok(None)
    }

    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        _session: &mut Session,
        e: Box<Error>,
        _ctx: &mut Self::CTX,
        _client_reused: bool,
    ) -> Box<Error> {
        upstream::proxy_failed(e).more_context(format!("Peer: {peer}"))
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
        access_log::finish(session, ctx);
        crate::connections::request_ended();
    }
}

/// Upstream latency and response-class metrics for the current member.
fn record_upstream_response(resp: &ResponseHeader, ctx: &mut Ctx) {
    let status = resp.status.as_u16();
    ctx.upstream.status = Some(status);
    let (Some(admitted), Some(member)) = (&ctx.admitted, ctx.upstream.member()) else {
        return;
    };
    let pool = &admitted.route.pool;
    if let Some(t) = ctx.upstream.started {
        pool.latency
            .get_or_init(|| {
                crate::metrics::get()
                    .upstream_latency
                    .with_label_values(&[pool.name.as_str()])
            })
            .observe(t.elapsed().as_secs_f64());
    }
    member.series.response(&pool.name, &member.label, status);
}
