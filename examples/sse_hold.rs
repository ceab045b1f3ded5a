//! Open N idle `subscriptions/listen` SSE streams to a URL and hold them (benchmark P4).
//! Usage: `sse_hold <host:port> <path> <n> <hold-seconds>`. Prints `HOLDING <n>` once every
//! stream has received its first event, then holds them for the given time.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (addr, path) = (args[0].clone(), args[1].clone());
    let n: usize = args[2].parse().unwrap_or(1000);
    let hold: u64 = args[3].parse().unwrap_or(10);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let mut streams = Vec::with_capacity(n);
        let body = r#"{"jsonrpc":"2.0","id":"l","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
        let req = format!(
            "POST {path} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\nmcp-method: subscriptions/listen\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut open = Vec::new();
        for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
            let tasks: Vec<_> = chunk
                .iter()
                .map(|_| {
                    let (addr, req) = (addr.clone(), req.clone());
                    tokio::spawn(async move {
                        let mut s = TcpStream::connect(&addr).await?;
                        s.write_all(req.as_bytes()).await?;
                        let mut buf = vec![0u8; 4096];
                        let mut got = 0;
                        // Until the first event's blank line.
                        while !buf[..got].windows(4).any(|w| w == b"\n\n\r\n") && !buf[..got].ends_with(b"\n\n\r\n") {
                            let k = s.read(&mut buf[got..]).await?;
                            if k == 0 {
                                return Err(std::io::Error::other("closed"));
                            }
                            got += k;
                            if String::from_utf8_lossy(&buf[..got]).contains("acknowledged") && buf[..got].windows(2).any(|w| w == b"\n\n") {
                                break;
                            }
                        }
                        Ok::<TcpStream, std::io::Error>(s)
                    })
                })
                .collect();
            for t in tasks {
                match t.await {
                    Ok(Ok(s)) => open.push(s),
                    Ok(Err(e)) => eprintln!("stream failed: {e}"),
                    Err(e) => eprintln!("task failed: {e}"),
                }
            }
        }
        streams.extend(open);
        println!("HOLDING {}", streams.len());
        tokio::time::sleep(Duration::from_secs(hold)).await;
        Ok(())
    })
}
