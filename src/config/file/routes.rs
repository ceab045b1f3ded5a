//! `[[routes]]` and `[[passthrough]]`.

use serde::Deserialize;

use super::defaults;
use super::{PolicyRuleSection, RateLimitSection, ScopeRuleSection, Versions};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSection {
    pub path: String,
    pub pool: String,
    /// Public path prefix, stripped before forwarding (and put back in HTTP+SSE endpoints).
    #[serde(default)]
    pub prefix: String,
    /// Legacy HTTP+SSE: the upstream's GET stream path and its POST messages path.
    pub sse_path: Option<String>,
    pub messages_path: Option<String>,
    #[serde(default = "defaults::session_params")]
    pub session_params: Vec<String>,
    /// `"auto"` (the default: every revision mcp-edge knows) or a list; either way narrowed
    /// to what the pool's members say they speak.
    #[serde(default)]
    pub versions: Versions,
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Host header allowlist (DNS-rebinding defence): `host` or `host:port`; empty allows any.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// How long browsers may cache the edge's answer to a CORS preflight.
    #[serde(default = "cors_max_age")]
    pub cors_max_age_seconds: u64,
    /// Serve legacy (2025) Streamable HTTP clients from 2026-07-28 members: the edge answers
    /// `initialize` and turns every later request into a stateless one.
    #[serde(default)]
    pub bridge_legacy: bool,
    /// `none` (default), `optional` or `required`: see `[identity]`.
    #[serde(default)]
    pub auth: crate::identity::AuthMode,
    /// Pass the client's `Authorization` to the server; default: only when `auth = "none"`.
    pub forward_credential: Option<bool>,
    /// Rules, first match decides (see docs/design.md).
    #[serde(default)]
    pub policy: Vec<PolicyRuleSection>,
    /// The scopes a call needs (step-up: 403 `insufficient_scope`).
    #[serde(default)]
    pub scopes: Vec<ScopeRuleSection>,
    /// How a hidden entry is answered: as this SDK answers an absent one; unset, as the
    /// pool's servers themselves answer (learned by the `mcp` check), else as `typescript`.
    pub absent_as: Option<crate::mcp::absent::AbsentAs>,
    pub rate_limit: Option<RateLimitSection>,
}

/// `[[passthrough]]`: requests to `path` (or any path under `path_prefix`) go to the pool as
/// they are, without MCP checks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PassthroughSection {
    pub path: Option<String>,
    pub path_prefix: Option<String>,
    pub pool: String,
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    #[serde(default = "cors_max_age")]
    pub cors_max_age_seconds: u64,
}

fn cors_max_age() -> u64 {
    defaults::CORS_MAX_AGE_SECONDS
}
