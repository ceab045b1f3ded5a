//! `mcp-edge doctor`: what an MCP server really does on the 2026-07-28 revision, checked from
//! outside, each finding with the rule it comes from and a one-line fix. `doctor URL` checks
//! one endpoint; `doctor --config FILE` every member of every pool of a configuration, then
//! what the configuration assumes that its servers contradict.
//!
//! The probes are harmless: the only tool, prompt or resource ever named is one no server has
//! (`mcp-edge-doctor-absent-…`), and a session a probe opens is deleted.

use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use crate::mcp::client;

mod config;
mod guards;
mod legacy;
mod modern;
mod prescribed;
mod probe;
mod reach;
mod results;
mod stdio;
mod stream;

pub use probe::Target;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    Pass,
    Warn,
    Fail,
    /// Not applicable to this server (no authorization, no HTTP+SSE…).
    Skip,
}

/// One check's finding.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub id: &'static str,
    pub status: Status,
    /// What was checked.
    pub title: &'static str,
    /// What was seen.
    pub detail: String,
    /// The spec section or SEP the check comes from.
    pub rule: &'static str,
    /// What to do about a WARN or FAIL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<&'static str>,
}

/// A finding's fixed parts: id, title, rule, fix.
pub struct Check {
    pub id: &'static str,
    pub title: &'static str,
    pub rule: &'static str,
    pub fix: &'static str,
}

impl Check {
    pub fn pass(&self, detail: impl Into<String>) -> Finding {
        self.finding(Status::Pass, detail)
    }
    pub fn warn(&self, detail: impl Into<String>) -> Finding {
        self.finding(Status::Warn, detail)
    }
    pub fn fail(&self, detail: impl Into<String>) -> Finding {
        self.finding(Status::Fail, detail)
    }
    pub fn skip(&self, detail: impl Into<String>) -> Finding {
        self.finding(Status::Skip, detail)
    }
    fn finding(&self, status: Status, detail: impl Into<String>) -> Finding {
        Finding {
            id: self.id,
            status,
            title: self.title,
            detail: detail.into(),
            rule: self.rule,
            fix: matches!(status, Status::Warn | Status::Fail).then_some(self.fix),
        }
    }
}

/// What the doctor was asked.
#[derive(Clone)]
struct Options {
    url: Option<String>,
    config: Option<String>,
    headers: Vec<(String, String)>,
    json: bool,
    timeout: Duration,
    listen_wait: Duration,
    sse_path: Option<String>,
    /// The `Host` to name (a pool's `host`, `--config`).
    host: Option<String>,
    /// How the member is reached (`--config`, an HTTPS pool).
    reach: probe::Reach,
}

pub const USAGE: &str = "\
  mcp-edge doctor URL [options]   check an MCP server (or an edge route) against the 2026-07-28 rules
  mcp-edge doctor --config FILE   check every member of every pool of a configuration
    -H, --header 'Name: value'    send this header with every probe (credentials); repeatable
    --json                        one JSON document instead of the table
    --timeout-ms N                the longest one probe may take (default 5000)
    --listen-ms N                 how long to wait for a keep-alive on subscriptions/listen (default 20000)
    --sse-path PATH               the HTTP+SSE endpoint to look for (default: /sse beside the URL)
  exit status: 0 nothing failed (warnings at most), 1 a check failed, 2 the doctor could not run,
               3 a server could not be reached at all (refused, DNS, TLS, timeout, reset)";

/// `mcp-edge doctor …` (`args` after `doctor`).
pub fn main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("usage:\n{USAGE}");
        return ExitCode::SUCCESS;
    }
    let opts = match options(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("mcp-edge doctor: {e}\n\nusage:\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mcp-edge doctor: {e}");
            return ExitCode::from(2);
        }
    };
    let reports = runtime.block_on(async {
        match (&opts.url, &opts.config) {
            (Some(url), None) => examine(url, &opts).await.map(|r| vec![r]),
            (None, Some(file)) => config::examine_file(file, &opts).await,
            _ => Err("give a URL or --config FILE".to_owned()),
        }
    });
    let reports = match reports {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mcp-edge doctor: {e}");
            return ExitCode::from(2);
        }
    };
    if opts.json {
        let doc = serde_json::json!({ "reports": reports });
        println!("{doc:#}");
    } else {
        for r in &reports {
            print!("{}", r.table());
        }
    }
    exit_status(&reports)
}

/// 1 when a reached server broke a rule, else 3 when one could not be reached, else 0.
fn exit_status(reports: &[Report]) -> ExitCode {
    let failed = |unreached: bool| {
        reports
            .iter()
            .flat_map(|r| &r.findings)
            .any(|f| f.status == Status::Fail && (f.id == REACH.id) == unreached)
    };
    if failed(false) {
        ExitCode::from(1)
    } else if failed(true) {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}

fn options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        url: None,
        config: None,
        headers: Vec::new(),
        json: false,
        timeout: Duration::from_secs(5),
        listen_wait: Duration::from_secs(20),
        sse_path: None,
        host: None,
        reach: probe::Reach::default(),
    };
    let mut it = args.iter();
    let millis = |v: Option<&String>, name: &str| -> Result<Duration, String> {
        v.and_then(|v| v.parse::<u64>().ok())
            .filter(|n| *n > 0)
            .map(Duration::from_millis)
            .ok_or_else(|| format!("{name} needs a number of milliseconds"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "-H" | "--header" => {
                let h = it.next().ok_or("--header needs 'Name: value'")?;
                let (k, v) = h
                    .split_once(':')
                    .ok_or_else(|| format!("--header '{h}' is not 'Name: value'"))?;
                o.headers.push((k.trim().to_owned(), v.trim().to_owned()));
            }
            "--json" => o.json = true,
            "--config" => o.config = Some(it.next().ok_or("--config needs a file")?.clone()),
            "--timeout-ms" => o.timeout = millis(it.next(), "--timeout-ms")?,
            "--listen-ms" => o.listen_wait = millis(it.next(), "--listen-ms")?,
            "--sse-path" => o.sse_path = Some(it.next().ok_or("--sse-path needs a path")?.clone()),
            url if !url.starts_with('-') && o.url.is_none() => o.url = Some(url.to_owned()),
            other => return Err(format!("unrecognised argument '{other}'")),
        }
    }
    Ok(o)
}

/// The findings for one endpoint.
#[derive(Debug, Serialize)]
pub struct Report {
    /// What was examined (a URL; for `--config`, which member of which pool).
    pub subject: String,
    pub findings: Vec<Finding>,
}

impl Report {
    fn table(&self) -> String {
        let mut out = format!("\n{}\n", self.subject);
        for f in &self.findings {
            let status = match f.status {
                Status::Pass => "PASS",
                Status::Warn => "WARN",
                Status::Fail => "FAIL",
                Status::Skip => "SKIP",
            };
            out.push_str(&format!(
                "  {status}  {:<22} {}: {}\n",
                f.id, f.title, f.detail
            ));
            if let Some(fix) = f.fix {
                out.push_str(&format!("        {:<22} fix: {fix} ({})\n", "", f.rule));
            }
        }
        let count = |s: Status| self.findings.iter().filter(|f| f.status == s).count();
        out.push_str(&format!(
            "  {} passed, {} warnings, {} failed, {} not applicable\n",
            count(Status::Pass),
            count(Status::Warn),
            count(Status::Fail),
            count(Status::Skip)
        ));
        out
    }
}

/// Every check against one endpoint.
async fn examine(url: &str, opts: &Options) -> Result<Report, String> {
    let mut target = Target::reaching(url, opts.headers.clone(), opts.timeout, &opts.reach)?;
    target.host.clone_from(&opts.host);
    if let Some(unreached) = unreached(&target).await {
        return Ok(Report {
            subject: url.to_owned(),
            findings: vec![unreached],
        });
    }
    let mut findings = modern::run(&target, opts.listen_wait).await;
    findings.extend(legacy::run(&target, opts.sse_path.as_deref()).await);
    findings.push(prescribed::framing(&target));
    Ok(Report {
        subject: url.to_owned(),
        findings,
    })
}

/// A name no server has, for the probes that must name something.
fn absent_name(kind: &str) -> String {
    use ring::rand::SecureRandom as _;
    let mut b = [0u8; 6];
    let _ = ring::rand::SystemRandom::new().fill(&mut b);
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("mcp-edge-doctor-absent-{kind}-{hex}")
}

pub const REACH: Check = Check {
    id: "reach",
    title: "the server answers",
    rule: "no answer, so no rule can be checked",
    fix: "check the URL, that the server runs and listens there, and what lies between (firewall, TLS, DNS)",
};

/// `None` when the server answers a POST (whatever it says); else a failed [`REACH`].
async fn unreached(t: &Target) -> Option<Finding> {
    let body = client::discover(r#""doctor-reach""#, client::DOCTOR);
    let headers = client::modern_headers("server/discover");
    match t.post(&body, "doctor-reach", &headers, true).await {
        Ok(_) => None,
        Err(cause) => Some(REACH.fail(cause)),
    }
}
