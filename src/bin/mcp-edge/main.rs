//! `mcp-edge --config <file>` runs the edge; `--check <file>` validates a config;
//! `demo` starts the edge in front of two built-in MCP servers.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use mcp_edge::config::Config;

mod demo;

// jemalloc: fewer cycles per allocation than glibc malloc on the request path, and less
// resident memory per idle stream (measured in docs/benchmarks.md).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const USAGE: &str = "\
mcp-edge: an MCP-aware edge proxy

usage:
  mcp-edge demo [--port N]        start the edge in front of two built-in MCP servers
  mcp-edge --config <file>        run the edge
  mcp-edge --check <file>         validate a configuration file and exit
  mcp-edge doctor URL | --config <file>
                                  check MCP servers against the 2026-07-28 rules (doctor --help)
  mcp-edge --version | --help
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // A stdio server's start (src/stdio/launcher.rs): becomes the server, returns only on
    // failure; before anything else, so the server inherits nothing of the edge's.
    if args.first().map(String::as_str) == Some(mcp_edge::stdio::launcher::SUBCOMMAND) {
        eprintln!("{}", mcp_edge::stdio::launcher::exec(&args[1..]));
        return ExitCode::from(127);
    }
    if args.first().map(String::as_str) == Some("doctor") {
        return mcp_edge::doctor::main(&args[1..]);
    }
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["--check", file] => check(&PathBuf::from(file)),
        ["--config", file] => run(&PathBuf::from(file)),
        ["demo"] => demo::run(8080),
        ["demo", "--port", port] => match port.parse() {
            Ok(p) => demo::run(p),
            Err(_) => usage_error(&format!("--port: '{port}' is not a port number")),
        },
        ["--version"] => {
            println!("mcp-edge {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        ["--help"] | ["-h"] => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => usage_error("unrecognised arguments"),
    }
}

fn usage_error(msg: &str) -> ExitCode {
    eprintln!("mcp-edge: {msg}\n\n{USAGE}");
    ExitCode::from(2)
}

fn load(path: &Path) -> Result<Config, ExitCode> {
    Config::load(path).map_err(|errs| {
        eprintln!("mcp-edge: {} is not a valid configuration:", path.display());
        for e in errs {
            eprintln!("  - {e}");
        }
        ExitCode::FAILURE
    })
}

fn check(path: &Path) -> ExitCode {
    match load(path) {
        Ok(config) if !config.warnings.is_empty() => {
            eprintln!("mcp-edge: {} loads, but:", path.display());
            for w in &config.warnings {
                eprintln!("  - {w}");
            }
            ExitCode::FAILURE
        }
        Ok(_) => {
            println!("{}: ok", path.display());
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

fn run(path: &Path) -> ExitCode {
    let config = match load(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    // Pingora binds listeners inside each service's thread, where a failure is a panic that
    // leaves the process running without the listener: find out here, and stop.
    let addresses = config
        .startup
        .listeners
        .iter()
        .map(|l| l.address)
        .chain(config.startup.metrics);
    for address in addresses {
        if let Err(e) = std::net::TcpListener::bind(address) {
            eprintln!("mcp-edge: cannot listen on {address}: {e}");
            return ExitCode::FAILURE;
        }
    }
    let log = &config.startup.access_log;
    if let Err(e) = mcp_edge::ops::access_log::start(&log.output, log.queue_lines) {
        eprintln!("mcp-edge: access_log.output: cannot open {e}");
        return ExitCode::FAILURE;
    }
    let options = mcp_edge::Options {
        config_path: Some(path.to_path_buf()),
        signals: true,
    };
    let built = mcp_edge::build_server(config, options);
    let tracing = built.tracing;
    let signals = mcp_edge::ops::shutdown::Signals { drain: built.drain };
    built.server.run(pingora::server::RunArgs {
        shutdown_signal: Box::new(signals),
    });
    // The last requests' spans, still queued, are exported (within a bound).
    if let Some(tracing) = tracing {
        tracing.shutdown(std::time::Duration::from_secs(2));
    }
    // The servers the edge runs stop too (SIGTERM, then SIGKILL after their grace).
    mcp_edge::stdio::stop_all();
    // The last requests' lines, still queued, go out before the process ends.
    mcp_edge::ops::access_log::flush(std::time::Duration::from_secs(2));
    ExitCode::SUCCESS
}
