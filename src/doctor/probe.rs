//! The doctor's HTTP: one MCP endpoint, the caller's headers (credentials), and requests
//! shaped as a 2026-07-28 or a legacy client sends them. Every answer is read within the
//! timeout and at most [`MAX_BODY`]; an event stream is read until the message answering the
//! request arrives.

use std::time::Duration;

use serde_json::{json, Value};

/// The most of one answer read.
const MAX_BODY: usize = 1 << 20;

pub const MODERN: &str = "2026-07-28";
pub const LEGACY: &str = "2025-11-25";

/// The server under examination.
pub struct Target {
    pub url: String,
    /// `Name: value` headers sent with every request (credentials), unless a check asks
    /// without them.
    pub headers: Vec<(String, String)>,
    /// The `Host` every request names (a pool's `host`), credentials or not.
    pub host: Option<String>,
    pub timeout: Duration,
    client: reqwest::Client,
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
            p.insert("_meta".into(), modern_meta());
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let name = match method {
            "tools/call" | "prompts/get" => params["name"].as_str(),
            "resources/read" => params["uri"].as_str(),
            _ => None,
        };
        let mut headers = vec![("mcp-protocol-version", MODERN), ("mcp-method", method)];
        if let Some(n) = name {
            headers.push(("mcp-name", n));
        }
        self.post(&body.to_string(), id, &merge(&headers, extra), true)
            .await
    }

    /// A 2026-07-28 request for `method` without parameters, sent without the caller's
    /// headers (as an anonymous client sends it).
    pub async fn modern_anonymous(&self, id: &str, method: &str) -> Result<Reply, String> {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"_meta": modern_meta()}});
        let headers = [("mcp-protocol-version", MODERN), ("mcp-method", method)];
        self.post(&body.to_string(), id, &headers, false).await
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
            headers.push(("mcp-session-id", s));
            headers.push(("mcp-protocol-version", LEGACY));
        }
        self.post(&body.to_string(), id.unwrap_or(""), &headers, true)
            .await
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
        let mut resp = rb.send().await.map_err(|e| format!("no answer: {e}"))?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let sse = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.to_ascii_lowercase().starts_with("text/event-stream"));
        let mut read = Vec::new();
        let mut message = None;
        let deadline = tokio::time::Instant::now() + self.timeout;
        while read.len() < MAX_BODY {
            let next = tokio::time::timeout_at(deadline, resp.chunk()).await;
            match next {
                Ok(Ok(Some(chunk))) => read.extend_from_slice(&chunk),
                _ => break,
            }
            if sse {
                message = events(&String::from_utf8_lossy(&read))
                    .into_iter()
                    .find(|m| answers(m, id));
                if message.is_some() {
                    break;
                }
            }
        }
        let body = String::from_utf8_lossy(&read).into_owned();
        if !sse {
            message = serde_json::from_str(&body).ok();
        }
        Ok(Reply {
            status,
            headers,
            body,
            message,
            sse,
        })
    }

    /// A `subscriptions/listen` stream: the messages and comment lines seen within `wait`
    /// (it is closed after).
    pub async fn listen(
        &self,
        id: &str,
        wait: Duration,
    ) -> Result<(u16, Vec<Value>, usize), String> {
        let mut params = json!({"notifications": {"toolsListChanged": true}});
        params["_meta"] = modern_meta();
        let body =
            json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": params});
        let mut rb = self
            .client
            .post(&self.url)
            .timeout(wait + self.timeout)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", MODERN)
            .header("mcp-method", "subscriptions/listen")
            .body(body.to_string());
        rb = self.named(rb, &self.url);
        for (k, v) in &self.headers {
            rb = rb.header(k.as_str(), v.as_str());
        }
        let mut resp = rb.send().await.map_err(|e| format!("no answer: {e}"))?;
        let status = resp.status().as_u16();
        let mut read = Vec::new();
        let deadline = tokio::time::Instant::now() + wait;
        while read.len() < MAX_BODY {
            match tokio::time::timeout_at(deadline, resp.chunk()).await {
                Ok(Ok(Some(chunk))) => read.extend_from_slice(&chunk),
                _ => break,
            }
            let text = String::from_utf8_lossy(&read);
            if !events(&text).is_empty() && comments(&text) > 0 {
                break;
            }
        }
        let text = String::from_utf8_lossy(&read);
        Ok((status, events(&text), comments(&text)))
    }
}

/// An event stream held open (HTTP+SSE's GET), read as far as asked.
pub struct Stream {
    resp: reqwest::Response,
    pub text: String,
}

impl Stream {
    /// Read until `done` holds for what was read, or `wait` passes; whether it held.
    pub async fn read_until(&mut self, wait: Duration, done: impl Fn(&str) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        while !done(&self.text) && self.text.len() < MAX_BODY {
            match tokio::time::timeout_at(deadline, self.resp.chunk()).await {
                Ok(Ok(Some(chunk))) => self.text.push_str(&String::from_utf8_lossy(&chunk)),
                _ => return done(&self.text),
            }
        }
        done(&self.text)
    }
}

impl Target {
    /// A GET of `url` as an event stream, held open when it is one (200, `text/event-stream`).
    pub async fn open_stream(&self, url: &str) -> Result<Option<Stream>, String> {
        let mut rb = self
            .client
            .get(url)
            .timeout(Duration::from_secs(3600))
            .header("accept", "text/event-stream");
        rb = self.named(rb, url);
        for (k, v) in &self.headers {
            rb = rb.header(k.as_str(), v.as_str());
        }
        let resp = tokio::time::timeout(self.timeout, rb.send())
            .await
            .map_err(|_| format!("no answer head within {} ms", self.timeout.as_millis()))?
            .map_err(|e| format!("no answer: {e}"))?;
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.to_ascii_lowercase().starts_with("text/event-stream"));
        Ok((resp.status() == 200 && sse).then(|| Stream {
            resp,
            text: String::new(),
        }))
    }

    /// A POST of `body` to another URL (an HTTP+SSE messages endpoint): its status. The
    /// caller's headers (credentials) go only to the URL's own origin.
    pub async fn post_to(&self, url: &str, body: &str) -> Result<u16, String> {
        let mut rb = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_owned());
        rb = self.named(rb, url);
        if same_origin(url, &self.url) {
            for (k, v) in &self.headers {
                rb = rb.header(k.as_str(), v.as_str());
            }
        }
        let resp = rb.send().await.map_err(|e| format!("no answer: {e}"))?;
        Ok(resp.status().as_u16())
    }
}

impl Target {
    /// `rb` for `url` with the `Host` to name, when `url` is the endpoint's own origin.
    fn named(&self, rb: reqwest::RequestBuilder, url: &str) -> reqwest::RequestBuilder {
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
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "mcp-edge-doctor", "version": env!("CARGO_PKG_VERSION")}
    })
}

fn answers(message: &Value, id: &str) -> bool {
    message.get("id").and_then(Value::as_str) == Some(id)
        && (message.get("result").is_some() || message.get("error").is_some())
}

/// The JSON messages of the complete events of an SSE text.
pub fn events(text: &str) -> Vec<Value> {
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
    let mut events: Vec<&str> = text.split("\n\n").collect();
    events.pop();
    events
        .into_iter()
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            serde_json::from_str(&data.join("\n")).ok()
        })
        .collect()
}

/// Comment lines (`:` keep-alives) in an SSE text.
pub fn comments(text: &str) -> usize {
    text.lines().filter(|l| l.starts_with(':')).count()
}
