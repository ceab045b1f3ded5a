//! A pool's `[pools.credential] kind = "exchange"`: RFC 8693 token exchange at an
//! authorization server (see [`crate::identity::exchange`]), checked.

use std::sync::Arc;
use std::time::Duration;

use super::credentials::{only, EXCHANGE_KEYS};
use super::file::{ClientAuthMethod, CredentialSection};
use crate::identity::assertion::{Credential, Signer};
use crate::identity::exchange::{ClientAuth, Exchange, Settings};

const DEFAULT_TIMEOUT_MS: u64 = 5_000;
const MAX_TIMEOUT_MS: u64 = 60_000;
const DEFAULT_CACHE_ENTRIES: usize = 10_000;

pub(super) fn exchange(
    c: &CredentialSection,
    pool: &str,
    at: &str,
    signer: Option<&Arc<Signer>>,
) -> Result<Credential, String> {
    only(c, EXCHANGE_KEYS, at)?;
    let token_endpoint = c.token_endpoint.clone().ok_or_else(|| {
        format!(
            "{at}.token_endpoint: pool '{pool}' needs the authorization server's token endpoint"
        )
    })?;
    endpoint(&token_endpoint)
        .map_err(|e| format!("{at}.token_endpoint: '{token_endpoint}' {e}"))?;
    let client_id = c
        .client_id
        .clone()
        .filter(|id| !id.is_empty())
        .ok_or_else(|| {
            format!(
                "{at}.client_id: pool '{pool}' needs the edge's client id at the token endpoint"
            )
        })?;
    let auth = client_auth(c, pool, at, signer)?;
    let nonempty = |key: &str, v: &Option<String>| match v {
        Some(s) if s.trim().is_empty() => Err(format!("{at}.{key}: must not be empty")),
        _ => Ok(v.clone()),
    };
    let audience = nonempty("audience", &c.audience)?;
    let resource = nonempty("resource", &c.resource)?;
    let scope = nonempty("scope", &c.scope)?;
    if audience.is_none() && resource.is_none() {
        return Err(format!(
            "{at}.audience: pool '{pool}' needs audience or resource (whom the exchanged token is for)"
        ));
    }
    if let Some(r) = &resource {
        if !(r.starts_with("https://") || r.starts_with("http://")) || r.contains('#') {
            return Err(format!(
                "{at}.resource: '{r}' is not an absolute URI without a fragment (RFC 8707)"
            ));
        }
    }
    let timeout_ms = c.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
    if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
        return Err(format!(
            "{at}.timeout_ms: {timeout_ms} is not 1 to {MAX_TIMEOUT_MS}"
        ));
    }
    let cache_entries = c.cache_entries.unwrap_or(DEFAULT_CACHE_ENTRIES);
    if cache_entries == 0 {
        return Err(format!("{at}.cache_entries: must be at least 1"));
    }
    Exchange::new(Settings {
        token_endpoint,
        client_id,
        auth,
        audience,
        resource,
        scope,
        timeout: Duration::from_millis(timeout_ms),
        ca_file: c.ca_file.clone(),
        cache_entries,
    })
    .map(|e| Credential::Exchange(Arc::new(e)))
    .map_err(|e| format!("{at}.{e}"))
}

/// How the edge proves itself at the token endpoint (`client_auth` and its secret or key).
fn client_auth(
    c: &CredentialSection,
    pool: &str,
    at: &str,
    signer: Option<&Arc<Signer>>,
) -> Result<ClientAuth, String> {
    let method = c.client_auth.unwrap_or(ClientAuthMethod::ClientSecretBasic);
    Ok(match method {
        ClientAuthMethod::PrivateKeyJwt => {
            if c.client_secret_file.is_some() || c.client_secret_env.is_some() {
                return Err(format!(
                    "{at}.client_secret_file: private_key_jwt signs with the [assertions] key; no secret is sent"
                ));
            }
            ClientAuth::PrivateKeyJwt(signer.cloned().ok_or_else(|| {
                format!("{at}.client_auth: \"private_key_jwt\" needs [assertions] (the key the edge signs with)")
            })?)
        }
        ClientAuthMethod::ClientSecretBasic => ClientAuth::Basic(secret(c, pool, at)?),
        ClientAuthMethod::ClientSecretPost => ClientAuth::Post(secret(c, pool, at)?),
    })
}

/// `https://`, or `http://` to this host's loopback (an authorization server beside the edge);
/// no user information (it would hide the host).
fn endpoint(url: &str) -> Result<(), &'static str> {
    let parsed = reqwest::Url::parse(url).map_err(|_| "is not a URL")?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("must not carry user information");
    }
    let host = parsed.host_str().ok_or("names no host")?;
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        _ => Err("must be an https:// URL (http:// only to a loopback address)"),
    }
}

fn secret(c: &CredentialSection, pool: &str, at: &str) -> Result<String, String> {
    let (from, text) = super::secret::read(&c.client_secret_file, &c.client_secret_env)
        .ok_or_else(|| {
            format!("{at}.client_secret_file: pool '{pool}' needs client_secret_file or client_secret_env (one of them)")
        })?;
    let key = from.key(["client_secret_file", "client_secret_env"]);
    // A mounted Secret usually ends with a newline.
    let secret = text
        .map_err(|e| format!("{at}.{key}: pool '{pool}': {e}"))?
        .trim()
        .to_string();
    if secret.is_empty() {
        return Err(format!("{at}.{key}: pool '{pool}': the secret is empty"));
    }
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::endpoint;

    #[test]
    fn https_or_loopback_http_only() {
        for ok in [
            "https://as.example/token",
            "http://127.0.0.1:8080/token",
            "http://127.9.9.9/t",
            "http://[::1]:9/t",
            "http://localhost/t",
        ] {
            assert!(endpoint(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://as.example/token",
            "http://10.0.0.1/t",
            "http://localhost.evil.test/t",
            "ftp://x",
            "https://",
            "http://127.0.0.1.evil.test/t",
            "http://localhost:1@evil.example/t",
            "http://[::1]@evil.example/t",
            "https://user:pw@as.example/t",
        ] {
            assert!(endpoint(bad).is_err(), "{bad}");
        }
    }
}
