//! What a 2026-07-28 server refuses before it serves, and what it must not refuse: routing
//! headers that disagree with the body or are missing (-32020), on every method that carries
//! them, but not a name sent as `=?base64?…?=`; a `_meta` envelope lacking a required key
//! (-32602); an `Origin` of another site in the forms browsers and attackers send (403).

use serde_json::{json, Value};

use super::probe::Target;
use super::{absent_name, Check, Finding};
use crate::mcp::client;

const MIRROR: Check = Check {
    id: "header-mirroring",
    title: "MCP-Protocol-Version, Mcp-Method and Mcp-Name: missing or disagreeing, refused",
    rule: "2026-07-28 Streamable HTTP: a standard header missing or disagreeing with the body is 400 + -32020 (SEP-2243; Mcp-Name = taskId on tasks/*, SEP-2663; MUST)",
    fix: "reject a request whose routing headers are missing or disagree with its body (400 -32020), on every method, or put mcp-edge in front",
};
const ENCODING: Check = Check {
    id: "header-encoding",
    title: "an Mcp-Name sent as =?base64?…?= is decoded, not refused",
    rule: "2026-07-28 Streamable HTTP: a name outside visible ASCII is sent =?base64?{UTF-8}?=; servers MUST decode before comparing (ST:467-519)",
    fix: "decode an =?base64?…?= header value (canonical padded Base64 of UTF-8) before comparing it with the body",
};
const ENVELOPE: Check = Check {
    id: "meta-envelope",
    title: "a _meta envelope lacking a required key gets 400 -32602",
    rule: "2026-07-28 basic: a request missing a required _meta field is malformed: 400 + -32602 (BI:380-382; MUST)",
    fix: "refuse a 2026-07-28 request whose _meta lacks protocolVersion or clientCapabilities with 400 -32602",
};
const ORIGIN: Check = Check {
    id: "origin",
    title: "an Origin of another site is refused, in every form",
    rule: "Streamable HTTP security: servers MUST validate Origin; 403 when invalid (DNS rebinding)",
    fix: "compare the whole Origin with the ones you serve (not a prefix; `null` is not yours) and answer 403, or put mcp-edge in front (allowed_origins)",
};

/// A probe's request: its method, params, and the header overridden ("" removes it).
struct Case {
    method: &'static str,
    params: Value,
    header: &'static str,
    value: String,
}

/// The methods each header governs, with a request for each (absent names only); with
/// `tasks` (the extension declared), `tasks/get` of an absent task too.
fn cases(tasks: bool) -> Vec<Case> {
    let mut all = vec![
        ("tools/list", json!({})),
        (
            "tools/call",
            json!({"name": absent_name("tool"), "arguments": {}}),
        ),
        ("prompts/get", json!({"name": absent_name("prompt")})),
        (
            "resources/read",
            json!({"uri": format!("mcp-edge-doctor://{}", absent_name("resource"))}),
        ),
    ];
    if tasks {
        let mut meta = super::probe::modern_meta();
        meta["io.modelcontextprotocol/clientCapabilities"] =
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
        all.push((
            "tasks/get",
            json!({"taskId": absent_name("task"), "_meta": meta}),
        ));
    }
    let mut out = Vec::new();
    for (method, params) in &all {
        let other_method = if *method == "tools/list" {
            "prompts/list"
        } else {
            "tools/list"
        };
        let mut headers = vec![
            ("MCP-Protocol-Version", super::probe::LEGACY.to_owned()),
            ("Mcp-Method", other_method.to_owned()),
        ];
        if *method != "tools/list" {
            headers.push(("Mcp-Name", absent_name("other")));
        }
        for (header, disagreeing) in headers {
            for value in [String::new(), disagreeing.clone()] {
                out.push(Case {
                    method,
                    params: params.clone(),
                    header,
                    value,
                });
            }
        }
    }
    out
}

pub async fn mirroring(t: &Target, tasks: bool) -> Finding {
    let all = cases(tasks);
    let mut failed = Vec::new();
    for c in &all {
        let extra = [(c.header, c.value.as_str())];
        let how = if c.value.is_empty() {
            "missing"
        } else {
            "disagreeing"
        };
        match t
            .modern("doctor-mirror", c.method, c.params.clone(), &extra)
            .await
        {
            Ok(r) if r.status == 400 && r.code() == Some(-32020) => {}
            Ok(r) => failed.push(format!("{} {how} on {}: {}", c.header, c.method, r.brief())),
            Err(e) => failed.push(format!("{} {how} on {}: {e}", c.header, c.method)),
        }
    }
    if failed.is_empty() {
        MIRROR.pass(format!(
            "400 -32020 for each header missing or disagreeing ({} requests)",
            all.len()
        ))
    } else {
        MIRROR.fail(summary(&failed))
    }
}

/// The first few of `items`, and how many more.
pub fn summary(items: &[String]) -> String {
    let mut out = items.iter().take(4).cloned().collect::<Vec<_>>().join("; ");
    if items.len() > 4 {
        out.push_str(&format!("; and {} more", items.len() - 4));
    }
    out
}

/// The `Origin` forms sent: another site, the opaque `null` (sandboxed frames, `file:`
/// pages, some redirects), the server's own host as the prefix of another site's, and as
/// its suffix (with the port: what `endswith` lets through).
fn origins(url: &str) -> Vec<String> {
    let mut out = vec!["http://doctor.invalid".to_owned(), "null".to_owned()];
    if let Ok(u) = reqwest::Url::parse(url) {
        if let Some(host) = u.host_str() {
            let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
            out.push(format!("{}://{host}.doctor.invalid", u.scheme()));
            out.push(format!("{}://doctor{host}{port}", u.scheme()));
        }
    }
    out
}

pub async fn origin(t: &Target) -> Finding {
    let mut served = Vec::new();
    let mut other = Vec::new();
    let forms = origins(&t.url);
    for form in &forms {
        let extra = [("origin", form.as_str())];
        let r = t
            .modern("doctor-origin", "tools/list", json!({}), &extra)
            .await;
        match r {
            Ok(r) if r.status == 403 => {}
            Ok(r) if r.status < 300 => {
                served.push(format!("Origin {form} was served: {}", r.brief()))
            }
            Ok(r) => other.push(format!("Origin {form}: {}", r.brief())),
            Err(e) => served.push(format!("Origin {form}: {e}")),
        }
    }
    if !served.is_empty() {
        ORIGIN.fail(served.join("; "))
    } else if other.is_empty() {
        ORIGIN.pass(format!("403 for {}", forms.join(", ")))
    } else {
        ORIGIN.skip(format!(
            "refused for another reason first: {}",
            other.join("; ")
        ))
    }
}

/// A tool whose name needs the `=?base64?…?=` form (not visible ASCII), asked for once.
pub async fn encoding(t: &Target) -> Finding {
    let name = absent_name("tool-\u{e9}");
    let params = json!({"name": name, "arguments": {}});
    match t.modern("doctor-encoded", "tools/call", params, &[]).await {
        Ok(r) if r.code() == Some(-32020) => ENCODING.fail(format!(
            "Mcp-Name {} refused: {}",
            crate::mcp::headers::encode_value(&name),
            r.brief()
        )),
        Ok(r) => ENCODING.pass(format!("reached the tool lookup: {}", r.brief())),
        Err(e) => ENCODING.fail(e),
    }
}

/// `tools/list` whose `_meta` lacks `clientCapabilities`, then one lacking `protocolVersion`
/// (its header still 2026-07-28: a header/body disagreement, -32020, is as good).
pub async fn envelope(t: &Target) -> Finding {
    let mut seen = Vec::new();
    let mut failed = false;
    for (lacking, also) in [
        ("io.modelcontextprotocol/clientCapabilities", None),
        ("io.modelcontextprotocol/protocolVersion", Some(-32020)),
    ] {
        let mut meta = super::probe::modern_meta();
        if let Some(m) = meta.as_object_mut() {
            m.remove(lacking);
        }
        let body = json!({"jsonrpc": "2.0", "id": "doctor-envelope", "method": "tools/list", "params": {"_meta": meta}});
        let headers = client::modern_headers("tools/list");
        let short = lacking.trim_start_matches("io.modelcontextprotocol/");
        match t
            .post(&body.to_string(), "doctor-envelope", &headers, true)
            .await
        {
            Ok(r)
                if r.status == 400
                    && (r.code() == Some(-32602) || (also.is_some() && r.code() == also)) =>
            {
                seen.push(format!(
                    "without {short}: 400 {}",
                    r.code().unwrap_or_default()
                ));
            }
            Ok(r) => {
                failed = true;
                seen.push(format!("without {short}: {}", r.brief()));
            }
            Err(e) => {
                failed = true;
                seen.push(format!("without {short}: {e}"));
            }
        }
    }
    if failed {
        ENVELOPE.fail(seen.join("; "))
    } else {
        ENVELOPE.pass(seen.join("; "))
    }
}
