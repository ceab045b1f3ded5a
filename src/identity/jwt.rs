//! JWT access tokens: signature (RS256, ES256, EdDSA and their relatives, never HMAC or
//! `none`), `iss`, `aud`, `exp` and `nbf` with a small clock skew, against the keys of
//! [`super::jwks`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};

use super::jwks::{Jwks, Key, MAX_KID_BYTES};
use super::{Principal, Refusal};

/// What `[identity.jwt]` says, checked.
#[derive(Debug, Clone)]
pub struct JwtSettings {
    pub issuer: String,
    pub audiences: Vec<String>,
    pub algorithms: Vec<Algorithm>,
    pub leeway: Duration,
    pub tenant_claim: Option<String>,
    pub groups_claim: Option<String>,
}

/// Validates tokens against one issuer's keys.
#[derive(Debug)]
pub struct Verifier {
    pub settings: JwtSettings,
    pub jwks: Arc<Jwks>,
    pub cache: TokenCache,
}

/// Tokens verified lately, by SHA-256 of the token: a client sends the same token with
/// every request, and a signature check costs tens of microseconds. An entry lasts until
/// the token's `exp` (with the skew), at most [`CACHE_TTL`], and only while the key set is
/// the one it was verified with.
#[derive(Debug, Default)]
pub struct TokenCache {
    entries: Mutex<HashMap<[u8; 32], Cached>>,
}

#[derive(Debug, Clone)]
struct Cached {
    principal: Principal,
    until: u64,
    generation: u64,
}

/// The longest a verified token is trusted without checking it again.
pub const CACHE_TTL: Duration = Duration::from_secs(60);
/// Entries kept at most (a digest and a principal: a few hundred bytes, up to a token's
/// size); when full the cache starts over.
const CACHE_ENTRIES: usize = 10_000;

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl TokenCache {
    fn get(&self, key: &[u8; 32], generation: u64) -> Option<Principal> {
        let entries = self.entries.lock().ok()?;
        let hit = entries.get(key)?;
        (hit.generation == generation && unix_now() < hit.until).then(|| hit.principal.clone())
    }

    fn put(&self, key: [u8; 32], cached: Cached) {
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= CACHE_ENTRIES {
                entries.clear();
            }
            entries.insert(key, cached);
        }
    }
}

impl Verifier {
    pub async fn verify(&self, token: &str) -> Result<Principal, Refusal> {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let mut key = [0u8; 32];
        key.copy_from_slice(digest.as_ref());
        let generation = self.jwks.generation();
        if let Some(principal) = self.cache.get(&key, generation) {
            return Ok(principal);
        }
        let (principal, exp) = self.verify_uncached(token).await?;
        let until = exp
            .saturating_add(self.settings.leeway.as_secs())
            .min(unix_now() + CACHE_TTL.as_secs());
        self.cache.put(
            key,
            Cached {
                principal: principal.clone(),
                until,
                // Read before the keys were: a fetch since then (a key removed, say) leaves
                // this entry stale rather than blessing it.
                generation,
            },
        );
        Ok(principal)
    }

    async fn verify_uncached(&self, token: &str) -> Result<(Principal, u64), Refusal> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| Refusal::Invalid("the token is not a JWT this edge accepts"))?;
        if !self.settings.algorithms.contains(&header.alg) {
            return Err(Refusal::Invalid("the token's algorithm is not accepted"));
        }
        let kid = header.kid.as_deref();
        if kid.is_some_and(|k| k.len() > MAX_KID_BYTES) {
            return Err(Refusal::Invalid("the token's key id is unknown"));
        }
        match self.try_keys(token, header.alg, kid) {
            Err(Refusal::Invalid(UNKNOWN_KEY)) => {
                if self.jwks.refetch_for_unknown_kid().await {
                    self.try_keys(token, header.alg, kid)
                } else {
                    Err(Refusal::Invalid(UNKNOWN_KEY))
                }
            }
            other => other,
        }
    }

    fn try_keys(
        &self,
        token: &str,
        alg: Algorithm,
        kid: Option<&str>,
    ) -> Result<(Principal, u64), Refusal> {
        let set = self.jwks.keys.load();
        let candidates: Vec<&Key> = set
            .keys
            .iter()
            .filter(|k| k.algorithms.contains(&alg))
            .filter(|k| kid.is_none() || k.kid.as_deref() == kid)
            .collect();
        if candidates.is_empty() {
            return Err(Refusal::Invalid(UNKNOWN_KEY));
        }
        if kid.is_none() && candidates.len() > 1 {
            // Without a `kid` only a lone key is tried: trying every key would let one
            // request cost many signature checks.
            return Err(Refusal::Invalid(
                "the token names no key (kid) and the issuer has several",
            ));
        }
        let mut validation = Validation::new(alg);
        validation.algorithms = vec![alg];
        validation.set_issuer(&[&self.settings.issuer]);
        validation.set_audience(&self.settings.audiences);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = self.settings.leeway.as_secs();
        let mut last = Refusal::Invalid("the token's signature does not verify");
        for key in candidates {
            match jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation) {
                Ok(data) => {
                    let exp = data.claims.get("exp").and_then(Value::as_u64).unwrap_or(0);
                    return self.principal(data.claims).map(|p| (p, exp));
                }
                Err(e) => match refusal(e.kind()) {
                    // Another key may verify it.
                    Ok(refusal) => last = refusal,
                    Err(refusal) => return Err(refusal),
                },
            }
        }
        Err(last)
    }

    fn principal(&self, claims: Map<String, Value>) -> Result<Principal, Refusal> {
        let text = |v: Option<&Value>| match v {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        let subject = text(claims.get("sub"))
            .filter(|s| !s.is_empty())
            .ok_or(Refusal::Invalid("the token lacks a subject"))?;
        let tenant = self
            .settings
            .tenant_claim
            .as_deref()
            .and_then(|c| text(claims.get(c)));
        let groups = match self
            .settings
            .groups_claim
            .as_deref()
            .and_then(|c| claims.get(c))
        {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|g| g.as_str().map(str::to_owned))
                .collect(),
            // OAuth `scope` style: space-separated.
            Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        Ok(Principal {
            issuer: self.settings.issuer.clone(),
            subject,
            tenant,
            groups,
            scopes: scopes(&claims),
        })
    }
}

/// The token's scopes: `scope` (RFC 8693 and 9068: space-separated), else `scp` (an array,
/// or a space-separated string).
fn scopes(claims: &Map<String, Value>) -> Vec<String> {
    match claims.get("scope").or_else(|| claims.get("scp")) {
        Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

const UNKNOWN_KEY: &str = "the token's key id is unknown";

/// Why a key did not verify a token: `Ok` when another key might (a signature for another
/// key, a token not readable with this one), `Err` when none will.
fn refusal(kind: &jsonwebtoken::errors::ErrorKind) -> Result<Refusal, Refusal> {
    use jsonwebtoken::errors::ErrorKind as K;
    Err(match kind {
        K::InvalidSignature => {
            return Ok(Refusal::Invalid("the token's signature does not verify"))
        }
        K::ExpiredSignature => Refusal::Expired,
        K::ImmatureSignature => Refusal::Invalid("the token is not valid yet"),
        K::InvalidIssuer => Refusal::Invalid("the token's issuer is not accepted"),
        K::InvalidAudience => Refusal::Invalid("the token's audience is not this resource"),
        K::MissingRequiredClaim(_) => Refusal::Invalid("the token lacks a required claim"),
        _ => return Ok(Refusal::Invalid("the token is malformed")),
    })
}

/// Parse an algorithm name from the config.
pub fn algorithm(name: &str) -> Result<Algorithm, String> {
    use Algorithm::*;
    let alg = match name {
        "RS256" => RS256,
        "RS384" => RS384,
        "RS512" => RS512,
        "PS256" => PS256,
        "PS384" => PS384,
        "PS512" => PS512,
        "ES256" => ES256,
        "ES384" => ES384,
        "EdDSA" => EdDSA,
        other => {
            return Err(format!(
                "algorithm '{other}' is not accepted (asymmetric only: RS256/384/512, PS256/384/512, ES256, ES384, EdDSA)"
            ))
        }
    };
    Ok(alg)
}
