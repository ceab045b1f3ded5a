//! `mcp-edge demo`: two small built-in MCP servers (2026-07-28, stateless) behind the edge,
//! and the curl commands that show it working.
//!
//! The demo servers are deliberately tiny: `server/discover`, `tools/list`, `tools/call` for
//! `echo` and `whoami` (which names the member that answered, so round-robin is visible).

use std::net::{SocketAddr, TcpListener};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use http::Response;
use pingora::apps::http_app::{HttpServer, ServeHttp};
use pingora::protocols::http::ServerSession;
use pingora::services::listening::Service;
use serde_json::{json, Value};

use mcp_edge::config::Config;

/// A minimal stateless MCP server; counts the requests it receives.
pub struct DemoServer {
    pub instance: String,
    pub requests: Arc<AtomicUsize>,
}

pub fn service(
    instance: &str,
    addr: SocketAddr,
) -> (Service<HttpServer<DemoServer>>, Arc<AtomicUsize>) {
    let requests = Arc::new(AtomicUsize::new(0));
    let app = DemoServer {
        instance: instance.to_string(),
        requests: requests.clone(),
    };
    let mut svc = Service::new(
        format!("demo upstream {instance}"),
        HttpServer::new_app(app),
    );
    svc.add_tcp(&addr.to_string());
    (svc, requests)
}

#[async_trait]
impl ServeHttp for DemoServer {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if session.req_header().method != http::Method::POST {
            return reply(
                405,
                &json!({"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Method not allowed."}}),
            );
        }
        let mut body = Vec::new();
        while let Ok(Some(chunk)) = session.read_request_body().await {
            body.extend_from_slice(&chunk);
        }
        let Ok(req) = serde_json::from_slice::<Value>(&body) else {
            return reply(
                400,
                &json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}),
            );
        };
        let id = req.get("id").cloned().unwrap_or(Value::Null);
        if req.get("id").is_none() {
            return reply(202, &Value::Null);
        }
        let method = req.get("method").and_then(Value::as_str).unwrap_or("");
        match self.answer(method, &req) {
            Ok(result) => reply(200, &json!({"jsonrpc":"2.0","id":id,"result":result})),
            Err((status, code, message)) => reply(
                status,
                &json!({"jsonrpc":"2.0","id":id,"error":{"code":code,"message":message}}),
            ),
        }
    }
}

impl DemoServer {
    fn answer(&self, method: &str, req: &Value) -> Result<Value, (u16, i64, String)> {
        let server_info = json!({"name": "mcp-edge-demo", "version": env!("CARGO_PKG_VERSION")});
        let params = req.get("params").cloned().unwrap_or(Value::Null);
        match method {
            "server/discover" => Ok(json!({
                "resultType": "complete",
                "supportedVersions": [mcp_edge::mcp::MODERN_VERSION],
                "capabilities": {"tools": {}},
                "ttlMs": 0, "cacheScope": "private",
                "_meta": {"io.modelcontextprotocol/serverInfo": server_info},
            })),
            "initialize" => Ok(json!({
                "protocolVersion": params.get("protocolVersion").cloned().unwrap_or(json!(mcp_edge::mcp::LATEST_LEGACY)),
                "capabilities": {"tools": {}},
                "serverInfo": server_info,
            })),
            "tools/list" => Ok(json!({
                "resultType": "complete", "ttlMs": 0, "cacheScope": "private",
                "tools": [
                    {"name": "echo", "description": "Echo text back, prefixed with the member that answered",
                     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
                    {"name": "whoami", "description": "Name the member that answered",
                     "inputSchema": {"type": "object", "properties": {}}},
                ],
            })),
            "tools/call" => {
                let text = match params.get("name").and_then(Value::as_str) {
                    Some("echo") => {
                        let said = params
                            .pointer("/arguments/text")
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        format!("{}: {said}", self.instance)
                    }
                    Some("whoami") => self.instance.clone(),
                    _ => return Err((200, -32602, "Unknown tool".into())),
                };
                Ok(json!({"resultType": "complete", "content": [{"type": "text", "text": text}]}))
            }
            _ => Err((404, -32601, "Method not found".into())),
        }
    }
}

fn reply(status: u16, body: &Value) -> Response<Vec<u8>> {
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    let mut resp = Response::new(bytes);
    *resp.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    let len = resp.body().len();
    let headers = resp.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(len));
    resp
}

/// A free loopback port (bound and released; the demo starts right after).
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Environment variable holding the demo's key ring (random, made at start).
pub const DEMO_KEYS_ENV: &str = "MCP_EDGE_DEMO_SESSION_KEYS";

/// Put a fresh random key ring in [`DEMO_KEYS_ENV`]: demo sessions die with the process.
pub fn set_demo_keys() -> Result<(), String> {
    let mut secret = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
        .map_err(|_| "no system randomness")?;
    use base64::Engine;
    let ring = format!(
        "1:{}",
        base64::engine::general_purpose::STANDARD.encode(secret)
    );
    // Called before any thread starts.
    std::env::set_var(DEMO_KEYS_ENV, ring);
    Ok(())
}

/// The demo configuration: the edge on `port`, metrics on the next port, two members.
pub fn config_text(port: u16, members: [u16; 2]) -> String {
    format!(
        r#"
[server]
threads = 1

[sessions]
keys_env = "{DEMO_KEYS_ENV}"

[[listeners]]
address = "127.0.0.1:{port}"

[metrics]
address = "127.0.0.1:{metrics}"

[[pools]]
name = "demo"
members = ["127.0.0.1:{a}", "127.0.0.1:{b}"]

[[routes]]
path = "/mcp"
pool = "demo"
allowed_origins = ["http://localhost:{port}"]
"#,
        metrics = port.wrapping_add(1),
        a = members[0],
        b = members[1],
    )
}

pub fn run(port: u16) -> ExitCode {
    if let Err(e) = TcpListener::bind(("127.0.0.1", port)) {
        eprintln!("mcp-edge demo: port {port} is not free ({e}); try `mcp-edge demo --port N`");
        return ExitCode::FAILURE;
    }
    let members = match (free_port(), free_port()) {
        (Ok(a), Ok(b)) if a != b => [a, b],
        _ => {
            eprintln!("mcp-edge demo: could not find two free loopback ports");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = set_demo_keys() {
        eprintln!("mcp-edge demo: {e}");
        return ExitCode::FAILURE;
    }
    let config = match Config::parse(&config_text(port, members)) {
        Ok(c) => c,
        Err(errs) => {
            eprintln!("mcp-edge demo: built-in config invalid: {errs:?}");
            return ExitCode::FAILURE;
        }
    };
    let mut built = mcp_edge::build_server(
        config,
        mcp_edge::Options {
            config_path: None,
            signals: true,
        },
    );
    for (name, p) in [("member-a", members[0]), ("member-b", members[1])] {
        built
            .server
            .add_service(service(name, SocketAddr::from(([127, 0, 0, 1], p))).0);
    }
    print_walkthrough(port, members);
    let signals = mcp_edge::ops::shutdown::Signals { drain: built.drain };
    built.server.run(pingora::server::RunArgs {
        shutdown_signal: Box::new(signals),
    });
    ExitCode::SUCCESS
}

fn print_walkthrough(port: u16, members: [u16; 2]) {
    let url = format!("http://127.0.0.1:{port}/mcp");
    let modern = mcp_edge::mcp::MODERN_VERSION;
    let h = format!("-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: {modern}'");
    let meta = format!(
        r#""_meta":{{"io.modelcontextprotocol/protocolVersion":"{modern}","io.modelcontextprotocol/clientCapabilities":{{}}}}"#
    );
    println!(
        r#"
mcp-edge demo: the edge listens on {url}
  in front of two built-in MCP servers: member-a on 127.0.0.1:{a}, member-b on 127.0.0.1:{b}
  metrics: http://127.0.0.1:{metrics}/metrics        (Ctrl-C to stop)

# 1. discover the server (2026-07-28, stateless)
curl -s {url} {h} -H 'Mcp-Method: server/discover' \
  -d '{{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{{{meta}}}}}'

# 2. call a tool twice: round-robin answers from member-a, then member-b
curl -s {url} {h} -H 'Mcp-Method: tools/call' -H 'Mcp-Name: whoami' \
  -d '{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"whoami","arguments":{{}},{meta}}}}}'

# 3. rejected by the edge, never forwarded: Mcp-Name says one tool, the body another
#    -> HTTP 400, JSON-RPC -32020, header x-mcp-edge-error: header_mismatch_name
curl -si {url} {h} -H 'Mcp-Method: tools/call' -H 'Mcp-Name: whoami' \
  -d '{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"hi"}},{meta}}}}}'

# 4. rejected: a version the route does not accept -> HTTP 400, JSON-RPC -32022 with the supported list
curl -si {url} -H 'Content-Type: application/json' -H 'MCP-Protocol-Version: 2099-01-01' -H 'Mcp-Method: tools/list' \
  -d '{{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{{"_meta":{{"io.modelcontextprotocol/protocolVersion":"2099-01-01"}}}}}}'

# 5. rejected: a browser page from another origin -> HTTP 403
curl -si {url} {h} -H 'Origin: https://evil.example' -H 'Mcp-Method: tools/list' \
  -d '{{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{{{meta}}}}}'

# 6. the edge's own view
curl -s http://127.0.0.1:{metrics}/metrics | grep '^mcp_edge_'
"#,
        a = members[0],
        b = members[1],
        metrics = port.wrapping_add(1),
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_demo_config_is_valid() {
        super::set_demo_keys().unwrap();
        mcp_edge::config::Config::parse(&super::config_text(8080, [18081, 18082])).unwrap();
    }
}
