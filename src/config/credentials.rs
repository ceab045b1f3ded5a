//! `[assertions]` and each pool's `[pools.credential]`: what its members are told of the
//! caller (see [`crate::identity::assertion`]).

use std::sync::Arc;

use http::{HeaderName, HeaderValue};

use super::file::{
    AssertionsSection, CredentialKind, CredentialSection, PassthroughSection, PoolSection,
    RouteSection,
};
use super::Errors;
use crate::identity::assertion::{
    Assertion, Credential, Signer, Static, DEFAULT_HEADER, DEFAULT_ISSUER, MAX_TTL_SECONDS,
};
use crate::identity::AuthMode;

/// Headers a credential may not go in: the edge writes them, or they frame the request.
const RESERVED: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "content-encoding",
    "transfer-encoding",
    "connection",
    "te",
    "upgrade",
    "accept",
    "traceparent",
    "tracestate",
    "forwarded",
    "x-mcp-edge-hop",
];

/// `[assertions]`: the ring assertions are signed with.
pub(super) fn signer(
    section: Option<&AssertionsSection>,
    errs: &mut Errors,
) -> Option<Arc<Signer>> {
    let s = section?;
    let Some((from, text)) = super::secret::read(&s.keys_file, &s.keys_env) else {
        errs.push("assertions.keys_file: set keys_file or keys_env (one of them)".into());
        return None;
    };
    let key = from.key(["assertions.keys_file", "assertions.keys_env"]);
    let issuer = s.issuer.clone().unwrap_or_else(|| DEFAULT_ISSUER.into());
    if issuer.is_empty() {
        errs.push("assertions.issuer: must not be empty".into());
        return None;
    }
    text.and_then(|t| Signer::parse(&t, issuer))
        .map(Arc::new)
        .map_err(|e| errs.push(format!("{key}: {e}")))
        .ok()
}

/// A pool's `[pools.credential]`, checked.
pub(super) fn credential(
    p: &PoolSection,
    i: usize,
    signer: Option<&Arc<Signer>>,
    errs: &mut Errors,
) -> Credential {
    let Some(c) = &p.credential else {
        return Credential::None;
    };
    let at = format!("pools[{i}].credential");
    if c.kind != CredentialKind::None && p.command.is_some() {
        errs.push(format!(
            "{at}.kind: a stdio pool's server is the edge's own (it is told who calls already)"
        ));
        return Credential::None;
    }
    let result = match c.kind {
        CredentialKind::None => only(c, &[], &at).map(|()| Credential::None),
        CredentialKind::Identity => identity(c, p, &at, signer),
        CredentialKind::Static => static_credential(c, &p.name, &at),
        CredentialKind::Exchange => super::exchange::exchange(c, &p.name, &at, signer),
    };
    result.unwrap_or_else(|e| {
        errs.push(e);
        Credential::None
    })
}

fn identity(
    c: &CredentialSection,
    p: &PoolSection,
    at: &str,
    signer: Option<&Arc<Signer>>,
) -> Result<Credential, String> {
    only(c, IDENTITY_KEYS, at)?;
    let signer = signer.ok_or_else(|| {
        format!("{at}.kind: \"identity\" needs [assertions] (the keys the edge signs with)")
    })?;
    let ttl_seconds = c.ttl_seconds.unwrap_or(MAX_TTL_SECONDS);
    if ttl_seconds == 0 || ttl_seconds > MAX_TTL_SECONDS {
        return Err(format!(
            "{at}.ttl_seconds: {ttl_seconds} is not 1 to {MAX_TTL_SECONDS}"
        ));
    }
    let audience = c.audience.clone().unwrap_or_else(|| p.name.clone());
    if audience.is_empty() {
        return Err(format!("{at}.audience: must not be empty"));
    }
    Ok(Credential::Identity(Assertion {
        header: header(c.header.as_deref().unwrap_or(DEFAULT_HEADER), at)?,
        audience,
        ttl_seconds,
        signer: signer.clone(),
    }))
}

fn static_credential(c: &CredentialSection, pool: &str, at: &str) -> Result<Credential, String> {
    only(c, STATIC_KEYS, at)?;
    let (from, text) = super::secret::read(&c.value_file, &c.value_env).ok_or_else(|| {
        format!("{at}.value_file: pool '{pool}' needs value_file or value_env (one of them)")
    })?;
    let key = from.key(["value_file", "value_env"]);
    let fail = |e: &str| format!("{at}.{key}: pool '{pool}': {e}");
    // A mounted Secret usually ends with a newline.
    let secret = text.map_err(|e| fail(&e))?.trim().to_string();
    if secret.is_empty() {
        return Err(fail("the value is empty"));
    }
    let header = header(c.header.as_deref().unwrap_or("authorization"), at)?;
    let scheme = match c.scheme.as_deref() {
        Some(s) => s.trim(),
        None if header == http::header::AUTHORIZATION => "Bearer",
        None => "",
    };
    let whole = if scheme.is_empty() {
        secret
    } else {
        format!("{scheme} {secret}")
    };
    let visible = whole.bytes().all(|b| b == b' ' || b.is_ascii_graphic());
    let value = HeaderValue::from_str(&whole)
        .ok()
        .filter(|_| visible)
        .ok_or_else(|| fail("the value is not a header value (printable ASCII, one line)"))?;
    Ok(Credential::Static(Static { header, value }))
}

fn header(name: &str, at: &str) -> Result<HeaderName, String> {
    let header = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("{at}.header: '{name}' is not a header name"))?;
    let reserved = RESERVED.contains(&header.as_str())
        || ["mcp-", "x-forwarded-", "proxy-"]
            .iter()
            .any(|p| header.as_str().starts_with(p));
    if reserved {
        return Err(format!(
            "{at}.header: '{name}' is a header the edge or HTTP itself writes"
        ));
    }
    Ok(header)
}

/// The keys each kind reads.
const IDENTITY_KEYS: &[&str] = &["header", "audience", "ttl_seconds"];
const STATIC_KEYS: &[&str] = &["header", "value_file", "value_env", "scheme"];
pub(super) const EXCHANGE_KEYS: &[&str] = &[
    "audience",
    "token_endpoint",
    "client_id",
    "client_auth",
    "client_secret_file",
    "client_secret_env",
    "resource",
    "scope",
    "ca_file",
    "timeout_ms",
    "cache_entries",
];

/// A key set that this kind does not read is refused.
pub(super) fn only(c: &CredentialSection, keys: &[&str], at: &str) -> Result<(), String> {
    let set = [
        ("header", c.header.is_some()),
        ("audience", c.audience.is_some()),
        ("ttl_seconds", c.ttl_seconds.is_some()),
        ("value_file", c.value_file.is_some()),
        ("value_env", c.value_env.is_some()),
        ("scheme", c.scheme.is_some()),
        ("token_endpoint", c.token_endpoint.is_some()),
        ("client_id", c.client_id.is_some()),
        ("client_auth", c.client_auth.is_some()),
        ("client_secret_file", c.client_secret_file.is_some()),
        ("client_secret_env", c.client_secret_env.is_some()),
        ("resource", c.resource.is_some()),
        ("scope", c.scope.is_some()),
        ("ca_file", c.ca_file.is_some()),
        ("timeout_ms", c.timeout_ms.is_some()),
        ("cache_entries", c.cache_entries.is_some()),
    ];
    match set.iter().find(|(k, on)| *on && !keys.contains(k)) {
        Some((key, _)) => Err(format!(
            "{at}.{key}: does not apply to kind = \"{}\"",
            kind_name(c.kind)
        )),
        None => Ok(()),
    }
}

pub(super) fn kind_name(kind: CredentialKind) -> &'static str {
    match kind {
        CredentialKind::None => "none",
        CredentialKind::Identity => "identity",
        CredentialKind::Static => "static",
        CredentialKind::Exchange => "exchange",
    }
}

/// A route that forwards the caller's token to a pool that sends its own credential would
/// mix the two: refused (unset, the caller's `Authorization` never reaches such a pool). A
/// pool that exchanges callers' tokens needs callers verified by a JWT on every route to it,
/// and no pass-through route (it would send the caller's own token).
pub(super) fn forwarded(
    pools: &[PoolSection],
    routes: &[RouteSection],
    passthrough: &[PassthroughSection],
    jwt: bool,
    errs: &mut Errors,
) {
    let kind = |pool: &str| {
        pools
            .iter()
            .find(|p| p.name == pool)
            .and_then(|p| p.credential.as_ref())
            .map_or(CredentialKind::None, |c| c.kind)
    };
    for (i, r) in routes.iter().enumerate() {
        let kind = kind(&r.pool);
        if r.forward_credential == Some(true) && kind != CredentialKind::None {
            errs.push(format!(
                "routes[{i}].forward_credential: pool '{}' sends a credential of its own ([pools.credential]); the caller's token is never sent with it",
                r.pool
            ));
        }
        if kind == CredentialKind::Exchange && r.auth == AuthMode::None {
            errs.push(format!(
                "routes[{i}].auth: pool '{}' exchanges the caller's token ([pools.credential] kind = \"exchange\"): the route needs auth = \"optional\" or \"required\"",
                r.pool
            ));
        }
    }
    for (i, p) in passthrough.iter().enumerate() {
        if kind(&p.pool) == CredentialKind::Exchange {
            errs.push(format!(
                "passthrough[{i}].pool: pool '{}' exchanges callers' tokens; a pass-through route would send the caller's own",
                p.pool
            ));
        }
    }
    for (i, p) in pools.iter().enumerate() {
        if !jwt && p.credential.as_ref().map(|c| c.kind) == Some(CredentialKind::Exchange) {
            errs.push(format!(
                "pools[{i}].credential.kind: \"exchange\" needs [identity.jwt] (only a caller's JWT can be exchanged)"
            ));
        }
    }
}
