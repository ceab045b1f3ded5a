//! A plain Pingora 0.9.1 reverse proxy with no MCP logic (benchmark baseline): shows how much
//! of mcp-edge's cost is Pingora's own. Usage: `plain_pingora <listen-port> <upstream-port>`.

use async_trait::async_trait;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session};

struct Plain(u16);

#[async_trait]
impl ProxyHttp for Plain {
    type CTX = ();
    fn new_ctx(&self) {}
    async fn upstream_peer(&self, _s: &mut Session, _c: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(
            ("127.0.0.1", self.0),
            false,
            String::new(),
        )))
    }
}

fn main() {
    let args: Vec<u16> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (listen, upstream) = (args[0], args[1]);
    let mut server = Server::new(None).expect("server");
    server.bootstrap();
    let mut svc = pingora::proxy::http_proxy_service(&server.configuration, Plain(upstream));
    svc.add_tcp(&format!("127.0.0.1:{listen}"));
    server.add_service(svc);
    server.run_forever();
}
