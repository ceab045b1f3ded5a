//! Every metric mcp-edge exports, registered once in one registry, with bounded labels.
//!
//! Labels never carry session ids, request ids or arguments: methods come from
//! [`crate::mcp::method_label`], error kinds from [`crate::error::EdgeError::kind`], routes
//! and pools from the configuration.

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex};

use prometheus::{
    register_histogram_vec_with_registry, register_int_counter_vec_with_registry,
    register_int_gauge_vec_with_registry, Encoder, HistogramVec, IntCounterVec, IntGaugeVec,
    Registry, TextEncoder,
};

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
    /// Configuration reloads by result (`success`, `failure`).
    pub config_reloads: IntCounterVec,
    pub build_info: IntGaugeVec,
    /// Member labels last published per pool, so departed members' series are removed.
    published: Mutex<HashMap<String, HashSet<String>>>,
}

/// Reasons a session token is refused (metric label values).
pub const TOKEN_FAILURE_REASONS: &[&str] = &[
    "malformed",
    "unknown_key",
    "forged",
    "expired",
    "other_pool",
    "foreign_credential",
    "member_gone",
];

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

fn build() -> Result<Metrics, prometheus::Error> {
    let registry = Registry::new();
    let m = Metrics {
        requests: register_int_counter_vec_with_registry!(
            "mcp_edge_requests_total",
            "MCP requests by route, method, era and outcome",
            &["route", "method", "era", "outcome"],
            registry
        )?,
        edge_errors: register_int_counter_vec_with_registry!(
            "mcp_edge_errors_total",
            "Errors raised by the edge itself, by kind",
            &["kind"],
            registry
        )?,
        upstream_latency: register_histogram_vec_with_registry!(
            "mcp_edge_upstream_response_seconds",
            "Time from choosing an upstream member to its response header",
            &["pool"],
            LATENCY_BUCKETS.to_vec(),
            registry
        )?,
        request_duration: register_histogram_vec_with_registry!(
            "mcp_edge_request_duration_seconds",
            "Time from request start to the end of the response",
            &["route", "era"],
            LATENCY_BUCKETS.to_vec(),
            registry
        )?,
        upstream_responses: register_int_counter_vec_with_registry!(
            "mcp_edge_upstream_responses_total",
            "Upstream responses by pool, member and status class",
            &["pool", "member", "class"],
            registry
        )?,
        active_sse: register_int_gauge_vec_with_registry!(
            "mcp_edge_active_sse_streams",
            "SSE responses currently streaming, by era",
            &["era"],
            registry
        )?,
        session_tokens: register_int_counter_vec_with_registry!(
            "mcp_edge_session_tokens_total",
            "Legacy session tokens sealed and opened",
            &["op"],
            registry
        )?,
        session_token_failures: register_int_counter_vec_with_registry!(
            "mcp_edge_session_token_failures_total",
            "Legacy session tokens refused, by reason",
            &["reason"],
            registry
        )?,
        member_healthy: register_int_gauge_vec_with_registry!(
            "mcp_edge_member_healthy",
            "1 when the member passes its health checks and is not ejected",
            &["pool", "member"],
            registry
        )?,
        pool_members: register_int_gauge_vec_with_registry!(
            "mcp_edge_pool_members",
            "Members currently in the pool",
            &["pool"],
            registry
        )?,
        health_checks: register_int_counter_vec_with_registry!(
            "mcp_edge_health_checks_total",
            "Active health checks by pool and result",
            &["pool", "result"],
            registry
        )?,
        dns_resolutions: register_int_counter_vec_with_registry!(
            "mcp_edge_dns_resolutions_total",
            "DNS re-resolutions of discovered pools by result",
            &["pool", "result"],
            registry
        )?,
        connect_failures: register_int_counter_vec_with_registry!(
            "mcp_edge_upstream_connect_failures_total",
            "Failed connections to a member (refused, timed out)",
            &["pool", "member"],
            registry
        )?,
        config_reloads: register_int_counter_vec_with_registry!(
            "mcp_edge_config_reloads_total",
            "Configuration reloads by result",
            &["result"],
            registry
        )?,
        build_info: register_int_gauge_vec_with_registry!(
            "mcp_edge_build_info",
            "Build information",
            &["version"],
            registry
        )?,
        published: Mutex::new(HashMap::new()),
        registry,
    };
    m.build_info
        .with_label_values(&[env!("CARGO_PKG_VERSION")])
        .set(1);
    for kind in crate::error::EdgeError::KINDS {
        m.edge_errors.with_label_values(&[kind]).inc_by(0);
    }
    for op in ["sealed", "opened"] {
        m.session_tokens.with_label_values(&[op]).inc_by(0);
    }
    for reason in TOKEN_FAILURE_REASONS {
        m.session_token_failures
            .with_label_values(&[reason])
            .inc_by(0);
    }
    for result in ["success", "failure"] {
        m.config_reloads.with_label_values(&[result]).inc_by(0);
    }
    for era in ["modern", "legacy"] {
        m.active_sse.with_label_values(&[era]).set(0);
    }
    Ok(m)
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| match build() {
    Ok(m) => m,
    // Only reachable through a programming error (a duplicate or malformed metric name).
    Err(e) => panic!("metric registration failed: {e}"),
});

pub fn get() -> &'static Metrics {
    &METRICS
}

/// The Prometheus text exposition of every metric.
pub fn render() -> Vec<u8> {
    let mut out = Vec::new();
    // Encoding into a Vec cannot fail for well-formed metric families.
    let _ = TextEncoder::new().encode(&get().registry.gather(), &mut out);
    out
}

/// Publish a pool's member count and each member's health; drop series of members that left.
pub fn publish_pool(pool: &crate::routing::Pool) {
    let m = get();
    let members = pool.members();
    m.pool_members
        .with_label_values(&[&pool.name])
        .set(members.len() as i64);
    let now: HashSet<String> = members.iter().map(|x| x.label.clone()).collect();
    for member in members.iter() {
        m.member_healthy
            .with_label_values(&[&pool.name, &member.label])
            .set(i64::from(member.is_healthy()));
    }
    let Ok(mut published) = m.published.lock() else {
        return;
    };
    let before = published
        .insert(pool.name.clone(), now.clone())
        .unwrap_or_default();
    for gone in before.difference(&now) {
        let _ = m.member_healthy.remove_label_values(&[&pool.name, gone]);
    }
}

/// Drop every series of a pool that no longer exists (after a reload removed it).
pub fn forget_pool(name: &str) {
    let m = get();
    let _ = m.pool_members.remove_label_values(&[name]);
    let Ok(mut published) = m.published.lock() else {
        return;
    };
    for member in published.remove(name).unwrap_or_default() {
        let _ = m.member_healthy.remove_label_values(&[name, &member]);
    }
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
