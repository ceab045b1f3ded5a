//! The 2026-07-28 checks: stateless requests, `server/discover` and its required fields,
//! version errors, sessions, GET and DELETE, `subscriptions/listen`, list order, the tasks
//! extension; then the cache hints (`results.rs`), what is refused (`guards.rs`) and the
//! prescribed answers (`prescribed.rs`).

use std::time::Duration;

use serde_json::{json, Value};

use super::probe::{Reply, Target, MODERN};
use super::{Check, Finding};

const STATELESS: Check = Check {
    id: "stateless-list",
    title: "tools/list answers without a handshake",
    rule: "2026-07-28 Streamable HTTP: every request stands alone (SEP-2575)",
    fix: "serve 2026-07-28 requests statelessly: no initialize, no session needed",
};
const DISCOVER: Check = Check {
    id: "discover",
    title: "server/discover is served with every required field",
    rule: "2026-07-28 lifecycle: server/discover MUST be implemented; DiscoverResult requires supportedVersions and capabilities (serverInfo SHOULD)",
    fix: "implement server/discover (the SDKs' 2026-07-28 servers do)",
};
const VERSION: Check = Check {
    id: "unsupported-version",
    title: "an unsupported version gets -32022 with the supported list",
    rule: "2026-07-28 versioning: 400 + -32022, data.supported and data.requested",
    fix: "answer an unknown MCP-Protocol-Version with 400 -32022 naming the supported revisions and echoing the requested one",
};
const SESSIONS: Check = Check {
    id: "no-session",
    title: "stateless answers carry no Mcp-Session-Id",
    rule: "2026-07-28 Streamable HTTP: sessions are removed; never mint or echo one",
    fix: "do not issue Mcp-Session-Id (empty or not) to 2026-07-28 requests",
};
const METHODS: Check = Check {
    id: "get-delete",
    title: "GET and DELETE of a 2026-07-28 endpoint get 405",
    rule: "2026-07-28 Streamable HTTP: only POST (405 SHOULD)",
    fix: "answer GET and DELETE with 405 and Allow: POST",
};
const LISTEN: Check = Check {
    id: "listen",
    title: "subscriptions/listen is acknowledged and kept alive",
    rule: "2026-07-28 subscriptions: acknowledged first; keep-alive comments on long streams",
    fix: "acknowledge a listen at once and send a ': keep-alive' comment every 15 s so proxies keep the stream",
};
const ORDER: Check = Check {
    id: "list-order",
    title: "tools/list comes in the same order twice",
    rule: "2026-07-28 caching: a deterministic list order (SHOULD)",
    fix: "sort the tools (or keep registration order) so equal lists are equal bytes",
};
const TASKS: Check = Check {
    id: "tasks",
    title: "the tasks extension",
    rule: "Tasks extension (SEP-2663): declared in server/discover capabilities",
    fix: "",
};

/// Every 2026-07-28 check.
pub async fn run(t: &Target, listen_wait: Duration) -> Vec<Finding> {
    let mut out = Vec::new();
    let list = t
        .modern("doctor-list-1", "tools/list", json!({}), &[])
        .await;
    let discover = t
        .modern("doctor-discover", "server/discover", json!({}), &[])
        .await;
    out.push(stateless(&list));
    out.push(discovered(&discover));
    out.push(version(t).await);
    out.push(super::results::fields(t, &list, &discover).await);
    out.push(sessions(t, &list).await);
    out.push(super::guards::mirroring(t, offers_tasks(&discover)).await);
    out.push(super::guards::encoding(t).await);
    out.push(super::guards::envelope(t).await);
    out.push(super::guards::origin(t).await);
    out.push(methods(t).await);
    out.push(listen(t, listen_wait).await);
    out.push(order(t).await);
    out.push(tasks(&discover));
    out.extend(super::prescribed::run(t).await);
    out
}

fn stateless(list: &Result<Reply, String>) -> Finding {
    match list {
        Ok(r)
            if r.status == 200
                && r.result()
                    .and_then(|x| x.get("tools"))
                    .is_some_and(Value::is_array) =>
        {
            STATELESS.pass("200 with a tool list")
        }
        Ok(r) => STATELESS.fail(r.brief()),
        Err(e) => STATELESS.fail(e.clone()),
    }
}

fn discovered(d: &Result<Reply, String>) -> Finding {
    let r = match d {
        Ok(r) => r,
        Err(e) => return DISCOVER.fail(e.clone()),
    };
    let Some(result) = r.result() else {
        return DISCOVER.fail(r.brief());
    };
    let Some(versions) = result.get("supportedVersions").and_then(Value::as_array) else {
        return DISCOVER.fail("no supportedVersions array");
    };
    let listed = Value::Array(versions.clone());
    if !versions.iter().any(|x| x == MODERN) {
        return DISCOVER.fail(format!("supportedVersions {listed} lacks {MODERN}"));
    }
    if !result.get("capabilities").is_some_and(Value::is_object) {
        return DISCOVER.fail(format!(
            "supportedVersions {listed}, but no capabilities object (required)"
        ));
    }
    let named = result.get("serverInfo").is_some()
        || result
            .pointer("/_meta/io.modelcontextprotocol~1serverInfo")
            .is_some();
    if named {
        DISCOVER.pass(format!(
            "supportedVersions {listed}, capabilities, serverInfo"
        ))
    } else {
        DISCOVER.warn(format!(
            "supportedVersions {listed}, capabilities; no serverInfo (SHOULD)"
        ))
    }
}

async fn version(t: &Target) -> Finding {
    let mut params = json!({});
    params["_meta"] = super::probe::modern_meta();
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let body = json!({"jsonrpc":"2.0","id":"doctor-version","method":"tools/list","params":params});
    let headers = [
        ("mcp-protocol-version", "2099-01-01"),
        ("mcp-method", "tools/list"),
    ];
    let r = match t
        .post(&body.to_string(), "doctor-version", &headers, true)
        .await
    {
        Ok(r) => r,
        Err(e) => return VERSION.fail(e),
    };
    let data = r.message.as_ref().and_then(|m| m.pointer("/error/data"));
    let supported = data
        .and_then(|d| d.get("supported"))
        .and_then(Value::as_array);
    match (r.status, r.code(), supported) {
        (400, Some(-32022), Some(list)) if !list.is_empty() => {
            let requested = data
                .and_then(|d| d.get("requested"))
                .and_then(Value::as_str);
            if requested == Some("2099-01-01") {
                VERSION.pass(format!(
                    "400 -32022, supported {}",
                    Value::Array(list.clone())
                ))
            } else {
                VERSION.warn("400 -32022 with the supported list, but data.requested does not echo 2099-01-01")
            }
        }
        (_, Some(-32022), _) => VERSION.fail(format!(
            "{}: -32022 without a supported list, or not with 400",
            r.brief()
        )),
        _ => VERSION.fail(r.brief()),
    }
}

async fn sessions(t: &Target, first: &Result<Reply, String>) -> Finding {
    let mut issued = 0;
    let mut empty = false;
    let mut seen = Vec::new();
    if let Ok(r) = first {
        seen.push(r.header("mcp-session-id").map(str::to_owned));
    }
    for i in 0..9 {
        let id = format!("doctor-list-{}", i + 2);
        if let Ok(r) = t.modern(&id, "tools/list", json!({}), &[]).await {
            seen.push(r.header("mcp-session-id").map(str::to_owned));
        }
    }
    for s in seen.iter().flatten() {
        if s.is_empty() {
            empty = true;
        } else {
            issued += 1;
            // Not left behind by the doctor at least (best effort).
            let headers = [("mcp-session-id", s.as_str())];
            let _ = t.other(http::Method::DELETE, None, &headers, true).await;
        }
    }
    if empty {
        SESSIONS.fail(
            "an empty Mcp-Session-Id header on a stateless answer (clients then send it back)",
        )
    } else if issued > 0 {
        SESSIONS.fail(format!(
            "{issued} of {} stateless answers issued a session (each one left behind)",
            seen.len()
        ))
    } else if seen.is_empty() {
        SESSIONS.skip("no stateless answer")
    } else {
        SESSIONS.pass(format!("none in {} answers", seen.len()))
    }
}

async fn methods(t: &Target) -> Finding {
    let headers = [("mcp-protocol-version", MODERN)];
    let mut seen = Vec::new();
    for m in [http::Method::GET, http::Method::DELETE] {
        match t.other(m.clone(), None, &headers, true).await {
            Ok(r) if r.status == 405 => {}
            Ok(r) => seen.push(format!("{m}: HTTP {}", r.status)),
            Err(e) => seen.push(format!("{m}: {e}")),
        }
    }
    if seen.is_empty() {
        METHODS.pass("405 for both")
    } else {
        METHODS.warn(seen.join("; "))
    }
}

async fn listen(t: &Target, wait: Duration) -> Finding {
    let (status, messages, comments) = match t.listen("doctor-listen", wait).await {
        Ok(x) => x,
        Err(e) => return LISTEN.fail(e),
    };
    let acknowledged = messages
        .first()
        .and_then(|m| m.get("method"))
        .and_then(Value::as_str)
        == Some("notifications/subscriptions/acknowledged");
    match (status, acknowledged, comments) {
        (200, true, n) if n > 0 => LISTEN.pass("acknowledged, then keep-alive comments"),
        (200, true, _) => LISTEN.warn(format!(
            "acknowledged, but no keep-alive comment within {} s (idle-timeout proxies close it)",
            wait.as_secs()
        )),
        (200, false, _) => LISTEN.fail("no notifications/subscriptions/acknowledged first"),
        (s, _, _) => LISTEN.fail(format!("HTTP {s}")),
    }
}

async fn order(t: &Target) -> Finding {
    let names = |r: &Reply| -> Option<Vec<String>> {
        let tools = r.result()?.get("tools")?.as_array()?;
        Some(
            tools
                .iter()
                .filter_map(|x| x.get("name")?.as_str().map(str::to_owned))
                .collect(),
        )
    };
    // Two lists in a row, as two clients (or a cache and a client) would see them.
    let first = t
        .modern("doctor-order-1", "tools/list", json!({}), &[])
        .await;
    let Some(a) = first.as_ref().ok().and_then(names) else {
        return ORDER.skip("no tool list");
    };
    let second = t
        .modern("doctor-order-2", "tools/list", json!({}), &[])
        .await;
    match second.as_ref().ok().and_then(names) {
        Some(b) if a == b => ORDER.pass(format!("{} tools, same order", a.len())),
        Some(_) => ORDER.warn("the same list came in another order"),
        None => ORDER.warn("the second tools/list did not answer with a list"),
    }
}

/// The tasks extension declared in discover's capabilities.
pub fn offers_tasks(d: &Result<Reply, String>) -> bool {
    let caps = d
        .as_ref()
        .ok()
        .and_then(Reply::result)
        .and_then(|r| r.get("capabilities"));
    caps.is_some_and(|c| {
        c.pointer("/extensions/io.modelcontextprotocol~1tasks")
            .is_some()
            || c.get("tasks").is_some()
    })
}

fn tasks(d: &Result<Reply, String>) -> Finding {
    if offers_tasks(d) {
        TASKS.pass("declared: the edge routes every request of a task to its member")
    } else {
        TASKS.skip("not declared")
    }
}
