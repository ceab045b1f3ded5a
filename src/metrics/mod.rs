//! Every metric mcp-edge exports, registered once in one registry, with bounded labels.
//!
//! Labels never carry session ids, request ids or arguments: methods come from
//! [`crate::mcp::method_label`], error kinds from [`ErrorKind`], the other fixed label sets
//! from the enums below (every value pre-registered, so a series exists before its first
//! event), routes and pools from the configuration. [`build`] registers them; [`series`]
//! keeps the hot path's handles.

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex};

use prometheus::{
    Encoder, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry,
    TextEncoder,
};

use crate::error::ErrorKind;
pub use crate::mcp::EraLabel;

pub mod balance;
mod build;
mod labels;
mod series;

pub use balance::{BalanceMetrics, Ejection};
pub use labels::*;
pub use series::{MemberSeries, RouteSeries};

pub struct Metrics {
    pub registry: Registry,
    /// Requests by route, JSON-RPC method, era and outcome.
    pub requests: IntCounterVec,
    /// Errors raised by the edge itself, by kind.
    pub edge_errors: IntCounterVec,
    /// Time from choosing a member to its response header.
    pub upstream_latency: HistogramVec,
    /// Whole request time as the client sees it (to the end of the response).
    pub request_duration: HistogramVec,
    /// Upstream responses by pool, member and status class.
    pub upstream_responses: IntCounterVec,
    /// Open SSE responses by era.
    pub active_sse: IntGaugeVec,
    /// Session tokens sealed and opened (`op`).
    pub session_tokens: IntCounterVec,
    /// Session tokens refused, by reason.
    pub session_token_failures: IntCounterVec,
    /// Task ids sealed, opened and refused (`op`).
    pub task_ids: IntCounterVec,
    /// Configuration reloads by result (`success`, `failure`).
    pub config_reloads: IntCounterVec,
    pub build_info: IntGaugeVec,
    /// Access-log lines dropped because the writer could not keep up.
    pub access_log_dropped: IntCounter,
    /// Pool membership, health and discovery.
    pub pools: PoolMetrics,
    /// Members' load, queues, ejections.
    pub balance: BalanceMetrics,
    /// The memory budget.
    pub budget: BudgetMetrics,
    /// TLS listeners and upstreams.
    pub tls: TlsMetrics,
    /// Identity, policy, rate limits and CORS.
    pub access: AccessMetrics,
    /// Credentials sent to members, token exchanges.
    pub credentials: CredentialMetrics,
    /// stdio pools.
    pub stdio: StdioMetrics,
    /// The OpenTelemetry MCP operation metric and the export of spans.
    pub traces: TraceMetrics,
    /// Member labels last published per pool, so departed members' series are removed.
    pub published: Mutex<HashMap<String, HashSet<String>>>,
}

/// Who may call what: credentials, policy, rate limits, CORS preflights.
pub struct AccessMetrics {
    /// Requests answered by the edge's CORS policy (preflights), by route.
    pub cors_preflights: IntCounterVec,
    /// Credentials checked on routes with `auth`, by route and result.
    pub auth: IntCounterVec,
    /// Requests refused by a route's policy (a hidden name), by route and rule.
    pub policy_refusals: IntCounterVec,
    /// Entries cut from list answers by a route's policy, by route and rule.
    pub policy_hidden: IntCounterVec,
    /// Requests over a route's rate limit (429), by route.
    pub rate_limited: IntCounterVec,
    /// Rate-limit decisions by route and who decided (local, shared, fallback).
    pub rate_decisions: IntCounterVec,
    /// Time Redis took for a decision it gave.
    pub rate_store_seconds: Histogram,
    /// 1 while Redis cannot decide and replicas decide locally.
    pub rate_fallback: IntGauge,
    /// Why Redis did not decide, by cause.
    pub rate_redis_failures: IntCounterVec,
    /// JWKS fetches by result.
    pub jwks_fetches: IntCounterVec,
}

/// What members were told of callers (`[pools.credential]`).
pub struct CredentialMetrics {
    /// Credentials the edge sent members (identity assertions minted, static ones
    /// attached, exchanged tokens), by pool and kind.
    pub upstream_credentials: IntCounterVec,
    /// Token exchanges (RFC 8693) by pool and outcome (ok, refused, timeout, failed).
    pub token_exchanges: IntCounterVec,
    /// Time an exchange took, by pool.
    pub token_exchange_seconds: HistogramVec,
    /// Where a caller's exchanged token came from, by pool (hit, miss, joined).
    pub token_exchange_cache: IntCounterVec,
}

/// `mcp.server.operation.duration` of the OpenTelemetry MCP conventions, and the span export.
pub struct TraceMetrics {
    /// `mcp_server_operation_duration_seconds`: from receiving a request to sending its
    /// answer, by method, error type, route and (for the names the configuration lists)
    /// tool.
    pub operation_duration: HistogramVec,
    /// Spans the collector took.
    pub spans_exported: IntCounter,
    /// Spans dropped, by reason.
    pub spans_dropped: IntCounterVec,
}

/// stdio pools: processes running, starts by result, ends.
pub struct StdioMetrics {
    pub processes: IntGaugeVec,
    pub starts: IntCounterVec,
    pub exits: IntCounterVec,
    /// How each process ended, by pool and [`StdioStop`].
    pub stops: IntCounterVec,
    /// Every process the pool's servers hold (what they started, stragglers included).
    pub tree: IntGaugeVec,
    /// stderr bytes over a process's bound, not logged.
    pub stderr_dropped: IntCounterVec,
}

/// Pool membership, health checks and discovery.
pub struct PoolMetrics {
    /// Member health as the edge sees it (1 healthy, 0 not), by pool and member.
    pub member_healthy: IntGaugeVec,
    /// Members currently in each pool (static or discovered).
    pub pool_members: IntGaugeVec,
    /// Active health checks by pool and result.
    pub health_checks: IntCounterVec,
    /// DNS re-resolutions of discovered pools by result (`ok`, `empty`, `error`).
    pub dns_resolutions: IntCounterVec,
    /// Connections to a member that failed (refused, timed out), by pool and member.
    pub connect_failures: IntCounterVec,
    /// Whether a pool's healthy members speak a revision (1) or not (0), as their `mcp`
    /// health checks told; no series while nobody has said.
    pub revisions: IntGaugeVec,
    /// How many of the three absent answers (tool, prompt, resource) were learned from a
    /// pool's servers, by era (`modern`, `legacy`); no series while none is.
    pub absent_learned: IntGaugeVec,
    /// The edge's own replicas (`[fleet]`): known and live.
    pub fleet: IntGaugeVec,
    /// Requests handed from one replica to the one holding their state, by outcome.
    pub handoffs: IntCounterVec,
    /// Requests the hand-off listener refused, by reason.
    pub handoffs_refused: IntCounterVec,
    /// HTTP+SSE streams the edge holds for bridged clients: opened, lost (a client not reading).
    pub bridged_streams: IntCounterVec,
}

/// The memory budget and its push-back.
pub struct BudgetMetrics {
    /// The memory budget in force, and what is reserved of it.
    pub limit: IntGauge,
    pub used: IntGauge,
    /// Work refused because the budget was full, by holder.
    pub refusals: IntCounterVec,
    /// Stalled holders closed to make room, by reason.
    pub evictions: IntCounterVec,
    /// Connections closed because their first request head was not complete in time.
    pub head_timeouts: IntCounter,
}

/// TLS listeners and HTTPS pools.
pub struct TlsMetrics {
    /// Each served certificate's notAfter (seconds since the epoch), by listener and name.
    pub certificate_expiry: IntGaugeVec,
    /// Certificate reloads by result (`success`, `failure`).
    pub certificate_reloads: IntCounterVec,
    /// Client connections that did not complete a TLS handshake, by reason.
    pub handshake_failures: IntCounterVec,
    /// Handshakes with members that failed (untrusted, expired or wrong-name certificate),
    /// by pool and member.
    pub upstream_failures: IntCounterVec,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| match build::build() {
    Ok(m) => m,
    // Only reachable through a programming error (a duplicate or malformed metric name).
    Err(e) => panic!("metric registration failed: {e}"),
});

pub fn get() -> &'static Metrics {
    &METRICS
}

pub fn stdio_processes(pool: &str, running: i64) {
    get()
        .stdio
        .processes
        .with_label_values(&[pool])
        .set(running);
}

pub fn stdio_start(pool: &str, ok: bool) {
    let result = if ok { "ok" } else { "failed" };
    get().stdio.starts.with_label_values(&[pool, result]).inc();
}

pub fn stdio_exit(pool: &str) {
    get().stdio.exits.with_label_values(&[pool]).inc();
}

impl Metrics {
    pub fn bridged_stream(&self, event: BridgedStream) {
        self.pools
            .bridged_streams
            .with_label_values(&[label(event)])
            .inc();
    }

    pub fn handoff(&self, outcome: Handoff) {
        self.pools
            .handoffs
            .with_label_values(&[label(outcome)])
            .inc();
    }

    pub fn hop_refused(&self, reason: HopRefused) {
        self.pools
            .handoffs_refused
            .with_label_values(&[label(reason)])
            .inc();
    }
}

/// The fleet's replicas: `known` (listed or resolved) and `live` (answering).
pub fn fleet(known: usize, live: usize) {
    let f = &get().pools.fleet;
    f.with_label_values(&["known"]).set(known as i64);
    f.with_label_values(&["live"]).set(live as i64);
}

/// A decision Redis gave, and how long it took.
pub fn rate_store_seconds(took: std::time::Duration) {
    get().access.rate_store_seconds.observe(took.as_secs_f64());
}

/// Replicas decide locally (`true`) or through Redis again.
pub fn rate_fallback(on: bool) {
    get().access.rate_fallback.set(i64::from(on));
}

/// Redis did not decide, for `cause`.
pub fn rate_redis_failure(cause: RedisCause) {
    get()
        .access
        .rate_redis_failures
        .with_label_values(&[label(cause)])
        .inc();
}

pub fn stdio_stop(pool: &str, how: StdioStop) {
    get()
        .stdio
        .stops
        .with_label_values(&[pool, label(how)])
        .inc();
}

/// Processes the pool's servers hold: `delta` more (or fewer).
pub fn stdio_tree(pool: &str, delta: i64) {
    get().stdio.tree.with_label_values(&[pool]).add(delta);
}

pub fn stdio_stderr_dropped(pool: &str, bytes: u64) {
    get()
        .stdio
        .stderr_dropped
        .with_label_values(&[pool])
        .inc_by(bytes);
}

impl Metrics {
    /// Count an error the edge raised.
    pub fn edge_error(&self, kind: ErrorKind) {
        self.edge_errors.with_label_values(&[kind.as_str()]).inc();
    }
    pub fn token(&self, op: TokenOp) {
        self.session_tokens.with_label_values(&[label(op)]).inc();
    }
    pub fn task_id(&self, op: TaskIdOp) {
        self.task_ids.with_label_values(&[label(op)]).inc();
    }
    pub fn token_failure(&self, reason: TokenFailure) {
        self.session_token_failures
            .with_label_values(&[label(reason)])
            .inc();
    }
    pub fn reload(&self, result: ReloadResult) {
        self.config_reloads
            .with_label_values(&[label(result)])
            .inc();
    }
    pub fn handshake_failure(&self, reason: HandshakeFailure) {
        self.tls
            .handshake_failures
            .with_label_values(&[label(reason)])
            .inc();
    }
    pub fn certificate_reload(&self, result: ReloadResult) {
        self.tls
            .certificate_reloads
            .with_label_values(&[label(result)])
            .inc();
    }
    pub fn budget_limit(&self, bytes: usize) {
        self.budget.limit.set(bytes as i64);
    }
    pub fn budget_used(&self, bytes: usize) {
        self.budget.used.set(bytes as i64);
    }
    pub fn budget_refusal(&self, what: Holder) {
        self.budget.refusals.with_label_values(&[label(what)]).inc();
    }
    pub fn eviction(&self, reason: Eviction) {
        self.budget
            .evictions
            .with_label_values(&[label(reason)])
            .inc();
    }
    pub fn span_dropped(&self, reason: SpanDrop, spans: u64) {
        self.traces
            .spans_dropped
            .with_label_values(&[label(reason)])
            .inc_by(spans);
    }
    pub fn span_exported(&self, spans: u64) {
        self.traces.spans_exported.inc_by(spans);
    }
    /// An SSE response started (`+1`) or ended (`-1`).
    pub fn sse_streams(&self, era: EraLabel, delta: i64) {
        self.active_sse.with_label_values(&[label(era)]).add(delta);
    }
}

/// The Prometheus text exposition of every metric.
pub fn render() -> Vec<u8> {
    let mut out = Vec::new();
    // Encoding into a Vec cannot fail for well-formed metric families.
    let _ = TextEncoder::new().encode(&get().registry.gather(), &mut out);
    out
}

/// Status class label (`2xx` … `5xx`).
pub fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(series: &str) -> f64 {
        String::from_utf8(render())
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix(series))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    }

    #[test]
    fn cached_handles_count_into_the_labelled_series() {
        let route = RouteSeries::default();
        for _ in 0..3 {
            route.finished(
                "/cached-test",
                "tools/call",
                EraLabel::Legacy,
                Outcome::Rejected,
                0.01,
            );
        }
        route.finished(
            "/cached-test",
            "none",
            EraLabel::Unknown,
            Outcome::Failed,
            0.01,
        );
        assert_eq!(
            scrape(
                r#"mcp_edge_requests_total{era="legacy",method="tools/call",outcome="rejected",route="/cached-test"}"#
            ),
            3.0
        );
        assert_eq!(
            scrape(
                r#"mcp_edge_requests_total{era="unknown",method="none",outcome="failed",route="/cached-test"}"#
            ),
            1.0
        );
        let member = MemberSeries::default();
        for status in [200, 204, 503, 101, 404] {
            member.response("cached-pool", "10.0.0.1:1", status);
        }
        for (class, n) in [("1xx", 1.0), ("2xx", 2.0), ("4xx", 1.0), ("5xx", 1.0)] {
            assert_eq!(
                scrape(&format!(
                    r#"mcp_edge_upstream_responses_total{{class="{class}",member="10.0.0.1:1",pool="cached-pool"}}"#
                )),
                n,
                "{class}"
            );
        }
    }
}
