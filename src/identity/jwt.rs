//! JWT access tokens: signature (RS256, ES256, EdDSA and their relatives, never HMAC or
//! `none`), `iss`, `aud`, `exp` and `nbf` with a small clock skew. The keys are a JWKS,
//! from a file or an HTTPS URL; the URL is fetched by the maintenance service, off the
//! request path ([`Jwks::refresh`]), and again soon after a token names an unknown `kid`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use tokio::sync::watch;

use super::{Principal, Refusal};

/// The most a JWKS document may weigh, and the most keys kept from it.
const MAX_JWKS_BYTES: usize = 1024 * 1024;
const MAX_KEYS: usize = 64;
/// A `kid` longer than this names no key (it is never looked up).
const MAX_KID_BYTES: usize = 256;
/// Unknown `kid`s make the edge fetch the JWKS again at most this often.
pub const UNKNOWN_KID_REFETCH: Duration = Duration::from_secs(10);

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

/// A verification key and what it may verify.
struct Key {
    kid: Option<String>,
    key: DecodingKey,
    /// The algorithms the key's type allows (narrowed to its `alg`, when the JWK names one).
    algorithms: Vec<Algorithm>,
}

#[derive(Default)]
struct KeySet {
    keys: Vec<Key>,
}

impl KeySet {
    /// Parse a JWKS document; keys this edge cannot use (symmetric, unknown curve or type,
    /// malformed) are skipped, not fatal.
    fn parse(doc: &[u8]) -> Result<KeySet, String> {
        #[derive(serde::Deserialize)]
        struct Doc {
            keys: Vec<Value>,
        }
        let doc: Doc =
            serde_json::from_slice(doc).map_err(|e| format!("not a JWKS document: {e}"))?;
        let mut keys = Vec::new();
        for raw in doc.keys {
            if keys.len() == MAX_KEYS {
                break;
            }
            let Ok(jwk) = serde_json::from_value::<Jwk>(raw) else {
                continue;
            };
            // A key for encryption does not verify signatures.
            if matches!(
                jwk.common.public_key_use,
                Some(jsonwebtoken::jwk::PublicKeyUse::Encryption)
            ) {
                continue;
            }
            let Some(mut algorithms) = family(&jwk) else {
                continue;
            };
            if let Some(alg) = jwk.common.key_algorithm {
                algorithms.retain(|a| format!("{a:?}") == format!("{alg:?}"));
            }
            let Ok(key) = DecodingKey::from_jwk(&jwk) else {
                continue;
            };
            keys.push(Key {
                kid: jwk.common.key_id.clone(),
                key,
                algorithms,
            });
        }
        Ok(KeySet { keys })
    }
}

/// The asymmetric algorithms a JWK's key type can verify; `None` for symmetric keys (an
/// `oct` key would let a token signed with the public key as an HMAC secret pass).
fn family(jwk: &Jwk) -> Option<Vec<Algorithm>> {
    use Algorithm::*;
    match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Some(vec![RS256, RS384, RS512, PS256, PS384, PS512]),
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => Some(vec![ES256]),
            EllipticCurve::P384 => Some(vec![ES384]),
            _ => None,
        },
        AlgorithmParameters::OctetKeyPair(okp) => {
            (okp.curve == EllipticCurve::Ed25519).then(|| vec![EdDSA])
        }
        AlgorithmParameters::OctetKey(_) => None,
    }
}

/// Where the keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    File(String),
    Url {
        url: String,
        /// PEM CA bundle trusted besides the system roots.
        ca_file: Option<String>,
        /// Refetch this often.
        every: Duration,
        /// A fetch gives up after this long; a request waiting for one, too.
        timeout: Duration,
    },
}

/// The current key set, and the machinery that refreshes it.
pub struct Jwks {
    pub source: JwksSource,
    keys: ArcSwap<KeySet>,
    /// Bumped whenever a fetch ends (with or without new keys); requests waiting for a
    /// refresh watch it.
    generation: watch::Sender<u64>,
    wanted: AtomicBool,
    /// When an unknown `kid` last asked for a fetch (ms since `epoch`, 0: never).
    last_kid_fetch: AtomicU64,
    epoch: Instant,
    fetching: Mutex<bool>,
    client: Option<reqwest::Client>,
}

impl std::fmt::Debug for Jwks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jwks")
            .field("source", &self.source)
            .field("keys", &self.keys.load().keys.len())
            .finish()
    }
}

impl Jwks {
    /// A file is read now (an unreadable or empty one is a config error); a URL is fetched
    /// by the maintenance service.
    pub fn new(source: JwksSource) -> Result<Jwks, String> {
        let (keys, client) = match &source {
            JwksSource::File(path) => {
                let doc = std::fs::read(path).map_err(|e| format!("jwks_file {path}: {e}"))?;
                let keys = KeySet::parse(&doc).map_err(|e| format!("jwks_file {path}: {e}"))?;
                if keys.keys.is_empty() {
                    return Err(format!(
                        "jwks_file {path}: no usable key (RSA, P-256, P-384 or Ed25519)"
                    ));
                }
                (keys, None)
            }
            JwksSource::Url {
                url,
                ca_file,
                timeout,
                ..
            } => {
                if !url.starts_with("https://") {
                    return Err(format!("jwks_url {url}: must be an https:// URL"));
                }
                let mut builder = reqwest::Client::builder()
                    .timeout(*timeout)
                    .connect_timeout(*timeout)
                    .redirect(reqwest::redirect::Policy::none());
                if let Some(ca) = ca_file {
                    let pem = std::fs::read(ca).map_err(|e| format!("jwks_ca_file {ca}: {e}"))?;
                    for cert in reqwest::Certificate::from_pem_bundle(&pem)
                        .map_err(|e| format!("jwks_ca_file {ca}: {e}"))?
                    {
                        builder = builder.add_root_certificate(cert);
                    }
                }
                let client = builder
                    .build()
                    .map_err(|e| format!("jwks_url {url}: {e}"))?;
                (KeySet::default(), Some(client))
            }
        };
        Ok(Jwks {
            source,
            keys: ArcSwap::from_pointee(keys),
            generation: watch::channel(0).0,
            wanted: AtomicBool::new(true),
            last_kid_fetch: AtomicU64::new(0),
            epoch: Instant::now(),
            fetching: Mutex::new(false),
            client,
        })
    }

    /// Bumped by every fetch that ended (verified tokens are trusted only within one).
    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    /// Keep the keys another instance fetched from the same source (a reload).
    pub fn inherit(&self, old: &Jwks) {
        if self.source == old.source && self.client.is_some() {
            self.keys.store(old.keys.load_full());
            self.wanted.store(false, Ordering::Relaxed);
        }
    }

    /// A request found an unknown `kid` (or nothing was fetched yet): the maintenance
    /// service should fetch now.
    pub fn wanted(&self) -> bool {
        self.client.is_some() && self.wanted.load(Ordering::Relaxed)
    }

    pub fn refresh_interval(&self) -> Option<Duration> {
        match &self.source {
            JwksSource::Url { every, .. } => Some(*every),
            JwksSource::File(_) => None,
        }
    }

    /// Fetch the JWKS URL once (at most one fetch at a time). A failure keeps the keys
    /// there are and is logged.
    pub async fn refresh(&self) {
        let Some(client) = &self.client else {
            return;
        };
        let JwksSource::Url { url, .. } = &self.source else {
            return;
        };
        {
            let Ok(mut busy) = self.fetching.lock() else {
                return;
            };
            if *busy {
                return;
            }
            *busy = true;
        }
        self.wanted.store(false, Ordering::Relaxed);
        match fetch(client, url).await {
            Ok(keys) => {
                log::info!("jwks_url {url}: {} usable keys", keys.keys.len());
                crate::metrics::get()
                    .access
                    .jwks_fetches
                    .with_label_values(&["success"])
                    .inc();
                self.keys.store(Arc::new(keys));
            }
            Err(e) => {
                log::warn!("jwks_url {url}: {e} (keeping the keys there were)");
                crate::metrics::get()
                    .access
                    .jwks_fetches
                    .with_label_values(&["failure"])
                    .inc();
            }
        }
        if let Ok(mut busy) = self.fetching.lock() {
            *busy = false;
        }
        self.generation.send_modify(|g| *g += 1);
    }

    /// A token named a `kid` the set lacks: ask for a fetch (paced, see
    /// [`UNKNOWN_KID_REFETCH`]) and wait for it, up to the fetch timeout. `false` when no
    /// fetch will come.
    async fn refetch_for_unknown_kid(&self) -> bool {
        let JwksSource::Url { timeout, .. } = &self.source else {
            return false;
        };
        let mut changes = self.generation.subscribe();
        // Before the first fetch ends, every token waits for it (that is not a refetch).
        if *changes.borrow() > 0 {
            let now = self.epoch.elapsed().as_millis() as u64 + 1;
            let last = self.last_kid_fetch.load(Ordering::Relaxed);
            if last != 0 && now.saturating_sub(last) < UNKNOWN_KID_REFETCH.as_millis() as u64 {
                return false;
            }
            // Racing requests both ask; they wait for the same fetch.
            self.last_kid_fetch.store(now, Ordering::Relaxed);
        }
        changes.mark_unchanged();
        self.wanted.store(true, Ordering::Relaxed);
        tokio::time::timeout(*timeout + Duration::from_millis(200), changes.changed())
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

async fn fetch(client: &reqwest::Client, url: &str) -> Result<KeySet, String> {
    let mut resp = client.get(url).send().await.map_err(|e| e.to_string())?;
    if !resp.status().is_success() {
        return Err(format!("answered {}", resp.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_JWKS_BYTES {
            return Err(format!("larger than {MAX_JWKS_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    KeySet::parse(&body)
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
                Err(e) => {
                    use jsonwebtoken::errors::ErrorKind as K;
                    last = match e.kind() {
                        K::InvalidSignature => {
                            Refusal::Invalid("the token's signature does not verify")
                        }
                        K::ExpiredSignature => return Err(Refusal::Expired),
                        K::ImmatureSignature => {
                            return Err(Refusal::Invalid("the token is not valid yet"))
                        }
                        K::InvalidIssuer => {
                            return Err(Refusal::Invalid("the token's issuer is not accepted"))
                        }
                        K::InvalidAudience => {
                            return Err(Refusal::Invalid(
                                "the token's audience is not this resource",
                            ))
                        }
                        K::MissingRequiredClaim(_) => {
                            return Err(Refusal::Invalid("the token lacks a required claim"))
                        }
                        _ => Refusal::Invalid("the token is malformed"),
                    };
                }
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
        })
    }
}

const UNKNOWN_KEY: &str = "the token's key id is unknown";

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
