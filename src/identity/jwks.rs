//! The keys JWTs are checked against: a JWKS from a file, or from an HTTPS URL fetched by
//! the maintenance service off the request path ([`Jwks::refresh`]), and again soon after a
//! token names an unknown `kid`. Only asymmetric keys are kept, at most [`MAX_KEYS`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;
use tokio::sync::watch;

/// The most a JWKS document may weigh, and the most keys kept from it.
const MAX_JWKS_BYTES: usize = 1024 * 1024;
const MAX_KEYS: usize = 64;
/// A `kid` longer than this names no key (it is never looked up).
pub(super) const MAX_KID_BYTES: usize = 256;
/// Unknown `kid`s make the edge fetch the JWKS again at most this often.
pub const UNKNOWN_KID_REFETCH: Duration = Duration::from_secs(10);

/// A verification key and what it may verify.
pub(super) struct Key {
    pub(super) kid: Option<String>,
    pub(super) key: DecodingKey,
    /// The algorithms the key's type allows (narrowed to its `alg`, when the JWK names one).
    pub(super) algorithms: Vec<Algorithm>,
}

#[derive(Default)]
pub(super) struct KeySet {
    pub(super) keys: Vec<Key>,
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
    pub(super) keys: ArcSwap<KeySet>,
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
                let client = super::client(*timeout, ca_file.as_deref())
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
    pub(super) async fn refetch_for_unknown_kid(&self) -> bool {
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
