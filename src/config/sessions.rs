//! `[sessions]`: the key ring every sealed id opens with.

use std::sync::Arc;

use super::file::SessionsSection;
use super::Errors;
use crate::session::{KeyRing, Sessions};

/// Load the key ring. Required when any route admits legacy clients: the edge never starts
/// with an insecure fallback key.
pub(super) fn sessions(
    section: Option<&SessionsSection>,
    any_legacy: bool,
    errs: &mut Errors,
) -> Option<Arc<Sessions>> {
    let default = SessionsSection::default();
    let s = section.unwrap_or(&default);
    let (key, text) = match (&s.keys_file, &s.keys_env) {
        (Some(_), Some(_)) => {
            errs.push("sessions: set keys_file or keys_env, not both".to_string());
            return None;
        }
        (Some(path), None) => (
            "sessions.keys_file",
            std::fs::read_to_string(path).map_err(|e| format!("cannot read '{path}': {e}")),
        ),
        (None, Some(var)) => (
            "sessions.keys_env",
            std::env::var(var).map_err(|_| format!("environment variable '{var}' is not set")),
        ),
        (None, None) => {
            if any_legacy {
                errs.push(
                    "sessions.keys_file: a session key ring (keys_file or keys_env) is required because a route accepts legacy protocol versions".to_string(),
                );
            }
            return None;
        }
    };
    match text.and_then(|t| KeyRing::parse(&t)) {
        Ok(ring) => Some(Arc::new(Sessions {
            ring,
            max_age_secs: s.max_age_seconds.get(),
            bind_credential: s.bind_credential,
        })),
        Err(e) => {
            errs.push(format!("{key}: {e}"));
            None
        }
    }
}
