//! One JSON access-log line per request, the audit record of who called what and what the
//! edge decided; handed to the writer ([`crate::ops::access_log`]), which adds the timestamp
//! and writes it off the request path.
//!
//! Every line has every field (`null` when it does not apply): the trace and span ids (and
//! the trace the client's own `traceparent` names), the principal (issuer and subject; an API
//! key's subject is its name) and tenant, the client's address (after the trusted proxies),
//! the tool, prompt or resource the request names in any era (at most 256 bytes; a URI
//! without its query and userinfo), the rate limiter's and the policy's verdicts. Never
//! Authorization, session ids, tokens or argument values; with `access_log.argument_names`
//! the names of a tool call's or prompt's arguments (read in the request phase, while the
//! body is the edge's, before the checks that may refuse the request).

use pingora::proxy::Session;
use serde::Serialize;

use crate::error::Rejection;
use crate::mcp::json;
use crate::mcp::target::Kind;
use crate::proxy::ctx::Ctx;
use crate::proxy::stage::{Admission, Flow, Phase, Site, Stage};

/// At most this many argument names, each at most [`MAX_NAME`] bytes.
const MAX_ARGUMENTS: usize = 32;
const MAX_NAME: usize = 64;
/// The longest tool, prompt or resource name logged.
const MAX_LOGGED_NAME: usize = 256;

#[derive(Default)]
pub struct State {
    /// The names of the request's arguments (`access_log.argument_names`).
    arguments: Option<Box<[String]>>,
}

pub struct AccessLog;

impl Stage for AccessLog {
    const NAME: &'static str = "access_log";

    /// A log that is written (its argument names only when asked for).
    fn serves(site: &Site<'_>, phase: Phase) -> bool {
        let wanted = site.runtime.access_log;
        match phase {
            Phase::Request => wanted.enabled && wanted.argument_names,
            _ => wanted.enabled,
        }
    }

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let wanted = a.ctx.snapshot.access_log;
        if wanted.enabled && wanted.argument_names {
            a.ctx.stages.access_log.arguments = argument_names(a.ctx).map(Vec::into_boxed_slice);
        }
        Ok(Flow::Next)
    }

    fn logging(session: &Session, ctx: &mut Ctx) {
        if ctx.snapshot.access_log.enabled {
            log_line(session, ctx);
        }
    }
}

/// The keys of `params.arguments` of a `tools/call` or `prompts/get`: at most
/// [`MAX_ARGUMENTS`], each cut to [`MAX_NAME`] bytes; the rest are skipped unread (a body of
/// a million keys costs no more than its parse).
fn argument_names(ctx: &Ctx) -> Option<Vec<String>> {
    let method = ctx.request.method()?;
    if method != "tools/call" && method != "prompts/get" {
        return None;
    }
    let body = ctx.request.body.as_ref()?;
    let text = std::str::from_utf8(body.bytes()).ok()?;
    let params = json::member(text, "params").ok()??;
    let arguments = json::member(params.get(), "arguments").ok()??;
    let mut de = serde_json::Deserializer::from_str(arguments.get());
    serde::Deserializer::deserialize_map(&mut de, Names).ok()
}

/// Reads an object's first keys, skipping its values.
struct Names;

impl<'de> serde::de::Visitor<'de> for Names {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
        use serde::de::IgnoredAny;
        let mut names = Vec::new();
        loop {
            if names.len() < MAX_ARGUMENTS {
                let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? else {
                    break;
                };
                names.push(cut(&key, MAX_NAME).to_string());
            } else if map.next_key::<IgnoredAny>()?.is_none() {
                break;
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(names)
    }
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// One JSON object per request.
#[derive(Serialize)]
struct Line<'a> {
    route: &'a str,
    http_method: &'a str,
    method: Option<&'a str>,
    name: Option<&'a str>,
    era: &'static str,
    member: Option<&'a str>,
    /// How long it waited for a member's room, when it had to.
    queue_ms: Option<f64>,
    status: Option<u16>,
    outcome: &'static str,
    error: Option<&'static str>,
    duration_ms: f64,
    bytes_sent: usize,
    trace_id: Option<&'a str>,
    span_id: Option<&'a str>,
    /// The trace the client's own `traceparent` names (the same as `trace_id` on a listener
    /// that continues it).
    client_trace_id: Option<&'a str>,
    client: Option<std::net::IpAddr>,
    /// Who called, on a route with `auth`: the principal's subject (an API key's name) and
    /// its issuer, and the tenant.
    principal: Option<&'a str>,
    issuer: Option<&'a str>,
    tenant: Option<&'a str>,
    rate_limit: Option<&'static str>,
    policy: Option<&'static str>,
    policy_rule: Option<&'a str>,
    /// What the member was sent of the caller (`[pools.credential]`): `none`, `identity` or
    /// `static`; never the value. `null` when no member was tried.
    credential: Option<&'static str>,
    /// `null` unless `access_log.argument_names` (every field is on every line).
    arguments: Option<&'a [String]>,
}

fn log_line(session: &Session, ctx: &Ctx) {
    let principal = ctx.request.principal.as_deref();
    let message = ctx.request.message.as_deref();
    // Hex ids on the stack, borrowed by the line (hex digits are UTF-8).
    let ids = super::trace::ids(ctx).map(|sc| {
        (
            super::trace::trace_hex(sc.trace_id()),
            super::trace::span_hex(sc.span_id()),
        )
    });
    let (trace_id, span_id) = match &ids {
        Some((t, s)) => (std::str::from_utf8(t).ok(), std::str::from_utf8(s).ok()),
        None => (None, None),
    };
    let client_trace = super::trace::remote_parent(session.req_header())
        .map(|sc| super::trace::trace_hex(sc.trace_id()));
    let client_trace_id = client_trace
        .as_ref()
        .and_then(|t| std::str::from_utf8(t).ok());
    let name = message.and_then(|m| {
        let resource = m.target.as_ref().is_some_and(|t| t.kind == Kind::Resource);
        let name = m
            .name
            .as_deref()
            .or(m.target.as_ref().map(|t| t.value.as_str()))?;
        let name = cut(name, MAX_LOGGED_NAME);
        Some(match resource {
            true => crate::mcp::target::redacted_uri(name),
            false => name.into(),
        })
    });
    let decided = &ctx.request.decided;
    let line = Line {
        route: ctx.route_name(),
        http_method: super::trace::http_method(&session.req_header().method),
        method: (ctx.labels.method != "none").then_some(ctx.labels.method),
        // The `Mcp-Name` subject (2026-07-28), else the entry the body names (any era); a
        // resource URI without its query and userinfo.
        name: name.as_deref(),
        era: ctx.labels.era.into(),
        member: ctx.upstream.member().map(|m| m.label.as_str()),
        queue_ms: ctx.upstream.queued.map(|d| d.as_secs_f64() * 1000.0),
        status: session.response_written().map(|r| r.status.as_u16()),
        outcome: super::metrics::outcome(ctx).into(),
        error: ctx.error.as_ref().map(|e| e.kind().as_str()),
        duration_ms: ctx.started.elapsed().as_secs_f64() * 1000.0,
        bytes_sent: session.body_bytes_sent(),
        trace_id,
        span_id,
        client_trace_id,
        client: super::forwarding::client_address(session, ctx),
        principal: principal.map(|p| p.subject.as_str()),
        issuer: principal.map(|p| p.issuer.as_str()),
        tenant: principal.and_then(|p| p.tenant.as_deref()),
        rate_limit: decided.rate.map(<&str>::from),
        policy: decided.policy.as_ref().map(|p| p.verdict.into()),
        policy_rule: decided.policy.as_ref().map(|p| p.rule.as_str()),
        credential: ctx.upstream.member().map(|_| super::credential::kind(ctx)),
        arguments: ctx.stages.access_log.arguments.as_deref(),
    };
    let mut json = Vec::with_capacity(480);
    // Serializing borrowed strings and numbers into a Vec cannot fail.
    if serde_json::to_writer(&mut json, &line).is_ok() {
        crate::ops::access_log::submit(json);
    }
}
