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
    /// identity: the assertion's `aud`; default the pool's name. exchange: the `audience`
    /// asked for.
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
    /// exchange: the authorization server's token endpoint.
    pub token_endpoint: Option<String>,
    /// exchange: the edge's client id there.
    pub client_id: Option<String>,
    /// exchange: `client_secret_basic` (default), `client_secret_post` or `private_key_jwt`.
    pub client_auth: Option<ClientAuthMethod>,
    /// exchange: the file holding the client secret.
    pub client_secret_file: Option<String>,
    /// exchange: the environment variable holding the client secret.
    pub client_secret_env: Option<String>,
    /// exchange: the RFC 8707 `resource` asked for.
    pub resource: Option<String>,
    /// exchange: the `scope` asked for.
    pub scope: Option<String>,
    /// exchange: CA bundle (PEM) for the token endpoint's certificate.
    pub ca_file: Option<String>,
    /// exchange: how long an exchange may take.
    pub timeout_ms: Option<u64>,
    /// exchange: the most callers' tokens kept.
    pub cache_entries: Option<usize>,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuthMethod {
    ClientSecretBasic,
    ClientSecretPost,
    PrivateKeyJwt,
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum CredentialKind {
    #[default]
    None,
    Identity,
    Static,
    Exchange,
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
