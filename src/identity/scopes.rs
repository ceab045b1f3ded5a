//! The scopes a call needs (a route's `[[routes.scopes]]`): a `tools/call`, `prompts/get` or
//! `resources/read` naming an entry some rule lists needs every scope those rules require,
//! among the token's own (its `scope` or `scp` claim). Without them the caller gets 403
//! `insufficient_scope` naming what it has and what the call needs, and may come back with a
//! token that has them (step-up, as the 2026-07-28 authorization rules describe).

use wildmatch::WildMatch;

use super::policy::under;
use super::Principal;
use crate::mcp::target::Kind;

/// One `[[routes.scopes]]` entry.
#[derive(Debug)]
pub struct ScopeRule {
    pub tools: Vec<WildMatch>,
    pub prompts: Vec<WildMatch>,
    /// URI prefixes.
    pub resources: Vec<String>,
    pub require: Vec<String>,
}

impl ScopeRule {
    fn names(&self, kind: Kind, value: &str) -> bool {
        match kind {
            Kind::Tool => self.tools.iter().any(|p| p.matches(value)),
            Kind::Prompt => self.prompts.iter().any(|p| p.matches(value)),
            Kind::Resource => self.resources.iter().any(|p| under(p, value)),
        }
    }
}

/// A route's scope rules.
#[derive(Debug, Default)]
pub struct Scopes {
    pub rules: Vec<ScopeRule>,
}

impl Scopes {
    /// What a call naming `value` needs and `who` lacks: `None` when it has all it needs,
    /// else the scopes to ask for (what the token has and what the call needs, in that
    /// order, each once: a client asking for only the missing ones would lose the others).
    pub fn lacking(&self, who: Option<&Principal>, kind: Kind, value: &str) -> Option<Vec<String>> {
        let have: &[String] = who.map_or(&[], |p| &p.scopes);
        let mut needed = self
            .rules
            .iter()
            .filter(|r| r.names(kind, value))
            .flat_map(|r| r.require.iter())
            .peekable();
        needed.peek()?;
        let mut ask: Vec<String> = have.to_vec();
        let mut short = false;
        for scope in needed {
            if !have.contains(scope) {
                short = true;
                if !ask.contains(scope) {
                    ask.push(scope.clone());
                }
            }
        }
        short.then_some(ask)
    }

    /// Every scope some rule requires, each once (for the metadata document).
    pub fn all(&self) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        for scope in self.rules.iter().flat_map(|r| r.require.iter()) {
            if !all.contains(scope) {
                all.push(scope.clone());
            }
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scopes() -> Scopes {
        Scopes {
            rules: vec![
                ScopeRule {
                    tools: vec![WildMatch::new("deploy*")],
                    prompts: vec![],
                    resources: vec!["file:///secret/".into()],
                    require: vec!["deploy".into()],
                },
                ScopeRule {
                    tools: vec![WildMatch::new("deploy-prod")],
                    prompts: vec![WildMatch::new("audit")],
                    resources: vec![],
                    require: vec!["prod".into(), "deploy".into()],
                },
            ],
        }
    }

    fn who(scopes: &[&str]) -> Principal {
        Principal {
            issuer: "i".into(),
            subject: "s".into(),
            tenant: None,
            groups: vec![],
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_call_needs_every_scope_of_every_rule_naming_it() {
        let s = scopes();
        assert_eq!(s.lacking(Some(&who(&["read"])), Kind::Tool, "echo"), None);
        assert_eq!(
            s.lacking(Some(&who(&["read"])), Kind::Tool, "deploy"),
            Some(vec!["read".into(), "deploy".into()])
        );
        assert_eq!(
            s.lacking(Some(&who(&["deploy"])), Kind::Tool, "deploy"),
            None
        );
        assert_eq!(
            s.lacking(Some(&who(&["deploy"])), Kind::Tool, "deploy-prod"),
            Some(vec!["deploy".into(), "prod".into()])
        );
        assert_eq!(
            s.lacking(Some(&who(&["prod", "deploy"])), Kind::Tool, "deploy-prod"),
            None
        );
        assert_eq!(
            s.lacking(None, Kind::Prompt, "audit"),
            Some(vec!["prod".into(), "deploy".into()])
        );
        assert_eq!(
            s.lacking(Some(&who(&[])), Kind::Resource, "file:///secret/a"),
            Some(vec!["deploy".into()])
        );
        // A way out of the prefix is not under it (and needs nothing here; the policy
        // decides whether it may be read at all).
        assert_eq!(s.lacking(None, Kind::Resource, "file:///secret/../x"), None);
        assert_eq!(s.all(), vec!["deploy".to_string(), "prod".to_string()]);
    }
}
