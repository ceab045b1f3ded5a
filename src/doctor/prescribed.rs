//! The well-formed requests whose answers the rules prescribe, each harmless: a tool, a prompt
//! and a resource no server has (-32602; reached without a legacy session), a method no server
//! has (-32601), a JSON-RPC batch (refused on the 2026-07-28 path); and every answer to a
//! well-formed request checked for the shape every answer has.

use serde_json::{json, Value};

use super::guards::summary;
use super::probe::{modern_meta, Reply, Target};
use super::{absent_name, Check, Finding, Status};
use crate::mcp::client;

const STATELESS_CALL: Check = Check {
    id: "stateless-call",
    title: "tools/call, prompts/get and resources/read work without a legacy session",
    rule: "2026-07-28 Streamable HTTP: every request stands alone; no initialize, no session (SEP-2575; MUST)",
    fix: "serve every 2026-07-28 method statelessly: drop the 'session initialized' guard on calls and reads",
};
const ABSENT: Check = Check {
    id: "absent-name",
    title: "a tool, prompt or resource that does not exist gets -32602",
    rule: "2026-07-28 tools, prompts, resources: an unknown name is a JSON-RPC error -32602 (SHOULD; an answer of some kind MUST)",
    fix: "answer an unknown tool, prompt or resource with a JSON-RPC error -32602 carrying the request id, not a bare HTTP error or a tool result",
};
const UNKNOWN: Check = Check {
    id: "unknown-method",
    title: "a method that does not exist gets -32601",
    rule: "JSON-RPC 2.0 §5.1: -32601 Method not found (MUST); 2026-07-28: with HTTP 404",
    fix: "answer a method the server does not have with a JSON-RPC error -32601 carrying the request id",
};
const BATCH: Check = Check {
    id: "batch",
    title: "a JSON-RPC batch is refused on the 2026-07-28 path",
    rule: "2026-07-28 Streamable HTTP: a POST body is one JSON-RPC request, never a batch (400 -32600; MUST)",
    fix: "refuse an array body of 2026-07-28 requests with 400 and a JSON-RPC error -32600",
};
const FRAMING: Check = Check {
    id: "answer-framing",
    title: "every answer: jsonrpc 2.0, the request's id, result xor error, JSON or an event stream",
    rule: "JSON-RPC 2.0 §5 (MUST); 2026-07-28 Streamable HTTP: application/json or text/event-stream",
    fix: "answer each request with one JSON-RPC response carrying its id, labelled application/json or text/event-stream",
};

/// The prescribed answers' checks.
pub async fn run(t: &Target) -> Vec<Finding> {
    let calls = named(t).await;
    vec![
        stateless_call(&calls),
        absent(&calls),
        unknown(t).await,
        batch(t).await,
    ]
}

/// A tool, a prompt and a resource no server has, each asked for once.
async fn named(t: &Target) -> Vec<(&'static str, Result<Reply, String>)> {
    let uri = format!("mcp-edge-doctor://{}", absent_name("resource"));
    let asks = [
        (
            "tools/call",
            json!({"name": absent_name("tool"), "arguments": {}}),
        ),
        ("prompts/get", json!({"name": absent_name("prompt")})),
        ("resources/read", json!({"uri": uri})),
    ];
    let mut out = Vec::new();
    for (method, params) in asks {
        let id = format!("doctor-absent-{}", method.replace('/', "-"));
        out.push((method, t.modern(&id, method, params, &[]).await));
    }
    out
}

/// An answer asking for a legacy session (`initialize` first, a session id).
fn guarded(r: &Reply) -> bool {
    let said = match r.message.as_ref().and_then(|m| m.pointer("/error/message")) {
        Some(Value::String(m)) => m.clone(),
        _ if r.status >= 400 && r.message.is_none() => r.body.clone(),
        _ => return false,
    };
    let said = said.to_ascii_lowercase();
    said.contains("session") || said.contains("initializ")
}

fn stateless_call(calls: &[(&str, Result<Reply, String>)]) -> Finding {
    let guarded: Vec<String> = calls
        .iter()
        .filter_map(|(m, r)| match r {
            Ok(r) if guarded(r) => Some(format!("{m}: {} {:?}", r.brief(), error_message(r))),
            _ => None,
        })
        .collect();
    if guarded.is_empty() {
        STATELESS_CALL.pass("each reached its lookup without a session")
    } else {
        STATELESS_CALL.fail(format!(
            "asked for a legacy session: {}",
            guarded.join("; ")
        ))
    }
}

fn error_message(r: &Reply) -> String {
    r.message
        .as_ref()
        .and_then(|m| m.pointer("/error/message"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// How one absent name was answered: the status it earns and what was seen.
fn judge_absent(method: &str, reply: &Result<Reply, String>) -> (Status, String) {
    let r = match reply {
        Ok(r) => r,
        Err(e) => return (Status::Fail, format!("{method}: {e}")),
    };
    let is_error = r.result().and_then(|x| x.get("isError")) == Some(&json!(true));
    match (r.code(), r.result()) {
        (Some(-32602), _) => (Status::Pass, format!("{method}: -32602")),
        (Some(-32601), _) => (Status::Pass, format!("{method}: -32601 (not offered)")),
        (Some(c), _) => (Status::Warn, format!("{method}: {c}, not -32602")),
        (None, Some(_)) if is_error => (
            Status::Warn,
            format!("{method}: a tool result with isError, not a JSON-RPC error"),
        ),
        (None, Some(_)) => (
            Status::Fail,
            format!("{method}: a result, as if it existed"),
        ),
        (None, None) => (
            Status::Fail,
            format!("{method}: {}, no JSON-RPC error", r.brief()),
        ),
    }
}

fn absent(calls: &[(&str, Result<Reply, String>)]) -> Finding {
    let judged: Vec<(Status, String)> = calls
        .iter()
        .filter(|(_, r)| !r.as_ref().is_ok_and(guarded))
        .map(|(m, r)| judge_absent(m, r))
        .collect();
    if judged.is_empty() {
        return ABSENT.skip("every lookup asked for a session first (stateless-call)");
    }
    let worst = |s: Status| judged.iter().any(|(x, _)| *x == s);
    let seen: Vec<&str> = judged.iter().map(|(_, d)| d.as_str()).collect();
    let detail = seen.join("; ");
    if worst(Status::Fail) {
        ABSENT.fail(detail)
    } else if worst(Status::Warn) {
        ABSENT.warn(detail)
    } else {
        ABSENT.pass(detail)
    }
}

async fn unknown(t: &Target) -> Finding {
    let method = "mcp-edge-doctor/absent-method";
    let r = match t.modern("doctor-unknown", method, json!({}), &[]).await {
        Ok(r) => r,
        Err(e) => return UNKNOWN.fail(e),
    };
    match (r.code(), r.result()) {
        (Some(-32601), _) => UNKNOWN.pass(format!("HTTP {} -32601", r.status)),
        (Some(c), _) => UNKNOWN.warn(format!("HTTP {} {c}, not -32601", r.status)),
        (None, Some(_)) => UNKNOWN.fail(format!("{method} was answered with a result")),
        (None, None) => UNKNOWN.fail(format!("{}: no JSON-RPC error", r.brief())),
    }
}

async fn batch(t: &Target) -> Finding {
    let mut params = json!({});
    params["_meta"] = modern_meta();
    let one =
        json!({"jsonrpc": "2.0", "id": "doctor-batch", "method": "tools/list", "params": params});
    let body = Value::Array(vec![one]).to_string();
    let headers = client::modern_headers("tools/list");
    let r = match t.post(&body, "", &headers, true).await {
        Ok(r) => r,
        Err(e) => return BATCH.fail(e),
    };
    let code = r
        .message
        .as_ref()
        .and_then(|m| m.pointer("/error/code"))
        .and_then(Value::as_i64);
    match (r.status, code) {
        (s, _) if s < 300 => BATCH.fail(format!("served as a batch: {}", r.brief())),
        (400, Some(c)) => BATCH.pass(format!("400 {c}")),
        (s, _) if s >= 500 => BATCH.fail(format!("HTTP {s}")),
        (s, c) => BATCH.warn(format!(
            "HTTP {s}{}: refused, but not 400 with a JSON-RPC error",
            c.map(|c| format!(" {c}")).unwrap_or_default()
        )),
    }
}

/// Every answer to a well-formed request the doctor sent, as [`Target::record`] kept them.
pub fn framing(t: &Target) -> Finding {
    let flawed = t.flawed();
    if flawed.is_empty() {
        FRAMING.pass("every answer to a well-formed request")
    } else {
        FRAMING.fail(summary(&flawed))
    }
}
