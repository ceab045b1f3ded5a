//! The doctor's long-lived exchanges: a `subscriptions/listen` stream, an HTTP+SSE stream
//! held open, and the POSTs to its messages URL.

use std::time::Duration;

use serde_json::{json, Value};

use super::probe::{comments, events, modern_meta, same_origin, Target, MAX_BODY, MODERN};

impl Target {
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
        let mut resp = rb.send().await.map_err(|e| super::reach::cause(&e))?;
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
            .map_err(|e| super::reach::cause(&e))?;
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
        let resp = rb.send().await.map_err(|e| super::reach::cause(&e))?;
        Ok(resp.status().as_u16())
    }
}
