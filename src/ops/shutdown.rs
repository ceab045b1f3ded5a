//! Stopping: SIGTERM stops accepting, ends open event streams cleanly, lets in-flight
//! requests finish within `server.grace_period_seconds`, then exits. SIGINT does the same
//! without the grace period.

use async_trait::async_trait;
use pingora::server::{ShutdownSignal, ShutdownSignalWatch};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

/// The drain switch: flipped once, when shutdown starts; every SSE response watches it.
pub fn drain_switch() -> (watch::Sender<bool>, watch::Receiver<bool>) {
    watch::channel(false)
}

/// Unix signals → Pingora shutdown, flipping the drain switch first.
pub struct Signals {
    pub drain: watch::Sender<bool>,
}

#[async_trait]
impl ShutdownSignalWatch for Signals {
    async fn recv(&self) -> ShutdownSignal {
        let (Ok(mut term), Ok(mut int), Ok(mut quit)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::quit()),
        ) else {
            log::error!("cannot listen for shutdown signals; stopping");
            return ShutdownSignal::FastShutdown;
        };
        let kind = tokio::select! {
            _ = term.recv() => { log::info!("SIGTERM: draining"); ShutdownSignal::GracefulTerminate }
            _ = quit.recv() => { log::info!("SIGQUIT: draining"); ShutdownSignal::GracefulTerminate }
            _ = int.recv() => { log::info!("SIGINT: stopping"); ShutdownSignal::FastShutdown }
        };
        let _ = self.drain.send(true);
        kind
    }
}
