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

use bytes::{Bytes, BytesMut};
use pingora::http::ResponseHeader;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::{EdgeError, Rejection};
use crate::mcp::headers::{self, NAME};
use crate::mcp::json;
use crate::mcp::media::Media;
use crate::mcp::rules::{Era, Verdict};
use crate::mcp::task_ids::{JsonScan, SseScan, Swap};
use crate::metrics::{self, TaskIdOp};
use crate::proxy::ctx::{Ctx, Holds, Pinned};
use crate::proxy::edge::Edge;
use crate::proxy::stage::{Admission, Flow, Outbound, Stage};
use crate::runtime::{Route, Runtime};
use crate::session::token::{self, now_secs, Claims, Kind};
use crate::session::{self, Caller, Sessions, Unopened};

/// What a request has to do with tasks, and the scan of its answer.
pub struct State {
    role: TaskRole,
    scan: Option<(Scan, Sealed)>,
}

pub struct Tasks;

impl Stage for Tasks {
    const NAME: &'static str = "tasks";

    async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        let request = &mut a.ctx.request;
        let (Some(endpoint), Some(verdict), Some(body)) =
            (&request.endpoint, &request.message, &mut request.body)
        else {
            return Ok(Flow::Next);
        };
        let principal = request.principal.as_deref().map(|p| p.binding());
        let admitted = admit(verdict, body, &a.ctx.snapshot, &endpoint.route, principal);
        let role = admitted.map_err(|e| Rejection::with_id(e, verdict.id.clone()))?;
        let Some(role) = role else {
            return Ok(Flow::Next);
        };
        if let TaskRole::Follow(followed) = &role {
            request.pinned = Some(Pinned {
                member: followed.member.clone(),
                holds: Holds::Task,
            });
        }
        a.ctx.stages.tasks = Some(Box::new(State { role, scan: None }));
        Ok(Flow::Next)
    }

    /// No compressed answer (the scan reads plain JSON); for a followed task, the server's
    /// id in `Mcp-Name` (the body has it already).
    fn upstream_request(o: &mut Outbound<'_>) -> pingora::Result<()> {
        let Some(state) = &o.ctx.stages.tasks else {
            return Ok(());
        };
        o.head.remove_header(&http::header::ACCEPT_ENCODING);
        if let TaskRole::Follow(followed) = &state.role {
            o.head
                .insert_header(NAME, headers::encode_value(&followed.upstream_id))?;
        }
        Ok(())
    }

    /// Scan an answer that is JSON or an event stream (not compressed: its task ids then stay
    /// the server's, and its tasks are followed round-robin).
    fn response(head: &mut ResponseHeader, ctx: &mut Ctx, _edge: &Edge) -> pingora::Result<()> {
        let Some(state) = ctx.stages.tasks.as_deref_mut() else {
            return Ok(());
        };
        if ctx.response.encoded || ctx.snapshot.sessions.is_none() {
            return Ok(());
        }
        let scan = match ctx.response.media {
            Media::EventStream => Scan::Sse(SseScan::new()),
            Media::Json => Scan::Json(JsonScan::new()),
            Media::Other => return Ok(()),
        };
        state.scan = Some((scan, Sealed::default()));
        // Task ids change length; let Pingora re-frame the body.
        head.remove_header(&http::header::CONTENT_LENGTH);
        Ok(())
    }

    fn response_body(body: &mut Option<Bytes>, end: bool, ctx: &mut Ctx) -> pingora::Result<()> {
        rewrite_chunk(body, end, ctx)
    }
}

/// What a task id handed out by the edge starts with.
pub const PREFIX: &str = "mcp-edge-task.";

/// What a request has to do with tasks.
#[derive(Debug)]
enum TaskRole {
    /// A `tools/call` from a client that declared the extension: its answer may be a task.
    Create,
    /// A `tasks/*` request for a task the edge handed out.
    Follow(Box<Followed>),
}

/// Where a `tasks/*` request goes, and what it carried.
#[derive(Debug)]
struct Followed {
    member: std::sync::Arc<crate::routing::Member>,
    /// The server's own task id.
    upstream_id: String,
    /// The id the client sent (echoed when the server names the same task).
    token: String,
}

/// A modern request: a `tools/call` that may create a task, or a `tasks/*` request whose id
/// the edge sealed (opened, and the body given the server's id).
fn admit(
    verdict: &Verdict,
    body: &mut crate::proxy::body::Body,
    snapshot: &Runtime,
    route: &Route,
    principal: Option<[u8; 16]>,
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
            let claims = open(sessions, sealed, route, principal)?;
            let Some(member) = route.pool.find(&claims.member) else {
                return Err(refused("its server left the pool"));
            };
            body.replace(swap_param(body.bytes(), &claims.upstream_id)?);
            metrics::get().task_id(TaskIdOp::Opened);
            Ok(Some(TaskRole::Follow(Box::new(Followed {
                member,
                upstream_id: claims.upstream_id,
                token: format!("{PREFIX}{sealed}"),
            }))))
        }
        _ => Ok(None),
    }
}

fn refused(reason: &'static str) -> EdgeError {
    metrics::get().task_id(TaskIdOp::Refused);
    EdgeError::TaskUnknown { reason }
}

fn open(
    sessions: &Sessions,
    sealed: &str,
    route: &Route,
    principal: Option<[u8; 16]>,
) -> Result<Claims, EdgeError> {
    // A task lives as long as its server keeps it (its `ttlSeconds`, maybe unlimited), and
    // polling echoes the id it was given: the edge sets no age of its own. On a route with
    // `auth`, a task is its principal's.
    let pool = &route.pool.name;
    session::open_for(
        sessions,
        sealed,
        Kind::Task,
        u64::MAX,
        pool,
        Caller::IfBound(principal),
    )
    .map_err(|e| {
        refused(match e {
            Unopened::Token(t) => t.reason(),
            Unopened::OtherPool => "issued for another pool",
            Unopened::OtherCaller => "another caller's task",
        })
    })
}

/// `body` with the string at `params.taskId` replaced by `id` (as a JSON string); every
/// other byte as it was.
fn swap_param(body: &[u8], id: &str) -> Result<Vec<u8>, EdgeError> {
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
    let quoted = serde_json::to_string(id).map_err(|_| invalid("task id"))?;
    json::splice(body, &[(raw, quoted.as_bytes())])
        .ok_or_else(|| invalid("params.taskId could not be located"))
}

/// The scan over one response's body.
#[derive(Debug)]
enum Scan {
    Json(JsonScan),
    Sse(SseScan),
}

impl Scan {
    /// One chunk (`None`: none) through the scan, `end` ending it.
    fn run(&mut self, chunk: Option<Bytes>, end: bool, swap: &mut Swap<'_>) -> Bytes {
        let mut out = BytesMut::new();
        match self {
            Scan::Json(json) => {
                if let Some(chunk) = chunk {
                    json.feed(&chunk, &mut out, swap);
                }
                if end {
                    json.finish(&mut out);
                }
            }
            Scan::Sse(sse) => {
                if let Some(chunk) = chunk {
                    out.extend_from_slice(&sse.feed(&chunk, swap));
                }
                if end {
                    out.extend_from_slice(&sse.finish());
                }
            }
        }
        out.freeze()
    }
}

/// Ids sealed for one response, so the same task gets the same id throughout it.
#[derive(Debug, Default)]
struct Sealed(Vec<(String, String)>);

/// Feed one response chunk through the scan. An id that cannot be sealed ends the
/// response: the server's raw id never reaches the client.
fn rewrite_chunk(body: &mut Option<Bytes>, end: bool, ctx: &mut Ctx) -> pingora::Result<()> {
    let (Some(endpoint), Some(member), Some(sessions), Some(state)) = (
        ctx.request.endpoint.as_ref(),
        ctx.upstream.member(),
        ctx.snapshot.sessions.as_deref(),
        ctx.stages.tasks.as_deref_mut(),
    ) else {
        return Ok(());
    };
    let Some((scan, sealed)) = state.scan.as_mut() else {
        return Ok(());
    };
    let followed = match &state.role {
        TaskRole::Follow(f) => Some(&**f),
        TaskRole::Create => None,
    };
    let pool = endpoint.route.pool.name.as_str();
    let binding = ctx.request.principal.as_deref().map(|p| p.binding());
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
    let out = scan.run(body.take(), end, &mut swap);
    if let Some(e) = failure {
        return Err(pingora::Error::because(
            pingora::ErrorType::InternalError,
            "sealing a task id",
            e,
        ));
    }
    // An empty chunk holds back a partial id; `None` would mean end of body.
    *body = Some(out);
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
        owner: None,
    };
    let t =
        token::seal_kind(&sessions.ring, &claims, Kind::Task).map_err(|e| EdgeError::Internal {
            detail: format!("sealing a task id: {e}"),
        })?;
    if t.len() > token::MAX_TOKEN_CHARS {
        return Ok(None);
    }
    metrics::get().task_id(TaskIdOp::Sealed);
    Ok(Some(format!("{PREFIX}{t}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_param_is_swapped_and_nothing_else() {
        let body = br#"{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{ "taskId" : "mcp-edge-task.abc","requestState":"taskId"},"x":{"taskId":"y"}}"#;
        let out = swap_param(body, "t\"1").unwrap();
        assert_eq!(
            &out[..],
            &br#"{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{ "taskId" : "t\"1","requestState":"taskId"},"x":{"taskId":"y"}}"#[..]
        );
        let twice = br#"{"params":{"taskId":"a","taskId":"b"}}"#;
        assert!(swap_param(twice, "c").is_err());
    }
}
