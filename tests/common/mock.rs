//! A mock MCP upstream on raw tokio TCP, so tests can count requests, check bodies byte for
//! byte, and inject faults (stall, garbage, reset, slow or endless SSE).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// How the mock answers every request.
#[derive(Clone, Debug)]
pub enum Behavior {
    /// 200 JSON: `{"jsonrpc":"2.0","id":<id>,"result":{"len":N,"sha256":"…"}}`.
    Json,
    /// 200 SSE: each `(delay, frame)` written after its delay; then hold the stream open for
    /// `hold` (or until the client goes away) and end.
    Sse {
        frames: Vec<(Duration, String)>,
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

pub struct Mock {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    pub events: Mutex<mpsc::UnboundedReceiver<(Event, std::time::Instant)>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Mock {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Mock {
    pub async fn start(behavior: Behavior) -> Mock {
        Mock::start_on("127.0.0.1:0".parse().unwrap(), behavior).await
    }

    /// On a given address (to bring a "dead" member back).
    pub async fn start_on(addr: SocketAddr, behavior: Behavior) -> Mock {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::unbounded_channel();
        let seen2 = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (seen, tx, behavior) = (seen2.clone(), tx.clone(), behavior.clone());
                tokio::spawn(async move {
                    let _ = serve(stream, behavior, seen, tx).await;
                });
            }
        });
        Mock {
            addr,
            seen,
            events: Mutex::new(rx),
            task,
        }
    }

    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    pub fn last(&self) -> Option<Seen> {
        self.seen.lock().unwrap().last().cloned()
    }

    /// Wait for the next event of `kind`, up to `timeout`.
    pub async fn wait_for(&self, kind: Event, timeout: Duration) -> Option<std::time::Instant> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let next = {
                let mut rx = self.events.lock().unwrap();
                rx.try_recv().ok()
            };
            match next {
                Some((k, at)) if k == kind => return Some(at),
                Some(_) => continue,
                None if tokio::time::Instant::now() >= deadline => return None,
                None => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }
}

async fn serve(
    stream: TcpStream,
    behavior: Behavior,
    seen: Arc<Mutex<Vec<Seen>>>,
    tx: mpsc::UnboundedSender<(Event, std::time::Instant)>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    loop {
        let Some((head, body)) = read_request(&mut reader).await? else {
            return Ok(());
        };
        let sha = hex(&Sha256::digest(&body));
        seen.lock().unwrap().push(Seen {
            head: head.clone(),
            body_len: body.len(),
            body_sha256: sha.clone(),
        });
        let _ = tx.send((Event::Request, std::time::Instant::now()));
        let id = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("id").cloned())
            .unwrap_or(serde_json::Value::Null);
        let stream = reader.get_mut();
        match &behavior {
            Behavior::Json => {
                let body = serde_json::json!({"jsonrpc":"2.0","id":id,"result":{"len":body.len(),"sha256":sha}}).to_string();
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                stream.write_all(resp.as_bytes()).await?;
            }
            Behavior::Sse { frames, hold } => {
                stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n")
                    .await?;
                for (delay, frame) in frames {
                    tokio::time::sleep(*delay).await;
                    let chunk = format!("{:x}\r\n{frame}\r\n", frame.len());
                    if stream.write_all(chunk.as_bytes()).await.is_err() {
                        let _ = tx.send((Event::Disconnected, std::time::Instant::now()));
                        return Ok(());
                    }
                }
                // Hold the stream; a read returning 0 (or an error) means the edge closed it.
                let mut buf = [0u8; 64];
                match tokio::time::timeout(*hold, stream.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => {
                        let _ = tx.send((Event::Disconnected, std::time::Instant::now()));
                        return Ok(());
                    }
                    _ => {}
                }
                stream.write_all(b"0\r\n\r\n").await?;
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

/// Read one HTTP/1.1 request (Content-Length or chunked body). `None` on a clean close.
async fn read_request(r: &mut BufReader<TcpStream>) -> std::io::Result<Option<(String, Vec<u8>)>> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let lower = head.to_ascii_lowercase();
    let header = |name: &str| {
        lower
            .lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
    };
    let mut body = Vec::new();
    if header("transfer-encoding:").is_some_and(|v| v.contains("chunked")) {
        loop {
            let mut size_line = String::new();
            r.read_line(&mut size_line).await?;
            let size = usize::from_str_radix(size_line.trim().split(';').next().unwrap_or("0"), 16)
                .unwrap_or(0);
            let mut chunk = vec![0u8; size + 2];
            r.read_exact(&mut chunk).await?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(len) = header("content-length:").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(len, 0);
        r.read_exact(&mut body).await?;
    }
    Ok(Some((head, body)))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}
