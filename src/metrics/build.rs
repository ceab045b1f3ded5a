//! Registering every metric family once, in one registry, with its series for every fixed
//! label value.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};
use strum::IntoEnumIterator;

use super::*;

/// A shared store's answers: tens of microseconds on a node, milliseconds across zones.
const STORE_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1,
];

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Registers metrics in one registry; each call is one metric family.
struct Registrar(Registry);

impl Registrar {
    fn register<M: prometheus::core::Collector + Clone + 'static>(
        &self,
        m: M,
    ) -> Result<M, prometheus::Error> {
        self.0.register(Box::new(m.clone()))?;
        Ok(m)
    }
    fn counter(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<IntCounterVec, prometheus::Error> {
        self.register(IntCounterVec::new(Opts::new(name, help), labels)?)
    }
    fn gauge(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<IntGaugeVec, prometheus::Error> {
        self.register(IntGaugeVec::new(Opts::new(name, help), labels)?)
    }
    fn plain_gauge(&self, name: &str, help: &str) -> Result<IntGauge, prometheus::Error> {
        self.register(IntGauge::new(name, help)?)
    }
    fn plain_counter(&self, name: &str, help: &str) -> Result<IntCounter, prometheus::Error> {
        self.register(IntCounter::new(name, help)?)
    }
    fn seconds(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
    ) -> Result<HistogramVec, prometheus::Error> {
        let opts = HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec());
        self.register(HistogramVec::new(opts, labels)?)
    }
}

#[allow(clippy::too_many_lines)] // One entry per metric family: the catalogue of families.
pub(super) fn build() -> Result<Metrics, prometheus::Error> {
    let r = Registrar(Registry::new());
    let m = Metrics {
        requests: r.counter(
            "mcp_edge_requests_total",
            "MCP requests by route, method, era and outcome",
            &["route", "method", "era", "outcome"],
        )?,
        edge_errors: r.counter(
            "mcp_edge_errors_total",
            "Errors raised by the edge itself, by kind",
            &["kind"],
        )?,
        upstream_latency: r.seconds(
            "mcp_edge_upstream_response_seconds",
            "Time from choosing an upstream member to its response header",
            &["pool"],
        )?,
        request_duration: r.seconds(
            "mcp_edge_request_duration_seconds",
            "Time from request start to the end of the response",
            &["route", "era"],
        )?,
        upstream_responses: r.counter(
            "mcp_edge_upstream_responses_total",
            "Upstream responses by pool, member and status class",
            &["pool", "member", "class"],
        )?,
        active_sse: r.gauge(
            "mcp_edge_active_sse_streams",
            "SSE responses currently streaming, by era",
            &["era"],
        )?,
        session_tokens: r.counter(
            "mcp_edge_session_tokens_total",
            "Legacy session tokens sealed and opened",
            &["op"],
        )?,
        task_ids: r.counter(
            "mcp_edge_task_ids_total",
            "Task ids the edge sealed (answers naming a task), opened (requests following one) and refused (forged, expired, another pool's, member gone)",
            &["op"],
        )?,
        session_token_failures: r.counter(
            "mcp_edge_session_token_failures_total",
            "Legacy session tokens refused, by reason",
            &["reason"],
        )?,
        config_reloads: r.counter(
            "mcp_edge_config_reloads_total",
            "Configuration reloads by result",
            &["result"],
        )?,
        build_info: r.gauge("mcp_edge_build_info", "Build information", &["version"])?,
        access_log_dropped: r.plain_counter(
            "mcp_edge_access_log_dropped_total",
            "Access-log lines dropped because the log writer could not keep up",
        )?,
        pools: pool_metrics(&r)?,
        balance: balance_metrics(&r)?,
        budget: budget_metrics(&r)?,
        tls: tls_metrics(&r)?,
        access: access_metrics(&r)?,
        credentials: credential_metrics(&r)?,
        stdio: stdio_metrics(&r)?,
        traces: trace_metrics(&r)?,
        published: Mutex::new(HashMap::new()),
        registry: r.0,
    };
    preregister(&m);
    Ok(m)
}

fn credential_metrics(r: &Registrar) -> Result<CredentialMetrics, prometheus::Error> {
    Ok(CredentialMetrics {
        upstream_credentials: r.counter(
            "mcp_edge_upstream_credentials_total",
            "Credentials sent to members by pool and kind (identity: an assertion minted; static: the pool's credential attached)",
            &["pool", "kind"],
        )?,
        token_exchanges: r.counter(
            "mcp_edge_token_exchanges_total",
            "Token exchanges (RFC 8693) at pools' authorization servers, by pool and outcome (ok, refused, timeout, failed)",
            &["pool", "outcome"],
        )?,
        token_exchange_seconds: r.seconds(
            "mcp_edge_token_exchange_seconds",
            "Time a token exchange took, by pool",
            &["pool"],
        )?,
        token_exchange_cache: r.counter(
            "mcp_edge_token_exchange_cache_total",
            "Where a caller's exchanged token came from, by pool and result (hit: cached; miss: exchanged for this request; joined: an exchange under way)",
            &["pool", "result"],
        )?,
    })
}

fn access_metrics(r: &Registrar) -> Result<AccessMetrics, prometheus::Error> {
    Ok(AccessMetrics {
        auth: r.counter(
            "mcp_edge_auth_total",
            "Credentials checked on routes with auth, by route and result (ok, anonymous, missing, invalid, expired)",
            &["route", "result"],
        )?,
        policy_refusals: r.counter(
            "mcp_edge_policy_refusals_total",
            "Requests naming a tool, prompt or resource the route's policy hides, answered by the edge, by route and rule",
            &["route", "rule"],
        )?,
        policy_hidden: r.counter(
            "mcp_edge_policy_hidden_entries_total",
            "Entries cut from list answers by the route's policy, by route and rule",
            &["route", "rule"],
        )?,
        rate_limited: r.counter(
            "mcp_edge_rate_limited_total",
            "Requests over the route's rate limit (answered 429), by route",
            &["route"],
        )?,
        rate_decisions: r.counter(
            "mcp_edge_rate_limit_decisions_total",
            "Rate-limit decisions by route and store (local: no shared store; shared: Redis; fallback: this replica's share while Redis cannot decide)",
            &["route", "store"],
        )?,
        rate_store_seconds: r.register(Histogram::with_opts(
            HistogramOpts::new(
                "mcp_edge_rate_limit_redis_seconds",
                "Time Redis took for the rate-limit decisions it gave",
            )
            .buckets(STORE_BUCKETS.to_vec()),
        )?)?,
        rate_fallback: r.plain_gauge(
            "mcp_edge_rate_limit_fallback",
            "1 while Redis cannot decide rate limits and each replica decides with its share",
        )?,
        rate_redis_failures: r.counter(
            "mcp_edge_rate_limit_redis_failures_total",
            "Why Redis did not give a rate-limit decision, by cause (authentication, oom, timeout, refused, reset, other): each failed decision, and each cause a look at a new connection found behind decisions that missed their deadline",
            &["cause"],
        )?,
        jwks_fetches: r.counter(
            "mcp_edge_jwks_fetches_total",
            "JWKS URL fetches by result (success, failure)",
            &["result"],
        )?,
        cors_preflights: r.counter(
            "mcp_edge_cors_preflights_total",
            "CORS preflight requests answered by the edge, by route",
            &["route"],
        )?,
    })
}

/// The bucket boundaries the OpenTelemetry MCP conventions advise for operation durations.
const OPERATION_BUCKETS: &[f64] = &[
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

fn trace_metrics(r: &Registrar) -> Result<TraceMetrics, prometheus::Error> {
    let opts = HistogramOpts::new(
        "mcp_server_operation_duration_seconds",
        "MCP operation duration (OpenTelemetry mcp.server.operation.duration): from receiving a request to sending its answer, by method, error type, route and the tool names the configuration lists (others _OTHER)",
    )
    .buckets(OPERATION_BUCKETS.to_vec());
    Ok(TraceMetrics {
        operation_duration: r.register(HistogramVec::new(
            opts,
            &["mcp_method_name", "error_type", "route", "gen_ai_tool_name"],
        )?)?,
        spans_exported: r.plain_counter(
            "mcp_edge_trace_spans_exported_total",
            "Spans the trace collector took",
        )?,
        spans_dropped: r.counter(
            "mcp_edge_trace_spans_dropped_total",
            "Spans dropped, by reason (queue_full: the export queue was full; export_failed: the collector refused, failed or timed out)",
            &["reason"],
        )?,
    })
}

fn stdio_metrics(r: &Registrar) -> Result<StdioMetrics, prometheus::Error> {
    Ok(StdioMetrics {
        processes: r.gauge(
            "mcp_edge_stdio_processes",
            "Processes of a stdio pool running now, by pool",
            &["pool"],
        )?,
        starts: r.counter(
            "mcp_edge_stdio_starts_total",
            "stdio server processes started, by pool and result (ok: initialised; failed)",
            &["pool", "result"],
        )?,
        exits: r.counter(
            "mcp_edge_stdio_exits_total",
            "Shared stdio server processes that ended (on their own, hung, over a limit) and were restarted, by pool",
            &["pool"],
        )?,
        stops: r.counter(
            "mcp_edge_stdio_stops_total",
            "stdio server processes that ended, by pool and how (exited, sigterm, sigkill, hung, memory_limit, cpu_limit)",
            &["pool", "how"],
        )?,
        tree: r.gauge(
            "mcp_edge_stdio_tree_processes",
            "Processes a stdio pool's servers hold: the servers, what they started, stragglers being stopped",
            &["pool"],
        )?,
        stderr_dropped: r.counter(
            "mcp_edge_stdio_stderr_dropped_bytes_total",
            "stderr bytes of a stdio pool's processes over stderr_bytes_per_second, not logged",
            &["pool"],
        )?,
    })
}

fn balance_metrics(r: &Registrar) -> Result<BalanceMetrics, prometheus::Error> {
    Ok(BalanceMetrics {
        in_flight: r.gauge(
            "mcp_edge_upstream_in_flight",
            "Requests (kind=request) and long-lived streams (kind=stream) each member holds from this replica",
            &["pool", "member", "kind"],
        )?,
        queue_depth: r.gauge(
            "mcp_edge_pool_queue_depth",
            "Requests waiting for a member's room (max_in_flight, max_streams_per_member)",
            &["pool"],
        )?,
        queue_wait: r.seconds(
            "mcp_edge_pool_queue_wait_seconds",
            "Time a request waited for a member's room, however the wait ended",
            &["pool"],
        )?,
        rejections: r.counter(
            "mcp_edge_pool_rejections_total",
            "Requests that never reached a member because every eligible one was full: queue_full, queue_timeout, client_gone (left while waiting)",
            &["pool", "reason"],
        )?,
        ejections: r.counter(
            "mcp_edge_upstream_ejections_total",
            "Members ejected: refused (a connection that failed: ejected at once for eject_ms), or failed requests in a row ending in connect_error, server_error (5xx) or timeout",
            &["pool", "member", "reason"],
        )?,
    })
}

fn pool_metrics(r: &Registrar) -> Result<PoolMetrics, prometheus::Error> {
    Ok(PoolMetrics {
        member_healthy: r.gauge(
            "mcp_edge_member_healthy",
            "1 when the member passes its health checks and is not ejected",
            &["pool", "member"],
        )?,
        pool_members: r.gauge(
            "mcp_edge_pool_members",
            "Members currently in the pool",
            &["pool"],
        )?,
        health_checks: r.counter(
            "mcp_edge_health_checks_total",
            "Active health checks by pool and result",
            &["pool", "result"],
        )?,
        dns_resolutions: r.counter(
            "mcp_edge_dns_resolutions_total",
            "DNS re-resolutions of discovered pools by result",
            &["pool", "result"],
        )?,
        connect_failures: r.counter(
            "mcp_edge_upstream_connect_failures_total",
            "Failed connections to a member (refused, timed out)",
            &["pool", "member"],
        )?,
        fleet: r.gauge(
            "mcp_edge_fleet_replicas",
            "The edge's own replicas ([fleet]): known (listed or resolved) and live (answering)",
            &["state"],
        )?,
        handoffs: r.counter(
            "mcp_edge_handoffs_total",
            "Requests for state another replica holds: sent to it, received from another (signed), the holder unreachable, or refused by it (key rings or clocks disagree)",
            &["outcome"],
        )?,
        handoffs_refused: r.counter(
            "mcp_edge_handoffs_refused_total",
            "Requests the hand-off listener refused (never served), by reason: unsigned, unknown_key, stale, forged, replayed, body_altered, busy",
            &["reason"],
        )?,
        bridged_streams: r.counter(
            "mcp_edge_bridged_streams_total",
            "HTTP+SSE streams the edge holds for clients bridged to 2026-07-28 members: opened, lost (the client left 256 events or 8 MiB unread, or the memory budget had no room: the stream let go)",
            &["event"],
        )?,
        revisions: r.gauge(
            "mcp_edge_pool_revisions",
            "Protocol revisions a pool's healthy members speak (1) or refuse (0), from their server/discover answers and a legacy initialize",
            &["pool", "revision"],
        )?,
        absent_learned: r.gauge(
            "mcp_edge_pool_absent_answers_learned",
            "Entry kinds (tool, prompt, resource) whose answer for an absent one was learned from a pool's servers, by era: what policy answers for a hidden entry on a route without absent_as",
            &["pool", "era"],
        )?,
    })
}

fn tls_metrics(r: &Registrar) -> Result<TlsMetrics, prometheus::Error> {
    Ok(TlsMetrics {
        certificate_expiry: r.gauge(
            "mcp_edge_tls_certificate_expiry_timestamp_seconds",
            "notAfter of each certificate a TLS listener serves",
            &["listener", "name"],
        )?,
        certificate_reloads: r.counter(
            "mcp_edge_tls_certificate_reloads_total",
            "TLS certificate reloads by result",
            &["result"],
        )?,
        handshake_failures: r.counter(
            "mcp_edge_tls_handshake_failures_total",
            "Client connections that did not complete a TLS handshake, by reason",
            &["reason"],
        )?,
        upstream_failures: r.counter(
            "mcp_edge_upstream_tls_failures_total",
            "Failed TLS handshakes with members (certificate untrusted, expired or for another name)",
            &["pool", "member"],
        )?,
    })
}

fn budget_metrics(r: &Registrar) -> Result<BudgetMetrics, prometheus::Error> {
    Ok(BudgetMetrics {
        limit: r.plain_gauge(
            "mcp_edge_memory_budget_bytes",
            "The memory budget for what clients can make the edge hold",
        )?,
        used: r.plain_gauge(
            "mcp_edge_memory_budget_used_bytes",
            "Bytes of the memory budget reserved by connections, bodies and streams",
        )?,
        refusals: r.counter(
            "mcp_edge_memory_budget_refusals_total",
            "Work refused because the memory budget was full, by holder",
            &["what"],
        )?,
        evictions: r.counter(
            "mcp_edge_memory_evictions_total",
            "Stalled connections and uploads closed to make room in the memory budget",
            &["reason"],
        )?,
        head_timeouts: r.plain_counter(
            "mcp_edge_request_head_timeouts_total",
            "Connections closed because their first request head did not arrive in time",
        )?,
    })
}

/// Every fixed label value gets its series at start, so a dashboard sees 0, not nothing.
fn preregister(m: &Metrics) {
    m.build_info
        .with_label_values(&[env!("CARGO_PKG_VERSION")])
        .set(1);
    for kind in ErrorKind::iter() {
        m.edge_errors.with_label_values(&[kind.as_str()]).inc_by(0);
    }
    for result in ["success", "failure"] {
        m.access.jwks_fetches.with_label_values(&[result]).inc_by(0);
    }
    zeroes::<TokenOp>(&m.session_tokens);
    zeroes::<TaskIdOp>(&m.task_ids);
    zeroes::<Handoff>(&m.pools.handoffs);
    zeroes::<HopRefused>(&m.pools.handoffs_refused);
    zeroes::<BridgedStream>(&m.pools.bridged_streams);
    zeroes::<TokenFailure>(&m.session_token_failures);
    zeroes::<ReloadResult>(&m.config_reloads);
    zeroes::<Holder>(&m.budget.refusals);
    zeroes::<Eviction>(&m.budget.evictions);
    zeroes::<HandshakeFailure>(&m.tls.handshake_failures);
    zeroes::<RedisCause>(&m.access.rate_redis_failures);
    zeroes::<ReloadResult>(&m.tls.certificate_reloads);
    zeroes::<SpanDrop>(&m.traces.spans_dropped);
    for era in [EraLabel::Modern, EraLabel::Legacy] {
        m.active_sse.with_label_values(&[label(era)]).set(0);
    }
}

/// Every value of the label `L`, counted 0.
fn zeroes<L: IntoEnumIterator + Into<&'static str>>(counter: &IntCounterVec) {
    for value in L::iter() {
        counter.with_label_values(&[label(value)]).inc_by(0);
    }
}
