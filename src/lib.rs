//! mcp-edge: an MCP-aware edge proxy on Pingora.
//!
//! [`build_server`] turns a validated [`config::Config`] into a Pingora server;
//! [`EdgeHandle`] runs one in the background of the current process (tests, the demo).
#![forbid(unsafe_code)]

pub mod admin;
pub mod body;
pub mod config;
pub mod demo;
pub mod error;
pub mod mcp;
pub mod metrics;
pub mod proxy;
pub mod routing;
pub mod session;
pub mod sse;

use std::sync::Arc;
use std::thread::JoinHandle;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::apps::http_app::HttpServer;
use pingora::apps::HttpServerOptions;
use pingora::server::configuration::ServerConf;
use pingora::server::{RunArgs, Server, ShutdownSignal, ShutdownSignalWatch};
use pingora::services::listening::Service;

use config::{Config, Runtime};

/// A Pingora server with the edge's services added, and the handle to its live snapshot.
pub struct Built {
    pub server: Server,
    pub runtime: Arc<ArcSwap<Runtime>>,
}

pub fn build_server(config: Config) -> Built {
    let startup = config.startup;
    let conf = ServerConf {
        threads: startup.threads,
        grace_period_seconds: Some(startup.grace_period.as_secs()),
        graceful_shutdown_timeout_seconds: Some(startup.shutdown_timeout.as_secs()),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let runtime = Arc::new(ArcSwap::from_pointee(config.runtime));

    for (i, listener) in startup.listeners.iter().enumerate() {
        let edge = proxy::Edge::new(runtime.clone());
        let mut service = pingora::proxy::http_proxy_service_with_name(
            &server.configuration,
            edge,
            &format!("mcp-edge listener {i} ({})", listener.address),
        );
        if listener.h2c {
            if let Some(app) = service.app_logic_mut() {
                let mut options = HttpServerOptions::default();
                options.h2c = true;
                app.server_options = Some(options);
            }
        }
        service.add_tcp(&listener.address.to_string());
        server.add_service(service);
    }
    if let Some(addr) = startup.metrics {
        let mut admin = Service::new(
            "mcp-edge admin".to_string(),
            HttpServer::new_app(admin::Admin),
        );
        admin.add_tcp(&addr.to_string());
        server.add_service(admin);
    }
    Built { server, runtime }
}

/// An edge running on background threads of this process; dropping it shuts it down.
pub struct EdgeHandle {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    pub runtime: Arc<ArcSwap<Runtime>>,
}

struct StopSignal(std::sync::Mutex<Option<tokio::sync::oneshot::Receiver<()>>>);

#[async_trait]
impl ShutdownSignalWatch for StopSignal {
    async fn recv(&self) -> ShutdownSignal {
        let rx = self.0.lock().ok().and_then(|mut g| g.take());
        if let Some(rx) = rx {
            let _ = rx.await;
        }
        ShutdownSignal::FastShutdown
    }
}

impl EdgeHandle {
    pub fn start(config: Config) -> EdgeHandle {
        let Built { server, runtime } = build_server(config);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let signal = StopSignal(std::sync::Mutex::new(Some(rx)));
        let thread = std::thread::spawn(move || {
            server.run(RunArgs {
                shutdown_signal: Box::new(signal),
            })
        });
        EdgeHandle {
            stop: Some(tx),
            thread: Some(thread),
            runtime,
        }
    }

    pub fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for EdgeHandle {
    fn drop(&mut self) {
        self.stop();
    }
}
