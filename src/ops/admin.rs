//! The admin listener: `/metrics` (Prometheus text), `/healthz` (the process serves) and
//! `/readyz` (a configuration is loaded and every pool has a healthy member); with
//! `[assertions]`, `/.well-known/jwks.json` (the keys identity assertions are signed with).

use async_trait::async_trait;
use http::Response;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

/// Where members find the keys of the edge's identity assertions.
pub const JWKS_PATH: &str = "/.well-known/jwks.json";

pub struct Admin {
    pub runtime: std::sync::Arc<arc_swap::ArcSwap<crate::runtime::Runtime>>,
}

#[async_trait]
impl ServeHttp for Admin {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let (status, content_type, body) = match session.req_header().uri.path() {
            "/metrics" => {
                for pool in self.runtime.load().pools.values() {
                    crate::routing::publish_load(pool);
                }
                (200, "text/plain; version=0.0.4", crate::metrics::render())
            }
            "/healthz" => (200, "text/plain", b"ok\n".to_vec()),
            JWKS_PATH => match &self.runtime.load().assertions {
                Some(signer) => (200, "application/json", signer.jwks().as_bytes().to_vec()),
                None => (404, "text/plain", b"not found: no [assertions]\n".to_vec()),
            },
            "/readyz" if self.runtime.load().ready() => (200, "text/plain", b"ready\n".to_vec()),
            "/readyz" => (
                503,
                "text/plain",
                b"not ready: a pool has no healthy member\n".to_vec(),
            ),
            _ => (
                404,
                "text/plain",
                b"not found: try /metrics, /healthz or /readyz\n".to_vec(),
            ),
        };
        let mut resp = Response::new(body);
        *resp.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
        if let Ok(v) = http::HeaderValue::from_str(content_type) {
            resp.headers_mut().insert(http::header::CONTENT_TYPE, v);
        }
        let len = resp.body().len();
        resp.headers_mut()
            .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(len));
        resp
    }
}
