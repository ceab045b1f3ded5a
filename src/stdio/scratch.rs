//! Where an isolated process keeps its files: with `scratch_dir`, each process gets a
//! directory of its own, `<scratch_dir>/<pool>/<key>-<n>` (mode 0700, made before it
//! starts, `n` making it this process's alone), removed when it stops; with `keep_scratch`
//! it is `<scratch_dir>/<pool>/<key>`, kept, and the principal's (or the slot's) next process
//! finds its files again. The pool's `env` values and `command` arguments name it and the
//! caller with placeholders:
//!
//! - `{scratch}`: the process's directory (empty without `scratch_dir`);
//! - `{principal}`: the caller of a `per_principal` process, as the edge binds it (32 hex
//!   digits of a digest of issuer and subject, or of the credential: never the raw name,
//!   which a caller chooses); `anonymous` for one without a credential; empty otherwise;
//! - `{session}`: the legacy session of a `per_session` process (the server side's id,
//!   never the sealed token the client holds); empty otherwise.
//!
//! The key is `{principal}` for `per_principal`, `session-<digest of the session id>` for
//! `per_session`, `shared-<slot>` for the shared processes: only hex digits, letters and
//! `-`, so no key names a path outside its pool's directory (and pool names there are
//! letters, digits, `-` and `_`: the configuration checks it). A directory that is not one,
//! or not the edge's own (a link planted in a shared place), is refused.
//!
//! The processes all run as the edge's user: the directories keep principals' files apart
//! by name, not by permission (a server that went looking could read another's). Give
//! `scratch_dir` to the edge alone (a volume of its pod).

use std::path::{Path, PathBuf};

/// Who and what a process is for.
#[derive(Debug, Clone, Default)]
pub struct Place {
    /// The directory's name under the pool's.
    pub key: String,
    pub principal: Option<String>,
    pub session: Option<String>,
}

impl Place {
    pub fn shared(slot: usize) -> Place {
        Place {
            key: format!("shared-{slot}"),
            ..Place::default()
        }
    }

    /// The edge's own start that only tells readiness: a directory of its own.
    pub fn probe() -> Place {
        Place {
            key: "probe".into(),
            ..Place::default()
        }
    }

    /// A `per_principal` caller's process (`caller`: the binding's hex, or `anonymous`).
    pub fn principal(caller: &str) -> Place {
        let safe = safe(caller);
        Place {
            key: safe.clone(),
            principal: Some(safe),
            session: None,
        }
    }

    /// A `per_session` session's own process.
    pub fn session(id: &str) -> Place {
        let digest = ring::digest::digest(&ring::digest::SHA256, id.as_bytes());
        Place {
            key: format!("session-{}", super::hex(&digest.as_ref()[..16])),
            principal: None,
            session: Some(id.to_string()),
        }
    }

    pub fn vars(&self, scratch: Option<&Scratch>) -> Vars {
        Vars {
            scratch: scratch
                .map(|s| s.path.display().to_string())
                .unwrap_or_default(),
            principal: self.principal.clone().unwrap_or_default(),
            session: self.session.clone().unwrap_or_default(),
        }
    }
}

/// Only what a path component may safely be: ASCII letters, digits and `-`.
fn safe(text: &str) -> String {
    let kept: String = text
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(64)
        .collect();
    if kept.is_empty() {
        "anonymous".into()
    } else {
        kept
    }
}

/// The placeholders' values for one process.
#[derive(Debug, Clone)]
pub struct Vars {
    scratch: String,
    principal: String,
    session: String,
}

impl Vars {
    /// `text` with `{scratch}`, `{principal}` and `{session}` filled in (other braces kept).
    pub fn fill(&self, text: &str) -> String {
        if !text.contains('{') {
            return text.to_string();
        }
        text.replace("{scratch}", &self.scratch)
            .replace("{principal}", &self.principal)
            .replace("{session}", &self.session)
    }

    /// The command with its arguments filled in (never the program itself).
    pub fn fill_all(&self, command: &[String]) -> Vec<String> {
        command
            .iter()
            .enumerate()
            .map(|(i, a)| if i == 0 { a.clone() } else { self.fill(a) })
            .collect()
    }
}

/// Suffixes of directories made by this edge.
static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `path` is a directory (not a link to one) of this process's user; made private.
fn owned(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.file_type().is_dir() {
        return Err(std::io::Error::other("not a directory"));
    }
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return Err(std::io::Error::other("not the edge's own"));
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
}

/// A process's directory, removed when it is released unless kept.
#[derive(Debug, Clone)]
pub struct Scratch {
    pub path: PathBuf,
    keep: bool,
}

impl Scratch {
    /// A directory for one process under `<root>/<pool>/`: `<key>-<n>`, new (a free `n`), or,
    /// kept across processes, `<key>` itself (made if missing).
    pub fn create(root: &Path, pool: &str, key: &str, keep: bool) -> std::io::Result<Scratch> {
        use std::os::unix::fs::DirBuilderExt;
        let pool_dir = root.join(pool);
        let private = |recursive: bool| {
            let mut b = std::fs::DirBuilder::new();
            b.recursive(recursive).mode(0o700);
            b
        };
        let failed = |p: &Path, e: std::io::Error| {
            std::io::Error::other(format!("scratch_dir {}: {e}", p.display()))
        };
        private(true)
            .create(&pool_dir)
            .map_err(|e| failed(&pool_dir, e))?;
        let path = if keep {
            let path = pool_dir.join(key);
            private(true).create(&path).map_err(|e| failed(&path, e))?;
            path
        } else {
            loop {
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let path = pool_dir.join(format!("{key}-{n}"));
                match private(false).create(&path) {
                    Ok(()) => break path,
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(failed(&path, e)),
                }
            }
        };
        owned(&path).map_err(|e| failed(&path, e))?;
        Ok(Scratch { path, keep })
    }

    /// The process has stopped: its directory goes, unless kept.
    pub fn release(&self) {
        if self.keep {
            return;
        }
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("stdio: cannot remove {}: {e}", self.path.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_and_keys_stay_in_their_directory() {
        let p = Place::principal("../../etc");
        assert_eq!(p.key, "etc");
        let p = Place::principal("0af7651916cd43dd8448eb211c80319c");
        let v = p.vars(None);
        assert_eq!(
            v.fill("{scratch}/m-{principal}{session}.json {x}"),
            "/m-0af7651916cd43dd8448eb211c80319c.json {x}"
        );
        let cmd = vec!["{principal}".to_string(), "--p={principal}".to_string()];
        assert_eq!(
            v.fill_all(&cmd),
            ["{principal}", "--p=0af7651916cd43dd8448eb211c80319c"],
            "the program is never rewritten"
        );
        let s = Place::session("a/b");
        assert!(s.key.starts_with("session-") && !s.key.contains('/'));
        assert_eq!(s.vars(None).fill("{session}"), "a/b");
    }

    #[test]
    fn a_directory_is_made_private_and_removed_unless_kept() {
        let root = std::env::temp_dir().join(format!("mcp-edge-scratch-{}", std::process::id()));
        let s = Scratch::create(&root, "pool", "k", false).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&s.path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let next = Scratch::create(&root, "pool", "k", false).unwrap();
        assert_ne!(s.path, next.path, "each process has its own");
        std::fs::write(s.path.join("f"), "x").unwrap();
        s.release();
        assert!(!s.path.exists() && next.path.exists());
        let kept = Scratch::create(&root, "pool", "k", true).unwrap();
        kept.release();
        assert!(kept.path.exists());
        assert_eq!(
            Scratch::create(&root, "pool", "k", true).unwrap().path,
            kept.path
        );
        let link = root.join("pool").join("l");
        std::os::unix::fs::symlink(&next.path, &link).unwrap();
        assert!(
            Scratch::create(&root, "pool", "l", true).is_err(),
            "a link is refused"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
