//! A JWKS and a token for the identity benchmark (bench/identity.py): an RSA key (PKCS#8
//! PEM, made by `openssl genpkey`) as the issuer's, and a token for `sub = bench` in `tenant`
//! signed with it (RS256, valid a day).
//!
//! Usage: `bench_token <key.pem> <issuer> <audience> <tenant>`; prints
//! `{"jwks": {...}, "token": "..."}`.

use base64::Engine;
use ring::rsa::PublicKeyComponents;
use ring::signature::RsaKeyPair;
use serde_json::json;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [pem_path, issuer, audience, tenant] = args.as_slice() else {
        return Err("usage: bench_token <key.pem> <issuer> <audience> <tenant>".into());
    };
    let pem = std::fs::read_to_string(pem_path).map_err(|e| format!("{pem_path}: {e}"))?;
    let der = base64::engine::general_purpose::STANDARD
        .decode(
            pem.lines()
                .filter(|l| !l.starts_with("-----"))
                .collect::<String>(),
        )
        .map_err(|e| format!("{pem_path}: {e}"))?;
    let pair = RsaKeyPair::from_pkcs8(&der).map_err(|e| format!("{pem_path}: {e}"))?;
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let public = PublicKeyComponents::<Vec<u8>>::from(pair.public());
    let jwks = json!({"keys": [{
        "kty": "RSA", "kid": "bench", "alg": "RS256", "use": "sig",
        "n": b64(&public.n),
        "e": b64(&public.e),
    }]});
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs();
    let claims = json!({"iss": issuer, "aud": audience, "sub": "bench", "tenant": tenant,
        "iat": now, "exp": now + 86_400});
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some("bench".into());
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(pem.as_bytes()).map_err(|e| e.to_string())?;
    let token = jsonwebtoken::encode(&header, &claims, &key).map_err(|e| e.to_string())?;
    println!("{}", json!({"jwks": jwks, "token": token}));
    Ok(())
}
