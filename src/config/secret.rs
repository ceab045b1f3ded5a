//! A secret the configuration names by a `…_file` / `…_env` pair (a mounted Secret, or a
//! variable its Deployment sets): read at load, never from the configuration file itself.

/// Which of the pair named it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Which {
    File,
    Env,
}

impl Which {
    /// The key of the pair that named it, for messages (`keys`: the file's and the env's).
    pub(super) fn key(self, keys: [&'static str; 2]) -> &'static str {
        match self {
            Which::File => keys[0],
            Which::Env => keys[1],
        }
    }
}

/// The text of the one of `file` / `env` that is set (`None`: both or neither).
pub(super) fn read(
    file: &Option<String>,
    env: &Option<String>,
) -> Option<(Which, Result<String, String>)> {
    match (file, env) {
        (Some(path), None) => Some((
            Which::File,
            std::fs::read_to_string(path).map_err(|e| format!("cannot read '{path}': {e}")),
        )),
        (None, Some(var)) => Some((
            Which::Env,
            std::env::var(var).map_err(|_| format!("environment variable '{var}' is not set")),
        )),
        _ => None,
    }
}
