//! `[[routes]]` and `[[passthrough]]`: every public path, the route it belongs to, and the
//! checks of a route against its pool and the other routes.

use std::collections::HashMap;
use std::sync::Arc;

use super::file::{PassthroughSection, RouteSection};
use super::{identity, Errors};
use crate::mcp::origin::OriginPolicy;
use crate::mcp::rules::VersionPolicy;
use crate::routing::{Pool, Source};
use crate::runtime::{Endpoint, EndpointKind, Route};

/// Every public path of every route, and whether any route admits legacy clients.
pub(super) fn routes(
    sections: &[RouteSection],
    pools: &HashMap<String, Arc<Pool>>,
    identity: Option<&crate::identity::Identity>,
    errs: &mut Errors,
    warnings: &mut Vec<String>,
) -> (HashMap<String, Endpoint>, bool) {
    let mut endpoints = HashMap::new();
    let mut any_legacy = false;
    if sections.is_empty() {
        errs.push("routes: at least one [[routes]] entry is required".to_string());
    }
    for (i, r) in sections.iter().enumerate() {
        check_route(r, i, errs);
        let accepted = r.versions.list().unwrap_or_default();
        any_legacy |= accepted.iter().any(|v| crate::mcp::is_legacy_version(v));
        check_against_pool(r, i, &accepted, pools.get(&r.pool).map(|p| &**p), errs);
        let Some(pool) = pools.get(&r.pool) else {
            errs.push(format!("routes[{i}].pool: unknown pool '{}'", r.pool));
            continue;
        };
        let mut versions = VersionPolicy::narrowed_by(accepted, pool.spoken.clone());
        versions.bridged = r.bridge_legacy;
        let access = identity::access(r, i, identity, errs, warnings);
        let route = Arc::new(Route {
            name: format!("{}{}", r.prefix, r.path),
            prefix: r.prefix.clone(),
            session_params: r.session_params.clone(),
            pool: pool.clone(),
            versions,
            origins: OriginPolicy::new(&r.allowed_origins),
            hosts: lower(&r.allowed_hosts),
            cors_max_age: r.cors_max_age_seconds,
            bridge: r.bridge_legacy,
            messages_path: r
                .messages_path
                .as_ref()
                .filter(|_| r.sse_path.is_some())
                .map(|m| format!("{}{}", r.prefix, m)),
            access,
            series: Default::default(),
        });
        for (path, kind) in public_paths(r) {
            if endpoints.contains_key(&path) {
                errs.push(format!(
                    "routes[{i}]: path '{path}' is already served by another route"
                ));
            }
            let route = route.clone();
            endpoints.insert(path, Endpoint::new(route, kind));
        }
    }
    (endpoints, any_legacy)
}

/// What a route's versions, HTTP+SSE paths, auth and bridging need of the route itself and
/// of its pool (`None`: unknown, reported by the caller).
fn check_against_pool(
    r: &RouteSection,
    i: usize,
    accepted: &[String],
    pool: Option<&Pool>,
    errs: &mut Errors,
) {
    let configured_legacy = accepted.iter().any(|v| crate::mcp::is_legacy_version(v));
    if r.sse_path.is_some() && !configured_legacy {
        errs.push(format!("routes[{i}].sse_path: HTTP+SSE is legacy, but the route's versions list no legacy revision"));
    }
    let stdio = pool.and_then(|p| match &p.source {
        Source::Stdio(spec) => Some(spec),
        _ => None,
    });
    let per_principal = stdio.is_some_and(|s| s.isolation == crate::stdio::Isolation::PerPrincipal);
    if per_principal && r.auth != crate::identity::AuthMode::Required {
        errs.push(format!("routes[{i}].auth: pool '{}' has a process per principal, so its routes need auth = \"required\" (else any Authorization value would start a process)", r.pool));
    }
    if stdio.is_some() && r.sse_path.is_some() {
        errs.push(format!("routes[{i}].sse_path: pool '{}' runs a stdio server, which serves Streamable HTTP only", r.pool));
    }
    if pool.is_none() || !r.bridge_legacy {
        return;
    }
    if !configured_legacy {
        errs.push(format!(
            "routes[{i}].bridge_legacy: the route's versions list no legacy revision to bridge"
        ));
    }
    if !accepted.iter().any(|v| v == crate::mcp::MODERN_VERSION) {
        errs.push(format!("routes[{i}].bridge_legacy: the route's versions must list {} (bridged requests are sent as such)", crate::mcp::MODERN_VERSION));
    }
}

fn lower(list: &[String]) -> Vec<String> {
    list.iter().map(|h| h.to_ascii_lowercase()).collect()
}

/// `[[passthrough]]` routes: exact paths join the route table (a clash with an MCP route is
/// an error); prefixes come back longest first.
pub(super) fn passthrough(
    sections: &[PassthroughSection],
    pools: &HashMap<String, Arc<Pool>>,
    endpoints: &mut HashMap<String, Endpoint>,
    errs: &mut Errors,
) -> Vec<(String, Endpoint)> {
    let mut prefixes: Vec<(String, Endpoint)> = Vec::new();
    for (i, p) in sections.iter().enumerate() {
        let (name, exact) = match (&p.path, &p.path_prefix) {
            (Some(path), None) => (path.clone(), true),
            (None, Some(prefix)) => (prefix.clone(), false),
            _ => {
                errs.push(format!(
                    "passthrough[{i}]: set exactly one of path and path_prefix"
                ));
                continue;
            }
        };
        if !name.starts_with('/') {
            errs.push(format!("passthrough[{i}]: '{name}' must start with '/'"));
        }
        check_origins(&p.allowed_origins, &format!("passthrough[{i}]"), errs);
        let Some(pool) = pools.get(&p.pool) else {
            errs.push(format!("passthrough[{i}].pool: unknown pool '{}'", p.pool));
            continue;
        };
        let endpoint = Endpoint::new(
            passthrough_route(p, &name, exact, pool),
            EndpointKind::Passthrough,
        );
        let covered: Vec<&String> = endpoints
            .iter()
            .filter(|(path, e)| {
                e.kind != EndpointKind::Passthrough && crate::runtime::covers(&name, path)
            })
            .map(|(path, _)| path)
            .collect();
        if !exact && !covered.is_empty() {
            errs.push(format!(
                "passthrough[{i}].path_prefix: '{name}' covers the MCP path {:?}: MCP requests must not bypass the MCP rules",
                covered
            ));
        }
        place(i, name, exact, endpoint, endpoints, &mut prefixes, errs);
    }
    prefixes.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    prefixes
}

/// A pass-through endpoint into the route table (exact) or the prefix list.
fn place(
    i: usize,
    name: String,
    exact: bool,
    endpoint: Endpoint,
    endpoints: &mut HashMap<String, Endpoint>,
    prefixes: &mut Vec<(String, Endpoint)>,
    errs: &mut Errors,
) {
    if exact {
        if endpoints.contains_key(&name) {
            errs.push(format!(
                "passthrough[{i}].path: '{name}' is already served by another route"
            ));
        }
        endpoints.insert(name, endpoint);
    } else {
        if prefixes.iter().any(|(p, _)| *p == name) {
            errs.push(format!(
                "passthrough[{i}].path_prefix: '{name}' is already used"
            ));
        }
        prefixes.push((name, endpoint));
    }
}

/// A pass-through route: requests forwarded as sent (`Authorization` included), no MCP rules.
fn passthrough_route(
    p: &PassthroughSection,
    name: &str,
    exact: bool,
    pool: &Arc<Pool>,
) -> Arc<Route> {
    Arc::new(Route {
        name: if exact {
            name.to_string()
        } else {
            format!("{name}*")
        },
        prefix: String::new(),
        session_params: Vec::new(),
        pool: pool.clone(),
        versions: VersionPolicy::new(Vec::new()),
        origins: OriginPolicy::new(&p.allowed_origins),
        hosts: lower(&p.allowed_hosts),
        cors_max_age: p.cors_max_age_seconds,
        bridge: false,
        messages_path: None,
        access: crate::identity::Access {
            forward_credential: true,
            ..Default::default()
        },
        series: Default::default(),
    })
}

fn check_origins(origins: &[String], at: &str, errs: &mut Errors) {
    for (j, o) in origins.iter().enumerate() {
        let web = o.starts_with("http://") || o.starts_with("https://");
        if o != "*" && o != "null" && !web {
            errs.push(format!(
                "{at}.allowed_origins[{j}]: '{o}' must be scheme://host[:port], 'null' or '*'"
            ));
        }
    }
}

/// The checks of one route that need no other section.
fn check_route(r: &RouteSection, i: usize, errs: &mut Errors) {
    let paths = [
        ("path", Some(&r.path)),
        ("sse_path", r.sse_path.as_ref()),
        ("messages_path", r.messages_path.as_ref()),
    ];
    for (key, value) in paths {
        if let Some(v) = value.filter(|v| !v.starts_with('/')) {
            errs.push(format!("routes[{i}].{key}: '{v}' must start with '/'"));
        }
    }
    if !r.prefix.is_empty() && (!r.prefix.starts_with('/') || r.prefix.ends_with('/')) {
        errs.push(format!(
            "routes[{i}].prefix: '{}' must start with '/' and not end with '/'",
            r.prefix
        ));
    }
    if r.sse_path.is_some() != r.messages_path.is_some() {
        errs.push(format!(
            "routes[{i}].sse_path: sse_path and messages_path go together"
        ));
    }
    let versions = match r.versions.list() {
        Ok(list) => list,
        Err(e) => {
            errs.push(format!("routes[{i}].versions: {e}"));
            Vec::new()
        }
    };
    if versions.is_empty() && r.versions.list().is_ok() {
        errs.push(format!(
            "routes[{i}].versions: must list at least one protocol version"
        ));
    }
    for (j, v) in versions.iter().enumerate().filter(|(_, v)| !is_revision(v)) {
        errs.push(format!(
            "routes[{i}].versions[{j}]: '{v}' is not a protocol revision (YYYY-MM-DD)"
        ));
    }
    check_origins(&r.allowed_origins, &format!("routes[{i}]"), errs);
}

/// The public paths a route serves, with the prefix.
fn public_paths(r: &RouteSection) -> Vec<(String, EndpointKind)> {
    let mut paths = vec![(r.path.clone(), EndpointKind::Streamable)];
    if let (Some(sse), Some(messages)) = (&r.sse_path, &r.messages_path) {
        paths.push((sse.clone(), EndpointKind::SseStream));
        // Python's SDK announces `/messages/`, TypeScript's `/messages`: accept both.
        let trimmed = messages.trim_end_matches('/');
        paths.push((trimmed.to_string(), EndpointKind::Messages));
        paths.push((format!("{trimmed}/"), EndpointKind::Messages));
    }
    paths
        .into_iter()
        .map(|(p, kind)| (format!("{}{p}", r.prefix), kind))
        .collect()
}

fn is_revision(v: &str) -> bool {
    let b = v.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}
