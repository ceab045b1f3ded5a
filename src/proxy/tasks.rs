//! Tasks that stay with their server (Tasks extension, SEP-2663).
//!
//! A server may answer a `tools/call` with a task that only its own instance holds; every
//! later `tasks/get`, `tasks/update` and `tasks/cancel` must reach that instance. As with
//! legacy sessions, the client carries the route: the edge hands out task ids that seal the
//! member and the server's own id (`mcp-edge-task.` + a token of kind `Task`, sealed with the
//! session key ring, so every replica opens them), and puts the server's id back on the way in.
//!
//! - Out: `result.taskId` of answers to `tools/call` (from clients that declared the
//!   extension) and to `tasks/*`, and `params.taskId` of `notifications/tasks/status` on their
//!   event streams, are swapped as they stream by ([`crate::mcp::task_ids`]). An id the
//!   request itself named goes back as the client sent it.
//! - In: the `Mcp-Name` header and `params.taskId` (byte-exact elsewhere) carry the server's
//!   id again, and the request goes to the member the token names.
//! - A task id without the prefix passes through untouched (a server's own id, or no key
//!   ring): such requests go round-robin, as before.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use pingora::http::RequestHeader;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::body::Body;
use super::ctx::Ctx;
use crate::error::EdgeError;
use crate::mcp::headers::{self, NAME};
use crate::mcp::rules::{Era, Verdict};
use crate::mcp::task_ids::{JsonScan, SseScan};
use crate::metrics;
use crate::routing::Member;
use crate::runtime::{Route, Runtime};
use crate::session::affinity::now_secs;
use crate::session::token::{self, Claims, Kind};
use crate::session::Sessions;

/// What a task id handed out by the edge starts with.
pub const PREFIX: &str = "mcp-edge-task.";

/// What a request has to do with tasks.
#[derive(Debug)]
pub enum TaskRole {
    /// A `tools/call` from a client that declared the extension: its answer may be a task.
    Create,
    /// A `tasks/*` request for a task the edge handed out.
    Follow(Box<Followed>),
}

/// Where a `tasks/*` request goes, and what it carried.
#[derive(Debug)]
pub struct Followed {
    pub member: Arc<Member>,
    /// The server's own task id.
    pub upstream_id: String,
    /// The id the client sent (echoed when the server names the same task).
    pub token: String,
    /// The body's length after the swap.
    pub body_len: usize,
}

impl TaskRole {
    pub fn followed(&self) -> Option<&Followed> {
        match self {
            TaskRole::Follow(f) => Some(f),
            TaskRole::Create => None,
        }
    }
}

/// Admission's step for a modern request: a `tools/call` that may create a task, or a
/// `tasks/*` request whose id the edge sealed (opened, and the body given the server's id).
pub fn admit(
    verdict: &Verdict,
    body: &mut Body,
    snapshot: &Runtime,
    route: &Route,
    principal: Option<&crate::identity::Principal>,
) -> Result<Option<TaskRole>, EdgeError> {
    let Some(sessions) = snapshot.sessions.as_deref() else {
        return Ok(None);
    };
    if !matches!(verdict.era, Era::Modern(_)) {
        return Ok(None);
    }
    match verdict.method.as_deref() {
        Some("tools/call") if verdict.tasks => Ok(Some(TaskRole::Create)),
        Some("tasks/get" | "tasks/update" | "tasks/cancel") => {
            let Some(sealed) = verdict.name.as_deref().and_then(|n| n.strip_prefix(PREFIX)) else {
                return Ok(None);
            };
            let claims = open(sessions, sealed, route, principal.map(|p| p.binding()))?;
            let Some(member) = route.pool.find(&claims.member) else {
                return Err(refused("its server left the pool"));
            };
            body.bytes = swap_param(&body.bytes, &claims.upstream_id)?;
            metrics::get().task_id("opened");
            Ok(Some(TaskRole::Follow(Box::new(Followed {
                member,
                upstream_id: claims.upstream_id,
                token: format!("{PREFIX}{sealed}"),
                body_len: body.bytes.len(),
            }))))
        }
        _ => Ok(None),
    }
}

fn refused(reason: &'static str) -> EdgeError {
    metrics::get().task_id("refused");
    EdgeError::TaskUnknown { reason }
}

fn open(
    sessions: &Sessions,
    sealed: &str,
    route: &Route,
    principal: Option<[u8; 16]>,
) -> Result<Claims, EdgeError> {
    // A task lives as long as its server keeps it (its `ttlSeconds`, maybe unlimited), and
    // polling echoes the id it was given: the edge sets no age of its own.
    let claims = token::open_kind(&sessions.ring, sealed, now_secs(), u64::MAX, Kind::Task)
        .map_err(|e| refused(e.reason()))?;
    if claims.pool != route.pool.name {
        return Err(refused("issued for another pool"));
    }
    if claims.credential.is_some() && claims.credential != principal {
        return Err(refused("another caller's task"));
    }
    Ok(claims)
}

/// `body` with the string at `params.taskId` replaced by `id` (as a JSON string); every
/// other byte as it was.
fn swap_param(body: &Bytes, id: &str) -> Result<Bytes, EdgeError> {
    #[derive(Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        params: Option<Params<'a>>,
    }
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(borrow, rename = "taskId")]
        task_id: Option<&'a RawValue>,
    }
    let invalid = |detail: &str| EdgeError::InvalidRequest {
        detail: detail.into(),
    };
    // The body passed the MCP rules, so it is JSON: a failure here is a repeated key.
    let message: Message = serde_json::from_slice(body)
        .map_err(|_| invalid("params or params.taskId appears more than once"))?;
    let raw = message
        .params
        .and_then(|p| p.task_id)
        .ok_or_else(|| invalid("params.taskId is missing"))?
        .get();
    // The raw value is a slice of `body`: its place there.
    let start = (raw.as_ptr() as usize).wrapping_sub(body.as_ptr() as usize);
    let end = start.wrapping_add(raw.len());
    if end > body.len() || start > end {
        return Err(invalid("params.taskId could not be located"));
    }
    let quoted = serde_json::to_string(id).map_err(|_| invalid("task id"))?;
    let mut out = BytesMut::with_capacity(body.len() - raw.len() + quoted.len());
    out.extend_from_slice(&body[..start]);
    out.extend_from_slice(quoted.as_bytes());
    out.extend_from_slice(&body[end..]);
    Ok(out.freeze())
}

/// Upstream request head of a request that has to do with tasks: no compressed answer
/// (the scan reads plain JSON); for a followed task, the server's id in `Mcp-Name` and the
/// body's new length.
pub fn restore_head(upstream: &mut RequestHeader, role: &TaskRole) -> pingora::Result<()> {
    upstream.remove_header(&http::header::ACCEPT_ENCODING);
    let TaskRole::Follow(followed) = role else {
        return Ok(());
    };
    upstream.insert_header(NAME, headers::encode_value(&followed.upstream_id))?;
    if upstream.headers.contains_key(http::header::CONTENT_LENGTH) {
        upstream.insert_header(http::header::CONTENT_LENGTH, followed.body_len.to_string())?;
    }
    Ok(())
}

/// The scan over one response's body.
#[derive(Debug)]
pub enum Scan {
    Json(JsonScan),
    Sse(SseScan),
}

/// Ids sealed for one response, so the same task gets the same id throughout it.
#[derive(Debug, Default)]
pub struct Sealed(Vec<(String, String)>);

/// Start scanning the response of a request that has to do with tasks, when it is JSON or
/// an event stream. Returns whether it did (the body then changes length).
pub fn watch(ctx: &mut Ctx, content_type: Option<&[u8]>) -> bool {
    let Some(admitted) = &ctx.admitted else {
        return false;
    };
    if admitted.task.is_none() || ctx.snapshot.sessions.is_none() {
        return false;
    }
    let starts =
        |t: &[u8], with: &[u8]| t.len() >= with.len() && t[..with.len()].eq_ignore_ascii_case(with);
    let scan = match content_type {
        Some(t) if starts(t, b"text/event-stream") => Scan::Sse(SseScan::new()),
        Some(t) if starts(t, b"application/json") => Scan::Json(JsonScan::new()),
        _ => return false,
    };
    ctx.tasks = Some(Box::new((scan, Sealed::default())));
    true
}

/// Feed one response chunk through the scan. An id that cannot be sealed ends the
/// response: the server's raw id never reaches the client.
pub fn rewrite_chunk(body: &mut Option<Bytes>, end: bool, ctx: &mut Ctx) -> pingora::Result<()> {
    let (Some(admitted), Some(member), Some(sessions), Some((scan, sealed))) = (
        ctx.admitted.as_ref(),
        ctx.upstream.member(),
        ctx.snapshot.sessions.as_deref(),
        ctx.tasks.as_deref_mut(),
    ) else {
        return Ok(());
    };
    let followed = admitted.task.as_ref().and_then(TaskRole::followed);
    let pool = admitted.route.pool.name.as_str();
    let binding = ctx.principal.as_deref().map(|p| p.binding());
    let mut failure = None;
    let mut swap = |upstream_id: &str| -> Option<String> {
        if let Some(f) = followed.filter(|f| f.upstream_id == upstream_id) {
            return Some(f.token.clone());
        }
        if let Some((_, id)) = sealed.0.iter().find(|(u, _)| u == upstream_id) {
            return Some(id.clone());
        }
        match seal(sessions, pool, &member.label, upstream_id, binding) {
            // Too long for a token: passed through as it is (its requests go round-robin).
            Ok(None) => None,
            Ok(Some(id)) => {
                // A response names a handful of tasks; keep the list short regardless.
                if sealed.0.len() < 4 {
                    sealed.0.push((upstream_id.to_string(), id.clone()));
                }
                Some(id)
            }
            Err(e) => {
                failure = Some(e);
                None
            }
        }
    };
    let mut out = BytesMut::new();
    match scan {
        Scan::Json(json) => {
            if let Some(chunk) = body.take() {
                json.feed(&chunk, &mut out, &mut swap);
            }
            if end {
                json.finish(&mut out);
            }
        }
        Scan::Sse(sse) => {
            if let Some(chunk) = body.take() {
                out.extend_from_slice(&sse.feed(&chunk, &mut swap));
            }
            if end {
                out.extend_from_slice(&sse.finish());
            }
        }
    }
    if let Some(e) = failure {
        return Err(pingora::Error::because(
            pingora::ErrorType::InternalError,
            "sealing a task id",
            e,
        ));
    }
    // An empty chunk holds back a partial id; `None` would mean end of body.
    *body = Some(out.freeze());
    Ok(())
}

fn seal(
    sessions: &Sessions,
    pool: &str,
    member: &str,
    upstream_id: &str,
    principal: Option<[u8; 16]>,
) -> Result<Option<String>, EdgeError> {
    let claims = Claims {
        pool: pool.to_string(),
        member: member.to_string(),
        upstream_id: upstream_id.to_string(),
        issued_at: now_secs(),
        // On a route with `auth`, a task is its principal's (a refreshed token keeps it).
        credential: principal,
    };
    let t =
        token::seal_kind(&sessions.ring, &claims, Kind::Task).map_err(|e| EdgeError::Internal {
            detail: format!("sealing a task id: {e}"),
        })?;
    if t.len() > token::MAX_TOKEN_CHARS {
        return Ok(None);
    }
    metrics::get().task_id("sealed");
    Ok(Some(format!("{PREFIX}{t}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_param_is_swapped_and_nothing_else() {
        let body = Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{ "taskId" : "mcp-edge-task.abc","requestState":"taskId"},"x":{"taskId":"y"}}"#,
        );
        let out = swap_param(&body, "t\"1").unwrap();
        assert_eq!(
            &out[..],
            &br#"{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{ "taskId" : "t\"1","requestState":"taskId"},"x":{"taskId":"y"}}"#[..]
        );
        let twice = Bytes::from_static(br#"{"params":{"taskId":"a","taskId":"b"}}"#);
        assert!(swap_param(&twice, "c").is_err());
    }
}
