//! Reloading the configuration without dropping traffic: SIGHUP (and, optionally, a poll of
//! the file) loads and validates the file, then swaps the whole runtime snapshot at once. An
//! invalid file keeps the running snapshot, is logged with every reason, and counted.
//!
//! TLS listeners' certificates are read again on SIGHUP too, and every `tls.watch_ms` by
//! [`CertificateWatch`] (cert-manager rewrites a mounted Secret in place): new handshakes
//! get the new certificate, open connections keep theirs. Files that cannot be read or
//! parsed keep the certificates being served.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use crate::config::{Config, Startup};
use crate::metrics;
use crate::net::tls::Certificates;
use crate::runtime::Runtime;

pub struct Reloader {
    pub path: PathBuf,
    pub runtime: Arc<ArcSwap<Runtime>>,
    /// Settings only a restart applies; a reload that changes them says so.
    pub startup: Startup,
    /// Compiles each endpoint's plan of stages (the pipeline's, see [`Runtime::compile`]).
    pub plan: fn(&crate::runtime::Endpoint, &Runtime) -> crate::runtime::Plan,
}

/// Read every TLS listener's certificate files again; changed ones are served from now on.
pub fn reload_certificates(certificates: &[Arc<Certificates>]) {
    let m = metrics::get();
    for c in certificates {
        match c.reload() {
            Ok(false) => {}
            Ok(true) => {
                m.certificate_reload(metrics::ReloadResult::Success);
                log::info!("TLS certificates reloaded: {}", c.names().join(", "));
            }
            Err(e) => {
                m.certificate_reload(metrics::ReloadResult::Failure);
                log::error!("TLS certificate reload failed; still serving the previous ones: {e}");
            }
        }
    }
}

/// Looks for changed certificate files on each listener's `tls.watch_ms`.
pub struct CertificateWatch {
    pub watched: Vec<(Arc<Certificates>, Duration)>,
}

#[async_trait]
impl BackgroundService for CertificateWatch {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let every = self
            .watched
            .iter()
            .map(|(_, d)| *d)
            .min()
            .unwrap_or(Duration::from_secs(10));
        let mut due: Vec<tokio::time::Instant> = self
            .watched
            .iter()
            .map(|(_, d)| tokio::time::Instant::now() + *d)
            .collect();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.changed() => return,
            }
            let now = tokio::time::Instant::now();
            for ((certificates, interval), at) in self.watched.iter().zip(due.iter_mut()) {
                if *at <= now {
                    *at = now + *interval;
                    reload_certificates(std::slice::from_ref(certificates));
                }
            }
        }
    }
}

impl Reloader {
    /// The certificates of this process's TLS listeners.
    fn certificates(&self) -> Vec<Arc<Certificates>> {
        self.startup
            .listeners
            .iter()
            .filter_map(|l| l.tls.as_ref().map(|t| t.certificates.clone()))
            .collect()
    }

    /// Load, validate and swap (and read TLS certificates again). On error the running
    /// configuration stays.
    pub fn reload(&self) -> Result<(), Vec<String>> {
        reload_certificates(&self.certificates());
        let m = metrics::get();
        match Config::load(&self.path) {
            Ok(mut config) => {
                for w in &config.warnings {
                    log::warn!("config: {w}");
                }
                let old = self.runtime.load_full();
                if let Err(e) = same_handoff(&config.runtime, &old) {
                    m.reload(metrics::ReloadResult::Failure);
                    log::error!(
                        "config reload from {} failed; keeping the running configuration: {e}",
                        self.path.display()
                    );
                    return Err(vec![e]);
                }
                config.runtime.inherit(&old);
                config.runtime.compile(self.plan);
                config.runtime.start();
                for pool in config.runtime.pools.values() {
                    pool.publish();
                }
                for gone in old
                    .pools
                    .keys()
                    .filter(|name| !config.runtime.pools.contains_key(*name))
                {
                    crate::routing::forget_pool(gone);
                }
                self.runtime.store(Arc::new(config.runtime));
                m.reload(metrics::ReloadResult::Success);
                if needs_restart(&config.startup, &self.startup) {
                    log::warn!("config reloaded from {}; listener (address, TLS certificate files, trace_context), metrics, thread, access_log.output/queue_lines and [tracing] changes need a restart", self.path.display());
                } else {
                    log::info!("config reloaded from {}", self.path.display());
                }
                Ok(())
            }
            Err(errs) => {
                m.reload(metrics::ReloadResult::Failure);
                log::error!(
                    "config reload from {} failed; keeping the running configuration:",
                    self.path.display()
                );
                for e in &errs {
                    log::error!("  - {e}");
                }
                Err(errs)
            }
        }
    }
}

/// The hand-off listener and the address this replica names in its tokens are the started
/// ones: a reload that would change them (a listener nobody opened, tokens this replica no
/// longer recognises as its own) is refused whole.
fn same_handoff(new: &Runtime, running: &Runtime) -> Result<(), String> {
    let handoff = |r: &Runtime| r.fleet.as_ref().and_then(|f| f.settings.handoff.clone());
    if handoff(new) == handoff(running) {
        return Ok(());
    }
    Err("fleet.handoff_listen and fleet.advertise are read at start: restart to change them".into())
}

/// A reloaded file changes what only a restart applies.
fn needs_restart(new: &Startup, running: &Startup) -> bool {
    let listening = |l: &crate::config::Listener| {
        let files = l.tls.as_ref().map(|t| t.certificates.files().to_vec());
        (l.address, files, l.trace_context)
    };
    new.listeners
        .iter()
        .map(listening)
        .ne(running.listeners.iter().map(listening))
        || new.metrics != running.metrics
        || new.threads != running.threads
        || new.access_log != running.access_log
        || new.tracing != running.tracing
}

/// Waits for SIGHUP (when `signals`) and polls the file every `watch` (when set).
pub struct ReloadService {
    pub reloader: Arc<Reloader>,
    pub signals: bool,
    pub watch: Option<Duration>,
}

fn stamp(path: &PathBuf) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

#[async_trait]
impl BackgroundService for ReloadService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut hup = if self.signals {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
                Ok(s) => Some(s),
                Err(e) => {
                    log::error!("cannot listen for SIGHUP: {e}");
                    None
                }
            }
        } else {
            None
        };
        let mut last = stamp(&self.reloader.path);
        let poll = self.watch.unwrap_or(Duration::from_secs(3600));
        loop {
            let by_signal = async {
                match hup.as_mut() {
                    Some(h) => {
                        h.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = by_signal => {
                    log::info!("SIGHUP: reloading {}", self.reloader.path.display());
                    let _ = self.reloader.reload();
                    last = stamp(&self.reloader.path);
                }
                _ = tokio::time::sleep(poll), if self.watch.is_some() => {
                    let now = stamp(&self.reloader.path);
                    if now != last {
                        last = now;
                        let _ = self.reloader.reload();
                    }
                }
                _ = shutdown.changed() => return,
            }
        }
    }
}
