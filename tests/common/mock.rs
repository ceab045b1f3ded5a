//! A mock MCP upstream on raw tokio TCP, so tests can count what reaches it, check bodies
//! byte for byte, and inject faults (stall, garbage, reset, slow or endless SSE).
//!
//! It counts three things as they happen: accepted connections, request heads (counted before
//! the body is read, so a forwarded head with a short body is still seen) and whole requests.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};

use super::http1;

/// Bodies larger than this are refused (the tests send at most a few MiB).
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// When the mock writes an SSE frame.
#[derive(Clone, Debug)]
pub enum Pace {
    Now,
    After(Duration),
    /// Once the test calls [`Mock::release`]: the upstream provably still holds the stream.
    OnRelease,
}

/// How the mock answers every request.
#[derive(Clone, Debug)]
pub enum Behavior {
    /// 200 JSON: `{"jsonrpc":"2.0","id":<id>,"result":{"len":N,"sha256":"…"}}`.
    Json,
    /// 200 SSE: each frame written at its pace; then hold the stream open for `hold` (or until
    /// the client goes away) and end.
    Sse {
        frames: Vec<(Pace, String)>,
        hold: Duration,
    },
    /// Like `Sse`, with this `Content-Type` (a media type in another case, say).
    SseTyped {
        content_type: &'static str,
        frames: Vec<(Pace, String)>,
        hold: Duration,
    },
    /// Answer with this status and body verbatim (an upstream error, say).
    Status(u16, String),
    /// Read the request, never answer.
    Stall,
    /// Answer bytes that are not HTTP.
    Garbage,
    /// Send a response head promising a body, part of it, then reset.
    ResetMidResponse,
    /// Wait this long before answering like `Json`.
    SlowFirstByte(Duration),
    /// Start an SSE response, send one event and half of the next, then close the connection.
    SseCutMidEvent,
    /// Like `Json`, with `mcp-session-id: <id>` (a legacy session server).
    JsonWithSession(String),
    /// Read the whole request (it is counted: the server acted on it), then close the
    /// connection without answering.
    ActThenClose,
    /// Answer these bytes verbatim (a whole response, framing included).
    Raw(String),
    /// The n-th request the mock reads (over all connections) behaves as the n-th entry; the
    /// last entry repeats.
    Sequence(Vec<Behavior>),
    /// A server of the Tasks extension (SEP-2663) that keeps its tasks to itself: a
    /// `tools/call` from a client that declared the extension creates a task here (its id
    /// `<prefix>-<n>`), answered as JSON; `tasks/get` answers on an event stream (a
    /// `notifications/tasks/status`, then the task); `tasks/update` and `tasks/cancel` answer
    /// JSON. A task this instance does not hold, or an `Mcp-Name` that does not mirror
    /// `params.taskId`, is answered -32602 and counted in [`Mock::task_misses`].
    Tasks { prefix: String },
}

/// One request as the mock saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub head: String,
    pub body_len: usize,
    pub body_sha256: String,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Request,
    /// The client side of an SSE stream went away while the mock still held it.
    Disconnected,
}

#[derive(Default)]
struct Counters {
    connections: AtomicUsize,
    heads: AtomicUsize,
}

/// What every connection task shares.
struct Shared {
    behavior: Behavior,
    counters: Counters,
    seen: Mutex<Vec<Seen>>,
    events: mpsc::UnboundedSender<(Event, Instant)>,
    released: Semaphore,
    /// `Tasks`: id → status, and requests for tasks this instance does not hold.
    tasks: Mutex<Vec<(String, String)>>,
    task_misses: AtomicUsize,
}

pub struct Mock {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    events: tokio::sync::Mutex<mpsc::UnboundedReceiver<(Event, Instant)>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Mock {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Mock {
    pub async fn start(behavior: Behavior) -> Mock {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Mock::serve(listener, behavior)
    }

    /// Serve on a listener the caller bound (to bring a reserved "dead" member back).
    pub fn serve(listener: TcpListener, behavior: Behavior) -> Mock {
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            behavior,
            counters: Counters::default(),
            seen: Mutex::new(Vec::new()),
            events: tx,
            released: Semaphore::new(0),
            tasks: Mutex::new(Vec::new()),
            task_misses: AtomicUsize::new(0),
        });
        let s = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                s.counters.connections.fetch_add(1, Ordering::SeqCst);
                let s = s.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, &s).await;
                });
            }
        });
        Mock {
            addr,
            shared,
            events: tokio::sync::Mutex::new(rx),
            task,
        }
    }

    /// Connections accepted so far (health probes included).
    pub fn connections(&self) -> usize {
        self.shared.counters.connections.load(Ordering::SeqCst)
    }

    /// Request heads received so far, whether or not their bodies arrived.
    pub fn heads(&self) -> usize {
        self.shared.counters.heads.load(Ordering::SeqCst)
    }

    /// Requests read in full so far.
    pub fn requests(&self) -> usize {
        self.shared.seen.lock().unwrap().len()
    }

    /// The heads of every request read in full, in order.
    pub fn all_heads(&self) -> Vec<String> {
        self.shared
            .seen
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.head.clone())
            .collect()
    }

    /// Every request read in full, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    pub fn last(&self) -> Option<Seen> {
        self.shared.seen.lock().unwrap().last().cloned()
    }

    /// Let one [`Pace::OnRelease`] frame go out.
    pub fn release(&self) {
        self.shared.released.add_permits(1);
    }

    /// Wait for the next event of `kind`, up to `timeout`; when it happened.
    /// `Tasks`: requests that named a task this instance does not hold (or whose `Mcp-Name`
    /// did not mirror it).
    pub fn task_misses(&self) -> usize {
        self.shared.task_misses.load(Ordering::SeqCst)
    }

    /// `Tasks`: the tasks this instance holds, with their status.
    pub fn tasks(&self) -> Vec<(String, String)> {
        self.shared.tasks.lock().unwrap().clone()
    }

    pub async fn wait_for(&self, kind: Event, timeout: Duration) -> Option<Instant> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut rx = self.events.lock().await;
        loop {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some((k, at))) if k == kind => return Some(at),
                Ok(Some(_)) => continue,
                Ok(None) | Err(_) => return None,
            }
        }
    }
}

async fn serve(stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    loop {
        let Some(head) = http1::read_head(&mut reader).await? else {
            return Ok(());
        };
        shared.counters.heads.fetch_add(1, Ordering::SeqCst);
        let body = http1::read_body(&mut reader, &head, MAX_BODY_BYTES).await?;
        let sha = hex(&Sha256::digest(&body));
        shared.seen.lock().unwrap().push(Seen {
            head: head.text.clone(),
            body_len: body.len(),
            body_sha256: sha.clone(),
        });
        let _ = shared.events.send((Event::Request, Instant::now()));
        let id = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("id").cloned())
            .unwrap_or(serde_json::Value::Null);
        let stream = reader.get_mut();
        let n = shared.seen.lock().unwrap().len() - 1;
        let behavior = match &shared.behavior {
            Behavior::Sequence(steps) => steps.get(n).or(steps.last()).unwrap_or(&Behavior::Json),
            other => other,
        };
        match behavior {
            Behavior::Sequence(_) => return Ok(()),
            Behavior::JsonWithSession(session) => {
                let body = serde_json::json!({"jsonrpc":"2.0","id":id,"result":{"len":body.len(),"sha256":sha}}).to_string();
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmcp-session-id: {session}\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                stream.write_all(resp.as_bytes()).await?;
            }
            Behavior::ActThenClose => return Ok(()),
            Behavior::Tasks { prefix } => {
                let parsed = http1::Head::parse(&head.text);
                let resp = tasks_answer(shared, prefix, &parsed, &body, id);
                stream.write_all(resp.as_bytes()).await?;
            }
            Behavior::Raw(bytes) => stream.write_all(bytes.as_bytes()).await?,
            Behavior::Json => {
                let body = serde_json::json!({"jsonrpc":"2.0","id":id,"result":{"len":body.len(),"sha256":sha}}).to_string();
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                stream.write_all(resp.as_bytes()).await?;
            }
            Behavior::Sse { frames, hold } => {
                if !sse(stream, shared, "text/event-stream", frames, *hold).await? {
                    return Ok(());
                }
            }
            Behavior::SseTyped {
                content_type,
                frames,
                hold,
            } => {
                if !sse(stream, shared, content_type, frames, *hold).await? {
                    return Ok(());
                }
            }
            Behavior::Status(status, text) => {
                let resp = format!(
                    "HTTP/1.1 {status} Whatever\r\ncontent-type: application/json\r\nx-upstream: yes\r\ncontent-length: {}\r\n\r\n{text}",
                    text.len()
                );
                stream.write_all(resp.as_bytes()).await?;
            }
            Behavior::SlowFirstByte(delay) => {
                tokio::time::sleep(*delay).await;
                let body =
                    serde_json::json!({"jsonrpc":"2.0","id":id,"result":{"slow":true}}).to_string();
                let resp = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len());
                stream.write_all(resp.as_bytes()).await?;
            }
            Behavior::SseCutMidEvent => {
                let whole = "event: message\ndata: {\"a\":1}\n\n";
                let half = "event: message\ndata: {\"jsonrpc\":";
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{whole}\r\n{:x}\r\n{half}\r\n",
                    whole.len(),
                    half.len()
                );
                stream.write_all(resp.as_bytes()).await?;
                // Fault injection: a moment for the bytes to leave before the close.
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Ok(());
            }
            Behavior::Stall => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            Behavior::Garbage => {
                stream.write_all(b"this is not HTTP at all\r\n\r\n").await?;
                return Ok(());
            }
            Behavior::ResetMidResponse => {
                stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"jsonrpc\":").await?;
                // Linger 0 turns the close into a TCP reset; it cannot block with no data queued.
                #[allow(deprecated)]
                stream.set_linger(Some(Duration::ZERO))?;
                return Ok(());
            }
        }
    }
}

/// The whole HTTP response of the `Tasks` server to one request.
fn tasks_answer(
    shared: &Shared,
    prefix: &str,
    head: &http1::Head,
    body: &[u8],
    id: serde_json::Value,
) -> String {
    use serde_json::{json, Value};
    let json_response = |v: Value| {
        let text = v.to_string();
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
            text.len()
        )
    };
    let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let method = request["method"].as_str().unwrap_or("");
    let params = &request["params"];
    let now = "2026-12-01T00:00:00Z";
    let task = |task_id: &str, status: &str| {
        json!({"taskId": task_id, "status": status, "createdAt": now, "lastUpdatedAt": now,
               "ttlSeconds": 60, "pollIntervalMilliseconds": 100})
    };
    if method == "tools/call" {
        let declared = params["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"]
            .get("io.modelcontextprotocol/tasks")
            .is_some();
        if !declared {
            return json_response(
                json!({"jsonrpc":"2.0","id":id,"result":{"content":[{"type":"text","text":"done at once"}]}}),
            );
        }
        let mut tasks = shared.tasks.lock().unwrap();
        let task_id = format!("{prefix}-{}", tasks.len() + 1);
        tasks.push((task_id.clone(), "working".to_string()));
        let mut result = task(&task_id, "working");
        result["resultType"] = json!("task");
        return json_response(json!({"jsonrpc":"2.0","id":id,"result":result}));
    }
    let task_id = params["taskId"].as_str().unwrap_or("");
    let named = head.header("mcp-name").map(|v| {
        match v
            .trim()
            .strip_prefix("=?base64?")
            .and_then(|r| r.strip_suffix("?="))
        {
            Some(b64) => {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .unwrap_or_default()
            }
            None => v.trim().to_string(),
        }
    });
    let mut tasks = shared.tasks.lock().unwrap();
    let held = tasks.iter_mut().find(|(t, _)| t == task_id);
    let Some((_, status)) = held.filter(|_| named.as_deref() == Some(task_id)) else {
        shared.task_misses.fetch_add(1, Ordering::SeqCst);
        return json_response(json!({"jsonrpc":"2.0","id":id,"error":{"code":-32602,
            "message":"Failed to retrieve task: Task not found"}}));
    };
    match method {
        "tasks/update" => {
            *status = "working".to_string();
            json_response(json!({"jsonrpc":"2.0","id":id,"result":{"resultType":"complete"}}))
        }
        "tasks/cancel" => {
            *status = "cancelled".to_string();
            json_response(json!({"jsonrpc":"2.0","id":id,"result":{"resultType":"complete"}}))
        }
        _ => {
            let mut result = task(task_id, status);
            result["resultType"] = json!("complete");
            let note = json!({"jsonrpc":"2.0","method":"notifications/tasks/status",
                "params": task(task_id, status)});
            let answer = json!({"jsonrpc":"2.0","id":id,"result":result});
            let events =
                format!("event: message\ndata: {note}\n\nevent: message\ndata: {answer}\n\n");
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{events}",
                events.len()
            )
        }
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// An SSE answer: each frame at its pace, then the stream held for `hold` (or until the
/// client goes away), then its end. False when the client went away.
async fn sse(
    stream: &mut TcpStream,
    shared: &Shared,
    content_type: &str,
    frames: &[(Pace, String)],
    hold: Duration,
) -> std::io::Result<bool> {
    let head = format!("HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n");
    stream.write_all(head.as_bytes()).await?;
    for (pace, frame) in frames {
        match pace {
            Pace::Now => {}
            Pace::After(delay) => tokio::time::sleep(*delay).await,
            Pace::OnRelease => match shared.released.acquire().await {
                Ok(permit) => permit.forget(),
                Err(_) => return Ok(false),
            },
        }
        let chunk = format!("{:x}\r\n{frame}\r\n", frame.len());
        if stream.write_all(chunk.as_bytes()).await.is_err() {
            let _ = shared.events.send((Event::Disconnected, Instant::now()));
            return Ok(false);
        }
    }
    // Hold the stream; a read returning 0 (or an error) means the edge closed it.
    let mut buf = [0u8; 64];
    match tokio::time::timeout(hold, stream.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => {
            let _ = shared.events.send((Event::Disconnected, Instant::now()));
            return Ok(false);
        }
        _ => {}
    }
    stream.write_all(b"0\r\n\r\n").await?;
    Ok(true)
}
