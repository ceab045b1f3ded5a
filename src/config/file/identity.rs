//! `[identity]` and a route's `policy` and `rate_limit`.

use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};

use serde::Deserialize;

use super::defaults;

/// `[identity]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentitySection {
    pub jwt: Option<JwtSection>,
    /// TOML file of hashed API keys (a mounted Secret).
    pub api_keys_file: Option<String>,
    /// Where 401s point clients (RFC 9728); default:
    /// `{scheme}://{Host}/.well-known/oauth-protected-resource{route path}`.
    pub resource_metadata: Option<String>,
    /// `scheme://host[:port]` clients reach the edge at (TLS ended in front of it); default:
    /// the listener's scheme and the request's Host.
    pub resource_origin: Option<String>,
    /// Serve the Protected Resource Metadata document naming these authorization servers.
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
    #[serde(default = "max_token_bytes")]
    pub max_token_bytes: NonZeroUsize,
}

fn max_token_bytes() -> NonZeroUsize {
    defaults::MAX_TOKEN_BYTES
}

/// `[identity.jwt]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtSection {
    pub issuer: String,
    /// Accepted `aud` values (one must be in the token's).
    pub audience: Vec<String>,
    pub jwks_file: Option<String>,
    pub jwks_url: Option<String>,
    /// PEM CA bundle trusted for `jwks_url` besides the system roots.
    pub jwks_ca_file: Option<String>,
    #[serde(default = "jwks_refresh")]
    pub jwks_refresh_seconds: NonZeroU64,
    #[serde(default = "jwks_timeout")]
    pub jwks_timeout_ms: NonZeroU64,
    #[serde(default = "jwt_algorithms")]
    pub algorithms: Vec<String>,
    #[serde(default = "leeway")]
    pub leeway_seconds: u64,
    /// The claim naming the caller's tenant.
    pub tenant_claim: Option<String>,
    /// The claim listing the caller's groups (an array, or a space-separated string).
    pub groups_claim: Option<String>,
}

fn jwks_refresh() -> NonZeroU64 {
    defaults::JWKS_REFRESH_SECONDS
}
fn jwks_timeout() -> NonZeroU64 {
    defaults::JWKS_TIMEOUT_MS
}
fn jwt_algorithms() -> Vec<String> {
    ["RS256", "ES256", "EdDSA"].map(String::from).to_vec()
}
fn leeway() -> u64 {
    defaults::JWT_LEEWAY_SECONDS
}

/// `[[routes.policy]]`: one rule.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct PolicyRuleSection {
    pub name: Option<String>,
    #[serde(default)]
    pub subjects: Vec<String>,
    #[serde(default)]
    pub tenants: Vec<String>,
    #[serde(default)]
    pub groups: Vec<String>,
    /// Tool names; `*` and `?` are wildcards.
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub prompts: Vec<String>,
    /// Resource URI prefixes.
    #[serde(default)]
    pub resources: Vec<String>,
}

/// `[[routes.scopes]]`: the scopes a call needs, for the entries it names.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct ScopeRuleSection {
    /// Tool names; `*` and `?` are wildcards.
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub prompts: Vec<String>,
    /// Resource URI prefixes.
    #[serde(default)]
    pub resources: Vec<String>,
    /// Every one of these must be among the token's scopes.
    pub require: Vec<String>,
}

/// `[routes.rate_limit]`.
#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(deny_unknown_fields)]
pub struct RateLimitSection {
    pub requests_per_second: NonZeroU32,
    /// Default: `requests_per_second`.
    pub burst: Option<NonZeroU32>,
    /// Each tool a caller calls: at most this many `tools/call` per second (within the
    /// caller's own rate).
    pub per_tool_requests_per_second: Option<NonZeroU32>,
    /// Default: `per_tool_requests_per_second`.
    pub per_tool_burst: Option<NonZeroU32>,
}
