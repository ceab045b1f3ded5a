//! Handles on the per-request series, resolved once and kept: the request path only
//! increments.

use std::sync::OnceLock;

use prometheus::{Histogram, IntCounter};

use super::{get, label, status_class, EraLabel, Outcome};

/// A route's handles on the per-request series, each resolved (label lookup, hashing, lock)
/// on first use and then kept: the request path only increments.
pub struct RouteSeries {
    /// `mcp_edge_requests_total`, by method index × era × outcome.
    requests: Box<[OnceLock<IntCounter>]>,
    /// `mcp_edge_request_duration_seconds`, by era.
    duration: [OnceLock<Histogram>; ERAS],
    /// `mcp_server_operation_duration_seconds` of operations without an error or a tool
    /// label, by method index.
    operations: Box<[OnceLock<Histogram>]>,
}

const ERAS: usize = 3;
const OUTCOMES: usize = <Outcome as strum::EnumCount>::COUNT;

impl Default for RouteSeries {
    fn default() -> Self {
        RouteSeries {
            requests: (0..crate::mcp::METHOD_LABELS * ERAS * OUTCOMES)
                .map(|_| OnceLock::new())
                .collect(),
            duration: Default::default(),
            operations: (0..crate::mcp::METHOD_LABELS)
                .map(|_| OnceLock::new())
                .collect(),
        }
    }
}

impl std::fmt::Debug for RouteSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RouteSeries")
    }
}

impl RouteSeries {
    /// Count a finished request and its duration under `route`.
    pub fn finished(
        &self,
        route: &str,
        method: &'static str,
        era: EraLabel,
        outcome: Outcome,
        seconds: f64,
    ) {
        let m = get();
        let i =
            (crate::mcp::method_index(method) * ERAS + era as usize) * OUTCOMES + outcome as usize;
        let era_label = label(era);
        let resolve = || {
            m.requests
                .with_label_values(&[route, method, era_label, label(outcome)])
        };
        match self.requests.get(i) {
            Some(slot) => slot.get_or_init(resolve).inc(),
            None => resolve().inc(),
        }
        self.duration[era as usize]
            .get_or_init(|| m.request_duration.with_label_values(&[route, era_label]))
            .observe(seconds);
    }
}

impl RouteSeries {
    /// Record an MCP operation's duration.
    pub fn operation(
        &self,
        route: &str,
        method: &'static str,
        error: &str,
        tool: &str,
        seconds: f64,
    ) {
        let resolve = || {
            get()
                .traces
                .operation_duration
                .with_label_values(&[method, error, route, tool])
        };
        let slot = self.operations.get(crate::mcp::method_index(method));
        match slot {
            Some(slot) if error.is_empty() && tool.is_empty() => {
                slot.get_or_init(resolve).observe(seconds);
            }
            _ => resolve().observe(seconds),
        }
    }
}

/// A member's handles on `mcp_edge_upstream_responses_total`, by status class.
#[derive(Default)]
pub struct MemberSeries {
    responses: [OnceLock<IntCounter>; 5],
}

impl MemberSeries {
    pub fn response(&self, pool: &str, member: &str, status: u16) {
        let class = status_class(status);
        let i = usize::from(class.as_bytes()[0].saturating_sub(b'1')).min(4);
        self.responses[i]
            .get_or_init(|| {
                get()
                    .upstream_responses
                    .with_label_values(&[pool, member, class])
            })
            .inc();
    }
}

impl std::fmt::Debug for MemberSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemberSeries")
    }
}
