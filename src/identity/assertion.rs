//! What a pool's members are told of the caller (`[pools.credential]`): nothing, a signed
//! identity assertion the edge mints per request, or a static credential of the pool's own.
//!
//! The assertion is a JWT (RFC 7519) signed with EdDSA over Ed25519 (RFC 8037), with a key of
//! the edge's own (`[assertions]`): `iss` (the edge), `sub` (the verified principal), `aud`
//! (the pool's), `tenant` and `scope` when the principal has them, `iat`, `exp` (at most
//! [`MAX_TTL_SECONDS`] later) and a `jti` unique to the request. The public keys are served as
//! a JWKS (RFC 7517) on the admin listener.
//!
//! Keys: the session key ring's text format (`<id>:<base64 secret>`, one per line or comma),
//! the first entry signs, every entry is published; the Ed25519 key is derived from the
//! secret with HKDF-SHA256 (its own salt: an assertion key never seals and never signs a
//! hand-off), so replicas given the same ring sign with the same key and publish the same set.
//! To rotate: put the new entry first, keep the old one listed until tokens it signed have
//! expired (`ttl_seconds`, at most a minute), then drop it.

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use http::{HeaderName, HeaderValue};
use ring::hkdf;
use ring::rand::SecureRandom;
use ring::signature::{Ed25519KeyPair, KeyPair};
use serde_json::{json, Value};

use super::Principal;

const HKDF_SALT: &[u8] = b"mcp-edge/identity-assertion/v1";
const MIN_SECRET_BYTES: usize = 32;
/// The longest an assertion is valid (`ttl_seconds` is capped here).
pub const MAX_TTL_SECONDS: u64 = 60;
/// The header an assertion goes in unless the pool names another.
pub const DEFAULT_HEADER: &str = "x-mcp-edge-identity";
/// The edge's `iss` unless `[assertions] issuer` says otherwise.
pub const DEFAULT_ISSUER: &str = "mcp-edge";

/// What a pool's members get (`[pools.credential] kind`).
#[derive(Debug, Default)]
pub enum Credential {
    /// Nothing of the edge's (the caller's `Authorization` only with `forward_credential`).
    #[default]
    None,
    /// A signed assertion of who calls, minted per request.
    Identity(Assertion),
    /// One service credential for every request.
    Static(Static),
    /// The caller's token exchanged at an authorization server (RFC 8693), per caller.
    Exchange(std::sync::Arc<super::exchange::Exchange>),
}

impl Credential {
    /// The name the access log, the span and the metric give it.
    pub fn kind(&self) -> &'static str {
        match self {
            Credential::None => "none",
            Credential::Identity(_) => "identity",
            Credential::Static(_) => "static",
            Credential::Exchange(_) => "exchange",
        }
    }
}

/// A pool's assertion settings.
#[derive(Debug)]
pub struct Assertion {
    pub header: HeaderName,
    pub audience: String,
    pub ttl_seconds: u64,
    pub signer: std::sync::Arc<Signer>,
}

/// A pool's static credential: the header and its whole value (scheme included).
pub struct Static {
    pub header: HeaderName,
    pub value: HeaderValue,
}

impl std::fmt::Debug for Static {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.debug_struct("Static")
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

/// The edge's assertion keys (`[assertions]`): the first signs, all are published.
pub struct Signer {
    pub issuer: String,
    keys: Vec<(u8, Ed25519KeyPair)>,
    /// The JWKS document, built once.
    jwks: String,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<u8> = self.keys.iter().map(|(id, _)| *id).collect();
        f.debug_struct("Signer")
            .field("issuer", &self.issuer)
            .field("ids", &ids)
            .finish()
    }
}

impl Signer {
    /// A ring in the session key ring's text format.
    pub fn parse(text: &str, issuer: String) -> Result<Signer, String> {
        let mut keys: Vec<(u8, Ed25519KeyPair)> = Vec::new();
        for (n, raw) in text.split(['\n', ',']).enumerate() {
            let entry = raw.split('#').next().unwrap_or("").trim();
            if entry.is_empty() {
                continue;
            }
            let (id, secret) = entry
                .split_once(':')
                .ok_or_else(|| format!("entry {}: expected <id>:<base64 secret>", n + 1))?;
            let id: u8 = match id.trim().parse() {
                Ok(i) if i > 0 => i,
                _ => return Err(format!("entry {}: key id must be 1..255", n + 1)),
            };
            if keys.iter().any(|(k, _)| *k == id) {
                return Err(format!("entry {}: key id {id} listed twice", n + 1));
            }
            let secret = [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
                .iter()
                .find_map(|e| e.decode(secret.trim()).ok())
                .ok_or_else(|| format!("key {id}: secret is not base64"))?;
            if secret.len() < MIN_SECRET_BYTES {
                return Err(format!(
                    "key {id}: secret has {} bytes, need at least {MIN_SECRET_BYTES}",
                    secret.len()
                ));
            }
            keys.push((id, derive(id, &secret)?));
        }
        if keys.is_empty() {
            return Err("the key ring is empty".into());
        }
        let jwks = jwks(&keys);
        Ok(Signer { issuer, keys, jwks })
    }

    /// The public keys, as a JWKS document.
    pub fn jwks(&self) -> &str {
        &self.jwks
    }

    /// A compact JWT for `principal`, valid `ttl` seconds from `now` (unix seconds).
    pub fn mint(&self, principal: &Principal, audience: &str, ttl: u64, now: u64) -> String {
        let mut claims = json!({
            "iss": self.issuer,
            "sub": principal.subject,
            "aud": audience,
            "iat": now,
            "exp": now + ttl.min(MAX_TTL_SECONDS),
            "jti": jti(),
        });
        if let Some(tenant) = &principal.tenant {
            claims["tenant"] = Value::from(tenant.as_str());
        }
        if !principal.scopes.is_empty() {
            claims["scope"] = Value::from(principal.scopes.join(" "));
        }
        self.sign(&claims)
    }

    /// A compact JWT of these claims, signed with the ring's first key (an assertion, or the
    /// edge's `private_key_jwt` client authentication at a token endpoint).
    pub fn sign(&self, claims: &Value) -> String {
        let (id, key) = &self.keys[0];
        let header = json!({"alg": "EdDSA", "typ": "JWT", "kid": id.to_string()});
        let mut token = URL_SAFE_NO_PAD.encode(header.to_string());
        token.push('.');
        token.push_str(&URL_SAFE_NO_PAD.encode(claims.to_string()));
        let signature = key.sign(token.as_bytes());
        token.push('.');
        token.push_str(&URL_SAFE_NO_PAD.encode(signature.as_ref()));
        token
    }
}

/// 128 random bits, URL-safe base64: unique per request.
pub(super) fn jti() -> String {
    let mut bytes = [0u8; 16];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        // The system's generator failing is not something to carry on with quietly; a
        // counter still keeps ids distinct within the process.
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        bytes[..8].copy_from_slice(&n.to_be_bytes());
    }
    URL_SAFE_NO_PAD.encode(bytes)
}

/// An HKDF output length for a 32-byte Ed25519 seed.
struct Seed;

impl hkdf::KeyType for Seed {
    fn len(&self) -> usize {
        32
    }
}

fn derive(id: u8, secret: &[u8]) -> Result<Ed25519KeyPair, String> {
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, HKDF_SALT).extract(secret);
    let info = [id];
    let info_refs = [&info[..]];
    let mut seed = [0u8; 32];
    prk.expand(&info_refs, Seed)
        .and_then(|okm| okm.fill(&mut seed))
        .map_err(|_| "key derivation failed")?;
    Ed25519KeyPair::from_seed_unchecked(&seed).map_err(|_| format!("key {id}: not a key"))
}

fn jwks(keys: &[(u8, Ed25519KeyPair)]) -> String {
    let keys: Vec<Value> = keys
        .iter()
        .map(|(id, key)| {
            json!({
                "kty": "OKP",
                "crv": "Ed25519",
                "x": URL_SAFE_NO_PAD.encode(key.public_key().as_ref()),
                "kid": id.to_string(),
                "alg": "EdDSA",
                "use": "sig",
            })
        })
        .collect();
    json!({ "keys": keys }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{Algorithm, DecodingKey, Validation};

    const S1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="; // 32 bytes
    const S2: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA";

    fn who(subject: &str) -> Principal {
        Principal {
            issuer: "https://issuer.test".into(),
            subject: subject.into(),
            tenant: Some("acme".into()),
            groups: vec![],
            scopes: vec!["tools:read".into(), "tools:call".into()],
        }
    }

    /// Verify `token` against the JWKS document, as a member would.
    fn verify(jwks: &str, token: &str, audience: &str) -> Value {
        let header = jsonwebtoken::decode_header(token).unwrap();
        let set: jsonwebtoken::jwk::JwkSet = serde_json::from_str(jwks).unwrap();
        let jwk = set.find(header.kid.as_deref().unwrap()).unwrap();
        let key = DecodingKey::from_jwk(jwk).unwrap();
        let mut v = Validation::new(Algorithm::EdDSA);
        v.set_audience(&[audience]);
        v.set_issuer(&["mcp-edge"]);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        jsonwebtoken::decode::<Value>(token, &key, &v)
            .unwrap()
            .claims
    }

    fn now() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    #[test]
    fn a_minted_assertion_verifies_with_its_claims() {
        let signer = Signer::parse(&format!("1:{S1}"), DEFAULT_ISSUER.into()).unwrap();
        let t = now();
        let token = signer.mint(&who("alice"), "pool-a", 30, t);
        let claims = verify(signer.jwks(), &token, "pool-a");
        assert_eq!(claims["sub"], "alice");
        assert_eq!(claims["aud"], "pool-a");
        assert_eq!(claims["tenant"], "acme");
        assert_eq!(claims["scope"], "tools:read tools:call");
        assert_eq!(claims["iat"], t);
        assert_eq!(claims["exp"], t + 30);
        let other = signer.mint(&who("alice"), "pool-a", 30, t);
        assert_ne!(
            claims["jti"],
            verify(signer.jwks(), &other, "pool-a")["jti"]
        );
    }

    #[test]
    fn ttl_is_capped_and_odd_subjects_round_trip() {
        let signer = Signer::parse(&format!("1:{S1}"), DEFAULT_ISSUER.into()).unwrap();
        let t = now();
        let odd = "o'\"brien \\ 名前 😀";
        let mut p = who(odd);
        p.tenant = None;
        p.scopes.clear();
        let claims = verify(signer.jwks(), &signer.mint(&p, "a", 3600, t), "a");
        assert_eq!(claims["sub"], odd);
        assert_eq!(claims["exp"], t + MAX_TTL_SECONDS);
        assert!(claims.get("tenant").is_none() && claims.get("scope").is_none());
    }

    #[test]
    fn the_first_key_signs_and_every_key_is_published() {
        let old = Signer::parse(&format!("1:{S1}"), DEFAULT_ISSUER.into()).unwrap();
        let new = Signer::parse(&format!("2:{S2}\n1:{S1}"), DEFAULT_ISSUER.into()).unwrap();
        let before = old.mint(&who("a"), "p", 60, now());
        let after = new.mint(&who("a"), "p", 60, now());
        assert_eq!(
            jsonwebtoken::decode_header(&after).unwrap().kid.unwrap(),
            "2"
        );
        // A token of the old key verifies with the new ring's published keys.
        assert_eq!(verify(new.jwks(), &before, "p")["sub"], "a");
        // Derived keys are the same on every replica given the same ring.
        let again = Signer::parse(&format!("1:{S1}"), DEFAULT_ISSUER.into()).unwrap();
        assert_eq!(again.jwks(), old.jwks());
        assert!(!new.jwks().contains(S1) && !format!("{new:?}").contains(S1));
    }

    #[test]
    fn bad_rings_are_refused_with_a_reason() {
        for (text, why) in [
            ("", "empty"),
            ("1", "expected"),
            (&format!("0:{S1}") as &str, "1..255"),
            ("1:c2hvcnQ=", "at least 32"),
            (&format!("1:{S1}\n1:{S2}"), "twice"),
        ] {
            let err = Signer::parse(text, "x".into()).unwrap_err();
            assert!(err.contains(why), "{text:?}: {err}");
        }
    }
}
