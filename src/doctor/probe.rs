//! The doctor's HTTP: one MCP endpoint, the caller's headers (credentials), and requests
//! shaped as a 2026-07-28 or a legacy client sends them. Every answer is read within the
//! timeout and at most [`MAX_BODY`]; an event stream is read until the message answering the
//! request arrives.

use std::time::Duration;

use std::sync::Mutex;

use serde_json::{json, Value};

use crate::mcp::answer::{self, Flaw};
use crate::mcp::client;
use crate::mcp::media::Media;
use crate::mcp::sse::EventData;

/// The most of one answer read.
pub(super) const MAX_BODY: usize = 1 << 20;

pub const MODERN: &str = crate::mcp::MODERN_VERSION;
pub const LEGACY: &str = crate::mcp::LATEST_LEGACY;

/// The server under examination.
pub struct Target {
    pub url: String,
    /// `Name: value` headers sent with every request (credentials), unless a check asks
    /// without them.
    pub headers: Vec<(String, String)>,
    /// The `Host` every request names (a pool's `host`), credentials or not.
    pub host: Option<String>,
    pub timeout: Duration,
    pub(super) client: reqwest::Client,
    /// The flaws of the answers to well-formed requests, each with its request's id.
    flawed: Mutex<Vec<String>>,
}

/// How a member is reached: its name resolved to an address, its certificate not checked
/// (a pool with `verify = false`).
#[derive(Debug, Clone, Default)]
pub struct Reach {
    pub resolve: Option<(String, std::net::SocketAddr)>,
    pub insecure: bool,
}

/// An answer: status, headers, the raw body read, and the JSON-RPC message answering the
/// request (the JSON body, or the SSE event carrying it).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
    pub message: Option<Value>,
    pub sse: bool,
    /// How the message answering the request breaks the shape every answer has.
    pub flaws: Vec<Flaw>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The JSON-RPC error code, if the message is an error.
    pub fn code(&self) -> Option<i64> {
        self.message.as_ref()?.pointer("/error/code")?.as_i64()
    }

    pub fn result(&self) -> Option<&Value> {
        self.message.as_ref()?.get("result")
    }

    /// A short account for a report: status and code or the body's start.
    pub fn brief(&self) -> String {
        match self.code() {
            Some(c) => format!("HTTP {} with JSON-RPC error {c}", self.status),
            None if self.result().is_some() => format!("HTTP {} with a result", self.status),
            None => {
                let start: String = self.body.chars().take(80).collect();
                format!("HTTP {} {start:?}", self.status)
            }
        }
    }
}

impl Target {
    pub fn new(
        url: &str,
        headers: Vec<(String, String)>,
        timeout: Duration,
    ) -> Result<Target, String> {
        Target::reaching(url, headers, timeout, &Reach::default())
    }

    /// [`Target::new`] reaching the URL's name at a given address, checking (or not) its
    /// certificate (an HTTPS pool's member, `--config`).
    pub fn reaching(
        url: &str,
        headers: Vec<(String, String)>,
        timeout: Duration,
        reach: &Reach,
    ) -> Result<Target, String> {
        let parsed: http::Uri = url
            .parse()
            .map_err(|e| format!("'{url}' is not a URL: {e}"))?;
        if !matches!(parsed.scheme_str(), Some("http" | "https")) || parsed.host().is_none() {
            return Err(format!("'{url}' is not an http:// or https:// URL"));
        }
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .danger_accept_invalid_certs(reach.insecure);
        if let Some((name, addr)) = &reach.resolve {
            builder = builder.resolve(name, *addr);
        }
        let client = builder
            .build()
            .map_err(|e| format!("the HTTP client: {e}"))?;
        Ok(Target {
            url: url.to_owned(),
            headers,
            host: None,
            timeout,
            client,
            flawed: Mutex::new(Vec::new()),
        })
    }

    /// A 2026-07-28 request for `method` with `params` (the `_meta` envelope added) and the
    /// headers a conforming client mirrors; `extra` replaces or adds headers (`""` removes).
    pub async fn modern(
        &self,
        id: &str,
        method: &str,
        mut params: Value,
        extra: &[(&str, &str)],
    ) -> Result<Reply, String> {
        if let Some(p) = params.as_object_mut() {
            // A probe that needs more in its envelope (an extension) brings its own.
            p.entry("_meta").or_insert_with(modern_meta);
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let name = match method {
            "tools/call" | "prompts/get" => params["name"].as_str(),
            "resources/read" => params["uri"].as_str(),
            // The tasks extension (SEP-2663): the task id routes the request.
            "tasks/get" | "tasks/update" | "tasks/cancel" => params["taskId"].as_str(),
            _ => None,
        };
        // As a conforming client sends it: `=?base64?…?=` when the name needs it.
        let name = name.map(crate::mcp::headers::encode_value);
        let mut headers = client::modern_headers(method).to_vec();
        if let Some(n) = &name {
            headers.push(("mcp-name", n.as_str()));
        }
        let reply = self
            .post(&body.to_string(), id, &merge(&headers, extra), true)
            .await;
        if extra.is_empty() {
            self.record(id, &reply);
        }
        reply
    }

    /// The flaws of an answer to a well-formed request (a refusal before the body was read,
    /// 401 or 403, has no request to answer).
    pub fn record(&self, id: &str, reply: &Result<Reply, String>) {
        let Ok(r) = reply else { return };
        if r.flaws.is_empty() || matches!(r.status, 401 | 403) {
            return;
        }
        let seen: Vec<String> = r.flaws.iter().map(ToString::to_string).collect();
        if let Ok(mut log) = self.flawed.lock() {
            log.push(format!("{id}: {}", seen.join(", ")));
        }
    }

    /// What [`Target::record`] kept.
    pub fn flawed(&self) -> Vec<String> {
        self.flawed.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// A 2026-07-28 request for `method` without parameters, sent without the caller's
    /// headers (as an anonymous client sends it).
    pub async fn modern_anonymous(&self, id: &str, method: &str) -> Result<Reply, String> {
        let body = client::enveloped(&Value::from(id).to_string(), method, client::DOCTOR);
        let headers = client::modern_headers(method);
        self.post(&body, id, &headers, false).await
    }

    /// A legacy request (no `_meta` claim): `session` and the revision in the headers once
    /// a session exists.
    pub async fn legacy(
        &self,
        id: Option<&str>,
        method: &str,
        params: Value,
        session: Option<&str>,
    ) -> Result<Reply, String> {
        let body = match id {
            Some(id) => json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
            None => json!({"jsonrpc": "2.0", "method": method, "params": params}),
        };
        let mut headers = Vec::new();
        if let Some(s) = session {
            headers.extend(client::session_headers(s, LEGACY));
        }
        let reply = self
            .post(&body.to_string(), id.unwrap_or(""), &headers, true)
            .await;
        if let Some(id) = id {
            self.record(id, &reply);
        }
        reply
    }

    /// A POST of `body` whose answer carries `id`; `credentials`: with the caller's headers.
    pub async fn post(
        &self,
        body: &str,
        id: &str,
        headers: &[(&str, &str)],
        credentials: bool,
    ) -> Result<Reply, String> {
        let rb = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_owned());
        let rb = self.named(rb, &self.url);
        self.send(rb, headers, credentials, id).await
    }

    /// Another method on the endpoint (GET, DELETE), or a GET of another URL (`url`).
    pub async fn other(
        &self,
        method: http::Method,
        url: Option<&str>,
        headers: &[(&str, &str)],
        credentials: bool,
    ) -> Result<Reply, String> {
        let to = url.unwrap_or(&self.url);
        let rb = self
            .client
            .request(method, to)
            .header("accept", "application/json, text/event-stream");
        let rb = self.named(rb, to);
        self.send(rb, headers, credentials, "").await
    }

    async fn send(
        &self,
        mut rb: reqwest::RequestBuilder,
        headers: &[(&str, &str)],
        credentials: bool,
        id: &str,
    ) -> Result<Reply, String> {
        if credentials {
            for (k, v) in &self.headers {
                if !headers.iter().any(|(h, _)| h.eq_ignore_ascii_case(k)) {
                    rb = rb.header(k.as_str(), v.as_str());
                }
            }
        }
        for (k, v) in headers {
            if !v.is_empty() {
                rb = rb.header(*k, *v);
            }
        }
        let resp = rb.send().await.map_err(|e| super::reach::cause(&e))?;
        Ok(read_answer(resp, id, self.timeout).await)
    }
}

/// An answer read within `timeout` and [`MAX_BODY`]: a JSON body whole, an event stream until
/// the first response among its messages; the message judged as every answer is
/// ([`answer::flaws`]).
async fn read_answer(mut resp: reqwest::Response, id: &str, timeout: Duration) -> Reply {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let sse = Media::of_headers(&headers) == Media::EventStream;
    let mut read = Vec::new();
    let mut stream = EventData::default();
    let mut message = None;
    let deadline = tokio::time::Instant::now() + timeout;
    while read.len() < MAX_BODY && message.is_none() {
        let chunk = match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Ok(Ok(Some(chunk))) => chunk,
            _ => break,
        };
        read.extend_from_slice(&chunk);
        if sse {
            message = stream
                .feed(&chunk)
                .iter()
                .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                .find(answer::is_response);
        }
    }
    let body = String::from_utf8_lossy(&read).into_owned();
    if !sse {
        message = serde_json::from_str(&body).ok().filter(Value::is_object);
    }
    let mut flaws = Vec::new();
    if let Some(m) = &message {
        flaws = answer::flaws(m, &json!(id));
        let label = headers.get("content-type").and_then(|v| v.to_str().ok());
        flaws.extend(answer::media_flaw(label));
    }
    Reply {
        status,
        headers,
        body,
        message,
        sse,
        flaws,
    }
}

impl Target {
    /// `rb` for `url` with the `Host` to name, when `url` is the endpoint's own origin.
    pub(super) fn named(&self, rb: reqwest::RequestBuilder, url: &str) -> reqwest::RequestBuilder {
        match &self.host {
            Some(host) if same_origin(url, &self.url) => rb.header("host", host.as_str()),
            _ => rb,
        }
    }
}

/// Whether two URLs share scheme, host and port.
pub fn same_origin(a: &str, b: &str) -> bool {
    match (reqwest::Url::parse(a), reqwest::Url::parse(b)) {
        (Ok(a), Ok(b)) => a.origin() == b.origin(),
        _ => false,
    }
}

/// `base` with `extra` laid over it (an empty value removes the header).
fn merge<'a>(base: &[(&'a str, &'a str)], extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut out: Vec<(&str, &str)> = base
        .iter()
        .filter(|(k, _)| !extra.iter().any(|(e, _)| e.eq_ignore_ascii_case(k)))
        .copied()
        .collect();
    out.extend(extra.iter().copied());
    out
}

pub fn modern_meta() -> Value {
    value(&client::meta(client::DOCTOR))
}

/// A message the wire's client module wrote, as a value to send or edit.
pub fn value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_default()
}

/// The JSON messages of the complete events of an SSE text (read by the wire's event reader).
pub fn events(text: &str) -> Vec<Value> {
    EventData::default()
        .feed(text.as_bytes())
        .iter()
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

/// Comment lines (`:` keep-alives) in an SSE text.
pub fn comments(text: &str) -> usize {
    text.lines().filter(|l| l.starts_with(':')).count()
}
