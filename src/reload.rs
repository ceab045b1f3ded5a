//! Reloading the configuration without dropping traffic: SIGHUP (and, optionally, a poll of
//! the file) loads and validates the file, then swaps the whole runtime snapshot at once. An
//! invalid file keeps the running snapshot, is logged with every reason, and counted.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use crate::config::{Config, Startup};
use crate::metrics;
use crate::runtime::Runtime;

pub struct Reloader {
    pub path: PathBuf,
    pub runtime: Arc<ArcSwap<Runtime>>,
    /// Settings only a restart applies; a reload that changes them says so.
    pub startup: Startup,
}

impl Reloader {
    /// Load, validate and swap. On error the running configuration stays.
    pub fn reload(&self) -> Result<(), Vec<String>> {
        let m = metrics::get();
        match Config::load(&self.path) {
            Ok(config) => {
                let old = self.runtime.load_full();
                config.runtime.inherit(&old);
                for pool in config.runtime.pools.values() {
                    pool.publish();
                }
                for gone in old
                    .pools
                    .keys()
                    .filter(|name| !config.runtime.pools.contains_key(*name))
                {
                    metrics::forget_pool(gone);
                }
                self.runtime.store(Arc::new(config.runtime));
                m.reload(metrics::ReloadResult::Success);
                let s = &config.startup;
                if s.listeners.iter().map(|l| l.address).ne(self
                    .startup
                    .listeners
                    .iter()
                    .map(|l| l.address))
                    || s.metrics != self.startup.metrics
                    || s.threads != self.startup.threads
                    || s.access_log != self.startup.access_log
                {
                    log::warn!("config reloaded from {}; listener, metrics, thread and access_log.output/queue_lines changes need a restart", self.path.display());
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
