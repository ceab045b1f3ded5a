//! Tool, prompt and resource policy per route.
//!
//! A route's rules are read **in order and the first rule that matches the caller
//! decides** what it may see and use; a caller no rule matches may use nothing. A rule
//! matches when each of its `subjects`, `tenants` and `groups` lists that is not empty
//! names the caller (any of its entries); a rule with none of them matches everyone,
//! anonymous callers included (the only rules they can match).
//!
//! The decision is enforced twice (`proxy/stages/policy.rs`, with the wire work in
//! [`crate::mcp::lists`]): list answers (`tools/list`, `prompts/list`, `resources/list`,
//! `resources/templates/list`) lose the entries it hides, and requests naming a hidden entry
//! are answered by the edge as the server answers an absent one and never forwarded.

use std::sync::Arc;

use wildmatch::WildMatch;

use super::Principal;
use crate::mcp::lists::Visibility;
use crate::mcp::target::Kind;

#[derive(Debug)]
pub struct Rule {
    /// The `rule` label of the refusal metric (`rule-N` when unnamed).
    pub name: String,
    pub subjects: Vec<String>,
    pub tenants: Vec<String>,
    pub groups: Vec<String>,
    pub tools: Vec<WildMatch>,
    pub prompts: Vec<WildMatch>,
    /// URI prefixes.
    pub resources: Vec<String>,
}

impl Rule {
    /// Matches everyone (no subject, tenant or group condition).
    pub fn is_catch_all(&self) -> bool {
        self.subjects.is_empty() && self.tenants.is_empty() && self.groups.is_empty()
    }

    fn matches(&self, who: Option<&Principal>) -> bool {
        if self.is_catch_all() {
            return true;
        }
        let Some(p) = who else {
            return false;
        };
        (self.subjects.is_empty() || self.subjects.contains(&p.subject))
            && (self.tenants.is_empty()
                || p.tenant.as_ref().is_some_and(|t| self.tenants.contains(t)))
            && (self.groups.is_empty() || p.groups.iter().any(|g| self.groups.contains(g)))
    }
}

/// A route's rules, in order.
#[derive(Debug, Default)]
pub struct Policy {
    pub rules: Vec<Arc<Rule>>,
}

/// The label of refusals no rule decided.
pub const NO_RULE: &str = "no-rule";

impl Policy {
    pub fn grant(&self, who: Option<&Principal>) -> Grant {
        Grant(self.rules.iter().find(|r| r.matches(who)).cloned())
    }
}

/// What one caller may use on one route: the rule that matched it, if any.
#[derive(Debug, Clone)]
pub struct Grant(Option<Arc<Rule>>);

impl Grant {
    pub fn rule(&self) -> &str {
        self.0.as_ref().map_or(NO_RULE, |r| r.name.as_str())
    }

    pub fn allows(&self, kind: Kind, value: &str) -> bool {
        let Some(rule) = &self.0 else {
            return false;
        };
        match kind {
            Kind::Tool => rule.tools.iter().any(|p| p.matches(value)),
            Kind::Prompt => rule.prompts.iter().any(|p| p.matches(value)),
            Kind::Resource => rule.resources.iter().any(|p| under(p, value)),
        }
    }

    /// A resource template is shown when every URI it can produce is under an allowed
    /// prefix: its literal head (up to the first `{`) must be.
    pub fn allows_template(&self, template: &str) -> bool {
        let head = template.split('{').next().unwrap_or("");
        let Some(rule) = &self.0 else {
            return false;
        };
        rule.resources
            .iter()
            .any(|p| head.len() >= p.len() && under(p, head))
    }
}

/// `uri` is under `prefix`, and the rest cannot climb out of it on a server that
/// normalises paths (no `.`/`..` segment, no encoded dot, slash or backslash).
pub(super) fn under(prefix: &str, uri: &str) -> bool {
    // URL parsers drop tabs and line breaks (`.\t./` becomes `..`): no control character or
    // space anywhere.
    if uri.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return false;
    }
    let Some(rest) = uri.strip_prefix(prefix) else {
        return false;
    };
    let lower = rest.to_ascii_lowercase();
    let climbs = lower.split(['/', '?', '#']).any(|s| s == "." || s == "..")
        || ["%2e", "%2f", "%5c", "\\"]
            .iter()
            .any(|b| lower.contains(b));
    !climbs
}

impl Visibility for Grant {
    fn shows(&self, kind: Kind, name: &str) -> bool {
        self.allows(kind, name)
    }
    fn shows_template(&self, template: &str) -> bool {
        self.allows_template(template)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str, tenants: &[&str], tools: &[&str], resources: &[&str]) -> Arc<Rule> {
        Arc::new(Rule {
            name: name.into(),
            subjects: vec![],
            tenants: tenants.iter().map(|s| s.to_string()).collect(),
            groups: vec![],
            tools: tools.iter().map(|p| WildMatch::new(p)).collect(),
            prompts: vec![WildMatch::new("p_*")],
            resources: resources.iter().map(|s| s.to_string()).collect(),
        })
    }

    fn who(tenant: &str) -> Principal {
        Principal {
            issuer: "i".into(),
            subject: "s".into(),
            tenant: Some(tenant.into()),
            groups: vec![],
            scopes: vec![],
        }
    }

    fn policy() -> Policy {
        Policy {
            rules: vec![
                rule("a", &["a"], &["a_*", "echo"], &["file:///a/"]),
                rule("b", &["b"], &["b_*"], &["file:///b/"]),
            ],
        }
    }

    #[test]
    fn the_first_matching_rule_decides_and_nobody_else_gets_anything() {
        let p = policy();
        let a = p.grant(Some(&who("a")));
        assert_eq!(a.rule(), "a");
        assert!(a.allows(Kind::Tool, "a_secret") && a.allows(Kind::Tool, "echo"));
        assert!(!a.allows(Kind::Tool, "b_secret"));
        assert!(a.allows(Kind::Resource, "file:///a/x.txt"));
        assert!(!a.allows(Kind::Resource, "file:///a/../b/x.txt"));
        assert!(!a.allows(Kind::Resource, "file:///a/%2e%2E/b/x.txt"));
        assert!(!a.allows(Kind::Resource, "file:///ab"));
        let nobody = p.grant(None);
        assert_eq!(nobody.rule(), NO_RULE);
        assert!(!nobody.allows(Kind::Tool, "echo"));
        assert!(!p.grant(Some(&who("c"))).allows(Kind::Tool, "echo"));
    }

    #[test]
    fn controls_and_spaces_never_match_a_prefix() {
        let a = policy().grant(Some(&who("a")));
        // URL parsers drop tabs and line breaks, then resolve the dot segments they leave.
        assert!(!a.allows(Kind::Resource, "file:///a/.\t./b/x"));
        assert!(!a.allows(Kind::Resource, "file:///a/.\n./b/x"));
        assert!(!a.allows(Kind::Resource, "file:///a/x y"));
        assert!(a.allows_template("file:///a/{n}") && !a.allows_template("file:///{n}"));
    }
}
