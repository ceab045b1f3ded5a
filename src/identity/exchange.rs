//! RFC 8693 token exchange (`[pools.credential] kind = "exchange"`): the caller's verified
//! token, exchanged at an authorization server's token endpoint for one whose audience (and
//! RFC 8707 `resource`) is the pool's server, with the pool's `scope`; the member gets
//! `Authorization: Bearer <exchanged>`.
//!
//! - The edge authenticates as a confidential client: `client_secret_basic`,
//!   `client_secret_post`, or `private_key_jwt` signed with the `[assertions]` key (whose
//!   JWKS the admin listener serves, so the authorization server can read it by URL).
//! - Exchanged tokens are cached per caller token (so per issuer, subject, tenant, scopes and
//!   whatever else the token says, such as its client or its authentication level; the
//!   audience and scope are the pool's) until their expiry less [`SKEW`], never past the
//!   caller token's own `exp`, for at most [`MAX_LIFETIME`], at most `cache_entries` of them;
//!   concurrent misses of one token make one exchange, which runs apart from the requests
//!   waiting for it (a client that goes away does not cancel it).
//! - What went wrong is a [`Failure`]: the server refusing the caller's token, not answering
//!   in time, or anything else (down, 5xx, refusing the edge, garbage, a token for another
//!   audience). Failures are not cached. The caller's own token is never the fallback.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use futures::future::{BoxFuture, FutureExt, Shared};
use http::HeaderValue;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{json, Value};

use super::assertion::{jti, Signer};

pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
pub const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";
const JWT_TOKEN: &str = "urn:ietf:params:oauth:token-type:jwt";
const CLIENT_ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// The most a token endpoint's answer may weigh, and the longest token taken from it.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;
/// The longest an exchanged token is kept, whatever it says (some servers say "forever").
pub const MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// An exchanged token is not used within this long of its expiry.
pub const SKEW: Duration = Duration::from_secs(30);
/// How long the edge's `private_key_jwt` client assertion is valid.
const CLIENT_ASSERTION_SECONDS: u64 = 60;

/// RFC 6749 §2.3.1: the client id and secret are form-encoded before Basic.
const FORM: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'*');

/// How the edge proves itself to the token endpoint.
pub enum ClientAuth {
    Basic(String),
    Post(String),
    PrivateKeyJwt(Arc<Signer>),
}

/// A pool's exchange settings, checked (see `src/config/credentials.rs`).
pub struct Settings {
    pub token_endpoint: String,
    pub client_id: String,
    pub auth: ClientAuth,
    pub audience: Option<String>,
    pub resource: Option<String>,
    pub scope: Option<String>,
    pub timeout: Duration,
    pub ca_file: Option<String>,
    pub cache_entries: usize,
}

/// Why no token came back for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The server says the caller's token is no good (`invalid_grant`): the caller hears 401.
    Refused(String),
    /// The server did not answer within `timeout_ms`.
    Timeout,
    /// Down, a 5xx, refusing the edge itself, garbage, a token for another audience.
    Failed(String),
}

impl Failure {
    /// The `outcome` label of `mcp_edge_token_exchanges_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Failure::Refused(_) => "refused",
            Failure::Timeout => "timeout",
            Failure::Failed(_) => "failed",
        }
    }
}

/// Where a caller's token came from: the `result` label of `mcp_edge_token_exchange_cache_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Cached.
    Hit,
    /// This request's exchange.
    Miss,
    /// An exchange another request of the caller's began.
    Joined,
}

impl Source {
    pub fn label(self) -> &'static str {
        match self {
            Source::Hit => "hit",
            Source::Miss => "miss",
            Source::Joined => "joined",
        }
    }
}

#[derive(Clone)]
struct Issued {
    value: HeaderValue,
    /// Until when it may be used again; `None`: for the requests waiting now only.
    until: Option<Instant>,
}

type Outcome = Result<Issued, Failure>;

enum Slot {
    Ready(HeaderValue, Instant),
    Pending(u64, Shared<BoxFuture<'static, Outcome>>),
}

struct Cache {
    max: usize,
    slots: Mutex<HashMap<String, Slot>>,
    next: AtomicU64,
}

impl Cache {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The exchange `id` for `key` ended: its token is kept, or its slot is freed.
    fn settle(&self, key: &str, id: u64, outcome: &Outcome) {
        let mut slots = self.lock();
        if !matches!(slots.get(key), Some(Slot::Pending(p, _)) if *p == id) {
            return;
        }
        match outcome {
            Ok(Issued {
                value,
                until: Some(until),
            }) => {
                slots.insert(key.to_string(), Slot::Ready(value.clone(), *until));
            }
            _ => {
                slots.remove(key);
            }
        }
    }
}

/// Room for one more slot: expired tokens go, then the one nearest its expiry (exchanges
/// under way stay: requests wait on them).
fn make_room(slots: &mut HashMap<String, Slot>, max: usize, now: Instant) {
    if slots.len() < max {
        return;
    }
    slots.retain(|_, s| !matches!(s, Slot::Ready(_, until) if *until <= now));
    if slots.len() < max {
        return;
    }
    let nearest = slots
        .iter()
        .filter_map(|(k, s)| match s {
            Slot::Ready(_, until) => Some((*until, k)),
            Slot::Pending(..) => None,
        })
        .min()
        .map(|(_, k)| k.clone());
    if let Some(k) = nearest {
        slots.remove(&k);
    }
}

/// What one exchange needs, owned (it runs apart from the request).
struct Outgoing {
    client: reqwest::Client,
    settings: Settings,
}

/// A caller's exchanged token: cached (`Err`: nothing to wait for), or an exchange's end.
pub struct Token(Result<Shared<BoxFuture<'static, Outcome>>, HeaderValue>);

impl Token {
    pub async fn get(self) -> Result<HeaderValue, Failure> {
        match self.0 {
            Err(cached) => Ok(cached),
            Ok(pending) => pending.await.map(|issued| issued.value),
        }
    }
}

/// A pool's token exchange and its cache.
pub struct Exchange {
    outgoing: Arc<Outgoing>,
    cache: Arc<Cache>,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        let s = &self.outgoing.settings;
        f.debug_struct("Exchange")
            .field("token_endpoint", &s.token_endpoint)
            .field("client_id", &s.client_id)
            .field("audience", &s.audience)
            .field("resource", &s.resource)
            .finish_non_exhaustive()
    }
}

impl Exchange {
    pub fn new(settings: Settings) -> Result<Exchange, String> {
        let client = super::client(settings.timeout, settings.ca_file.as_deref())
            .map_err(|e| format!("token_endpoint: {e}"))?;
        Ok(Exchange {
            cache: Arc::new(Cache {
                max: settings.cache_entries.max(1),
                slots: Mutex::new(HashMap::new()),
                next: AtomicU64::new(0),
            }),
            outgoing: Arc::new(Outgoing { client, settings }),
        })
    }

    /// Where the `Authorization` value for the requests of the caller whose verified token
    /// is `subject_token` comes from (the cache, an exchange under way, or one begun now),
    /// and the value to wait for.
    pub fn lookup(&self, subject_token: &str) -> (Source, Token) {
        let now = Instant::now();
        let mut slots = self.cache.lock();
        match slots.get(subject_token) {
            Some(Slot::Ready(value, until)) if *until > now => {
                (Source::Hit, Token(Err(value.clone())))
            }
            Some(Slot::Pending(_, p)) => (Source::Joined, Token(Ok(p.clone()))),
            _ => {
                let id = self.cache.next.fetch_add(1, Ordering::Relaxed);
                let key = subject_token.to_string();
                let pending = self.spawn(key.clone(), id);
                slots.remove(&key);
                make_room(&mut slots, self.cache.max, now);
                slots.insert(key, Slot::Pending(id, pending.clone()));
                (Source::Miss, Token(Ok(pending)))
            }
        }
    }

    /// The exchange, as a task of its own whose end settles the cache (a panic included: the
    /// slot never stays pending).
    fn spawn(&self, subject_token: String, id: u64) -> Shared<BoxFuture<'static, Outcome>> {
        let outgoing = self.outgoing.clone();
        let cache = self.cache.clone();
        let task = tokio::spawn(async move {
            let outcome = AssertUnwindSafe(exchange(&outgoing, &subject_token))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    Err(Failure::Failed(
                        "the exchange failed inside the edge".into(),
                    ))
                });
            cache.settle(&subject_token, id, &outcome);
            outcome
        });
        task.map(|joined| {
            joined.unwrap_or_else(|e| Err(Failure::Failed(format!("the exchange ended: {e}"))))
        })
        .boxed()
        .shared()
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn transport(e: &reqwest::Error) -> Failure {
    if e.is_timeout() {
        Failure::Timeout
    } else {
        // The chain names the cause (refused, reset, TLS).
        let mut detail = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            detail.push_str(": ");
            detail.push_str(&s.to_string());
            source = s.source();
        }
        Failure::Failed(detail)
    }
}

/// The exchange request (RFC 8693 §2.1) and the edge's client authentication.
fn request<'a>(
    o: &'a Outgoing,
    subject_token: &str,
) -> (reqwest::RequestBuilder, Vec<(&'a str, String)>) {
    let s = &o.settings;
    let mut form: Vec<(&'a str, String)> = vec![
        ("grant_type", GRANT_TYPE.into()),
        ("subject_token", subject_token.into()),
        ("subject_token_type", ACCESS_TOKEN.into()),
        ("requested_token_type", ACCESS_TOKEN.into()),
    ];
    for (name, value) in [
        ("audience", &s.audience),
        ("resource", &s.resource),
        ("scope", &s.scope),
    ] {
        if let Some(v) = value {
            form.push((name, v.clone()));
        }
    }
    let mut request = o.client.post(&s.token_endpoint);
    match &s.auth {
        ClientAuth::Basic(secret) => {
            let id = utf8_percent_encode(&s.client_id, FORM).to_string();
            let secret = utf8_percent_encode(secret, FORM).to_string();
            request = request.basic_auth(id, Some(secret));
        }
        ClientAuth::Post(secret) => {
            form.push(("client_id", s.client_id.clone()));
            form.push(("client_secret", secret.clone()));
        }
        ClientAuth::PrivateKeyJwt(signer) => {
            let now = unix_now();
            let claims = json!({
                "iss": s.client_id,
                "sub": s.client_id,
                "aud": s.token_endpoint,
                "iat": now,
                "exp": now + CLIENT_ASSERTION_SECONDS,
                "jti": jti(),
            });
            form.push(("client_id", s.client_id.clone()));
            form.push(("client_assertion_type", CLIENT_ASSERTION_TYPE.into()));
            form.push(("client_assertion", signer.sign(&claims)));
        }
    }
    (request, form)
}

async fn exchange(o: &Outgoing, subject_token: &str) -> Outcome {
    let (request, form) = request(o, subject_token);
    let mut answer = request
        .header(http::header::ACCEPT, "application/json")
        .form(&form)
        .send()
        .await
        .map_err(|e| transport(&e))?;
    let status = answer.status();
    let mut body = Vec::new();
    while let Some(chunk) = answer.chunk().await.map_err(|e| transport(&e))? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(Failure::Failed(format!(
                "the token endpoint's answer is larger than {MAX_ANSWER_BYTES} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    let doc: Option<Value> = serde_json::from_slice(&body).ok();
    if !status.is_success() {
        return Err(refusal(status, doc.as_ref()));
    }
    let doc =
        doc.ok_or_else(|| Failure::Failed("the token endpoint's answer is not JSON".into()))?;
    let subject_exp = jwt_claims(subject_token).and_then(|c| c.get("exp").and_then(Value::as_u64));
    issued(&o.settings, &doc, subject_exp)
}

/// A 4xx or 5xx: the caller's token refused (`invalid_grant`), or the exchange failed.
fn refusal(status: http::StatusCode, doc: Option<&Value>) -> Failure {
    let error = doc.and_then(|d| d.get("error")).and_then(Value::as_str);
    let description = doc
        .and_then(|d| d.get("error_description"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let clip = |s: &str| s.chars().take(200).collect::<String>();
    match error {
        Some("invalid_grant") if status == http::StatusCode::BAD_REQUEST => {
            Failure::Refused(clip(description))
        }
        Some(error) => Failure::Failed(format!(
            "the token endpoint answered {status}: {} {}",
            clip(error),
            clip(description)
        )),
        None => Failure::Failed(format!("the token endpoint answered {status}")),
    }
}

/// RFC 8693 §2.2.1: the token, checked (a bearer access token, for the pool's audience when it
/// says which), and until when it may be used.
fn issued(s: &Settings, doc: &Value, subject_exp: Option<u64>) -> Outcome {
    let bad = |why: &str| {
        Err(Failure::Failed(format!(
            "the token endpoint's answer {why}"
        )))
    };
    let Some(token) = doc.get("access_token").and_then(Value::as_str) else {
        return bad("has no access_token");
    };
    if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
        return bad("has an empty or oversized access_token");
    }
    let token_type = doc.get("token_type").and_then(Value::as_str).unwrap_or("");
    if !token_type.eq_ignore_ascii_case("bearer") {
        return bad("is not a bearer token (token_type)");
    }
    match doc.get("issued_token_type").and_then(Value::as_str) {
        None | Some(ACCESS_TOKEN | JWT_TOKEN) => {}
        Some(_) => return bad("is not an access token (issued_token_type)"),
    }
    let claims = jwt_claims(token);
    if let Some(aud) = claims.as_ref().and_then(|c| c.get("aud")) {
        let wanted: Vec<&str> = [&s.audience, &s.resource]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        let has = |w: &str| match aud {
            Value::String(a) => a == w,
            Value::Array(all) => all.iter().any(|a| a.as_str() == Some(w)),
            _ => false,
        };
        if !wanted.is_empty() && !wanted.iter().any(|w| has(w)) {
            return bad("is a token for another audience");
        }
    }
    let value = HeaderValue::from_str(&format!("Bearer {token}"))
        .ok()
        .filter(|_| token.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| {
            Failure::Failed("the token endpoint's access_token is not a header value".into())
        })?;
    let now = unix_now();
    let exp = claims
        .as_ref()
        .and_then(|c| c.get("exp"))
        .and_then(Value::as_u64);
    let lifetimes = [
        doc.get("expires_in").and_then(Value::as_u64),
        exp.map(|exp| exp.saturating_sub(now)),
        subject_exp.map(|exp| exp.saturating_sub(now)),
    ];
    let until = lifetimes
        .into_iter()
        .flatten()
        .min()
        .map(|life| Duration::from_secs(life).min(MAX_LIFETIME))
        .and_then(|life| life.checked_sub(SKEW))
        .filter(|left| !left.is_zero())
        .and_then(|left| Instant::now().checked_add(left));
    Ok(Issued { value, until })
}

/// A JWT's claims, when the token is one (an opaque token has none to check).
fn jwt_claims(token: &str) -> Option<Value> {
    let mut parts = token.split('.');
    let (_, payload, _, None) = (parts.next()?, parts.next()?, parts.next()?, parts.next()) else {
        return None;
    };
    let bytes = URL_SAFE_NO_PAD.decode(payload).ok()?;
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .filter(Value::is_object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            token_endpoint: "http://127.0.0.1:1/token".into(),
            client_id: "edge".into(),
            auth: ClientAuth::Post("s".into()),
            audience: Some("https://api.test".into()),
            resource: None,
            scope: None,
            timeout: Duration::from_secs(1),
            ca_file: None,
            cache_entries: 2,
        }
    }

    fn jwt(claims: Value) -> String {
        format!(
            "e30.{}.c2ln",
            URL_SAFE_NO_PAD.encode(claims.to_string().as_bytes())
        )
    }

    #[test]
    fn a_token_for_another_audience_is_refused() {
        let s = settings();
        let other = json!({"access_token": jwt(json!({"aud": "https://else.test"})), "token_type": "Bearer", "expires_in": 300});
        assert!(
            matches!(issued(&s, &other, None), Err(Failure::Failed(m)) if m.contains("another audience"))
        );
        let ours = json!({"access_token": jwt(json!({"aud": ["x", "https://api.test"]})), "token_type": "bearer", "expires_in": 300});
        let ok = issued(&s, &ours, None).unwrap();
        assert!(ok.value.to_str().unwrap().starts_with("Bearer e30."));
        assert!(ok.until.is_some());
        // Opaque: nothing to check.
        let opaque = json!({"access_token": "opaque-1", "token_type": "Bearer"});
        assert!(issued(&s, &opaque, None).unwrap().until.is_none());
    }

    #[test]
    fn what_is_not_a_bearer_access_token_is_refused() {
        let s = settings();
        for doc in [
            json!({"token_type": "Bearer"}),
            json!({"access_token": "", "token_type": "Bearer"}),
            json!({"access_token": "a", "token_type": "N_A"}),
            json!({"access_token": "a", "token_type": "Bearer", "issued_token_type": "urn:ietf:params:oauth:token-type:id_token"}),
            json!({"access_token": "a\u{7f}b", "token_type": "Bearer"}),
            json!({"access_token": "a b", "token_type": "Bearer"}),
            json!({"access_token": "x".repeat(MAX_TOKEN_BYTES + 1), "token_type": "Bearer"}),
        ] {
            assert!(
                matches!(issued(&s, &doc, None), Err(Failure::Failed(_))),
                "{doc}"
            );
        }
    }

    #[test]
    fn the_cache_keeps_its_bound_and_the_nearest_expiry_goes_first() {
        let now = Instant::now();
        let v = HeaderValue::from_static("Bearer t");
        let mut slots = HashMap::new();
        slots.insert(
            "a".to_string(),
            Slot::Ready(v.clone(), now + Duration::from_secs(5)),
        );
        slots.insert(
            "b".to_string(),
            Slot::Ready(v.clone(), now + Duration::from_secs(50)),
        );
        make_room(&mut slots, 2, now);
        assert_eq!(slots.len(), 1);
        assert!(slots.contains_key("b"));
        slots.insert(
            "c".to_string(),
            Slot::Ready(v, now - Duration::from_secs(1)),
        );
        make_room(&mut slots, 2, now);
        assert!(slots.contains_key("b") && !slots.contains_key("c"));
    }

    #[test]
    fn invalid_grant_is_the_callers_refusal_anything_else_a_failure() {
        let doc = json!({"error": "invalid_grant", "error_description": "subject token expired"});
        assert_eq!(
            refusal(http::StatusCode::BAD_REQUEST, Some(&doc)),
            Failure::Refused("subject token expired".into())
        );
        let client = json!({"error": "invalid_client"});
        assert!(matches!(
            refusal(http::StatusCode::UNAUTHORIZED, Some(&client)),
            Failure::Failed(_)
        ));
        assert!(matches!(
            refusal(http::StatusCode::BAD_GATEWAY, None),
            Failure::Failed(_)
        ));
    }

    #[test]
    fn a_token_is_kept_no_longer_than_it_or_the_callers_lives_nor_a_day() {
        let s = settings();
        let now = unix_now();
        let life = |doc: Value, subject_exp: Option<u64>| {
            issued(&s, &doc, subject_exp)
                .unwrap()
                .until
                .map(|u| u.saturating_duration_since(Instant::now()).as_secs())
        };
        let doc =
            |ttl: u64| json!({"access_token": "t", "token_type": "Bearer", "expires_in": ttl});
        assert_eq!(life(doc(300), None), Some(269));
        // The caller's token ends first: so does the exchanged one's use.
        // (The second may turn between the two clocks.)
        let capped = life(doc(300), Some(now + 100)).unwrap();
        assert!((68..=69).contains(&capped), "{capped}");
        assert_eq!(life(doc(300), Some(now + 10)), None);
        // "Forever": a day, and no overflow.
        assert_eq!(life(doc(u64::MAX), None), Some(24 * 3600 - 31));
        let jwt_forever = json!({"access_token": jwt(json!({"aud": "https://api.test", "exp": u64::MAX})), "token_type": "Bearer"});
        assert_eq!(life(jwt_forever, None), Some(24 * 3600 - 31));
    }
}
