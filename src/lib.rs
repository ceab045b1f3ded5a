//! mcp-edge: an MCP-aware edge proxy on Pingora.
//!
//! [`build_server`] turns a validated [`config::Config`] into a Pingora server with the
//! proxy listeners, the admin listener, pool maintenance (discovery, health checks) and
//! reloading; [`EdgeHandle`] runs one in the background of the current process (tests).
#![forbid(unsafe_code)]
#![warn(clippy::too_many_lines)]

pub mod config;
pub mod doctor;
pub mod error;
pub mod fleet;
pub mod identity;
pub mod mcp;
pub mod metrics;
pub mod net;
pub mod ops;
pub mod proxy;
pub mod routing;
pub mod runtime;
pub mod session;
pub mod stdio;

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::apps::http_app::HttpServer;
use pingora::apps::HttpServerOptions;
use pingora::server::configuration::ServerConf;
use pingora::server::{RunArgs, Server, ShutdownSignal, ShutdownSignalWatch};
use pingora::services::background::background_service;
use pingora::services::listening::Service;
use tokio::sync::watch;

use config::{Config, Startup};
use net::{budget, connections};
use ops::reload::{ReloadService, Reloader};
use ops::tracing::Tracing;
use ops::{access_log, admin, maintenance, reload, shutdown};
use runtime::Runtime;

/// What [`build_server`] needs besides the configuration.
#[derive(Debug, Default, Clone)]
pub struct Options {
    /// The file the configuration came from: enables reloading.
    pub config_path: Option<PathBuf>,
    /// Listen for SIGHUP (the binary; never in-process tests, which share one process).
    pub signals: bool,
}

/// A Pingora server with the edge's services added, and the handles to drive it.
pub struct Built {
    pub server: Server,
    pub runtime: Arc<ArcSwap<Runtime>>,
    /// Flip to `true` to end open event streams (shutdown).
    pub drain: watch::Sender<bool>,
    pub reloader: Option<Arc<Reloader>>,
    /// The span export, to flush at exit.
    pub tracing: Option<Arc<Tracing>>,
}

pub fn build_server(mut config: Config, options: Options) -> Built {
    for w in &config.warnings {
        log::warn!("config: {w}");
    }
    let startup = config.startup;
    // The binary starts the writer itself first, to refuse an output it cannot open; here a
    // failure (an in-process edge) leaves lines dropped and counted.
    if let Err(e) = access_log::start(&startup.access_log.output, startup.access_log.queue_lines) {
        log::error!("access_log.output: cannot open {e}; access-log lines will be dropped");
    }
    let conf = ServerConf {
        threads: startup.threads,
        grace_period_seconds: Some(startup.grace_period.as_secs()),
        graceful_shutdown_timeout_seconds: Some(startup.shutdown_timeout.as_secs()),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    config.runtime.compile(proxy::pipeline::plan);
    config.runtime.start();
    for pool in config.runtime.pools.values() {
        pool.publish();
    }
    let budget = budget::Budget::new(config.runtime.limits.memory_budget);
    let runtime = Arc::new(ArcSwap::from_pointee(config.runtime));
    let (drain, drained) = shutdown::drain_switch();
    let tracing = startup
        .tracing
        .as_ref()
        .and_then(|t| match Tracing::start(t) {
            Ok(tracing) => Some(tracing),
            Err(e) => {
                log::error!("tracing: {e}; no spans will be exported");
                None
            }
        });
    let listening = Shared {
        drained,
        budget,
        tracing: tracing.clone(),
    };
    add_listeners(&mut server, &startup, &runtime, listening);
    add_watchers(&mut server, &startup, &runtime);
    server.add_service(background_service(
        "pool maintenance",
        maintenance::Maintenance {
            runtime: runtime.clone(),
        },
    ));
    let reloader = options
        .config_path
        .map(|path| add_reloader(&mut server, path, &startup, &runtime, options.signals));
    Built {
        server,
        runtime,
        drain,
        reloader,
        tracing,
    }
}

/// The admin listener (`/metrics`, `/healthz`, `/readyz`) and the certificate watch.
fn add_watchers(server: &mut Server, startup: &Startup, runtime: &Arc<ArcSwap<Runtime>>) {
    if let Some(addr) = startup.metrics {
        let admin = admin::Admin {
            runtime: runtime.clone(),
        };
        let mut service = Service::new("mcp-edge admin".to_string(), HttpServer::new_app(admin));
        service.add_tcp(&addr.to_string());
        server.add_service(service);
    }
    let watched: Vec<_> = startup
        .listeners
        .iter()
        .filter_map(|l| l.tls.as_ref())
        .filter_map(|t| t.watch.map(|every| (t.certificates.clone(), every)))
        .collect();
    if !watched.is_empty() {
        server.add_service(background_service(
            "certificate watch",
            reload::CertificateWatch { watched },
        ));
    }
}

/// What every listener shares besides the snapshot.
struct Shared {
    /// Turns `true` to end open event streams.
    drained: watch::Receiver<bool>,
    budget: Arc<budget::Budget>,
    tracing: Option<Arc<Tracing>>,
}

/// One proxy service per listener, sharing the snapshot, the load counters, the tracer and
/// the switch that ends open event streams.
fn add_listeners(
    server: &mut Server,
    startup: &Startup,
    runtime: &Arc<ArcSwap<Runtime>>,
    shared: Shared,
) {
    let Shared {
        drained,
        budget,
        tracing,
    } = shared;
    let load = proxy::Load::new(budget.clone());
    for (i, listener) in startup.listeners.iter().enumerate() {
        let tls = listener.tls.as_ref().map(|t| {
            pingora::listeners::tls::Acceptor::from_server_config(t.certificates.server_config())
        });
        let listening = proxy::Listening {
            tls: tls.is_some(),
            tracing: tracing.clone(),
            trace_context: listener.trace_context,
            handoff: listener.handoff,
        };
        let edge = proxy::Edge::new(runtime.clone(), drained.clone(), load.clone(), listening);
        let mut proxy = pingora::proxy::http_proxy(&server.configuration, edge);
        if listener.h2c {
            let mut options = HttpServerOptions::default();
            options.h2c = true;
            proxy.server_options = Some(options);
        }
        let app = connections::ConnectionLimit::new(
            proxy,
            runtime.clone(),
            budget.clone(),
            listener.h2c,
            tls,
        );
        let mut service =
            Service::new(format!("mcp-edge listener {i} ({})", listener.address), app);
        service.add_tcp(&listener.address.to_string());
        server.add_service(service);
    }
}

fn add_reloader(
    server: &mut Server,
    path: PathBuf,
    startup: &Startup,
    runtime: &Arc<ArcSwap<Runtime>>,
    signals: bool,
) -> Arc<Reloader> {
    let reloader = Arc::new(Reloader {
        path,
        runtime: runtime.clone(),
        startup: startup.clone(),
        plan: proxy::pipeline::plan,
    });
    server.add_service(background_service(
        "config reload",
        ReloadService {
            reloader: reloader.clone(),
            signals,
            watch: startup.config_watch,
        },
    ));
    reloader
}

/// An edge running on background threads of this process; dropping it shuts it down.
pub struct EdgeHandle {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    pub runtime: Arc<ArcSwap<Runtime>>,
    pub drain: watch::Sender<bool>,
    pub reloader: Option<Arc<Reloader>>,
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
        EdgeHandle::start_with(config, Options::default())
    }

    pub fn start_with(config: Config, options: Options) -> EdgeHandle {
        let Built {
            server,
            runtime,
            drain,
            reloader,
            ..
        } = build_server(config, options);
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
            drain,
            reloader,
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
