//! The session key ring: `id:secret` entries, the first one seals, every one opens.
//!
//! Text format (file or environment variable): entries separated by newlines or commas, each
//! `<id>:<secret>` with `id` in 1..=255 and `secret` at least 32 bytes, base64 (standard or
//! URL-safe, padding optional). `#` starts a comment. AES-256-GCM keys are derived from the
//! secrets with HKDF-SHA256 once, when the ring is loaded, never per request; so are the
//! HMAC-SHA256 keys that sign requests one replica hands another (another salt: a token key
//! never signs, a signing key never seals).

use base64::Engine;
use ring::aead::{LessSafeKey, UnboundKey, AES_256_GCM};
use ring::{hkdf, hmac};

const HKDF_SALT: &[u8] = b"mcp-edge/session-token/v1";
const HOP_SALT: &[u8] = b"mcp-edge/hop/v1";
const MIN_SECRET_BYTES: usize = 32;

pub struct KeyRing {
    sealing: u8,
    keys: Vec<(u8, LessSafeKey)>,
    /// The hand-off signing keys, by the same ids.
    signing: Vec<(u8, hmac::Key)>,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        let ids: Vec<u8> = self.keys.iter().map(|(id, _)| *id).collect();
        f.debug_struct("KeyRing")
            .field("sealing", &self.sealing)
            .field("ids", &ids)
            .finish()
    }
}

impl KeyRing {
    pub fn parse(text: &str) -> Result<KeyRing, String> {
        let mut keys: Vec<(u8, LessSafeKey)> = Vec::new();
        let mut signing = Vec::new();
        for (n, raw) in text.split(['\n', ',']).enumerate() {
            let entry = raw.split('#').next().unwrap_or("").trim();
            if entry.is_empty() {
                continue;
            }
            let Some((id, secret)) = entry.split_once(':') else {
                return Err(format!("entry {}: expected <id>:<base64 secret>", n + 1));
            };
            let id: u8 = match id.trim().parse() {
                Ok(i) if i > 0 => i,
                _ => return Err(format!("entry {}: key id must be 1..255", n + 1)),
            };
            if keys.iter().any(|(k, _)| *k == id) {
                return Err(format!("entry {}: key id {id} listed twice", n + 1));
            }
            let secret = decode_secret(secret.trim())
                .ok_or_else(|| format!("key {id}: secret is not base64"))?;
            if secret.len() < MIN_SECRET_BYTES {
                return Err(format!(
                    "key {id}: secret has {} bytes, need at least {MIN_SECRET_BYTES}",
                    secret.len()
                ));
            }
            keys.push((id, derive(id, &secret)?));
            signing.push((id, derive_signing(id, &secret)?));
        }
        let sealing = keys
            .first()
            .map(|(id, _)| *id)
            .ok_or("the key ring is empty")?;
        Ok(KeyRing {
            sealing,
            keys,
            signing,
        })
    }

    /// The key that signs a hand-off (the sealing key's id), and its id.
    pub fn signer(&self) -> (u8, &hmac::Key) {
        let key = self.signing_key(self.sealing).unwrap_or(&self.signing[0].1);
        (self.sealing, key)
    }

    /// The signing key with `id`: every key of the ring verifies.
    pub fn signing_key(&self, id: u8) -> Option<&hmac::Key> {
        self.signing
            .iter()
            .find(|(k, _)| *k == id)
            .map(|(_, key)| key)
    }

    pub fn sealing(&self) -> (u8, &LessSafeKey) {
        // `parse` guarantees the sealing id is present.
        let key = self.get(self.sealing).unwrap_or(&self.keys[0].1);
        (self.sealing, key)
    }

    pub fn get(&self, id: u8) -> Option<&LessSafeKey> {
        self.keys.iter().find(|(k, _)| *k == id).map(|(_, key)| key)
    }

    pub fn ids(&self) -> Vec<u8> {
        self.keys.iter().map(|(id, _)| *id).collect()
    }
}

fn decode_secret(s: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|e| e.decode(s).ok())
}

fn derive(id: u8, secret: &[u8]) -> Result<LessSafeKey, String> {
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, HKDF_SALT).extract(secret);
    let info = [id];
    let info_refs = [&info[..]];
    let okm = prk
        .expand(&info_refs, &AES_256_GCM)
        .map_err(|_| "key derivation failed")?;
    Ok(LessSafeKey::new(UnboundKey::from(okm)))
}

fn derive_signing(id: u8, secret: &[u8]) -> Result<hmac::Key, String> {
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, HOP_SALT).extract(secret);
    let info = [id];
    let info_refs = [&info[..]];
    let okm = prk
        .expand(&info_refs, hmac::HMAC_SHA256)
        .map_err(|_| "key derivation failed")?;
    Ok(hmac::Key::from(okm))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="; // 32 bytes
    const S2: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA";

    #[test]
    fn first_entry_seals_all_open() {
        let ring = KeyRing::parse(&format!("# rotation\n2:{S2}\n1:{S1}\n")).unwrap();
        assert_eq!(ring.sealing().0, 2);
        assert_eq!(ring.ids(), vec![2, 1]);
        let ring = KeyRing::parse(&format!("1:{S1},2:{S2}")).unwrap();
        assert_eq!(ring.sealing().0, 1);
    }

    #[test]
    fn bad_rings_are_refused_with_a_reason() {
        for (text, why) in [
            ("", "empty"),
            ("1", "expected"),
            (&format!("0:{S1}") as &str, "1..255"),
            ("1:c2hvcnQ=", "at least 32"),
            ("1:!!!", "not base64"),
            (&format!("1:{S1}\n1:{S2}"), "twice"),
        ] {
            let err = KeyRing::parse(text).unwrap_err();
            assert!(err.contains(why), "{text:?}: {err}");
        }
    }

    #[test]
    fn debug_never_prints_key_material() {
        let ring = KeyRing::parse(&format!("1:{S1}")).unwrap();
        let shown = format!("{ring:?}");
        assert!(!shown.contains(S1) && shown.contains("ids"));
    }
}
