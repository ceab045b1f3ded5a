//! A process's stderr into the log, one line each (prefixed `stdio <pool>[<pid>]:`), at
//! most `stderr_bytes_per_second` with a burst of one second's worth: a server that floods
//! its stderr cannot flood the edge's log. What does not fit is dropped, counted
//! (`mcp_edge_stdio_stderr_dropped_bytes_total{pool}`) and said at most once a second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

/// The longest piece read as one line (a longer line comes in pieces).
const MAX_LINE: u64 = 64 * 1024;
/// What a logged line costs beyond its text: the log's own head (time, level, target) and
/// the `stdio <pool>[<pid>]: ` prefix. Blank lines cost this too.
const LINE_COST: usize = 64;

/// A byte budget refilled at a rate (a token bucket).
#[derive(Debug)]
pub struct Bound {
    per_second: f64,
    tokens: f64,
    at: Instant,
}

impl Bound {
    pub fn new(per_second: u64) -> Bound {
        Bound {
            per_second: per_second as f64,
            tokens: per_second as f64,
            at: Instant::now(),
        }
    }

    /// Whether `bytes` may be logged now (taken from the budget if so).
    pub fn take(&mut self, bytes: usize, now: Instant) -> bool {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * self.per_second;
        self.tokens = (self.tokens + refill).min(self.per_second);
        self.at = now;
        if self.tokens >= bytes as f64 {
            self.tokens -= bytes as f64;
            true
        } else {
            false
        }
    }
}

pub async fn log(stderr: tokio::process::ChildStderr, pool: Arc<str>, pid: u32, mut bound: Bound) {
    let mut lines = BufReader::new(stderr);
    let mut line = Vec::new();
    let mut dropped = 0u64;
    let start = Instant::now();
    let mut said = start.checked_sub(Duration::from_secs(1)).unwrap_or(start);
    loop {
        line.clear();
        match (&mut lines)
            .take(MAX_LINE)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let now = Instant::now();
                // What is logged is what counts: a long line is cut (`clip`) first, and
                // every line pays for its head.
                let text = String::from_utf8_lossy(&line);
                let text = clip(text.trim_end());
                if bound.take(text.len() + LINE_COST, now) {
                    log::info!("stdio {pool}[{pid}]: {text}");
                    continue;
                }
                crate::metrics::stdio_stderr_dropped(&pool, n as u64);
                dropped += n as u64;
                if now.duration_since(said) >= Duration::from_secs(1) {
                    log::warn!(
                        "stdio {pool}[{pid}]: {dropped} stderr bytes dropped (over stderr_bytes_per_second)"
                    );
                    said = now;
                    dropped = 0;
                }
            }
        }
    }
    if dropped > 0 {
        log::warn!(
            "stdio {pool}[{pid}]: {dropped} stderr bytes dropped (over stderr_bytes_per_second)"
        );
    }
}

/// At most 2,000 characters of a line for the log.
pub(super) fn clip(text: &str) -> &str {
    match text.char_indices().nth(2000) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_a_burst_of_one_second_then_the_rate() {
        let start = Instant::now();
        let mut b = Bound::new(1000);
        b.at = start;
        assert!(b.take(600, start));
        assert!(b.take(400, start));
        assert!(!b.take(1, start), "the burst is spent");
        assert!(b.take(500, start + Duration::from_millis(500)));
        assert!(!b.take(500, start + Duration::from_millis(500)));
        assert!(
            b.take(1000, start + Duration::from_secs(10)),
            "refilled to one second's worth"
        );
        assert!(!b.take(1, start + Duration::from_secs(10)), "and no more");
    }
}
