//! `mcp-edge doctor --config FILE`: every check against every member of every HTTP pool, on
//! the path of the first route that uses it; then what the configuration assumes and the
//! servers contradict, with the fix.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use super::probe::Target;
use super::{examine, Check, Finding, Options, Report, Status};
use crate::config::Config;
use crate::mcp::learned::{Learned, Probe};
use crate::mcp::target::Kind;
use crate::routing::{CheckKind, Pool, Source};
use crate::runtime::{EndpointKind, Route};

const LEGACY_ROUTE: Check = Check {
    id: "config-legacy",
    title: "a route accepting legacy clients has servers that speak a legacy revision",
    rule: "versions: legacy clients reach a modern-only pool only through the bridge",
    fix: "set bridge_legacy = true on the route, or list only 2026-07-28 in its versions",
};
const SSE_ROUTE: Check = Check {
    id: "config-sse-path",
    title: "the route's sse_path is served by its members",
    rule: "2024-11-05 HTTP+SSE: the edge forwards the GET stream to a member",
    fix: "remove sse_path from the route, or point it at the path the servers serve HTTP+SSE on",
};
const VERSIONS: Check = Check {
    id: "config-versions",
    title: "the route's modern versions are spoken by its members",
    rule: "versions: the route's list is narrowed to what the members speak",
    fix: "list only revisions the servers name in supportedVersions (or \"auto\")",
};
const ABSENT: Check = Check {
    id: "config-absent",
    title: "a policy route's servers' answers for absent entries can be learned",
    rule: "policy: a hidden entry is answered as the server answers an absent one (learned by the mcp check)",
    fix: "set absent_as on the route to the servers' SDK (typescript, typescript-v1, python)",
};

/// A route, and its Streamable HTTP and HTTP+SSE paths.
struct RouteUse {
    route: Arc<Route>,
    path: Option<String>,
    sse: Option<String>,
}

fn routes_of(config: &Config) -> BTreeMap<String, RouteUse> {
    let mut routes: BTreeMap<String, RouteUse> = BTreeMap::new();
    for (path, endpoint) in &config.runtime.endpoints {
        let entry = routes
            .entry(endpoint.route.name.clone())
            .or_insert_with(|| RouteUse {
                route: endpoint.route.clone(),
                path: None,
                sse: None,
            });
        match endpoint.kind {
            EndpointKind::Streamable => entry.path = Some(path.clone()),
            EndpointKind::SseStream => entry.sse = Some(path.clone()),
            _ => {}
        }
    }
    routes
}

/// A pool's members now (a DNS pool resolved once); `None` for a stdio pool.
async fn members_of(source: &Source) -> Option<Vec<SocketAddr>> {
    match source {
        Source::Static(addrs) => Some(addrs.clone()),
        Source::Dns { name, .. } => Some(
            tokio::net::lookup_host(name.as_str())
                .await
                .map(Iterator::collect)
                .unwrap_or_default(),
        ),
        Source::Stdio(_) => None,
    }
}

const RESOLVED: Check = Check {
    id: "config-dns",
    title: "the pool's DNS name resolves to members",
    rule: "[[pools]] dns: re-resolved every dns_interval_ms",
    fix: "check the headless Service's name and that its pods are ready",
};

/// A route's public path as its members serve it: without the route's `prefix`.
fn member_path(route: &Route, public: &str) -> String {
    match public.strip_prefix(route.prefix.as_str()) {
        Some(rest) if rest.starts_with('/') => rest.to_owned(),
        _ => public.to_owned(),
    }
}

/// What the edge in front answers for the member on every request (Origin, header
/// mirroring; with `mcp` checks an unsupported version): a member's failure there is not the
/// deployment's.
fn covered_by_the_edge(report: &mut Report, learns: bool) {
    for f in &mut report.findings {
        let covered = matches!(f.id, "origin" | "header-mirroring")
            || (learns && f.id == "unsupported-version");
        if covered && f.status == Status::Fail {
            f.status = Status::Skip;
            f.detail = format!(
                "the edge in front answers this (the member alone: {})",
                f.detail
            );
            f.fix = None;
        }
    }
}

/// One report per member, then one for the configuration.
pub async fn examine_file(file: &str, opts: &Options) -> Result<Vec<Report>, String> {
    let config = Config::load(Path::new(file))
        .map_err(|errs| format!("{file} is not a valid configuration: {}", errs.join("; ")))?;
    let routes = routes_of(&config);
    let mut reports = Vec::new();
    let mut contradictions = Vec::new();
    let mut names: Vec<&String> = config.runtime.pools.keys().collect();
    names.sort();
    for name in names {
        let pool = &config.runtime.pools[name];
        // The MCP routes over the pool (a `[[passthrough]]` has no Streamable path).
        let using: Vec<&RouteUse> = routes
            .values()
            .filter(|u| u.route.pool.name == *name && u.path.is_some())
            .collect();
        let Some(first) = using.first() else {
            continue;
        };
        // What the members serve: the public path without the route's prefix.
        let path = member_path(&first.route, first.path.as_deref().unwrap_or("/mcp"));
        let sse = first.sse.as_deref().map(|s| member_path(&first.route, s));
        let Some(members) = members_of(&pool.source).await else {
            if let Source::Stdio(spec) = &pool.source {
                reports.push(Report {
                    subject: format!("pool {name} (stdio): {}", spec.command.join(" ")),
                    findings: super::stdio::examine(spec, opts.timeout).await,
                });
            }
            continue;
        };
        if members.is_empty() {
            reports.push(Report {
                subject: format!("pool {name}"),
                findings: vec![RESOLVED.fail("its DNS name resolves to no member now")],
            });
            continue;
        }
        let mut options = opts.clone();
        options.host.clone_from(&pool.host);
        options.sse_path = sse;
        let (found, contradicted) =
            examine_members(name, pool, &members, &path, &using, &options).await?;
        reports.extend(found);
        contradictions.extend(contradicted);
    }
    reports.push(Report {
        subject: format!("{file}: what the configuration assumes"),
        findings: contradictions,
    });
    Ok(reports)
}

/// Each member of `pool` examined on `path`, and what the routes `using` it assume that
/// they contradict.
async fn examine_members(
    name: &str,
    pool: &Pool,
    members: &[SocketAddr],
    path: &str,
    using: &[&RouteUse],
    options: &Options,
) -> Result<(Vec<Report>, Vec<Finding>), String> {
    let learns = matches!(pool.health.check, CheckKind::Mcp { .. });
    let (mut reports, mut contradictions) = (Vec::new(), Vec::new());
    for &addr in members {
        // An HTTPS member is reached by the name its certificate is checked against (the
        // pool's `sni`, else its `host`), resolved to the member's address.
        let mut options = options.clone();
        let url = match (
            &pool.tls,
            pool.tls
                .as_ref()
                .and_then(|t| t.sni.clone())
                .or_else(|| pool.host.clone()),
        ) {
            (Some(tls), Some(name)) => {
                options.reach.resolve = Some((name.clone(), addr));
                options.reach.insecure = !tls.verify;
                format!("https://{name}:{}{path}", addr.port())
            }
            (Some(tls), None) => {
                options.reach.insecure = !tls.verify;
                format!("https://{addr}{path}")
            }
            (None, _) => format!("http://{addr}{path}"),
        };
        let options = &options;
        let mut report = examine(&url, options).await?;
        report.subject = format!("pool {name}, member {addr}: {url}");
        covered_by_the_edge(&mut report, learns);
        for u in using {
            let sse = u.sse.as_deref().map(|s| member_path(&u.route, s));
            let found = contradict(
                &u.route,
                sse.as_deref(),
                &report,
                (&url, addr),
                options,
                learns,
            )
            .await;
            contradictions.extend(found);
        }
        reports.push(report);
    }
    Ok((reports, contradictions))
}

/// What `route` assumes of the member at `url` that its report contradicts; `learns`: the
/// pool has `mcp` checks.
async fn contradict(
    route: &Route,
    sse: Option<&str>,
    report: &Report,
    (url, addr): (&str, SocketAddr),
    opts: &Options,
    learns: bool,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let at = format!("route {} over {addr}", route.name);
    let status = |id: &str| report.findings.iter().find(|f| f.id == id);
    let legacy = status("legacy-initialize").filter(|f| f.status == Status::Pass);
    if route.versions.configured_legacy() && !route.bridge {
        match legacy {
            Some(f) if f.detail.starts_with("refused") => out.push(LEGACY_ROUTE.warn(format!(
                "{at}: the route accepts legacy clients; the server refuses legacy initialize, so they get -32022"
            ))),
            Some(_) => out.push(LEGACY_ROUTE.pass(format!("{at}: the server serves legacy"))),
            None => {}
        }
    }
    if let Some(path) = sse {
        let served = status("http-sse").is_some_and(|f| f.status != Status::Skip);
        out.push(if served {
            SSE_ROUTE.pass(format!("{at}: {path} is served"))
        } else {
            SSE_ROUTE.fail(format!("{at}: sse_path {path} is not served by the member"))
        });
    }
    let Ok(mut target) = Target::reaching(url, opts.headers.clone(), opts.timeout, &opts.reach)
    else {
        return out;
    };
    target.host.clone_from(&opts.host);
    out.extend(versions_spoken(route, &target, &at).await);
    if route.access.policy.is_some() && route.access.absent_as.is_none() {
        out.push(if learns {
            learnable(&target, &at).await
        } else {
            ABSENT.warn(format!("{at}: the pool's check is not mcp: nothing is learned, the catalogue (typescript) answers"))
        });
    }
    out
}

/// Whether the route's modern versions are what the member names in `supportedVersions`.
async fn versions_spoken(route: &Route, target: &Target, at: &str) -> Option<Finding> {
    let r = target
        .modern("doctor-config-discover", "server/discover", json!({}), &[])
        .await
        .ok()?;
    let spoken: Vec<String> = r
        .result()
        .and_then(|x| x.get("supportedVersions"))
        .and_then(Value::as_array)
        .map(|v| {
            v.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if spoken.is_empty() {
        return None;
    }
    let unspoken: Vec<&String> = route
        .versions
        .accepted
        .iter()
        .filter(|v| !crate::mcp::is_legacy_version(v) && !spoken.contains(v))
        .collect();
    Some(if unspoken.is_empty() {
        VERSIONS.pass(format!("{at}: {}", spoken.join(", ")))
    } else {
        VERSIONS.warn(format!(
            "{at}: the route lists {unspoken:?}, the server speaks {spoken:?}"
        ))
    })
}

/// Whether a probe for an absent tool is answered in a shape the edge can learn.
async fn learnable(t: &Target, at: &str) -> Finding {
    let discover = t
        .modern("doctor-config-identity", "server/discover", json!({}), &[])
        .await;
    let named = discover.as_ref().ok().and_then(|r| {
        r.result()?
            .pointer("/_meta/io.modelcontextprotocol~1serverInfo")
            .cloned()
    });
    if named.is_none() {
        // (A legacy-only server says who it is to initialize: the edge learns in a session.)
        let legacy_only = discover.as_ref().is_ok_and(|r| r.result().is_none());
        if !legacy_only {
            return ABSENT.warn(format!(
                "{at}: server/discover names no serverInfo: nothing is learned, the catalogue (typescript) answers"
            ));
        }
    }
    let probe = Probe::new(Kind::Tool, 0x5eed);
    let params = json!({"name": probe.name, "arguments": {}});
    match t.modern(&probe.id, "tools/call", params, &[]).await {
        Ok(r) => match r.message.as_ref().map(Value::to_string) {
            Some(text) if Learned::from_answer(&probe, r.status, &text).is_some() => {
                ABSENT.pass(format!("{at}: learnable"))
            }
            _ => ABSENT.warn(format!(
                "{at}: {}: the catalogue (typescript) would answer",
                r.brief()
            )),
        },
        Err(e) => ABSENT.warn(format!("{at}: {e}")),
    }
}
