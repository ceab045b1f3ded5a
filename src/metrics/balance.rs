//! How pools spread their load: requests each member holds, the queues, what was refused and
//! who was ejected. The gauges are read off the pools when `/metrics` is scraped
//! (`routing/publish.rs`): the request path only counts in the members' own atomics.

use prometheus::{HistogramVec, IntCounterVec, IntGaugeVec};
use strum::{EnumIter, IntoStaticStr};

use super::label;

pub struct BalanceMetrics {
    /// `mcp_edge_upstream_in_flight{pool,member,kind}`: requests (or long-lived streams) each
    /// member holds from this replica.
    pub in_flight: IntGaugeVec,
    /// `mcp_edge_pool_queue_depth{pool}`: requests waiting for a member's room.
    pub queue_depth: IntGaugeVec,
    /// `mcp_edge_pool_queue_wait_seconds{pool}`: time a request waited, however it ended.
    pub queue_wait: HistogramVec,
    /// `mcp_edge_pool_rejections_total{pool,reason}`: requests that never reached a member
    /// because of the limits.
    pub rejections: IntCounterVec,
    /// `mcp_edge_upstream_ejections_total{pool,member,reason}`.
    pub ejections: IntCounterVec,
}

/// The `reason` label of `mcp_edge_pool_rejections_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Rejection {
    /// Every eligible member was full and so was the queue.
    QueueFull,
    /// It waited `queue_ms` without room.
    QueueTimeout,
    /// The client left while it waited.
    ClientGone,
}

/// The `reason` label of `mcp_edge_upstream_ejections_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Ejection {
    /// A connection to it failed (refused, not accepted in time, a failed TLS handshake):
    /// ejected at once for `eject_ms`.
    Refused,
    /// Failed requests in a row, the last a connection that failed otherwise.
    ConnectError,
    /// Failed requests in a row, the last a 5xx it wrote.
    ServerError,
    /// Failed requests in a row, the last without a response head in time.
    Timeout,
}

impl super::Metrics {
    pub fn ejection(&self, pool: &str, member: &str, reason: Ejection) {
        self.balance
            .ejections
            .with_label_values(&[pool, member, label(reason)])
            .inc();
    }

    pub fn pool_rejection(&self, pool: &str, reason: Rejection) {
        self.balance
            .rejections
            .with_label_values(&[pool, label(reason)])
            .inc();
    }

    pub fn queue_wait(&self, pool: &str, seconds: f64) {
        self.balance
            .queue_wait
            .with_label_values(&[pool])
            .observe(seconds);
    }
}
