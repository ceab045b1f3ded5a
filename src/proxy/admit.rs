//! Admission: every check a request passes before an upstream is chosen, in order.
//!
//! limits → head size → route → Origin → Host → CORS preflight → method and body (MCP
//! rules) → stream slot → legacy session token. Pass-through routes skip the MCP rules. A step that refuses returns a [`Rejection`]; the edge answers it
//! and the request never reaches an upstream. A new check is one function here (or a module
//! of its own) and one line in [`admit`].

use std::sync::Arc;

use http::Method;
use pingora::http::RequestHeader;
use pingora::proxy::Session;

use super::ctx::{Admitted, Ctx};
use super::limits::{self, Load};
use super::{access, body, bridge, cors, legacy, tasks};
use crate::budget::Budget;
use crate::error::{EdgeError, Rejection};
use crate::mcp::rules::{self, Era};
use crate::runtime::{Endpoint, EndpointKind, Route, Runtime};

/// What admission lets through.
pub enum Admission {
    /// To the upstream: the request's state and its body (if it has one).
    Proxy {
        admitted: Admitted,
        body: Option<body::Body>,
    },
    /// A bridged legacy message the edge answers itself (`initialize`, `ping`, …).
    Answer(bridge::Answer),
    /// A CORS preflight from an allowed origin, which the edge answers itself.
    Preflight {
        methods: &'static str,
        max_age: u64,
        /// Allow whatever headers the page asks for (a pass-through route).
        any_header: bool,
    },
}

pub async fn admit(
    session: &mut Session,
    ctx: &mut Ctx,
    load: &Load,
) -> Result<Admission, Rejection> {
    let snapshot = ctx.snapshot.clone();
    ctx.slots.push(load.request(&snapshot.limits)?);
    keep_alive(session, &snapshot);
    check_head_size(session.req_header(), &snapshot)?;
    if let Some(answer) = access::metadata(session.req_header(), &snapshot, ctx.tls)? {
        body::discard(session, ctx, &load.budget).await?;
        return Ok(Admission::Answer(answer));
    }
    let endpoint = route(session.req_header(), &snapshot)?;
    ctx.labels.route = Some(endpoint.route.clone());
    let passthrough = endpoint.kind == EndpointKind::Passthrough;
    // A pass-through route without an origin list does not look at `Origin` (a same-origin
    // form post to an authorization server carries one).
    if !passthrough || endpoint.route.origins.grants_any() {
        endpoint
            .route
            .origins
            .check(&session.req_header().headers)?;
    }
    ctx.cors = cors::granted(session.req_header(), &endpoint.route);
    check_host(session.req_header(), &endpoint.route)?;
    if ctx.cors.is_some() && cors::is_preflight(session.req_header()) {
        body::discard(session, ctx, &load.budget).await?;
        return Ok(Admission::Preflight {
            methods: allowed_methods(&endpoint),
            max_age: endpoint.route.cors_max_age,
            any_header: passthrough,
        });
    }
    ctx.principal = access::identify(session, ctx, &endpoint)
        .await?
        .map(Box::new);
    let mut request = request(session, ctx, &endpoint, &load.budget).await?;
    if limits::is_stream(session.req_header(), endpoint.kind, ctx.labels.method) {
        let slot = load.stream(&snapshot.limits).await;
        ctx.slots
            .push(slot.map_err(|e| Rejection::with_id(e, request.id.clone()))?);
    }
    let (bridge, bridge_answer) = match request.bridge.take() {
        Some(bridge::Bridged::Answer(answer)) => (None, Some(answer)),
        Some(bridge::Bridged::Forward(forward)) => (Some(forward), None),
        None => (None, None),
    };
    // The session is checked before the policy: a hidden name with a bad session gets what
    // any other name gets.
    let legacy = match request.era {
        Some(Era::Legacy) if bridge.is_none() && bridge_answer.is_none() => Some(
            legacy::admit(
                session.req_header(),
                &snapshot,
                &endpoint,
                crate::session::binding(session.req_header(), ctx.principal.as_deref()),
            )
            .map_err(|e| Rejection::with_id(e, request.id.clone()))?,
        ),
        _ => None,
    };
    let client = session
        .client_addr()
        .and_then(|a| a.as_inet())
        .map(|a| a.ip());
    let req = session.req_header();
    let named = access::Named {
        era: request.era.as_ref(),
        method: request.method.as_deref(),
        id: request.id.as_ref(),
        target: request.target.as_ref(),
        batch: request.batch,
        stream: req.method == Method::GET,
        messages: endpoint.kind == EndpointKind::Messages,
        body: request.body.as_ref().map(|b| &b.bytes[..]),
        req,
        has_id: request.has_id,
        bridged: bridge.is_some(),
    };
    let mut body_len = None;
    match access::police(ctx, &endpoint.route, client, named)? {
        access::Policed::Pass => {}
        access::Policed::Answer(answer) => return Ok(Admission::Answer(answer)),
        access::Policed::Replace(replaced) => {
            if let Some(body) = request.body.as_mut() {
                body_len = Some(replaced.len());
                body.bytes = bytes::Bytes::from(replaced);
            }
        }
    }
    if let Some(answer) = bridge_answer {
        return Ok(Admission::Answer(answer));
    }
    Ok(Admission::Proxy {
        admitted: Admitted {
            route: endpoint.route,
            endpoint: endpoint.kind,
            id: request.id,
            legacy,
            task: request.task,
            bridge,
            body_len,
        },
        body: request.body,
    })
}

/// Client connections stay open between requests for `timeouts.idle_ms`.
fn keep_alive(session: &mut Session, snapshot: &Runtime) {
    let idle = snapshot.timeouts.idle.as_secs().max(1);
    session.downstream_session.set_keepalive(Some(idle));
}

fn check_head_size(req: &RequestHeader, snapshot: &Runtime) -> Result<(), EdgeError> {
    let limit = snapshot.limits.max_header_bytes;
    // The request target as sent (origin-form: path and query; else the whole URI).
    let size = req.uri.path_and_query().map_or(0, |p| p.as_str().len())
        + req.uri.authority().map_or(0, |a| a.as_str().len())
        + req
            .headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 4)
            .sum::<usize>();
    if size > limit {
        return Err(EdgeError::HeadersTooLarge { limit });
    }
    Ok(())
}

fn route(req: &RequestHeader, snapshot: &Runtime) -> Result<Endpoint, EdgeError> {
    let path = req.uri.path();
    snapshot
        .endpoint(path)
        .cloned()
        .ok_or_else(|| EdgeError::NoRoute {
            path: path.chars().take(200).collect(),
        })
}

/// The `Host` (or HTTP/2 `:authority`) must be on the route's allowlist when it has one.
pub(super) fn check_host(req: &RequestHeader, route: &Route) -> Result<(), EdgeError> {
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

/// What the method and body say: the era (`None` for a CORS preflight), the id, the body.
struct Request {
    era: Option<Era>,
    id: Option<serde_json::Value>,
    body: Option<body::Body>,
    task: Option<tasks::TaskRole>,
    bridge: Option<bridge::Bridged>,
    method: Option<String>,
    target: Option<crate::identity::policy::Target>,
    batch: bool,
    /// The message has an `id` (readable or not).
    has_id: bool,
}

impl Request {
    fn bodiless(era: Option<Era>) -> Request {
        Request {
            era,
            id: None,
            body: None,
            task: None,
            bridge: None,
            method: None,
            target: None,
            batch: false,
            has_id: false,
        }
    }
}

/// POSTs carry a JSON-RPC body checked against the MCP rules; GET and DELETE exist only
/// for legacy sessions and streams; OPTIONS goes to the upstream (unless the edge answered
/// it as a CORS preflight). A pass-through route forwards any method and body.
async fn request(
    session: &mut Session,
    ctx: &mut Ctx,
    endpoint: &Endpoint,
    budget: &Arc<Budget>,
) -> Result<Request, Rejection> {
    let method = session.req_header().method.clone();
    let not_allowed = || EdgeError::MethodNotAllowed {
        method: method.to_string(),
        allow: allowed_methods(endpoint),
    };
    match (endpoint.kind, &method) {
        (EndpointKind::Passthrough, _) => Ok(Request {
            body: body::read_any(session, ctx, budget).await?,
            ..Request::bodiless(None)
        }),
        (EndpointKind::Streamable | EndpointKind::Messages, &Method::POST) => {
            let mut body = body::read(session, ctx, budget).await?;
            let headers = &session.req_header().headers;
            let mut verdict = rules::check_post(headers, &body.bytes, &endpoint.route.versions)?;
            if endpoint.kind == EndpointKind::Messages && verdict.era != Era::Legacy {
                let detail = "the HTTP+SSE messages endpoint serves legacy revisions only";
                return Err(Rejection::with_id(
                    EdgeError::InvalidRequest {
                        detail: detail.into(),
                    },
                    verdict.id,
                ));
            }
            let task = tasks::admit(
                &verdict,
                &mut body,
                &ctx.snapshot,
                &endpoint.route,
                ctx.principal.as_deref(),
            );
            let bridged = (endpoint.route.bridge
                && verdict.era == Era::Legacy
                && endpoint.kind == EndpointKind::Streamable)
                .then(|| {
                    bridge::post(
                        session.req_header(),
                        &ctx.snapshot,
                        &endpoint.route,
                        &mut body,
                        crate::session::binding(session.req_header(), ctx.principal.as_deref()),
                    )
                });
            ctx.labels.record(&mut verdict);
            let reject = |e| Rejection::with_id(e, verdict.id.clone());
            let task = task.map_err(reject)?;
            let bridge = bridged.transpose().map_err(reject)?;
            Ok(Request {
                era: Some(verdict.era),
                id: verdict.id,
                body: Some(body),
                task,
                bridge,
                method: verdict.method,
                target: verdict.target,
                batch: verdict.batch,
                has_id: verdict.has_id,
            })
        }
        (EndpointKind::Streamable, &Method::GET | &Method::DELETE) if endpoint.route.bridge => {
            body::discard(session, ctx, budget).await?;
            ctx.labels.era = Era::Legacy.label();
            if method == Method::GET {
                // No standalone stream through the bridge: clients take 405 as "none".
                return Err(EdgeError::MethodNotAllowed {
                    method: method.to_string(),
                    allow: "POST, DELETE, OPTIONS",
                }
                .into());
            }
            Ok(Request {
                bridge: Some(bridge::Bridged::Answer(bridge::delete())),
                ..Request::bodiless(Some(Era::Legacy))
            })
        }
        (EndpointKind::Streamable, &Method::GET | &Method::DELETE)
        | (EndpointKind::SseStream, &Method::GET) => {
            if !endpoint.route.versions.accepts_legacy() {
                return Err(not_allowed().into());
            }
            ctx.labels.era = Era::Legacy.label();
            body::discard(session, ctx, budget).await?;
            Ok(Request::bodiless(Some(Era::Legacy)))
        }
        (_, &Method::OPTIONS) => {
            body::discard(session, ctx, budget).await?;
            Ok(Request::bodiless(None))
        }
        _ => Err(not_allowed().into()),
    }
}

/// The `Allow` header of a 405: what this endpoint serves.
fn allowed_methods(endpoint: &Endpoint) -> &'static str {
    match endpoint.kind {
        EndpointKind::Streamable if endpoint.route.versions.accepts_legacy() => {
            "GET, POST, DELETE, OPTIONS"
        }
        EndpointKind::Streamable | EndpointKind::Messages => "POST, OPTIONS",
        EndpointKind::SseStream => "GET, OPTIONS",
        EndpointKind::Passthrough => "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS",
    }
}
