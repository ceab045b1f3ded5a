//! `Origin` allowlist (DNS-rebinding protection, MCP transports §Security).

use http::HeaderMap;

use super::headers::{self, ORIGIN};
use crate::error::EdgeError;

/// Allowed origins for a route: exact `scheme://host[:port]` strings compared
/// case-insensitively, or `*` for any. An absent `Origin` header is always allowed (non-browser
/// clients send none); a present one must be listed. `null` is allowed only if listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OriginPolicy {
    allow_any: bool,
    allowed: Vec<String>,
}

impl OriginPolicy {
    pub fn new(list: &[String]) -> Self {
        OriginPolicy {
            allow_any: list.iter().any(|o| o == "*"),
            allowed: list
                .iter()
                .filter(|o| *o != "*")
                .map(|o| o.to_ascii_lowercase())
                .collect(),
        }
    }

    /// The route lists any origin at all (its CORS policy is on).
    pub fn grants_any(&self) -> bool {
        self.allow_any || !self.allowed.is_empty()
    }

    pub fn check(&self, headers: &HeaderMap) -> Result<(), EdgeError> {
        let value = match headers::single(headers, ORIGIN) {
            Ok(None) => return Ok(()),
            Ok(Some(v)) => v,
            Err(_) => {
                return Err(EdgeError::OriginRejected {
                    origin: "(repeated)".into(),
                })
            }
        };
        let origin = String::from_utf8_lossy(value);
        if self.allow_any
            || self
                .allowed
                .iter()
                .any(|a| a.eq_ignore_ascii_case(origin.trim()))
        {
            return Ok(());
        }
        Err(EdgeError::OriginRejected {
            origin: origin.chars().take(200).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(list: &[&str], origins: &[&str]) -> bool {
        let policy = OriginPolicy::new(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let mut h = HeaderMap::new();
        for o in origins {
            h.append(ORIGIN, o.parse().unwrap());
        }
        policy.check(&h).is_ok()
    }

    #[test]
    fn origin_table() {
        let app = &["https://app.example.com"];
        assert!(check(app, &[]), "absent origin allowed");
        assert!(check(app, &["https://app.example.com"]));
        assert!(check(app, &["HTTPS://APP.example.com"]), "case-insensitive");
        assert!(
            !check(app, &["https://app.example.com:8443"]),
            "port must match"
        );
        assert!(
            !check(app, &["https://app.example.com.evil.io"]),
            "lookalike"
        );
        assert!(!check(app, &["null"]));
        assert!(!check(
            app,
            &["https://app.example.com", "https://app.example.com"]
        ));
        assert!(
            !check(&[], &["http://localhost"]),
            "empty list rejects any present origin"
        );
        assert!(check(&["*"], &["https://anything.example"]));
        assert!(check(&["null"], &["null"]));
    }
}
