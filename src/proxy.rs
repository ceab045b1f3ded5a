//! The Pingora `ProxyHttp` implementation: one hook per phase, each delegating to a small
//! helper. The request flow is `request_filter` (route, Origin, body, MCP rules, legacy
//! session token) → `upstream_peer` (session owner, else round-robin) →
//! `upstream_request_filter` (restore the upstream's session id, strip the prefix) → Pingora
//! forwards and streams, `upstream_response_filter` / `upstream_response_body_filter` seal
//! new session ids and rewrite the HTTP+SSE `endpoint` event → `logging` (metrics, access log,
//! give the real downstream session back).

use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::HttpPeer;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::{Error, ErrorSource, ErrorType, Result};
use serde_json::Value;

use crate::body;
use crate::config::{EndpointKind, Route, Runtime, Sessions};
use crate::error::{EdgeError, ERROR_HEADER};
use crate::mcp::headers::SESSION_ID;
use crate::mcp::rules::{self, Era, Rejection, Verdict};
use crate::mcp::{self, headers};
use crate::metrics;
use crate::routing::{Member, Pick};
use crate::session::affinity::{self, Sticky};
use crate::session::credential_digest;
use crate::sse::{self, EndpointRewriter};

/// The edge: reads the current runtime snapshot once per request.
pub struct Edge {
    runtime: Arc<ArcSwap<Runtime>>,
    /// Turns `true` when the edge shuts down.
    drain: tokio::sync::watch::Receiver<bool>,
    /// Requests in flight and long-lived streams open, shared by every listener.
    load: Load,
}

/// Process-wide counters behind `limits.max_concurrent_requests` and `limits.max_streams`.
#[derive(Clone, Default)]
pub struct Load {
    requests: Arc<std::sync::atomic::AtomicUsize>,
    streams: Arc<std::sync::atomic::AtomicUsize>,
}

impl Edge {
    pub fn new(
        runtime: Arc<ArcSwap<Runtime>>,
        drain: tokio::sync::watch::Receiver<bool>,
        load: Load,
    ) -> Self {
        Edge {
            runtime,
            drain,
            load,
        }
    }
}

/// Per-request state.
pub struct Ctx {
    started: Instant,
    snapshot: Option<Arc<Runtime>>,
    route: Option<Arc<Route>>,
    endpoint: Option<EndpointKind>,
    verdict: Option<Verdict>,
    /// Legacy session this request belongs to (from its token).
    sticky: Option<Sticky>,
    /// Digest of the client's `Authorization`, bound into tokens sealed for it.
    credential: Option<[u8; 16]>,
    /// HTTP+SSE stream whose `endpoint` event is being rewritten.
    rewriter: Option<EndpointRewriter>,
    /// Members already tried for this request, in order; the last one is the current one.
    tried: Vec<Arc<Member>>,
    upstream_started: Option<Instant>,
    upstream_status: Option<u16>,
    edge_error: Option<EdgeError>,
    handback: Option<body::Handback>,
    /// Held for the request's lifetime (released on drop).
    slots: Vec<Slot>,
    answered_continue: bool,
    sse: bool,
}

impl Ctx {
    fn era_label(&self) -> &'static str {
        self.verdict.as_ref().map_or("unknown", |v| v.era.label())
    }
    fn method_label(&self) -> &'static str {
        mcp::method_label(self.verdict.as_ref().and_then(|v| v.method.as_deref()))
    }
    fn route_label(&self) -> &str {
        self.route.as_ref().map_or("none", |r| r.name.as_str())
    }
    fn sessions(&self) -> Option<&Sessions> {
        self.snapshot.as_ref()?.sessions.as_deref()
    }
    fn member(&self) -> Option<&Member> {
        self.tried.last().map(|m| m.as_ref())
    }
}

#[async_trait]
impl ProxyHttp for Edge {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx {
            started: Instant::now(),
            snapshot: None,
            route: None,
            endpoint: None,
            verdict: None,
            sticky: None,
            credential: None,
            rewriter: None,
            tried: Vec::new(),
            upstream_started: None,
            upstream_status: None,
            edge_error: None,
            handback: None,
            slots: Vec::new(),
            answered_continue: false,
            sse: false,
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let snapshot = self.runtime.load_full();
        ctx.snapshot = Some(snapshot.clone());
        let admitted =
            match Slot::take(&self.load.requests, snapshot.limits.max_concurrent_requests) {
                Some(slot) => {
                    ctx.slots.push(slot);
                    admit(session, ctx, &snapshot).await
                }
                None => Err(Rejection {
                    error: EdgeError::Overloaded {
                        limit: "concurrent requests",
                    },
                    id: None,
                }),
            };
        let admitted = admitted.and_then(|body| {
            let (Some(kind), req) = (ctx.endpoint, session.req_header()) else {
                return Ok(body);
            };
            if !is_stream(req, kind, ctx.verdict.as_ref()) {
                return Ok(body);
            }
            match Slot::take(&self.load.streams, snapshot.limits.max_streams) {
                Some(slot) => {
                    ctx.slots.push(slot);
                    Ok(body)
                }
                None => Err(Rejection {
                    error: EdgeError::Overloaded { limit: "streams" },
                    id: ctx.verdict.as_ref().and_then(|v| v.id.clone()),
                }),
            }
        });
        match admitted {
            Ok(body) => {
                ctx.handback = Some(body::install(session, body, self.drain.clone()));
                Ok(false)
            }
            Err(rejection) => {
                respond(session, &rejection.error, rejection.id.as_ref()).await;
                ctx.edge_error = Some(rejection.error);
                Ok(true)
            }
        }
    }

    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let (Some(route), Some(snapshot)) = (ctx.route.clone(), ctx.snapshot.clone()) else {
            return Err(Error::explain(ErrorType::InternalError, "no route chosen"));
        };
        let member = match (&ctx.sticky, ctx.tried.len()) {
            // The session's member, and once more after a failed pooled connection.
            (Some(sticky), 0 | 1) => sticky.member.clone(),
            (Some(sticky), _) => {
                ctx.edge_error = Some(EdgeError::SessionMemberGone {
                    member: sticky.member.label.clone(),
                });
                return Err(Error::explain(
                    ErrorType::ConnectError,
                    "the session's member failed",
                ));
            }
            (None, _) => match route.pool.pick(&ctx.tried) {
                Pick::Member(m) => m,
                Pick::AllTried => {
                    let detail = format!(
                        "every healthy member of pool '{}' failed to connect",
                        route.pool.name
                    );
                    ctx.edge_error = Some(EdgeError::ConnectFailed { detail });
                    return Err(Error::explain(
                        ErrorType::ConnectError,
                        "no pool member left to try",
                    ));
                }
                // This request's own failures ejected the last members: report those.
                Pick::NoneHealthy if !ctx.tried.is_empty() => {
                    let detail = format!(
                        "every member of pool '{}' failed to connect",
                        route.pool.name
                    );
                    ctx.edge_error = Some(EdgeError::ConnectFailed { detail });
                    return Err(Error::explain(
                        ErrorType::ConnectError,
                        "no pool member left to try",
                    ));
                }
                Pick::NoneHealthy => {
                    ctx.edge_error = Some(EdgeError::NoHealthyMember {
                        pool: route.pool.name.clone(),
                    });
                    return Err(Error::explain(
                        ErrorType::ConnectError,
                        "no healthy pool member",
                    ));
                }
            },
        };
        ctx.tried.push(member.clone());
        ctx.upstream_started = Some(Instant::now());
        let t = snapshot.timeouts;
        let mut peer = HttpPeer::new(member.addr, false, String::new());
        peer.options.connection_timeout = Some(t.connect);
        // Applies to every upstream read: bounds time to the response header and silence
        // inside a stream (SSE keep-alives reset it).
        peer.options.read_timeout = Some(t.upstream_read);
        peer.options.write_timeout = Some(t.upstream_read);
        peer.options.idle_timeout = Some(t.idle);
        Ok(Box::new(peer))
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        peer: &HttpPeer,
        ctx: &mut Ctx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        if let (Some(route), Some(member)) = (&ctx.route, ctx.tried.last()) {
            member.record_connect_failure(route.pool.health.eject);
            metrics::get()
                .connect_failures
                .with_label_values(&[&route.pool.name, &member.label])
                .inc();
        }
        if ctx.sticky.is_some() {
            // The member owning the session is gone, and the session with it.
            ctx.edge_error = Some(EdgeError::SessionMemberGone {
                member: peer._address.to_string(),
            });
            e.set_retry(false);
            return e;
        }
        // Nothing reached this member, so another one may take the request; `upstream_peer`
        // decides whether one is left.
        log::warn!(
            "upstream {} failed to connect: {}; trying another member",
            peer._address,
            e.etype().as_str()
        );
        e.set_retry(true);
        e
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if ctx.answered_continue {
            upstream.remove_header(&http::header::EXPECT);
        }
        rewrite_upstream_target(upstream, ctx)?;
        // HTTP/2 clients send :authority instead of Host; an HTTP/1.1 upstream needs Host.
        if upstream.headers.get(http::header::HOST).is_none() {
            if let Some(authority) = session
                .req_header()
                .uri
                .authority()
                .map(|a| a.as_str().to_owned())
            {
                upstream.insert_header(http::header::HOST, authority)?;
            }
        }
        Ok(())
    }

    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        seal_session_header(resp, ctx)?;
        let status = resp.status.as_u16();
        ctx.upstream_status = Some(status);
        let m = metrics::get();
        if let (Some(route), Some(member)) = (ctx.route.as_ref(), ctx.member()) {
            if let Some(t) = ctx.upstream_started {
                m.upstream_latency
                    .with_label_values(&[&route.pool.name])
                    .observe(t.elapsed().as_secs_f64());
            }
            m.upstream_responses
                .with_label_values(&[
                    &route.pool.name,
                    &member.label,
                    metrics::status_class(status),
                ])
                .inc();
        }
        let is_sse = resp
            .headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        if is_sse && !ctx.sse {
            ctx.sse = true;
            m.active_sse.with_label_values(&[ctx.era_label()]).inc();
        }
        if is_sse && ctx.endpoint == Some(EndpointKind::SseStream) {
            // The endpoint event changes length; let Pingora re-frame the stream.
            resp.remove_header(&http::header::CONTENT_LENGTH);
            ctx.rewriter = Some(EndpointRewriter::new());
        }
        Ok(())
    }

    fn upstream_response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end: bool,
        ctx: &mut Ctx,
    ) -> Result<Option<std::time::Duration>> {
        if ctx.rewriter.as_ref().is_none_or(|r| r.is_done() && !end) {
            return Ok(None);
        }
        rewrite_sse_chunk(body, end, ctx);
        Ok(None)
    }

    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        ctx: &mut Ctx,
        client_reused: bool,
    ) -> Box<Error> {
        let mut e = e.more_context(format!("Peer: {peer}"));
        // Pingora marks "a reused upstream connection failed before any response" as
        // retryable only on reuse: the member closed an idle pooled connection, so the request
        // never reached it. That is safe to send elsewhere even for a POST (the stored body is
        // replayed), unless the request belongs to a legacy session, whose member is fixed.
        let before_response = session.response_written().is_none() && ctx.upstream_status.is_none();
        if !before_response {
            e.set_retry(false);
        } else if ctx.sticky.is_some() {
            // A legacy session's member is fixed: try it once more on a fresh connection when
            // a pooled one failed; `upstream_peer` turns a second failure into 404.
            e.set_retry(client_reused || e.etype() == &ErrorType::WriteError);
            if !e.retry() {
                ctx.edge_error = Some(EdgeError::SessionMemberGone {
                    member: peer._address.to_string(),
                });
            }
        } else if e.etype() == &ErrorType::WriteError {
            // The member took less than the whole request (it closed or died): it cannot
            // have acted on it.
            e.set_retry(true);
        } else {
            e.retry.decide_reuse(client_reused);
        }
        e
    }

    fn suppress_error_log(&self, _session: &Session, _ctx: &Ctx, e: &Error) -> bool {
        if e.etype() == &body::DRAINING {
            return true;
        }
        // A client closing its stream is how MCP cancels; not an error worth a log line.
        e.esource() == &ErrorSource::Downstream
            && matches!(
                e.etype(),
                ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError
            )
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        if e.etype() == &body::DRAINING {
            // An event stream ended by shutdown: `logging` closes it cleanly.
            return FailToProxy {
                error_code: 0,
                can_reuse_downstream: false,
            };
        }
        let error = ctx.edge_error.take().unwrap_or_else(|| classify_failure(e));
        let client_gone = matches!(error, EdgeError::ClientError { .. })
            && matches!(
                e.etype(),
                ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError
            );
        // Pingora closes the client connection after a failure: say so (`Connection: close`),
        // so a keep-alive client does not send its next request into a closing connection.
        // Keep-alive is a setting of the real session, so put it back first.
        body::restore(session, &mut ctx.handback).await;
        session.downstream_session.set_keepalive(None);
        let code = if session.response_written().is_some() || client_gone {
            // Too late for an error response: the stream is cut, which the client sees.
            0
        } else {
            let id = ctx.verdict.as_ref().and_then(|v| v.id.clone());
            respond(session, &error, id.as_ref()).await;
            error.status()
        };
        ctx.edge_error = Some(error);
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
        body::restore(session, &mut ctx.handback).await;
        if e.is_some_and(|e| e.etype() == &body::DRAINING) {
            // The edge is shutting down: end the event stream properly (final chunk or h2
            // END_STREAM) so the client sees a closed stream, not a broken connection.
            let _ = session.downstream_session.finish_body().await;
        }
        let m = metrics::get();
        let outcome = match (&ctx.edge_error, ctx.upstream_status) {
            (None, Some(_)) => "forwarded",
            (Some(EdgeError::ClientError { .. }), _) => "client_error",
            (Some(e), _) if e.status() < 500 => "rejected",
            _ => "failed",
        };
        if let Some(err) = &ctx.edge_error {
            m.edge_errors.with_label_values(&[err.kind()]).inc();
        }
        m.requests
            .with_label_values(&[
                ctx.route_label(),
                ctx.method_label(),
                ctx.era_label(),
                outcome,
            ])
            .inc();
        m.request_duration
            .with_label_values(&[ctx.route_label(), ctx.era_label()])
            .observe(ctx.started.elapsed().as_secs_f64());
        if ctx.sse {
            m.active_sse.with_label_values(&[ctx.era_label()]).dec();
        }
        log_access(session, ctx, outcome);
    }
}

/// Everything that happens before an upstream is chosen; `Ok` carries the request body
/// (empty for GET and DELETE). An `Err` is answered by the edge and never reaches an upstream.
async fn admit(
    session: &mut Session,
    ctx: &mut Ctx,
    snapshot: &Runtime,
) -> std::result::Result<Bytes, Rejection> {
    let reject = |error: EdgeError| Rejection { error, id: None };
    let limits = snapshot.limits;
    let timeouts = snapshot.timeouts;
    session
        .downstream_session
        .set_keepalive(Some(timeouts.idle.as_secs().max(1)));

    let req = session.req_header();
    if header_bytes(req) > limits.max_header_bytes {
        return Err(reject(EdgeError::HeadersTooLarge {
            limit: limits.max_header_bytes,
        }));
    }
    let path = req.uri.path();
    let Some(endpoint) = snapshot.endpoint(path).cloned() else {
        return Err(reject(EdgeError::NoRoute {
            path: path.chars().take(200).collect(),
        }));
    };
    let route = endpoint.route;
    ctx.route = Some(route.clone());
    ctx.endpoint = Some(endpoint.kind);
    route.origins.check(&req.headers).map_err(reject)?;
    check_host(req, &route).map_err(reject)?;
    let method = req.method.clone();
    let legacy_only = |ctx: &mut Ctx| -> std::result::Result<(), Rejection> {
        if !route.versions.accepts_legacy() {
            return Err(Rejection {
                error: EdgeError::MethodNotAllowed {
                    method: method.to_string(),
                },
                id: None,
            });
        }
        ctx.verdict = Some(Verdict {
            era: Era::Legacy,
            method: None,
            id: None,
            name: None,
        });
        Ok(())
    };
    let body = match (endpoint.kind, &method) {
        (EndpointKind::Streamable | EndpointKind::Messages, &http::Method::POST) => {
            read_and_check_body(session, ctx, snapshot, &route).await?
        }
        (EndpointKind::Streamable, &http::Method::GET | &http::Method::DELETE)
        | (EndpointKind::SseStream, &http::Method::GET) => {
            legacy_only(ctx)?;
            Bytes::new()
        }
        // CORS preflight: the upstream owns its CORS policy.
        (_, &http::Method::OPTIONS) => return Ok(Bytes::new()),
        _ => {
            return Err(reject(EdgeError::MethodNotAllowed {
                method: method.to_string(),
            }))
        }
    };
    if ctx.verdict.as_ref().is_some_and(|v| v.era == Era::Legacy) {
        // Only legacy tokens bind the credential: modern requests skip the digest.
        let auth = session
            .req_header()
            .headers
            .get(http::header::AUTHORIZATION);
        ctx.credential = credential_digest(auth.map(|v| v.as_bytes()));
        let id = ctx.verdict.as_ref().and_then(|v| v.id.clone());
        ctx.sticky = session_of(session.req_header(), ctx, endpoint.kind, &route)
            .map_err(|error| Rejection { error, id })?;
    }
    Ok(body)
}

async fn read_and_check_body(
    session: &mut Session,
    ctx: &mut Ctx,
    snapshot: &Runtime,
    route: &Route,
) -> std::result::Result<Bytes, Rejection> {
    let reject = |error: EdgeError| Rejection { error, id: None };
    let req = session.req_header();
    check_content_type(req).map_err(reject)?;
    if expects_continue(req) {
        ctx.answered_continue = true;
        session
            .downstream_session
            .write_continue_response()
            .await
            .map_err(|e| {
                reject(EdgeError::ClientError {
                    detail: e.to_string(),
                })
            })?;
    }
    session
        .downstream_session
        .set_read_timeout(Some(snapshot.timeouts.request_body));
    let bytes = body::read_all(session, snapshot.limits.max_body_bytes)
        .await
        .map_err(reject)?;
    let verdict = rules::check_post(&session.req_header().headers, &bytes, &route.versions)?;
    if ctx.endpoint == Some(EndpointKind::Messages) && verdict.era != Era::Legacy {
        return Err(Rejection {
            error: EdgeError::InvalidRequest {
                detail: "the HTTP+SSE messages endpoint serves legacy revisions only".into(),
            },
            id: verdict.id,
        });
    }
    ctx.verdict = Some(verdict);
    Ok(bytes)
}

/// The legacy session a request names, if any: `Mcp-Session-Id` on the Streamable HTTP
/// endpoint, the session query parameter on the HTTP+SSE messages endpoint (required there).
fn session_of(
    req: &RequestHeader,
    ctx: &Ctx,
    kind: EndpointKind,
    route: &Route,
) -> std::result::Result<Option<Sticky>, EdgeError> {
    let token = match kind {
        EndpointKind::Streamable => match headers::single(&req.headers, SESSION_ID) {
            Ok(None) => return Ok(None),
            Ok(Some(v)) => String::from_utf8_lossy(v).into_owned(),
            Err(_) => {
                return Err(EdgeError::SessionUnknown {
                    reason: "Mcp-Session-Id appears more than once",
                })
            }
        },
        EndpointKind::Messages => {
            let query = req.uri.query().unwrap_or("");
            match sse::find_query_param(query, &route.session_params) {
                Some((_, v)) => v.to_string(),
                None => return Err(EdgeError::SessionMissing),
            }
        }
        EndpointKind::SseStream => return Ok(None),
    };
    affinity::resolve(ctx.sessions(), route, &token, ctx.credential).map(Some)
}

/// Upstream request target: strip the route's public prefix; put the upstream's own session
/// identifier back where the client sent the token.
fn rewrite_upstream_target(upstream: &mut RequestHeader, ctx: &Ctx) -> Result<()> {
    let Some(route) = &ctx.route else {
        return Ok(());
    };
    if let (Some(sticky), Some(EndpointKind::Streamable)) = (&ctx.sticky, ctx.endpoint) {
        upstream.insert_header(SESSION_ID, sticky.upstream_id.as_str())?;
    }
    let sticky_query = matches!(ctx.endpoint, Some(EndpointKind::Messages)) && ctx.sticky.is_some();
    if route.prefix.is_empty() && !sticky_query {
        return Ok(());
    }
    let path = upstream.uri.path();
    let mut target = path
        .strip_prefix(route.prefix.as_str())
        .unwrap_or(path)
        .to_string();
    if let Some(q) = upstream.uri.query() {
        target = format!("{target}?{q}");
    }
    if let (true, Some(sticky)) = (sticky_query, &ctx.sticky) {
        let query = upstream.uri.query().unwrap_or("");
        if let Some((name, _)) = sse::find_query_param(query, &route.session_params) {
            target = sse::replace_query_param(&target, name, &sticky.upstream_id);
        }
    }
    let uri = target.parse::<http::Uri>().map_err(|e| {
        Error::because(ErrorType::InternalError, "rewriting the upstream target", e)
    })?;
    upstream.set_uri(uri);
    Ok(())
}

/// Replace an upstream `Mcp-Session-Id` with a token (or the client's own token, when the
/// upstream repeats the identifier the client's token carries).
fn seal_session_header(resp: &mut ResponseHeader, ctx: &Ctx) -> Result<()> {
    let Some(raw) = resp
        .headers
        .get(SESSION_ID)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    else {
        return Ok(());
    };
    let token = match &ctx.sticky {
        Some(sticky) if sticky.upstream_id == raw => sticky.token.clone(),
        _ => {
            let (Some(route), Some(member), Some(sessions)) =
                (&ctx.route, ctx.member(), ctx.sessions())
            else {
                // No key ring (a modern-only route): never let the raw identifier out.
                resp.remove_header(SESSION_ID);
                return Ok(());
            };
            affinity::seal(sessions, route, &member.label, &raw, ctx.credential).map_err(|e| {
                Error::because(ErrorType::InternalError, "sealing a session token", e)
            })?
        }
    };
    resp.insert_header(SESSION_ID, token)?;
    Ok(())
}

/// Feed one upstream chunk of an HTTP+SSE stream through the endpoint rewriter.
fn rewrite_sse_chunk(body: &mut Option<Bytes>, end: bool, ctx: &mut Ctx) {
    let (Some(route), Some(member), Some(sessions)) = (
        ctx.route.clone(),
        ctx.member().map(|m| m.label.clone()),
        ctx.snapshot.as_ref().and_then(|s| s.sessions.clone()),
    ) else {
        return;
    };
    let credential = ctx.credential;
    let Some(rewriter) = ctx.rewriter.as_mut() else {
        return;
    };
    let mut seal_failed = false;
    let mut swap = |url: &str| {
        sse::rewrite_endpoint_url(url, &route.prefix, &route.session_params, &mut |sid| {
            match affinity::seal(&sessions, &route, &member, sid, credential) {
                Ok(t) => Some(t),
                Err(e) => {
                    log::error!("{e}");
                    seal_failed = true;
                    None
                }
            }
        })
    };
    let mut out = match body.take() {
        Some(chunk) => rewriter.feed(&chunk, &mut swap).to_vec(),
        None => Vec::new(),
    };
    if end {
        out.extend_from_slice(&rewriter.finish());
    }
    if seal_failed {
        log::error!("HTTP+SSE endpoint event passed through unsealed");
    }
    // An empty chunk holds back a partial event; `None` would mean end of body.
    *body = Some(Bytes::from(out));
}

/// The `Host` (or HTTP/2 `:authority`) must be on the route's allowlist when it has one.
fn check_host(req: &RequestHeader, route: &Route) -> std::result::Result<(), EdgeError> {
    if route.hosts.is_empty() {
        return Ok(());
    }
    let host = req
        .headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri.authority().map(|a| a.as_str()))
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let bare = host
        .rsplit_once(':')
        .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host.as_str(), |(h, _)| h);
    if route.hosts.iter().any(|a| *a == host || *a == bare) {
        Ok(())
    } else {
        Err(EdgeError::HostRejected {
            host: host.chars().take(200).collect(),
        })
    }
}

/// Is this request a long-lived stream (counted against `limits.max_streams`)?
fn is_stream(req: &RequestHeader, kind: EndpointKind, verdict: Option<&Verdict>) -> bool {
    match kind {
        EndpointKind::SseStream => true,
        EndpointKind::Streamable if req.method == http::Method::GET => true,
        _ => verdict.and_then(|v| v.method.as_deref()) == Some("subscriptions/listen"),
    }
}

/// A slot in a bounded counter, released when the request's context is dropped.
pub struct Slot(Arc<std::sync::atomic::AtomicUsize>);

impl Slot {
    fn take(counter: &Arc<std::sync::atomic::AtomicUsize>, limit: usize) -> Option<Slot> {
        use std::sync::atomic::Ordering;
        let previous = counter.fetch_add(1, Ordering::AcqRel);
        let slot = Slot(counter.clone());
        (previous < limit).then_some(slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

fn header_bytes(req: &RequestHeader) -> usize {
    // The request target as sent (origin-form: path and query; else the whole URI).
    req.uri.path_and_query().map_or(0, |p| p.as_str().len())
        + req.uri.authority().map_or(0, |a| a.as_str().len())
        + req
            .headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 4)
            .sum::<usize>()
}

fn check_content_type(req: &RequestHeader) -> std::result::Result<(), EdgeError> {
    let ct = req
        .headers
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.as_bytes())
        .unwrap_or(b"");
    let essence = ct.split(|&c| c == b';').next().unwrap_or(b"");
    if essence
        .trim_ascii()
        .eq_ignore_ascii_case(b"application/json")
    {
        Ok(())
    } else {
        Err(EdgeError::UnsupportedMediaType {
            content_type: String::from_utf8_lossy(ct).chars().take(100).collect(),
        })
    }
}

fn expects_continue(req: &RequestHeader) -> bool {
    req.headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Map a Pingora failure to the edge error the client sees.
fn classify_failure(e: &Error) -> EdgeError {
    let detail = e.to_string();
    match (e.esource(), e.etype()) {
        (
            _,
            ErrorType::ConnectTimedout
            | ErrorType::ConnectRefused
            | ErrorType::ConnectNoRoute
            | ErrorType::ConnectError,
        ) => EdgeError::ConnectFailed { detail },
        (ErrorSource::Upstream, ErrorType::ReadTimedout | ErrorType::WriteTimedout) => {
            EdgeError::UpstreamTimeout { detail }
        }
        (ErrorSource::Upstream, _) => EdgeError::UpstreamError { detail },
        (ErrorSource::Downstream, _) => EdgeError::ClientError { detail },
        _ => EdgeError::Internal { detail },
    }
}

/// Write an edge error response. Failures to write mean the client is gone; nothing to do.
async fn respond(session: &mut Session, error: &EdgeError, id: Option<&Value>) {
    let body: Bytes = error.body(id);
    if !session.downstream_session.is_body_done() {
        // The request body was not read: the connection cannot carry another request.
        session.downstream_session.set_keepalive(None);
    }
    let Ok(mut resp) = ResponseHeader::build(error.status(), Some(4)) else {
        return;
    };
    let ok = resp
        .insert_header(http::header::CONTENT_TYPE, "application/json")
        .is_ok()
        && resp
            .insert_header(http::header::CONTENT_LENGTH, body.len().to_string())
            .is_ok()
        && resp.insert_header(ERROR_HEADER, error.kind()).is_ok()
        && (!matches!(error, EdgeError::MethodNotAllowed { .. })
            || resp
                .insert_header(http::header::ALLOW, "GET, POST, DELETE, OPTIONS")
                .is_ok());
    if !ok {
        return;
    }
    if session
        .write_response_header(Box::new(resp), false)
        .await
        .is_ok()
    {
        let _ = session.write_response_body(Some(body), true).await;
    }
}

/// One JSON line per request. Never logs Authorization, session ids or tokens.
fn log_access(session: &Session, ctx: &Ctx, outcome: &str) {
    if !log::log_enabled!(target: "access", log::Level::Info) {
        return;
    }
    let status = session.response_written().map(|r| r.status.as_u16());
    let line = serde_json::json!({
        "route": ctx.route_label(),
        "http_method": session.req_header().method.as_str(),
        "method": ctx.verdict.as_ref().and_then(|v| v.method.as_deref()).map(|m| mcp::method_label(Some(m))),
        "name": ctx.verdict.as_ref().and_then(|v| v.name.as_deref()),
        "era": ctx.era_label(),
        "member": ctx.member().map(|m| m.label.as_str()),
        "status": status,
        "outcome": outcome,
        "error": ctx.edge_error.as_ref().map(EdgeError::kind),
        "duration_ms": ctx.started.elapsed().as_secs_f64() * 1000.0,
        "bytes_sent": session.body_bytes_sent(),
    });
    log::info!(target: "access", "{line}");
}
