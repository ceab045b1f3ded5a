//! Identity at the edge: who is calling, from the credential alone.
//!
//! - [`Identity::authenticate`] turns `Authorization: Bearer …` into a [`Principal`]: a JWT
//!   checked against the issuer's keys ([`jwt`]), or a static API key found by its digest
//!   ([`keys`]). Nothing the client sets besides the credential (no header, no argument)
//!   says who it is or which tenant it belongs to.
//! - A route's `auth` decides what happens without a valid one ([`AuthMode`]); a refusal is
//!   a 401 whose `WWW-Authenticate` points at the Protected Resource Metadata (RFC 9728),
//!   which the edge serves itself when `authorization_servers` are configured.
//! - What a principal may see and call is [`policy`]; how often, [`rate`]; with which of its
//!   token's scopes, [`scopes`].

pub mod assertion;
pub mod exchange;
pub mod jwks;
pub mod jwt;
pub mod keys;
pub mod policy;
pub mod rate;
pub mod scopes;

use http::HeaderMap;

/// Who is calling: from a validated token or an API key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub issuer: String,
    pub subject: String,
    pub tenant: Option<String>,
    pub groups: Vec<String>,
    /// The token's scopes (`scope`, space-separated, or `scp`); an API key's from its entry.
    pub scopes: Vec<String>,
}

impl Principal {
    /// What a legacy session is bound to when identity is configured: issuer and subject,
    /// so a refreshed token keeps the session (the raw credential's digest would not).
    pub fn binding(&self) -> [u8; 16] {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(b"mcp-edge principal\0");
        ctx.update(self.issuer.as_bytes());
        ctx.update(b"\0");
        ctx.update(self.subject.as_bytes());
        let d = ctx.finish();
        let mut out = [0u8; 16];
        out.copy_from_slice(&d.as_ref()[..16]);
        out
    }

    /// The rate-limit key: the principal, never the session.
    pub fn key(&self) -> String {
        format!("{}\0{}", self.issuer, self.subject)
    }
}

/// Why a credential was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No bearer credential.
    Missing,
    /// Present but not valid (the reason is for the log and the `error_description`).
    Invalid(&'static str),
    /// A valid token past its `exp` (and the clock skew).
    Expired,
}

impl Refusal {
    /// The `result` label of `mcp_edge_auth_total`.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Missing => "missing",
            Refusal::Invalid(_) => "invalid",
            Refusal::Expired => "expired",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Refusal::Missing => "No bearer credential was presented",
            Refusal::Invalid(reason) => reason,
            Refusal::Expired => "The access token expired",
        }
    }
}

/// A route's `auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// The edge does not look at credentials (they pass to the server as they are).
    #[default]
    None,
    /// A valid credential makes a principal; none makes an anonymous caller; an invalid
    /// one is refused.
    Optional,
    /// Every request needs a valid credential.
    Required,
}

/// A route's `auth`, `forward_credential`, `policy`, `absent_as` and `rate_limit`.
#[derive(Debug, Default)]
pub struct Access {
    pub auth: AuthMode,
    /// Pass the client's `Authorization` upstream.
    pub forward_credential: bool,
    pub policy: Option<policy::Policy>,
    /// Set: the catalogue's answers for this SDK, whatever was learned.
    pub absent_as: Option<crate::mcp::absent::AbsentAs>,
    pub rate: Option<rate::RateLimit>,
    /// The scopes calls need (step-up).
    pub scopes: Option<scopes::Scopes>,
}

/// `[identity]`, checked.
#[derive(Debug)]
pub struct Identity {
    pub jwt: Option<jwt::Verifier>,
    pub keys: Option<keys::ApiKeys>,
    /// Where 401s point (absolute URL); default: derived from each request's Host.
    pub resource_metadata: Option<String>,
    /// `scheme://host[:port]` clients use (TLS ended in front of the edge); default: each
    /// request's listener scheme and Host.
    pub resource_origin: Option<String>,
    /// Served in the edge's Protected Resource Metadata document (empty: the edge serves
    /// none; a pass-through route may serve the server's own).
    pub authorization_servers: Vec<String>,
    pub scopes: Vec<String>,
    pub max_token_bytes: usize,
}

/// The well-known prefix of Protected Resource Metadata documents (RFC 9728).
pub const METADATA_PREFIX: &str = "/.well-known/oauth-protected-resource";

impl Identity {
    /// The principal a request's credential names: `Ok(None)` when there is none.
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Option<Principal>, Refusal> {
        let mut values = headers.get_all(http::header::AUTHORIZATION).iter();
        let Some(value) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(Refusal::Invalid("more than one Authorization header"));
        }
        let Some(token) = bearer(value.as_bytes()) else {
            // Another scheme is not a credential the edge understands.
            return Ok(None);
        };
        if token.len() > self.max_token_bytes {
            return Err(Refusal::Invalid("the token is too large"));
        }
        let looks_like_jwt = token.bytes().filter(|&b| b == b'.').count() == 2;
        match (&self.jwt, &self.keys) {
            (Some(jwt), _) if looks_like_jwt => jwt.verify(token).await.map(Some),
            (_, Some(keys)) => keys
                .lookup(token)
                .cloned()
                .map(Some)
                .ok_or(Refusal::Invalid("the API key is not known")),
            _ => Err(Refusal::Invalid("the token is not a JWT")),
        }
    }

    /// The `WWW-Authenticate` of a 401 on `route_path`, requested with this scheme and
    /// `Host`.
    pub fn challenge(
        &self,
        refusal: Refusal,
        scheme: &str,
        host: Option<&str>,
        route_path: &str,
    ) -> String {
        let error = (refusal != Refusal::Missing).then(|| ("invalid_token", refusal.description()));
        self.bearer_challenge(error, &self.scopes, scheme, host, route_path)
    }

    /// The `WWW-Authenticate` of a 403 for a call that needs more scopes: `scope` names
    /// the ones to ask for (what the token has and what the call needs).
    pub fn step_up(
        &self,
        scope: &[String],
        scheme: &str,
        host: Option<&str>,
        route_path: &str,
    ) -> String {
        let error = Some((
            "insufficient_scope",
            "The call needs scopes the token does not have",
        ));
        self.bearer_challenge(error, scope, scheme, host, route_path)
    }

    fn bearer_challenge(
        &self,
        error: Option<(&str, &str)>,
        scopes: &[String],
        scheme: &str,
        host: Option<&str>,
        route_path: &str,
    ) -> String {
        let mut value = String::from("Bearer");
        let metadata = self.resource_metadata.clone().or_else(|| {
            self.origin(scheme, host)
                .map(|o| format!("{o}{METADATA_PREFIX}{route_path}"))
        });
        let mut params = Vec::new();
        if let Some(url) = metadata {
            params.push(format!("resource_metadata=\"{url}\""));
        }
        if let Some((error, description)) = error {
            params.push(format!("error=\"{error}\""));
            params.push(format!("error_description=\"{description}\""));
        }
        if !scopes.is_empty() {
            params.push(format!("scope=\"{}\"", scopes.join(" ")));
        }
        if !params.is_empty() {
            value.push(' ');
            value.push_str(&params.join(", "));
        }
        value
    }

    /// The edge's Protected Resource Metadata document for a route, as requested with
    /// this scheme and `Host` (the `resource` is the URL the client uses).
    /// `route_scopes`: what the route's calls may need, listed beside `scopes`.
    pub fn metadata_document(
        &self,
        scheme: &str,
        host: Option<&str>,
        route_path: &str,
        route_scopes: &[String],
    ) -> String {
        let resource = match self.origin(scheme, host) {
            Some(o) => format!("{o}{route_path}"),
            None => route_path.to_string(),
        };
        let mut doc = serde_json::json!({
            "resource": resource,
            "authorization_servers": self.authorization_servers,
            "bearer_methods_supported": ["header"],
        });
        let mut scopes = self.scopes.clone();
        for scope in route_scopes {
            if !scopes.contains(scope) {
                scopes.push(scope.clone());
            }
        }
        if !scopes.is_empty() {
            doc["scopes_supported"] = serde_json::json!(scopes);
        }
        doc.to_string()
    }
}

impl Identity {
    /// `scheme://host[:port]` of the resource: configured, or as requested.
    fn origin(&self, scheme: &str, host: Option<&str>) -> Option<String> {
        self.resource_origin.clone().or_else(|| {
            host.filter(|h| is_clean_host(h))
                .map(|h| format!("{scheme}://{h}"))
        })
    }
}

/// The HTTP client the edge fetches keys and exchanges tokens with: `timeout` for the whole
/// request (connect included), no redirects, the system's roots and `ca_file`'s (PEM).
pub(crate) fn client(
    timeout: std::time::Duration,
    ca_file: Option<&str>,
) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none());
    if let Some(ca) = ca_file {
        let pem = std::fs::read(ca).map_err(|e| format!("ca_file {ca}: {e}"))?;
        for cert in
            reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| format!("ca_file {ca}: {e}"))?
        {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder.build().map_err(|e| e.to_string())
}

/// The bearer token of a request's one `Authorization` header (what
/// [`Identity::authenticate`] read).
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let mut values = headers.get_all(http::header::AUTHORIZATION).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    bearer(value.as_bytes())
}

/// The token of `Bearer <token>` (scheme case-insensitive), when it is printable ASCII.
fn bearer(value: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(value).ok()?;
    let (scheme, token) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim_start();
    (!token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic())).then_some(token)
}

/// A `Host` safe to reflect into a URL and a quoted header parameter.
fn is_clean_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 255
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_strictly() {
        assert_eq!(bearer(b"Bearer abc.def.ghi"), Some("abc.def.ghi"));
        assert_eq!(bearer(b"bearer  x"), Some("x"));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Bearer a b"), None);
        assert_eq!(bearer(b"Bearer \xff"), None);
    }

    #[test]
    fn challenges_point_at_the_metadata() {
        let identity = Identity {
            jwt: None,
            keys: None,
            resource_metadata: None,
            resource_origin: None,
            authorization_servers: vec![],
            scopes: vec![],
            max_token_bytes: 8192,
        };
        assert_eq!(
            identity.challenge(Refusal::Missing, "https", Some("edge.example"), "/mcp"),
            "Bearer resource_metadata=\"https://edge.example/.well-known/oauth-protected-resource/mcp\""
        );
        let expired = identity.challenge(Refusal::Expired, "http", Some("a\"b"), "/mcp");
        assert_eq!(
            expired,
            "Bearer error=\"invalid_token\", error_description=\"The access token expired\""
        );
    }
}
