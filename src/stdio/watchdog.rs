//! Watching a running process: is it still answering, and does it stay within its memory?
//!
//! - **Liveness.** Once a process has answered `initialize` (its start is bounded by
//!   `start_timeout_ms`) and has then written nothing for `liveness_interval_ms`, the edge
//!   sends it an MCP `ping` over its own pipe. If nothing at all comes back within
//!   `liveness_timeout_ms` (not the answer, not any other line), it is hung: a server whose
//!   event loop is stuck, that stopped reading its stdin, or stopped writing. Its waiting
//!   requests are answered at once (`stdio_unresponsive`), and it is stopped; its supervisor
//!   (a shared slot) starts another, an on-demand one starts again on next use.
//! - **Memory.** Once a second (with `memory_limit_bytes`), the resident memory of the
//!   process and everything in its session; over the limit it is stopped the same way.
//!   (Resident memory, not address space: `RLIMIT_AS` counts what runtimes such as V8
//!   reserve and never use, and breaks them long before they use too much. Resident pages
//!   shared after a fork count once per process: the sum errs high.)
//! - The same scan (every [`GAUGE`] without a limit) keeps `mcp_edge_stdio_tree_processes` up
//!   to date. Scans of `/proc` run on the blocking pool.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::child::Cause;
use super::process::Proc;
use super::Spec;

/// How often the session is scanned for its memory.
const SCAN: Duration = Duration::from_secs(1);
/// How often it is scanned without a memory limit (the gauge only).
const GAUGE: Duration = Duration::from_secs(5);

/// Watch `proc` until it ends.
pub(super) async fn watch(proc: Arc<Proc>, spec: Arc<Spec>) {
    let liveness = spec.liveness_interval;
    let tick = match liveness {
        Some(every) => (every / 2).clamp(Duration::from_millis(50), SCAN),
        None => SCAN,
    };
    let every = match spec.memory_limit_bytes {
        Some(_) => SCAN,
        None => GAUGE,
    };
    let mut scanned = Instant::now();
    loop {
        tokio::select! {
            _ = proc.ended() => return,
            _ = tokio::time::sleep(tick) => {}
        }
        if scanned.elapsed() >= every {
            scanned = Instant::now();
            if let Some(over) = over_memory(&proc, &spec).await {
                log::error!(
                    "stdio pool {}: process {} and what it started hold {over} bytes, over its memory limit ({} bytes); stopping it",
                    proc.pool,
                    proc.pid,
                    spec.memory_limit_bytes.unwrap_or_default()
                );
                proc.give_up(Cause::MemoryLimit, spec.stop_grace);
                return;
            }
        }
        // Not before it answered `initialize`: a start has `start_timeout_ms`.
        let Some(every) = liveness.filter(|_| proc.init.get().is_some()) else {
            continue;
        };
        if proc.silent_for() < every {
            continue;
        }
        if !proc.ping(spec.liveness_timeout).await {
            log::error!(
                "stdio pool {}: process {} did not answer a ping within {} ms (nothing read for {} ms); it is hung, stopping it",
                proc.pool,
                proc.pid,
                spec.liveness_timeout.as_millis(),
                proc.silent_for().as_millis()
            );
            proc.give_up(Cause::Hung, spec.stop_grace);
            return;
        }
    }
}

/// Resident bytes of the process's session when over its limit (the gauge updated too).
async fn over_memory(proc: &Proc, spec: &Spec) -> Option<u64> {
    let members = super::stop::scan(proc.child.scope).await;
    let running: Vec<_> = members.iter().filter(|(_, s)| !s.zombie).collect();
    proc.child.count(running.len() as i64);
    let limit = spec.memory_limit_bytes?;
    let page = super::tree::page_size();
    let resident: u64 = running.iter().map(|(_, s)| s.rss_pages * page).sum();
    (resident > limit).then_some(resident)
}
