//! `[pools.credential]` (what a pool's members are told of the caller) and `[assertions]`
//! (the keys the edge signs identity assertions with).

use serde::Deserialize;

/// `[pools.credential]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CredentialSection {
    pub kind: CredentialKind,
    /// The header it goes in; default `X-MCP-Edge-Identity` (identity), `Authorization`
    /// (static).
    pub header: Option<String>,
    /// identity: the assertion's `aud`; default the pool's name.
    pub audience: Option<String>,
    /// identity: how long an assertion is valid, 1 to 60 seconds.
    pub ttl_seconds: Option<u64>,
    /// static: the file holding the value (a mounted Secret).
    pub value_file: Option<String>,
    /// static: the environment variable holding the value.
    pub value_env: Option<String>,
    /// static: written before the value; default `Bearer` in `Authorization`, else none
    /// (`""`: none).
    pub scheme: Option<String>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum CredentialKind {
    #[default]
    None,
    Identity,
    Static,
}

/// `[assertions]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssertionsSection {
    /// File holding the key ring (the session ring's format).
    pub keys_file: Option<String>,
    /// Environment variable holding the key ring.
    pub keys_env: Option<String>,
    /// The assertions' `iss`; default `mcp-edge`.
    pub issuer: Option<String>,
}
