//! The checks beside the 2026-07-28 path: a legacy `initialize`, authorization (the 401
//! challenge, the protected resource's metadata, how clients register, discover for an
//! anonymous caller), and the HTTP+SSE transport.

use serde_json::{json, Value};

use super::probe::{events, value, Target};
use super::{absent_name, Check, Finding};
use crate::mcp::{client, sse, HTTP_SSE_VERSION, LATEST_LEGACY};

const LEGACY_INIT: Check = Check {
    id: "legacy-initialize",
    title: "a legacy initialize is served or refused properly",
    rule: "Versioning: a modern-only server names its versions in the error to initialize (400 -32022)",
    fix: "serve the 2025 revisions, or refuse initialize with 400 -32022 and data.supported",
};
const LEGACY_SESSION: Check = Check {
    id: "legacy-session",
    title: "a legacy session carries a follow-up request",
    rule: "2025-11-25 Streamable HTTP: a request with the Mcp-Session-Id the server issued is served (MUST), until the session ends",
    fix: "keep the session the initialize answer issued (or issue none and serve legacy requests statelessly)",
};
const CHALLENGE: Check = Check {
    id: "auth-challenge",
    title: "a 401 names the protected resource's metadata",
    rule: "Authorization: 401 with WWW-Authenticate resource_metadata; the metadata's resource is the URL (RFC 9728)",
    fix: "send WWW-Authenticate: Bearer resource_metadata=\"…\" and serve a metadata document whose resource is this URL",
};
const REGISTRATION: Check = Check {
    id: "client-registration",
    title: "how clients register with the authorization server",
    rule: "Authorization: Client ID Metadata Documents (preferred) or Dynamic Client Registration",
    fix: "offer client_id_metadata_document_supported or a registration_endpoint in the authorization server's metadata",
};
const ANONYMOUS: Check = Check {
    id: "discover-anonymous",
    title: "server/discover answers an anonymous caller",
    rule: "2026-07-28 lifecycle: discovery before authorization",
    fix: "let server/discover through without credentials (mcp-edge does on routes with auth)",
};
const SSE: Check = Check {
    id: "http-sse",
    title: "the HTTP+SSE transport (2024-11-05, deprecated)",
    rule: "2024-11-05 HTTP+SSE: deprecated since 2025-03-26; its POSTs must reach the instance holding the stream",
    fix: "move clients to Streamable HTTP; meanwhile route each messages POST to the instance holding its stream (mcp-edge does)",
};

pub async fn run(t: &Target, sse_path: Option<&str>) -> Vec<Finding> {
    vec![
        initialize(t).await,
        challenge(t).await,
        anonymous(t).await,
        http_sse(t, sse_path).await,
    ]
    .into_iter()
    .flatten()
    .collect()
}

async fn initialize(t: &Target) -> Vec<Finding> {
    let params = value(&client::initialize_params(LATEST_LEGACY, client::DOCTOR));
    let r = match t
        .legacy(Some("doctor-init"), "initialize", params, None)
        .await
    {
        Ok(r) => r,
        Err(e) => return vec![LEGACY_INIT.fail(e)],
    };
    let session = r.header("mcp-session-id").map(str::to_owned);
    let carried = follow_up(t, &r, session.as_deref()).await;
    let negotiated = client::negotiated(r.message.as_ref()).to_owned();
    // The probe's session is not left behind (at the revision it was opened with).
    let deleted = match session.as_deref().filter(|s| !s.is_empty()) {
        Some(s) => {
            let headers = client::session_headers(s, &negotiated);
            let gone = t.other(http::Method::DELETE, None, &headers, true).await;
            match gone {
                Ok(g) if g.status < 300 => ", a session, deleted".to_owned(),
                Ok(g) => format!(
                    ", a session its DELETE did not end (HTTP {}: it expires on its own)",
                    g.status
                ),
                Err(e) => format!(", a session its DELETE did not reach ({e})"),
            }
        }
        None => ", stateless".to_owned(),
    };
    let supported = r
        .message
        .as_ref()
        .and_then(|m| m.pointer("/error/data/supported"))
        .and_then(Value::as_array);
    let finding = match (r.status, r.result(), r.code()) {
        (200, Some(result), _) => {
            let v = result
                .get("protocolVersion")
                .and_then(Value::as_str)
                .unwrap_or("?");
            LEGACY_INIT.pass(format!("served ({v}{deleted})"))
        }
        (400, _, Some(-32022)) if supported.is_some_and(|s| !s.is_empty()) => {
            LEGACY_INIT.pass("refused: 400 -32022 with the supported list (modern-only)")
        }
        (401 | 403, _, _) => LEGACY_INIT.skip(format!(
            "{}: it needs credentials (-H 'Authorization: …')",
            r.brief()
        )),
        _ => LEGACY_INIT.fail(r.brief()),
    };
    vec![finding, carried]
}

/// After a served `initialize`: `notifications/initialized`, then `tools/list`, both in the
/// session it issued (if any), as a 2025 client goes on.
async fn follow_up(t: &Target, init: &super::probe::Reply, session: Option<&str>) -> Finding {
    if init.status != 200 || init.result().is_none() {
        return LEGACY_SESSION.skip("legacy initialize not served");
    }
    let session = session.filter(|s| !s.is_empty());
    let _ = t
        .legacy(None, "notifications/initialized", json!({}), session)
        .await;
    let r = t
        .legacy(Some("doctor-legacy-list"), "tools/list", json!({}), session)
        .await;
    let how = if session.is_some() {
        "in its session"
    } else {
        "stateless"
    };
    match r {
        Ok(r) if r.status == 200 && r.result().is_some() => {
            LEGACY_SESSION.pass(format!("tools/list served {how}"))
        }
        Ok(r) => LEGACY_SESSION.fail(format!("tools/list {how}: {}", r.brief())),
        Err(e) => LEGACY_SESSION.fail(format!("tools/list {how}: {e}")),
    }
}

async fn challenge(t: &Target) -> Vec<Finding> {
    let r = match t.modern_anonymous("doctor-auth", "tools/list").await {
        Ok(r) => r,
        Err(e) => return vec![CHALLENGE.fail(e)],
    };
    if r.status != 401 {
        return vec![
            CHALLENGE.skip(format!(
                "no authorization asked of an anonymous caller (HTTP {})",
                r.status
            )),
            REGISTRATION.skip("no authorization"),
        ];
    }
    let Some(metadata_url) = r
        .header("www-authenticate")
        .and_then(|h| parameter(h, "resource_metadata"))
    else {
        return vec![
            CHALLENGE.fail("401 without resource_metadata in WWW-Authenticate"),
            REGISTRATION.skip("no metadata to read"),
        ];
    };
    let doc = t
        .other(http::Method::GET, Some(&metadata_url), &[], false)
        .await
        .ok()
        .filter(|r| r.status == 200)
        .and_then(|r| serde_json::from_str::<Value>(&r.body).ok());
    let Some(doc) = doc else {
        return vec![
            CHALLENGE.fail(format!("{metadata_url} does not serve a metadata document")),
            REGISTRATION.skip("no metadata to read"),
        ];
    };
    let resource = doc.get("resource").and_then(Value::as_str).unwrap_or("");
    let first = if resource.trim_end_matches('/') == t.url.trim_end_matches('/') {
        CHALLENGE.pass(format!(
            "resource_metadata {metadata_url}, resource matches"
        ))
    } else {
        CHALLENGE.fail(format!(
            "the metadata's resource is '{resource}', not {}",
            t.url
        ))
    };
    vec![first, registration(t, &doc).await]
}

async fn registration(t: &Target, prm: &Value) -> Finding {
    let Some(server) = prm
        .pointer("/authorization_servers/0")
        .and_then(Value::as_str)
    else {
        return REGISTRATION.fail("the resource's metadata names no authorization server");
    };
    let base = server.trim_end_matches('/');
    let mut meta = None;
    for path in [
        "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration",
    ] {
        let url = format!("{base}{path}");
        if let Ok(r) = t.other(http::Method::GET, Some(&url), &[], false).await {
            if r.status == 200 {
                meta = serde_json::from_str::<Value>(&r.body).ok();
                break;
            }
        }
    }
    let Some(meta) = meta else {
        return REGISTRATION.warn(format!("no authorization server metadata at {base}"));
    };
    let cimd = meta.get("client_id_metadata_document_supported") == Some(&json!(true));
    let dcr = meta.get("registration_endpoint").is_some();
    match (cimd, dcr) {
        (true, _) => REGISTRATION.pass(format!(
            "Client ID Metadata Documents{}",
            if dcr {
                " and Dynamic Client Registration"
            } else {
                ""
            }
        )),
        (false, true) => REGISTRATION.pass("Dynamic Client Registration"),
        (false, false) => REGISTRATION.warn("neither: clients need a pre-registered client id"),
    }
}

async fn anonymous(t: &Target) -> Vec<Finding> {
    if t.headers.is_empty() {
        // Every probe above was anonymous already.
        return Vec::new();
    }
    let f = match t.modern_anonymous("doctor-anon", "server/discover").await {
        Ok(r) if r.status == 200 && r.result().is_some() => ANONYMOUS.pass("200"),
        Ok(r) if matches!(r.status, 401 | 403) => ANONYMOUS.warn(r.brief()),
        Ok(r) => ANONYMOUS.skip(format!("not served to anyone: {}", r.brief())),
        Err(e) => ANONYMOUS.warn(e),
    };
    vec![f]
}

/// A parameter of a `WWW-Authenticate` challenge (`name="value"` or `name=value`).
fn parameter(header: &str, name: &str) -> Option<String> {
    let at = header.find(&format!("{name}="))? + name.len() + 1;
    let rest = &header[at..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?,
        None => rest.split([',', ' ']).next()?,
    };
    (!value.is_empty()).then(|| value.to_owned())
}

/// The HTTP+SSE endpoint: found or not; when found, whether messages POSTs are answered on
/// its stream (five of them, as a balancer in front would spread them).
async fn http_sse(t: &Target, path: Option<&str>) -> Vec<Finding> {
    let url = sse_url(&t.url, path);
    let mut stream = match t.open_stream(&url).await {
        Ok(Some(s)) => s,
        _ => return vec![SSE.skip(format!("not served at {url}"))],
    };
    stream
        .read_until(t.timeout, |text| sse::endpoint(text).is_some())
        .await;
    let Some(endpoint) = sse::endpoint(&stream.text) else {
        return vec![SSE.fail(format!(
            "{url} is an event stream without an endpoint event"
        ))];
    };
    let messages = join(&url, &endpoint);
    initialize_sse(t, &mut stream, &messages).await;
    let name = absent_name("tool");
    let mut refused = Vec::new();
    for i in 1..=5 {
        let call = json!({"jsonrpc":"2.0","id":format!("doctor-sse-{i}"),"method":"tools/call","params":{"name": name, "arguments": {}}});
        match t.post_to(&messages, &call.to_string()).await {
            Ok(s) if s < 300 => {}
            Ok(s) => refused.push(format!("POST {i}: HTTP {s}")),
            Err(e) => refused.push(format!("POST {i}: {e}")),
        }
    }
    let answered = |text: &str| {
        let seen = events(text);
        (1..=5).all(|i| {
            let id = format!("doctor-sse-{i}");
            seen.iter()
                .any(|m| m.get("id").and_then(Value::as_str) == Some(id.as_str()))
        })
    };
    let all = refused.is_empty() && stream.read_until(t.timeout, answered).await;
    let detail = format!("served at {url} (messages at {endpoint})");
    if all {
        vec![SSE.warn(format!(
            "{detail}, every POST answered on its stream; the transport is deprecated"
        ))]
    } else {
        let missing = if refused.is_empty() {
            "not every answer came on the stream".to_owned()
        } else {
            refused.join("; ")
        };
        vec![SSE.fail(format!(
            "{detail}: {missing} (a POST reaching an instance that does not hold the stream)"
        ))]
    }
}

/// A session of the 2024-11-05 transport is initialized before anything else.
async fn initialize_sse(t: &Target, stream: &mut super::stream::Stream, messages: &str) {
    let init = client::initialize(r#""doctor-sse-init""#, HTTP_SSE_VERSION, client::DOCTOR);
    let _ = t.post_to(messages, &init).await;
    let initialized = |text: &str| {
        events(text)
            .iter()
            .any(|m| m.get("id").and_then(Value::as_str) == Some("doctor-sse-init"))
    };
    stream.read_until(t.timeout, initialized).await;
    let _ = t.post_to(messages, client::initialized()).await;
}

fn sse_url(url: &str, path: Option<&str>) -> String {
    let path = path.unwrap_or("/sse");
    match url
        .find("://")
        .and_then(|i| url[i + 3..].find('/').map(|j| i + 3 + j))
    {
        Some(at) => format!("{}{path}", &url[..at]),
        None => format!("{url}{path}"),
    }
}

/// The messages URL an `endpoint` event names, resolved against the stream's URL.
fn join(base: &str, endpoint: &str) -> String {
    reqwest::Url::parse(base)
        .and_then(|b| b.join(endpoint))
        .map_or_else(|_| endpoint.to_owned(), String::from)
}
