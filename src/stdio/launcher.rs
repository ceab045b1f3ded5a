//! How a stdio server process starts: through the edge's own binary (`mcp-edge
//! __stdio-exec …`), which makes the process the leader of a session of its own, sets its
//! resource limits, then becomes the server (`execvp`: the same process id).
//!
//! Why a session: a server's descendants (a helper it started, in a process group of its
//! own or not) stay in its session unless they leave it with `setsid`, so the edge can stop
//! all of them (see [`super::tree`]); a process group alone misses a helper that made its
//! own. Why through the binary: the standard library starts a child in a new session only
//! with an unsafe `pre_exec` hook, and this crate forbids `unsafe`; the binary's own `main`
//! calls the safe `setsid`, `setrlimit` and `execvp` wrappers instead.
//!
//! The binary is found as the running program when it is `mcp-edge`, else next to it (test
//! binaries run from `target/<profile>/deps/`), or at `MCP_EDGE_STDIO_LAUNCHER`. Without it
//! the server runs in a process group of its own and without the limits (logged once).

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::LazyLock;

/// The hidden subcommand.
pub const SUBCOMMAND: &str = "__stdio-exec";

/// Limits and placement the launcher applies before it becomes the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Launch {
    /// `RLIMIT_NOFILE`.
    pub open_files: Option<u64>,
    /// `RLIMIT_CPU` (seconds): SIGXCPU at this many, SIGKILL a second later.
    pub cpu_seconds: Option<u64>,
}

/// The `mcp-edge` binary that launches servers, when there is one.
pub fn binary() -> Option<&'static PathBuf> {
    static FOUND: LazyLock<Option<PathBuf>> = LazyLock::new(|| {
        let found = find();
        if found.is_none() {
            log::warn!(
                "stdio pools: the mcp-edge binary was not found (set MCP_EDGE_STDIO_LAUNCHER); servers run in a process group of their own, and what they start outside it may outlive them"
            );
        }
        found
    });
    FOUND.as_ref()
}

fn find() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MCP_EDGE_STDIO_LAUNCHER") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    if exe.file_name().is_some_and(|n| n == "mcp-edge") {
        return Some(exe);
    }
    let dir = exe.parent()?;
    [
        dir.parent().map(|d| d.join("mcp-edge")),
        Some(dir.join("mcp-edge")),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.is_file())
}

/// The launcher's arguments for `command` (program first).
pub fn args(launch: &Launch, command: &[String]) -> Vec<String> {
    let mut out = vec![SUBCOMMAND.to_string()];
    if let Some(n) = launch.open_files {
        out.extend(["--open-files".to_string(), n.to_string()]);
    }
    if let Some(n) = launch.cpu_seconds {
        out.extend(["--cpu-seconds".to_string(), n.to_string()]);
    }
    out.push("--".to_string());
    out.extend(command.iter().cloned());
    out
}

/// The launcher itself (`mcp-edge __stdio-exec [--open-files N] [--cpu-seconds N] --
/// PROGRAM ARGS…`): a new session, the limits, then the program. Returns only on failure,
/// with the message for stderr (the edge logs the process's stderr).
pub fn exec(args: &[String]) -> String {
    let Some(split) = args.iter().position(|a| a == "--") else {
        return "mcp-edge __stdio-exec: no -- before the command".into();
    };
    let (options, command) = (&args[..split], &args[split + 1..]);
    if let Err(e) = nix::unistd::setsid() {
        return format!("mcp-edge __stdio-exec: setsid: {e}");
    }
    let mut i = 0;
    while i < options.len() {
        let value = options.get(i + 1).map(String::as_str).unwrap_or_default();
        let applied = match options[i].as_str() {
            "--open-files" => limit(nix::sys::resource::Resource::RLIMIT_NOFILE, value, 0),
            // The hard limit a second later: SIGXCPU first, which the edge counts.
            "--cpu-seconds" => limit(nix::sys::resource::Resource::RLIMIT_CPU, value, 1),
            other => Err(format!("unknown option {other}")),
        };
        if let Err(e) = applied {
            return format!("mcp-edge __stdio-exec: {e}");
        }
        i += 2;
    }
    let Ok(argv) = command
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()
    else {
        return "mcp-edge __stdio-exec: an argument holds a NUL byte".into();
    };
    let Some(program) = argv.first() else {
        return "mcp-edge __stdio-exec: no command".into();
    };
    // Rust's runtime ignores SIGPIPE, and an ignored signal stays ignored across exec: the
    // server (a shell pipeline in a wrapper, say) would not die of a closed pipe as a
    // server started anywhere else does. A handled signal is reset to its default by exec.
    let pipe = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    if let Err(e) = signal_hook::flag::register(signal_hook::consts::SIGPIPE, pipe) {
        return format!("mcp-edge __stdio-exec: SIGPIPE: {e}");
    }
    match nix::unistd::execvp(program, &argv) {
        Err(e) => format!("mcp-edge __stdio-exec: cannot run {}: {e}", command[0]),
        Ok(never) => match never {},
    }
}

/// Soft limit `value` (a number) for `resource`, the hard one `more` above it.
fn limit(resource: nix::sys::resource::Resource, value: &str, more: u64) -> Result<(), String> {
    let n: u64 = value
        .parse()
        .map_err(|_| format!("{value} is not a number"))?;
    nix::sys::resource::setrlimit(resource, n, n.saturating_add(more))
        .map_err(|e| format!("setrlimit {resource:?}: {e}"))
}
