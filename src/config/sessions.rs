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
    if s.keys_file.is_some() && s.keys_env.is_some() {
        errs.push("sessions: set keys_file or keys_env, not both".to_string());
        return None;
    }
    let Some((from, text)) = super::secret::read(&s.keys_file, &s.keys_env) else {
        if any_legacy {
            errs.push(
                "sessions.keys_file: a session key ring (keys_file or keys_env) is required because a route accepts legacy protocol versions".to_string(),
            );
        }
        return None;
    };
    let key = from.key(["sessions.keys_file", "sessions.keys_env"]);
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
