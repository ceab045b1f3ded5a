//! Pingora 0.9.1 reverse proxies with no MCP logic, the benchmark's floors (bench/bench.py):
//! how much of mcp-edge's cost is Pingora's own, and how much the work any production proxy
//! does besides MCP.
//!
//! Usage: `plain_pingora <listen-port> <upstream-port> [--fair <access-log-file>]`.
//!
//! - plain: forwards the request as it came, logs nothing.
//! - `--fair`: the same non-MCP work as mcp-edge's production defaults, written the way a
//!   Pingora user would: `X-Forwarded-For` / `-Proto` / `-Host` set on the upstream request
//!   (replacing what the client sent), and one JSON access-log line per request, handed to a
//!   bounded queue that a writer thread empties to the file every 20 ms (off the request path,
//!   as mcp-edge's writer does).

use std::io::{BufWriter, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use pingora::http::RequestHeader;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session};

struct Plain {
    upstream: u16,
    /// `--fair`: the access log's queue.
    log: Option<SyncSender<(SystemTime, Vec<u8>)>>,
}

#[derive(serde::Serialize)]
struct Line<'a> {
    http_method: &'a str,
    path: &'a str,
    host: Option<&'a str>,
    upstream: String,
    status: Option<u16>,
    duration_ms: f64,
    bytes_sent: usize,
    client: Option<std::net::IpAddr>,
    user_agent: Option<&'a str>,
    error: Option<String>,
}

#[async_trait]
impl ProxyHttp for Plain {
    type CTX = Option<Instant>;
    fn new_ctx(&self) -> Option<Instant> {
        self.log.as_ref().map(|_| Instant::now())
    }

    async fn upstream_peer(
        &self,
        _s: &mut Session,
        _c: &mut Option<Instant>,
    ) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(
            ("127.0.0.1", self.upstream),
            false,
            String::new(),
        )))
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        _c: &mut Option<Instant>,
    ) -> Result<()> {
        if self.log.is_none() {
            return Ok(());
        }
        if let Some(ip) = session.client_addr().and_then(|a| a.as_inet()) {
            upstream.insert_header("x-forwarded-for", ip.ip().to_string())?;
        }
        upstream.insert_header("x-forwarded-proto", "http")?;
        if let Some(host) = session.req_header().headers.get("host").cloned() {
            upstream.insert_header("x-forwarded-host", host)?;
        }
        Ok(())
    }

    async fn logging(
        &self,
        session: &mut Session,
        e: Option<&Error>,
        started: &mut Option<Instant>,
    ) {
        let (Some(log), Some(started)) = (&self.log, started) else {
            return;
        };
        let req = session.req_header();
        let header = |name: &str| req.headers.get(name).and_then(|v| v.to_str().ok());
        let line = Line {
            http_method: req.method.as_str(),
            path: req.uri.path(),
            host: header("host"),
            upstream: format!("127.0.0.1:{}", self.upstream),
            status: session.response_written().map(|r| r.status.as_u16()),
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            bytes_sent: session.body_bytes_sent(),
            client: session
                .client_addr()
                .and_then(|a| a.as_inet())
                .map(|a| a.ip()),
            user_agent: header("user-agent"),
            error: e.map(|e| e.etype().as_str().to_string()),
        };
        let mut json = Vec::with_capacity(320);
        if serde_json::to_writer(&mut json, &line).is_ok() {
            // A full queue drops the line rather than wait.
            let _ = log.try_send((SystemTime::now(), json));
        }
    }
}

/// The writer thread: every 20 ms, what was queued, in one write.
fn write_out(rx: Receiver<(SystemTime, Vec<u8>)>, file: std::fs::File) {
    let mut out = BufWriter::with_capacity(128 * 1024, file);
    loop {
        std::thread::sleep(Duration::from_millis(20));
        loop {
            match rx.try_recv() {
                Ok((at, json)) => {
                    let ts = jiff::Timestamp::try_from(at).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
                    let _ = write!(out, "{{\"ts\":\"{ts:.3}\",");
                    let _ = out.write_all(json.strip_prefix(b"{").unwrap_or(&json));
                    let _ = out.write_all(b"\n");
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return,
            }
        }
        let _ = out.flush();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let port = |i: usize| -> u16 {
        args.get(i)
            .and_then(|a| a.parse().ok())
            .expect("usage: plain_pingora <listen-port> <upstream-port> [--fair <log-file>]")
    };
    let (listen, upstream) = (port(0), port(1));
    let log = match (args.get(2).map(String::as_str), args.get(3)) {
        (Some("--fair"), Some(path)) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .expect("access log file");
            let (tx, rx) = sync_channel(16_384);
            std::thread::spawn(move || write_out(rx, file));
            Some(tx)
        }
        _ => None,
    };
    let mut server = Server::new(None).expect("server");
    server.bootstrap();
    let mut svc =
        pingora::proxy::http_proxy_service(&server.configuration, Plain { upstream, log });
    svc.add_tcp(&format!("127.0.0.1:{listen}"));
    server.add_service(svc);
    server.run_forever();
}
