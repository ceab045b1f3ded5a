//! Every metric mcp-edge exports, registered once in one registry, with bounded labels.
//!
//! Labels never carry session ids, request ids or arguments: methods come from
//! [`crate::mcp::method_label`], error kinds from [`ErrorKind`], the other fixed label sets
//! from the enums below (every value pre-registered, so a series exists before its first
//! event), routes and pools from the configuration.

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex, OnceLock};

use strum::{EnumIter, IntoEnumIterator, IntoStaticStr};

use crate::error::ErrorKind;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
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
    /// Task ids sealed, opened and refused (`op`).
    pub task_ids: IntCounterVec,
    /// Configuration reloads by result (`success`, `failure`).
    pub config_reloads: IntCounterVec,
    pub build_info: IntGaugeVec,
    /// Access-log lines dropped because the writer could not keep up.
    pub access_log_dropped: IntCounter,
    /// Pool membership, health and discovery.
    pub pools: PoolMetrics,
    /// The memory budget.
    pub budget: BudgetMetrics,
    /// TLS listeners and upstreams.
    pub tls: TlsMetrics,
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
    /// stdio pools: processes running, starts by result, ends.
    pub stdio_processes: IntGaugeVec,
    pub stdio_starts: IntCounterVec,
    pub stdio_exits: IntCounterVec,
    /// JWKS fetches by result.
    pub jwks_fetches: IntCounterVec,
    /// Member labels last published per pool, so departed members' series are removed.
    published: Mutex<HashMap<String, HashSet<String>>>,
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

/// Why a client's TLS handshake failed (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum HandshakeFailure {
    /// Plain HTTP sent to a TLS port (answered 400).
    PlainHttp,
    /// Not complete within `timeouts.request_head_ms`.
    Timeout,
    /// Closed to make room in the memory budget.
    Evicted,
    /// The handshake itself failed (no common version or cipher, bad record, the client left).
    Failed,
}

/// Why the edge refused a session token: the `reason` label of
/// `mcp_edge_session_token_failures_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum TokenFailure {
    Malformed,
    UnknownKey,
    Forged,
    Expired,
    OtherPool,
    ForeignCredential,
    MemberGone,
}

/// The `op` label of `mcp_edge_task_ids_total`.
pub const TASK_ID_OPS: [&str; 3] = ["sealed", "opened", "refused"];

/// What happened to a token: the `op` label of `mcp_edge_session_tokens_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum TokenOp {
    Sealed,
    Opened,
}

/// The `result` label of `mcp_edge_config_reloads_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum ReloadResult {
    Success,
    Failure,
}

/// The `era` label: which protocol generation a request belongs to (`unknown` before the
/// edge could tell).
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum EraLabel {
    Modern,
    Legacy,
    Unknown,
}

/// What holds a part of the memory budget (the `what` label of its refusals).
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Holder {
    Connection,
    Body,
    Stream,
}

/// Why a holder was closed to make room in the budget (the `reason` label of evictions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Eviction {
    /// A connection that had not completed its first request head.
    StalledHead,
    /// An upload that stopped making progress.
    StalledUpload,
    /// A kept-alive HTTP/1 connection between requests.
    IdleConnection,
}

/// How a request ended: the `outcome` label of `mcp_edge_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Outcome {
    Forwarded,
    ClientError,
    Rejected,
    Failed,
    /// The edge answered it itself (a CORS preflight).
    Answered,
}

/// A route's handles on the per-request series, each resolved (label lookup, hashing, lock)
/// on first use and then kept: the request path only increments.
pub struct RouteSeries {
    /// `mcp_edge_requests_total`, by method index × era × outcome.
    requests: Box<[OnceLock<IntCounter>]>,
    /// `mcp_edge_request_duration_seconds`, by era.
    duration: [OnceLock<Histogram>; ERAS],
}

const ERAS: usize = 3;
const OUTCOMES: usize = 5;

impl Default for RouteSeries {
    fn default() -> Self {
        RouteSeries {
            requests: (0..crate::mcp::METHOD_LABELS * ERAS * OUTCOMES)
                .map(|_| OnceLock::new())
                .collect(),
            duration: Default::default(),
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

/// Label value of any of the label enums above.
fn label<L: Into<&'static str>>(l: L) -> &'static str {
    l.into()
}

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

fn build() -> Result<Metrics, prometheus::Error> {
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
        budget: budget_metrics(&r)?,
        tls: tls_metrics(&r)?,
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
        stdio_processes: r.gauge(
            "mcp_edge_stdio_processes",
            "Processes of a stdio pool running now, by pool",
            &["pool"],
        )?,
        stdio_starts: r.counter(
            "mcp_edge_stdio_starts_total",
            "stdio server processes started, by pool and result (ok: initialised; failed)",
            &["pool", "result"],
        )?,
        stdio_exits: r.counter(
            "mcp_edge_stdio_exits_total",
            "Shared stdio server processes that ended on their own (then restarted), by pool",
            &["pool"],
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
        published: Mutex::new(HashMap::new()),
        registry: r.0,
    };
    preregister(&m);
    Ok(m)
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
        revisions: r.gauge(
            "mcp_edge_pool_revisions",
            "Protocol revisions a pool's healthy members speak (1) or refuse (0), from their server/discover answers and a legacy initialize",
            &["pool", "revision"],
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
    for op in TokenOp::iter() {
        m.session_tokens.with_label_values(&[label(op)]).inc_by(0);
    }
    for result in ["success", "failure"] {
        m.jwks_fetches.with_label_values(&[result]).inc_by(0);
    }
    for op in TASK_ID_OPS {
        m.task_ids.with_label_values(&[op]).inc_by(0);
    }
    for reason in TokenFailure::iter() {
        m.session_token_failures
            .with_label_values(&[label(reason)])
            .inc_by(0);
    }
    for result in ReloadResult::iter() {
        m.config_reloads
            .with_label_values(&[label(result)])
            .inc_by(0);
    }
    for what in Holder::iter() {
        m.budget
            .refusals
            .with_label_values(&[label(what)])
            .inc_by(0);
    }
    for reason in Eviction::iter() {
        m.budget
            .evictions
            .with_label_values(&[label(reason)])
            .inc_by(0);
    }
    for reason in HandshakeFailure::iter() {
        m.tls
            .handshake_failures
            .with_label_values(&[label(reason)])
            .inc_by(0);
    }
    for result in ReloadResult::iter() {
        m.tls
            .certificate_reloads
            .with_label_values(&[label(result)])
            .inc_by(0);
    }
    for era in [EraLabel::Modern, EraLabel::Legacy] {
        m.active_sse.with_label_values(&[label(era)]).set(0);
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| match build() {
    Ok(m) => m,
    // Only reachable through a programming error (a duplicate or malformed metric name).
    Err(e) => panic!("metric registration failed: {e}"),
});

pub fn get() -> &'static Metrics {
    &METRICS
}

pub fn stdio_processes(pool: &str, running: i64) {
    get()
        .stdio_processes
        .with_label_values(&[pool])
        .set(running);
}

pub fn stdio_start(pool: &str, ok: bool) {
    let result = if ok { "ok" } else { "failed" };
    get().stdio_starts.with_label_values(&[pool, result]).inc();
}

pub fn stdio_exit(pool: &str) {
    get().stdio_exits.with_label_values(&[pool]).inc();
}

impl Metrics {
    /// Count an error the edge raised.
    pub fn edge_error(&self, kind: ErrorKind) {
        self.edge_errors.with_label_values(&[kind.as_str()]).inc();
    }
    pub fn token(&self, op: TokenOp) {
        self.session_tokens.with_label_values(&[label(op)]).inc();
    }
    /// `op`: one of [`TASK_ID_OPS`].
    pub fn task_id(&self, op: &'static str) {
        self.task_ids.with_label_values(&[op]).inc();
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

/// Publish a pool's members (label, healthy); drop series of members that left.
pub fn publish_pool(pool: &str, members: &[(&str, bool)]) {
    let m = get();
    m.pools
        .pool_members
        .with_label_values(&[pool])
        .set(members.len() as i64);
    let now: HashSet<String> = members.iter().map(|(l, _)| l.to_string()).collect();
    for (member, healthy) in members {
        m.pools
            .member_healthy
            .with_label_values(&[pool, member])
            .set(i64::from(*healthy));
    }
    let Ok(mut published) = m.published.lock() else {
        return;
    };
    let before = published
        .insert(pool.to_string(), now.clone())
        .unwrap_or_default();
    for gone in before.difference(&now) {
        let _ = m.pools.member_healthy.remove_label_values(&[pool, gone]);
    }
}

/// Publish which revisions a pool's members speak.
pub fn publish_spoken(pool: &str, spoken: &crate::routing::Spoken) {
    let m = get();
    for revision in crate::mcp::revisions() {
        let speaks = if crate::mcp::is_legacy_version(revision) {
            spoken.legacy
        } else {
            spoken
                .modern
                .as_ref()
                .map(|list| list.iter().any(|v| v == revision))
        };
        match speaks {
            Some(yes) => m
                .pools
                .revisions
                .with_label_values(&[pool, revision])
                .set(i64::from(yes)),
            None => {
                let _ = m.pools.revisions.remove_label_values(&[pool, revision]);
            }
        }
    }
}

/// Drop every series of a pool that no longer exists (after a reload removed it).
pub fn forget_pool(name: &str) {
    let m = get();
    let _ = m.stdio_processes.remove_label_values(&[name]);
    let _ = m.stdio_exits.remove_label_values(&[name]);
    for result in ["ok", "failed"] {
        let _ = m.stdio_starts.remove_label_values(&[name, result]);
    }
    let _ = m.pools.pool_members.remove_label_values(&[name]);
    for revision in crate::mcp::revisions() {
        let _ = m.pools.revisions.remove_label_values(&[name, revision]);
    }
    let Ok(mut published) = m.published.lock() else {
        return;
    };
    for member in published.remove(name).unwrap_or_default() {
        let _ = m.pools.member_healthy.remove_label_values(&[name, &member]);
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
