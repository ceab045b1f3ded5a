//! Identity for tests: signing keys made here (RSA, P-256 and Ed25519, by Node's crypto so
//! RSA is available too), tokens signed with them, and small HTTP(S) servers that serve a
//! JWKS or an authorization server's metadata and count what they were asked.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use super::http1;
use super::tls::Issued;

/// A signing key and its public JWK.
#[derive(Clone)]
pub struct SigningKey {
    pub kid: String,
    pub alg: Algorithm,
    pub private_pem: String,
    /// SPKI PEM of the public key (what an HS256 forgery uses as its secret).
    pub public_pem: String,
    pub jwk: Value,
}

impl SigningKey {
    /// A fresh key: `alg` is RS256, ES256 or EdDSA.
    pub fn generate(kid: &str, alg: Algorithm) -> SigningKey {
        let spec = match alg {
            Algorithm::RS256 => "'rsa',{modulusLength:2048}",
            Algorithm::ES256 => "'ec',{namedCurve:'P-256'}",
            Algorithm::EdDSA => "'ed25519'",
            other => panic!("no test keys for {other:?}"),
        };
        let script = format!(
            "const c=require('crypto');const k=c.generateKeyPairSync({spec});\
             console.log(JSON.stringify({{pem:k.privateKey.export({{type:'pkcs8',format:'pem'}}),\
             pub:k.publicKey.export({{type:'spki',format:'pem'}}),jwk:k.publicKey.export({{format:'jwk'}})}}))"
        );
        let out = std::process::Command::new("node")
            .args(["-e", &script])
            .output()
            .expect("node makes keys");
        let v: Value = serde_json::from_slice(&out.stdout).expect("node printed keys");
        let mut jwk = v["jwk"].clone();
        jwk["kid"] = json!(kid);
        jwk["use"] = json!("sig");
        SigningKey {
            kid: kid.into(),
            alg,
            private_pem: v["pem"].as_str().unwrap().into(),
            public_pem: v["pub"].as_str().unwrap().into(),
            jwk,
        }
    }

    fn encoding_key(&self) -> EncodingKey {
        let pem = self.private_pem.as_bytes();
        match self.alg {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(pem).unwrap(),
            Algorithm::ES256 => EncodingKey::from_ec_pem(pem).unwrap(),
            Algorithm::EdDSA => EncodingKey::from_ed_pem(pem).unwrap(),
            other => panic!("no test keys for {other:?}"),
        }
    }

    /// A token signed with this key, carrying `claims` (its header names the key).
    pub fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding_key()).unwrap()
    }
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Claims for a token of `issuer` for `audience`, valid for an hour.
pub fn claims(issuer: &str, audience: &str, sub: &str, tenant: &str) -> Value {
    json!({
        "iss": issuer, "aud": audience, "sub": sub, "tenant": tenant,
        "iat": now(), "nbf": now() - 5, "exp": now() + 3600,
    })
}

/// A JWKS document of these keys.
pub fn jwks(keys: &[&SigningKey]) -> String {
    json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()}).to_string()
}

/// An HTTP(S) server answering GETs from a path table (`*` answers any path), counting
/// requests per path. The table can be changed while it runs.
pub struct StaticServer {
    pub addr: SocketAddr,
    pub routes: Arc<Mutex<HashMap<String, (u16, String)>>>,
    pub hits: Arc<Mutex<Vec<String>>>,
}

impl StaticServer {
    /// Serve `routes`; over TLS with `cert` when given.
    pub async fn start(routes: Vec<(&str, u16, String)>, cert: Option<&Issued>) -> StaticServer {
        let table: HashMap<String, (u16, String)> = routes
            .into_iter()
            .map(|(p, s, b)| (p.to_string(), (s, b)))
            .collect();
        let routes = Arc::new(Mutex::new(table));
        let hits = Arc::new(Mutex::new(Vec::new()));
        let acceptor = cert.map(|issued| {
            let chain = CertificateDer::pem_file_iter(&issued.cert)
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_file(&issued.key).unwrap();
            let config = rustls::ServerConfig::builder()
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .unwrap();
            tokio_rustls::TlsAcceptor::from(Arc::new(config))
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (table, seen) = (routes.clone(), hits.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (table, seen, acceptor) = (table.clone(), seen.clone(), acceptor.clone());
                tokio::spawn(async move {
                    match acceptor {
                        Some(a) => {
                            if let Ok(tls) = a.accept(tcp).await {
                                serve(tls, &table, &seen).await;
                            }
                        }
                        None => serve(tcp, &table, &seen).await,
                    }
                });
            }
        });
        StaticServer { addr, routes, hits }
    }

    pub fn set(&self, path: &str, status: u16, body: String) {
        self.routes
            .lock()
            .unwrap()
            .insert(path.to_string(), (status, body));
    }

    pub fn hits(&self, path: &str) -> usize {
        self.hits
            .lock()
            .unwrap()
            .iter()
            .filter(|p| *p == path)
            .count()
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    table: &Mutex<HashMap<String, (u16, String)>>,
    seen: &Mutex<Vec<String>>,
) {
    let mut r = BufReader::new(stream);
    loop {
        let Ok(Some(head)) = http1::read_head(&mut r).await else {
            return;
        };
        if http1::read_body(&mut r, &head, 1 << 20).await.is_err() {
            return;
        }
        let path = head
            .text
            .lines()
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .unwrap_or("")
            .to_string();
        seen.lock().unwrap().push(path.clone());
        let answer = {
            let t = table.lock().unwrap();
            t.get(&path).or_else(|| t.get("*")).cloned()
        };
        let (status, body) = answer.unwrap_or((404, "{}".to_string()));
        let resp = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        if r.get_mut().write_all(resp.as_bytes()).await.is_err() {
            return;
        }
    }
}
