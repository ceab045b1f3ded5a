//! Which revisions: the ones a route accepts ([`VersionPolicy`]), narrowed to what its pool's
//! members speak ([`Spoken`], combined from each member's [`Speaks`], learned by the `mcp`
//! health check), and what `-32022` lists.

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::learned::AbsentAnswers;
use crate::error::EdgeError;

/// What one member says it speaks, from its `mcp` health checks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Speaks {
    /// `supportedVersions` of its last good `server/discover` answer.
    pub modern: Option<Vec<String>>,
    /// Whether it accepted a legacy `initialize` (asked once per server identity).
    pub legacy: Option<bool>,
    /// `serverInfo` name and version: a new one (a rollout) asks the legacy question again.
    pub identity: Option<String>,
    /// Times the legacy question was asked of this identity without an answer that settles
    /// it (asked at most [`Speaks::LEGACY_ATTEMPTS`] times).
    pub legacy_attempts: u8,
    /// What this identity answers for absent entries (asked once per identity).
    pub absent: Option<Arc<AbsentAnswers>>,
    /// Times the absent entries were asked about without a whole answer.
    pub absent_attempts: u8,
}

impl Speaks {
    pub const LEGACY_ATTEMPTS: u8 = 3;
}

/// What a pool's members speak, combined over the healthy members that answered: the
/// revisions the edge may route there. `None` in a field means "not known": the edge then
/// goes by the route's `versions` alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spoken {
    /// Modern revisions every answering member lists.
    pub modern: Option<Vec<String>>,
    /// `Some(false)` when every member asked refused a legacy `initialize`, `Some(true)`
    /// when every one accepted it; members that disagree leave it unknown.
    pub legacy: Option<bool>,
    /// What the members answer for absent entries, when every member that was asked is the
    /// same server identity (members that differ, a rollout, leave it unknown: the route's
    /// `absent_as` catalogue answers then).
    pub absent: Option<Arc<AbsentAnswers>>,
}

impl Spoken {
    /// Combine what healthy members said; members that said nothing yet do not count.
    pub fn combine<'a>(members: impl IntoIterator<Item = &'a Speaks>) -> Spoken {
        let mut spoken = Spoken::default();
        let mut legacy_votes = (0usize, 0usize);
        // The learned answers, when every member has them and they agree: a member not
        // learned yet, or another server (a rollout), leaves them unknown.
        let mut absent: Option<Option<&Arc<AbsentAnswers>>> = None;
        for m in members {
            absent = match (absent, &m.absent) {
                (None, Some(learned)) => Some(Some(learned)),
                (Some(Some(seen)), Some(learned)) if seen == learned => Some(Some(seen)),
                _ => Some(None),
            };
            if let Some(modern) = &m.modern {
                spoken.modern = Some(match spoken.modern.take() {
                    None => modern.clone(),
                    Some(all) => all.into_iter().filter(|v| modern.contains(v)).collect(),
                });
            }
            match m.legacy {
                Some(true) => legacy_votes.0 += 1,
                Some(false) => legacy_votes.1 += 1,
                None => {}
            }
        }
        if spoken.modern.as_ref().is_some_and(Vec::is_empty) {
            // Members that share no revision (or one that lists none) cannot narrow a
            // route to nothing: the route's own list stands.
            spoken.modern = None;
        }
        spoken.legacy = match legacy_votes {
            (0, 0) => None,
            (_, 0) => Some(true),
            (0, _) => Some(false),
            _ => None,
        };
        spoken.absent = absent.flatten().cloned();
        spoken
    }
}

/// Versions a route accepts: the modern revisions it lists and, when it lists any legacy
/// revision, legacy traffic; narrowed to what its pool's members say they speak
/// ([`Spoken`], learned by the `mcp` health check) once they have said it.
#[derive(Debug, Clone, Default)]
pub struct VersionPolicy {
    pub accepted: Vec<String>,
    /// The pool's view, shared with it; `None` (no pool, or tests) narrows nothing.
    pub spoken: Option<Arc<ArcSwap<Spoken>>>,
    /// Legacy clients are bridged: the members' own legacy support does not matter.
    pub bridged: bool,
}

impl VersionPolicy {
    /// A policy that goes by the configured list alone.
    pub fn new(accepted: Vec<String>) -> Self {
        VersionPolicy {
            accepted,
            spoken: None,
            bridged: false,
        }
    }

    /// The same list, narrowed by what a pool's members speak.
    pub fn narrowed_by(accepted: Vec<String>, spoken: Arc<ArcSwap<Spoken>>) -> Self {
        VersionPolicy {
            accepted,
            spoken: Some(spoken),
            bridged: false,
        }
    }

    pub fn accepts_modern(&self, v: &str) -> bool {
        !super::is_legacy_version(v)
            && self.accepted.iter().any(|a| a == v)
            && self.members_speak(v)
    }

    pub fn accepts_legacy(&self) -> bool {
        self.configured_legacy() && self.members_speak_legacy()
    }

    /// The configured list names a legacy revision (whatever the members say).
    pub fn configured_legacy(&self) -> bool {
        self.accepted.iter().any(|a| super::is_legacy_version(a))
    }

    fn members_speak(&self, modern: &str) -> bool {
        let Some(spoken) = &self.spoken else {
            return true;
        };
        match &spoken.load().modern {
            Some(list) => list.iter().any(|v| v == modern),
            None => true,
        }
    }

    fn members_speak_legacy(&self) -> bool {
        self.bridged
            || self
                .spoken
                .as_ref()
                .is_none_or(|s| s.load().legacy != Some(false))
    }

    /// The revisions this route serves now: what -32022 lists.
    pub fn supported(&self) -> Vec<String> {
        let legacy = self.members_speak_legacy();
        self.accepted
            .iter()
            .filter(|v| {
                if super::is_legacy_version(v) {
                    legacy
                } else {
                    self.members_speak(v)
                }
            })
            .cloned()
            .collect()
    }

    pub fn unsupported(&self, requested: Option<String>) -> EdgeError {
        EdgeError::UnsupportedVersion {
            supported: self.supported(),
            requested,
        }
    }
}

impl PartialEq for VersionPolicy {
    fn eq(&self, other: &Self) -> bool {
        self.accepted == other.accepted
    }
}
