//! Static API keys, stored as SHA-256 digests in a TOML file (a mounted Secret):
//!
//! ```toml
//! [[keys]]
//! sha256 = "<hex digest of the key>"   # printf %s "$KEY" | sha256sum
//! subject = "ci-bot"
//! tenant = "acme"                      # optional
//! groups = ["ops"]                     # optional
//! scopes = ["deploy"]                   # optional: the scopes `[[routes.scopes]]` may need
//! ```
//!
//! A client presents the key as `Authorization: Bearer <key>`. Its principal's issuer is
//! `api-key`.

use std::collections::HashMap;

use serde::Deserialize;

use super::Principal;

pub const ISSUER: &str = "api-key";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    keys: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    sha256: String,
    subject: String,
    tenant: Option<String>,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    scopes: Vec<String>,
}

#[derive(Debug)]
pub struct ApiKeys {
    by_digest: HashMap<[u8; 32], Principal>,
}

impl ApiKeys {
    pub fn load(path: &str) -> Result<ApiKeys, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("api_keys {path}: {e}"))?;
        ApiKeys::parse(&text).map_err(|e| format!("api_keys {path}: {e}"))
    }

    pub fn parse(text: &str) -> Result<ApiKeys, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut by_digest = HashMap::new();
        for (i, e) in file.keys.into_iter().enumerate() {
            let digest = hex32(e.sha256.trim())
                .ok_or_else(|| format!("keys[{i}].sha256 is not 64 hex digits"))?;
            if e.subject.is_empty() {
                return Err(format!("keys[{i}].subject is empty"));
            }
            let principal = Principal {
                issuer: ISSUER.to_string(),
                subject: e.subject,
                tenant: e.tenant,
                groups: e.groups,
                scopes: e.scopes,
            };
            // One subject is one principal: its sessions, rate bucket and rules are shared.
            if let Some(other) = by_digest
                .values()
                .find(|p: &&Principal| p.subject == principal.subject)
            {
                if other.tenant != principal.tenant
                    || other.groups != principal.groups
                    || other.scopes != principal.scopes
                {
                    return Err(format!(
                        "keys[{i}]: subject '{}' is listed with another tenant, other groups or other scopes",
                        principal.subject
                    ));
                }
            }
            if by_digest.insert(digest, principal).is_some() {
                return Err(format!("keys[{i}]: the same key is listed twice"));
            }
        }
        Ok(ApiKeys { by_digest })
    }

    /// The principal a presented key stands for. Only its digest is compared.
    pub fn lookup(&self, key: &str) -> Option<&Principal> {
        let digest = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
        let mut d = [0u8; 32];
        d.copy_from_slice(digest.as_ref());
        self.by_digest.get(&d)
    }

    pub fn principals(&self) -> impl Iterator<Item = &Principal> {
        self.by_digest.values()
    }
}

fn hex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_found_by_its_digest_only() {
        // sha256("secret-a")
        let digest = ring::digest::digest(&ring::digest::SHA256, b"secret-a");
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        let keys = ApiKeys::parse(&format!(
            "[[keys]]\nsha256 = \"{hex}\"\nsubject = \"bot\"\ntenant = \"a\"\n"
        ))
        .unwrap();
        let p = keys.lookup("secret-a").unwrap();
        assert_eq!(
            (p.subject.as_str(), p.tenant.as_deref()),
            ("bot", Some("a"))
        );
        assert!(keys.lookup("secret-b").is_none());
        assert!(keys.lookup(&hex).is_none());
        assert!(ApiKeys::parse("[[keys]]\nsha256 = \"zz\"\nsubject = \"x\"\n").is_err());
    }
}
