//! A fast mock MCP upstream for benchmarks (so the upstream is not the bottleneck):
//! HTTP/1.1 keep-alive on raw tokio, one thread by default.
//!
//! - any POST answers `{"jsonrpc":"2.0","id":<id>,"result":{...}}` (JSON);
//! - `tools/list` answers 20 tools, as an SSE event when asked with `x-bench-sse: 1`;
//! - `initialize` answers a 2025-11-25 `InitializeResult` and mints an `Mcp-Session-Id` (so
//!   legacy token requests can be measured, and a gateway that initializes its backends starts);
//! - `subscriptions/listen` answers an SSE stream with one event and holds it open until
//!   the client goes away (idle-stream memory measurements).
//!
//! Usage: `bench_upstream <port> [threads]`; prints `LISTENING <port>`.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

#[path = "../tests/common/http1.rs"]
mod http1;

/// Benchmarks send small requests; a body larger than this is refused.
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

static SESSIONS: AtomicU64 = AtomicU64::new(0);

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let threads: usize = args.next().and_then(|t| t.parse().ok()).unwrap_or(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        println!("LISTENING {}", listener.local_addr()?.port());
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let _ = serve(stream).await;
            });
        }
    })
}

/// A `tools/list` result of 20 tools with small schemas (about 4 KiB), half of them
/// `team_a_*`, half `team_b_*` (the identity benchmark's policy shows one half).
fn tools_list(id: &serde_json::Value) -> String {
    let tools: Vec<String> = (0..20)
        .map(|i| {
            let team = if i % 2 == 0 { "a" } else { "b" };
            format!(
                "{{\"name\":\"team_{team}_tool_{i}\",\"description\":\"tool {i} of team {team}, which does something useful\",\"inputSchema\":{{\"type\":\"object\",\"properties\":{{\"text\":{{\"type\":\"string\"}},\"count\":{{\"type\":\"integer\"}}}},\"required\":[\"text\"]}}}}"
            )
        })
        .collect();
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"resultType\":\"complete\",\"tools\":[{}]}}}}",
        tools.join(",")
    )
}

async fn serve(stream: TcpStream) -> std::io::Result<()> {
    let mut r = BufReader::with_capacity(16 * 1024, stream);
    loop {
        let Some(head) = http1::read_head(&mut r).await? else {
            return Ok(());
        };
        let body = http1::read_body(&mut r, &head, MAX_BODY_BYTES).await?;
        let msg: serde_json::Value =
            serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
        let id = msg.get("id").cloned().unwrap_or(serde_json::Value::Null);
        let method = msg.get("method").and_then(|m| m.as_str()).unwrap_or("");
        let stream = r.get_mut();
        match method {
            "subscriptions/listen" => {
                let event = format!(
                    "event: message\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\",\"params\":{{\"_meta\":{{\"io.modelcontextprotocol/subscriptionId\":{id}}}}}}}\n\n"
                );
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{event}\r\n",
                    event.len()
                );
                stream.write_all(head.as_bytes()).await?;
                let mut buf = [0u8; 64];
                // Hold until the client (the edge) closes.
                while stream.read(&mut buf).await? != 0 {}
                return Ok(());
            }
            "tools/list" => {
                let sse = head.text.to_ascii_lowercase().contains("\nx-bench-sse: 1");
                let out = tools_list(&id);
                let resp = if sse {
                    let event = format!("event: message\ndata: {out}\n\n");
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ncontent-length: {}\r\n\r\n{event}",
                        event.len()
                    )
                } else {
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{out}",
                        out.len()
                    )
                };
                stream.write_all(resp.as_bytes()).await?;
            }
            _ => {
                let session = if method == "initialize" {
                    format!(
                        "mcp-session-id: bench-{}\r\n",
                        SESSIONS.fetch_add(1, Ordering::Relaxed)
                    )
                } else {
                    String::new()
                };
                let out = if method == "initialize" {
                    // A 2025-era client (a gateway that speaks it to its backends) checks the
                    // answer's shape.
                    format!(
                        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{{\"tools\":{{}}}},\"serverInfo\":{{\"name\":\"bench_upstream\",\"version\":\"1\"}}}}}}"
                    )
                } else {
                    format!(
                        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"resultType\":\"complete\",\"content\":[{{\"type\":\"text\",\"text\":\"ok\"}}]}}}}"
                    )
                };
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{session}content-length: {}\r\n\r\n{out}",
                    out.len()
                );
                stream.write_all(resp.as_bytes()).await?;
            }
        }
    }
}
