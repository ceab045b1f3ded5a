//! `[fleet]` (the edge's own replicas) and `[rate_limits]` (the store rate limits share).

use std::num::NonZeroU64;

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSection {
    /// `host:port` of a headless Service of the edge itself, re-resolved.
    pub dns: Option<String>,
    /// Or the replicas' `IP:port`, this one included.
    #[serde(default)]
    pub peers: Vec<String>,
    #[serde(default = "interval_ms")]
    pub interval_ms: NonZeroU64,
    /// A replica that does not accept a connection this fast is not live.
    #[serde(default = "timeout_ms")]
    pub timeout_ms: NonZeroU64,
    /// Where this replica takes requests other replicas hand it (hand-off on).
    pub handoff_listen: Option<std::net::SocketAddr>,
    /// Where the other replicas reach that listener: `IP:port`, `${VAR}` taken from the
    /// environment (`${POD_IP}:7444`).
    pub advertise: Option<String>,
}

fn interval_ms() -> NonZeroU64 {
    super::defaults::FLEET_INTERVAL_MS
}
fn timeout_ms() -> NonZeroU64 {
    super::defaults::FLEET_TIMEOUT_MS
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitsSection {
    /// `redis://host:port/db` or `rediss://…`: the routes' rate limits hold across the fleet.
    pub redis: String,
    /// PEM roots that verify a `rediss://` server (else the system's).
    pub redis_ca_file: Option<std::path::PathBuf>,
    /// The Redis password (AUTH), read from this file (a mounted Secret).
    pub redis_password_file: Option<std::path::PathBuf>,
    /// Redis must decide within this; else this replica decides with its share.
    #[serde(default = "decision_timeout_ms")]
    pub decision_timeout_ms: NonZeroU64,
    /// The start of every key the edge writes.
    #[serde(default = "key_prefix")]
    pub key_prefix: String,
}

fn decision_timeout_ms() -> NonZeroU64 {
    super::defaults::RATE_DECISION_TIMEOUT_MS
}
fn key_prefix() -> String {
    "mcp-edge".to_string()
}
