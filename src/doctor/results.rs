//! The cache hints of every result type 2026-07-28 marks cacheable (`tools/list`,
//! `prompts/list`, `resources/list`, `resources/templates/list`, `server/discover`): the
//! `resultType`, `ttlMs` and `cacheScope` each must carry. `resources/read` is cacheable too,
//! but only an existing resource has a result to look at, and the doctor names only absent
//! ones: it is left out.

use serde_json::{json, Value};

use super::probe::{Reply, Target};
use super::{Check, Finding};

const RESULT_FIELDS: Check = Check {
    id: "result-fields",
    title: "resultType, ttlMs and cacheScope on every cacheable result",
    rule: "2026-07-28 schema: CacheableResult (resultType; ttlMs ≥ 0; cacheScope public or private; MUST)",
    fix: "update the server's SDK: 2026-07-28 results carry resultType, cacheable ones ttlMs and cacheScope",
};

/// The other cacheable lists, with the capability that offers them.
const LISTS: [(&str, &str); 3] = [
    ("prompts/list", "prompts"),
    ("resources/list", "resources"),
    ("resources/templates/list", "resources"),
];

pub async fn fields(
    t: &Target,
    list: &Result<Reply, String>,
    discover: &Result<Reply, String>,
) -> Finding {
    let caps = discover
        .as_ref()
        .ok()
        .and_then(Reply::result)
        .and_then(|r| r.get("capabilities"))
        .cloned()
        .unwrap_or(Value::Null);
    let mut problems = Vec::new();
    let mut looked = 0;
    for (name, reply) in [("tools/list", list), ("server/discover", discover)] {
        if let Some(result) = reply.as_ref().ok().and_then(Reply::result) {
            looked += 1;
            problems.extend(lacks(name, result));
        }
    }
    for (method, capability) in LISTS {
        let id = format!("doctor-{}", method.replace('/', "-"));
        let reply = t.modern(&id, method, json!({}), &[]).await;
        let offered = caps.get(capability).is_some();
        match reply.as_ref().map(|r| (r.result(), r.code())) {
            Ok((Some(result), _)) => {
                looked += 1;
                problems.extend(lacks(method, result));
            }
            // Not offered, or refused: not a result to look at.
            Ok((None, Some(_))) => {}
            Ok((None, None)) if offered => problems.push(format!(
                "{method} (offered) was not answered: {}",
                reply.as_ref().map(Reply::brief).unwrap_or_default()
            )),
            Err(e) if offered => problems.push(format!("{method} (offered): {e}")),
            _ => {}
        }
    }
    match (looked, problems.is_empty()) {
        (0, true) => RESULT_FIELDS.skip("no result to look at"),
        (n, true) => RESULT_FIELDS.pass(format!("present on {n} cacheable results")),
        (_, false) => RESULT_FIELDS.fail(problems.join("; ")),
    }
}

/// What `result` of `method` lacks of a cacheable result.
fn lacks(method: &str, result: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if !result.get("resultType").is_some_and(Value::is_string) {
        out.push(format!("{method} lacks resultType"));
    }
    match result.get("ttlMs") {
        None => out.push(format!("{method} lacks ttlMs")),
        Some(v) if !v.is_u64() => out.push(format!("{method}: ttlMs {v} is not an integer ≥ 0")),
        _ => {}
    }
    match result.get("cacheScope").and_then(Value::as_str) {
        Some("public" | "private") => {}
        Some(other) => out.push(format!("{method}: cacheScope {other:?}")),
        None => out.push(format!("{method} lacks cacheScope")),
    }
    out
}
