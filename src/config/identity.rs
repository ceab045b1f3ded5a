//! `[identity]` and each route's `auth`, `policy`, `scopes` and `rate_limit`, checked and built.
//! Besides errors, this finds rules and patterns that can never match (warnings: the
//! config still loads; `--check` prints them and fails).

use std::sync::Arc;
use std::time::Duration;

use wildmatch::WildMatch;

use super::file::{IdentitySection, JwtSection, PolicyRuleSection, RouteSection};
use super::Errors;
use crate::identity::jwks::{Jwks, JwksSource};
use crate::identity::jwt::{self, JwtSettings, Verifier};
use crate::identity::keys::ApiKeys;
use crate::identity::policy::{Policy, Rule};
use crate::identity::rate::{RateLimit, RateSettings};
use crate::identity::scopes::{ScopeRule, Scopes};
use crate::identity::{Access, AuthMode, Identity};

pub fn identity(section: Option<&IdentitySection>, errs: &mut Errors) -> Option<Arc<Identity>> {
    let s = section?;
    let verifier = s.jwt.as_ref().and_then(|j| verifier(j, errs));
    let keys = match &s.api_keys_file {
        Some(path) => ApiKeys::load(path)
            .map_err(|e| errs.push(format!("identity.{e}")))
            .ok(),
        None => None,
    };
    if s.jwt.is_none() && s.api_keys_file.is_none() {
        errs.push("identity: configure [identity.jwt], api_keys_file or both".to_string());
    }
    check_resource(s, errs);
    Some(Arc::new(Identity {
        jwt: verifier,
        keys,
        resource_metadata: s.resource_metadata.clone(),
        resource_origin: s.resource_origin.clone(),
        authorization_servers: s.authorization_servers.clone(),
        scopes: s.scopes.clone(),
        max_token_bytes: s.max_token_bytes.get(),
    }))
}

/// `[identity.jwt]`: the issuer, audiences, algorithms and the key set.
fn verifier(j: &JwtSection, errs: &mut Errors) -> Option<Verifier> {
    let at = "identity.jwt";
    if j.issuer.is_empty() {
        errs.push(format!("{at}.issuer: must not be empty"));
    }
    if j.audience.is_empty() || j.audience.iter().any(String::is_empty) {
        errs.push(format!(
            "{at}.audience: list at least one non-empty audience"
        ));
    }
    let mut algorithms = Vec::new();
    for name in &j.algorithms {
        match jwt::algorithm(name) {
            Ok(a) => algorithms.push(a),
            Err(e) => errs.push(format!("{at}.algorithms: {e}")),
        }
    }
    if j.algorithms.is_empty() {
        errs.push(format!("{at}.algorithms: list at least one"));
    }
    let source = match (&j.jwks_file, &j.jwks_url) {
        (Some(f), None) => JwksSource::File(f.clone()),
        (None, Some(u)) => JwksSource::Url {
            url: u.clone(),
            ca_file: j.jwks_ca_file.clone(),
            every: Duration::from_secs(j.jwks_refresh_seconds.get()),
            timeout: Duration::from_millis(j.jwks_timeout_ms.get()),
        },
        _ => {
            errs.push(format!("{at}: set exactly one of jwks_file and jwks_url"));
            return None;
        }
    };
    let jwks = Jwks::new(source)
        .map_err(|e| errs.push(format!("{at}: {e}")))
        .ok()?;
    Some(Verifier {
        settings: JwtSettings {
            issuer: j.issuer.clone(),
            audiences: j.audience.clone(),
            algorithms,
            leeway: Duration::from_secs(j.leeway_seconds),
            tenant_claim: j.tenant_claim.clone(),
            groups_claim: j.groups_claim.clone(),
        },
        jwks: Arc::new(jwks),
        cache: Default::default(),
    })
}

/// Where 401s point, and the origin clients use: absolute URLs.
fn check_resource(s: &IdentitySection, errs: &mut Errors) {
    if let Some(origin) = &s.resource_origin {
        let rest = origin
            .strip_prefix("https://")
            .or_else(|| origin.strip_prefix("http://"));
        if rest.is_none_or(|r| r.is_empty() || r.contains(['/', '?', '#', '"', ' '])) {
            errs.push(
                "identity.resource_origin: must be scheme://host[:port], without a path"
                    .to_string(),
            );
        }
    }
    if let Some(url) = &s.resource_metadata {
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            errs.push("identity.resource_metadata: must be an absolute http(s) URL".to_string());
        }
    }
}

/// A route's access settings; `warnings` gets what can never match.
pub fn access(
    r: &RouteSection,
    i: usize,
    identity: Option<&Identity>,
    errs: &mut Errors,
    warnings: &mut Vec<String>,
) -> Access {
    let at = format!("routes[{i}]");
    if r.auth != AuthMode::None && identity.is_none() {
        errs.push(format!(
            "{at}.auth: '{:?}' needs an [identity] section",
            r.auth
        ));
    }
    let policy = (!r.policy.is_empty()).then(|| Policy {
        rules: r
            .policy
            .iter()
            .enumerate()
            .map(|(n, rule)| Arc::new(build_rule(rule, n)))
            .collect(),
    });
    if let Some(p) = &policy {
        never_matching(r, &at, p, identity, warnings);
    }
    let rate = r.rate_limit.map(|l| {
        RateLimit::new(RateSettings {
            per_second: l.requests_per_second,
            burst: l.burst.unwrap_or(l.requests_per_second),
            per_tool: l
                .per_tool_requests_per_second
                .map(|rate| (rate, l.per_tool_burst.unwrap_or(rate))),
        })
    });
    Access {
        auth: r.auth,
        forward_credential: r.forward_credential.unwrap_or(r.auth == AuthMode::None),
        policy,
        absent_as: r.absent_as,
        rate,
        scopes: scopes(r, &at, errs),
    }
}

/// `[[routes.scopes]]`: only where the edge reads tokens, each rule naming what it guards
/// and at least one scope (a scope is a token of printable ASCII without `"` or `\`).
fn scopes(r: &RouteSection, at: &str, errs: &mut Errors) -> Option<Scopes> {
    if r.scopes.is_empty() {
        return None;
    }
    if r.auth == AuthMode::None {
        errs.push(format!(
            "{at}.scopes: needs auth = \"optional\" or \"required\" (the edge reads no token)"
        ));
    }
    for (n, rule) in r.scopes.iter().enumerate() {
        let here = format!("{at}.scopes[{n}]");
        if rule.tools.is_empty() && rule.prompts.is_empty() && rule.resources.is_empty() {
            errs.push(format!("{here}: names no tools, prompts or resources"));
        }
        if rule.require.is_empty() {
            errs.push(format!("{here}.require: names no scope"));
        }
        let bad = |s: &&String| {
            s.is_empty()
                || !s
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
        };
        if let Some(s) = rule.require.iter().find(bad) {
            errs.push(format!("{here}.require: '{s}' is not a scope token"));
        }
    }
    Some(Scopes {
        rules: r
            .scopes
            .iter()
            .map(|rule| ScopeRule {
                tools: rule.tools.iter().map(|p| WildMatch::new(p)).collect(),
                prompts: rule.prompts.iter().map(|p| WildMatch::new(p)).collect(),
                resources: rule.resources.clone(),
                require: rule.require.clone(),
            })
            .collect(),
    })
}

fn build_rule(r: &PolicyRuleSection, n: usize) -> Rule {
    Rule {
        name: r.name.clone().unwrap_or_else(|| format!("rule-{n}")),
        subjects: r.subjects.clone(),
        tenants: r.tenants.clone(),
        groups: r.groups.clone(),
        tools: r.tools.iter().map(|p| WildMatch::new(p)).collect(),
        prompts: r.prompts.iter().map(|p| WildMatch::new(p)).collect(),
        resources: r.resources.clone(),
    }
}

/// Rules and patterns that can never match.
fn never_matching(
    r: &RouteSection,
    at: &str,
    policy: &Policy,
    identity: Option<&Identity>,
    warnings: &mut Vec<String>,
) {
    let jwt = identity.and_then(|i| i.jwt.as_ref());
    let keys = identity.and_then(|i| i.keys.as_ref());
    let tenants_known = jwt.is_some_and(|j| j.settings.tenant_claim.is_some())
        || keys.is_some_and(|k| k.principals().any(|p| p.tenant.is_some()));
    let groups_known = jwt.is_some_and(|j| j.settings.groups_claim.is_some())
        || keys.is_some_and(|k| k.principals().any(|p| !p.groups.is_empty()));
    let mut catch_all: Option<&str> = None;
    for (n, (rule, section)) in policy.rules.iter().zip(&r.policy).enumerate() {
        let here = format!("{at}.policy[{n}] ({})", rule.name);
        if let Some(earlier) = catch_all {
            warnings.push(format!(
                "{here}: can never match: rule '{earlier}' before it matches every caller"
            ));
        }
        if !rule.is_catch_all() && r.auth == AuthMode::None {
            warnings.push(format!(
                "{here}: can never match: the route's auth is \"none\", so no caller has a subject, tenant or group"
            ));
        }
        if !rule.tenants.is_empty() && !tenants_known {
            warnings.push(format!(
                "{here}.tenants: can never match: identity.jwt has no tenant_claim and no API key has a tenant"
            ));
        }
        if !rule.groups.is_empty() && !groups_known {
            warnings.push(format!(
                "{here}.groups: can never match: identity.jwt has no groups_claim and no API key has groups"
            ));
        }
        never_matching_patterns(section, &here, warnings);
        if rule.is_catch_all() && catch_all.is_none() {
            catch_all = Some(&rule.name);
        }
    }
}

/// Tool, prompt and resource patterns of one rule that can never match an entry.
fn never_matching_patterns(section: &PolicyRuleSection, here: &str, warnings: &mut Vec<String>) {
    for p in &section.tools {
        let valid = p.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/' | b'*' | b'?')
        });
        if p.is_empty() || !valid || p.len() > 128 {
            warnings.push(format!(
                "{here}.tools: pattern '{p}' can never match a tool name (1-128 of A-Z a-z 0-9 _ - . /)"
            ));
        }
    }
    for p in &section.prompts {
        if p.is_empty() || p.trim() != p {
            warnings.push(format!("{here}.prompts: pattern '{p}' can never match"));
        }
    }
    for p in &section.resources {
        let scheme = p.split_once(':').map(|(s, _)| s);
        let ok = scheme.is_some_and(|s| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        });
        if !ok {
            warnings.push(format!(
                "{here}.resources: '{p}' is not a URI prefix (scheme:…) and can never match"
            ));
        } else if !p.ends_with('/') && !p.ends_with(':') {
            warnings.push(format!(
                "{here}.resources: '{p}' also covers '{p}-other…': end it with '/'"
            ));
        }
    }
}
