//! The one check for an answer the edge makes itself: exact status, `x-mcp-edge-error` kind,
//! JSON-RPC code and id, and, for a request the edge must refuse, proof that the upstream saw
//! neither a connection nor a request head.

use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::http1;
use super::mock::Mock;
use super::peers::Peer;

/// What a client got back, over reqwest or raw bytes.
#[derive(Debug)]
pub struct Answer {
    /// `None` when the edge closed without answering.
    pub status: Option<u16>,
    /// Every `x-mcp-edge-error` value.
    pub kinds: Vec<String>,
    /// The body, parsed as JSON (`Null` when it is not JSON).
    pub json: Value,
    /// Head and body as text, for failure messages.
    pub text: String,
}

/// Send with reqwest and read the whole answer.
pub async fn exchange(rb: reqwest::RequestBuilder) -> Answer {
    let resp = rb.send().await.expect("request failed");
    let status = Some(resp.status().as_u16());
    let kinds = resp
        .headers()
        .get_all("x-mcp-edge-error")
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect();
    let head = format!("{:?} {:?}", resp.status(), resp.headers());
    let body = resp.text().await.expect("answer body");
    Answer {
        status,
        kinds,
        json: serde_json::from_str(&body).unwrap_or(Value::Null),
        text: format!("{head}\n{body}"),
    }
}

/// Send raw bytes (a request that asks to close) and read the answer to EOF, at most 10 s.
pub async fn exchange_raw(port: u16, bytes: &[u8]) -> Answer {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    // The edge may answer and close before it has read everything: a failed write is fine.
    let _ = s.write_all(bytes).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let Some((head, body)) = http1::split_message(&out) else {
        return Answer {
            status: None,
            kinds: Vec::new(),
            json: Value::Null,
            text,
        };
    };
    Answer {
        status: head.status(),
        kinds: head
            .headers("x-mcp-edge-error")
            .map(str::to_string)
            .collect(),
        json: serde_json::from_slice(body).unwrap_or(Value::Null),
        text,
    }
}

/// What an answer must be. A JSON-RPC `code` implies the edge's marker header.
#[derive(Clone, Debug)]
pub struct Expect {
    pub status: u16,
    pub kind: Option<&'static str>,
    pub code: Option<i64>,
    pub id: Option<Value>,
}

impl Expect {
    /// The edge's own error in full: status, marker kind, JSON-RPC code and id.
    pub fn edge(status: u16, kind: &'static str, code: i64, id: Value) -> Expect {
        Expect {
            status,
            kind: Some(kind),
            code: Some(code),
            id: Some(id),
        }
    }

    /// A marked JSON-RPC error with this code, whatever its kind and id.
    pub fn code(status: u16, code: i64) -> Expect {
        Expect {
            status,
            kind: None,
            code: Some(code),
            id: None,
        }
    }

    /// Only a status (Pingora's HTTP parser refuses some requests before the edge sees them).
    pub fn status(status: u16) -> Expect {
        Expect {
            status,
            kind: None,
            code: None,
            id: None,
        }
    }

    /// Everything about `answer` that differs from this expectation.
    pub fn mismatches(&self, answer: &Answer) -> Vec<String> {
        let mut wrong = Vec::new();
        if answer.status != Some(self.status) {
            wrong.push(format!("status {:?}, want {}", answer.status, self.status));
        }
        let marked = answer.kinds.len() == 1;
        if let Some(kind) = self.kind {
            if answer.kinds != [kind] {
                wrong.push(format!("x-mcp-edge-error {:?}, want {kind}", answer.kinds));
            }
        } else if self.code.is_some() && !marked {
            wrong.push(format!("x-mcp-edge-error {:?}, want one", answer.kinds));
        }
        if let Some(code) = self.code {
            if answer.json["jsonrpc"] != "2.0" || answer.json["error"]["code"] != code {
                wrong.push(format!("not a JSON-RPC error with code {code}"));
            }
        }
        if let Some(id) = &self.id {
            if answer.json["id"] != *id {
                wrong.push(format!("id {}, want {id}", answer.json["id"]));
            }
        }
        wrong
    }
}

/// Assert an edge error that came after the upstream was contacted (a timeout, garbage, a
/// refused connection).
pub fn assert_answer(answer: &Answer, want: &Expect, what: &str) {
    let wrong = want.mismatches(answer);
    assert!(
        wrong.is_empty(),
        "{what}: {}\n{}",
        wrong.join("; "),
        answer.text
    );
}

/// Connections and request heads an upstream has seen so far.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Contact {
    /// `None` where the upstream cannot tell (an SDK server).
    pub connections: Option<usize>,
    pub heads: usize,
}

pub trait Upstream {
    fn contact(&self) -> Contact;
}

impl Upstream for Mock {
    fn contact(&self) -> Contact {
        Contact {
            connections: Some(self.connections()),
            heads: self.heads(),
        }
    }
}

impl Upstream for Peer {
    fn contact(&self) -> Contact {
        Contact {
            connections: None,
            heads: self.requests(),
        }
    }
}

/// All members of a pool together.
impl<U: Upstream, const N: usize> Upstream for [&U; N] {
    fn contact(&self) -> Contact {
        let each: Vec<Contact> = self.iter().map(|u| u.contact()).collect();
        Contact {
            connections: each.iter().map(|c| c.connections).sum(),
            heads: each.iter().map(|c| c.heads).sum(),
        }
    }
}

/// Send a request the edge must refuse itself; describe what is wrong with the answer or
/// with the upstream's side. The upstream's pool must run no active health checks (their
/// probes are connections too).
pub async fn check_rejected(
    upstream: &impl Upstream,
    want: &Expect,
    send: impl Future<Output = Answer>,
) -> Result<Answer, String> {
    let before = upstream.contact();
    let answer = send.await;
    let mut wrong = want.mismatches(&answer);
    let after = upstream.contact();
    if after != before {
        wrong.push(format!(
            "the upstream was contacted: {before:?} before, {after:?} after"
        ));
    }
    if wrong.is_empty() {
        Ok(answer)
    } else {
        Err(format!("{}\n{}", wrong.join("; "), answer.text))
    }
}

/// [`check_rejected`], panicking with `what` on the first difference.
pub async fn assert_rejected(
    upstream: &impl Upstream,
    what: &str,
    want: &Expect,
    send: impl Future<Output = Answer>,
) -> Answer {
    check_rejected(upstream, want, send)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}
