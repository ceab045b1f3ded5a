//! Everything mcp-edge knows about the Model Context Protocol wire format: every module that
//! reads or writes JSON-RPC, MCP or SSE bytes. They take bytes and values, never a Pingora
//! session or the request context; `README.md` beside this file has the table of modules and
//! the rules they share (eras, duplicate keys, byte-exact edits, what bridges).
//!
//! Here: the revisions the edge knows, and the bounded labels of methods and eras.

pub mod absent;
pub mod answer;
pub mod client;
pub mod era;
pub mod headers;
pub mod json;
pub mod jsonrpc;
pub mod learned;
pub mod lists;
pub mod media;
pub mod message;
pub mod origin;
pub mod outcome;
pub mod peek;
pub mod query;
pub mod rewrite;
pub mod rules;
pub mod sse;
pub mod target;
pub mod task_ids;
pub mod versions;

use strum::{EnumIter, IntoStaticStr};

/// The modern revision: stateless, every request self-contained.
pub const MODERN_VERSION: &str = "2026-07-28";

/// The newest legacy revision: what the edge's own `initialize` asks for, and what it assumes
/// when an answer names none.
pub const LATEST_LEGACY: &str = "2025-11-25";

/// The revision of the HTTP+SSE transport (deprecated since 2025-03-26).
pub const HTTP_SSE_VERSION: &str = "2024-11-05";

/// Revisions that use `initialize` and (optionally) sessions.
pub const LEGACY_VERSIONS: &[&str] = &[LATEST_LEGACY, "2025-06-18", "2025-03-26", HTTP_SSE_VERSION];

/// Every revision mcp-edge knows, newest first.
pub fn revisions() -> impl Iterator<Item = &'static str> {
    std::iter::once(MODERN_VERSION).chain(LEGACY_VERSIONS.iter().copied())
}

pub fn is_legacy_version(v: &str) -> bool {
    LEGACY_VERSIONS.contains(&v)
}

/// The `era` label: which protocol generation a request belongs to (`unknown` before the
/// edge could tell).
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum EraLabel {
    Modern,
    Legacy,
    Unknown,
}

/// MCP methods a metric may be labelled with; anything else is `other`, so a client cannot
/// create unbounded series.
pub const KNOWN_METHODS: &[&str] = &[
    "server/discover",
    "initialize",
    "notifications/initialized",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "subscriptions/listen",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "tasks/list",
    "tasks/result",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
    "sampling/createMessage",
    "elicitation/create",
    "roots/list",
];

/// Where a method label sits among the labels [`method_label`] gives: `KNOWN_METHODS` in
/// order, then `none`, then `other` (indexes per-route metric handles).
pub fn method_index(label: &str) -> usize {
    KNOWN_METHODS
        .iter()
        .position(|k| std::ptr::eq(*k, label) || *k == label)
        .unwrap_or(match label {
            "none" => KNOWN_METHODS.len(),
            _ => KNOWN_METHODS.len() + 1,
        })
}

/// How many values [`method_index`] can return.
pub const METHOD_LABELS: usize = KNOWN_METHODS.len() + 2;

/// Bounded metric label for a JSON-RPC method.
pub fn method_label(method: Option<&str>) -> &'static str {
    match method {
        None => "none",
        Some(m) => KNOWN_METHODS
            .iter()
            .find(|k| **k == m)
            .copied()
            .unwrap_or("other"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_label_has_its_own_handle_index() {
        let labels: Vec<&str> = KNOWN_METHODS
            .iter()
            .map(|m| method_label(Some(m)))
            .chain([method_label(None), method_label(Some("x/unknown"))])
            .collect();
        let mut seen: Vec<usize> = labels.iter().map(|l| method_index(l)).collect();
        assert!(seen.iter().all(|i| *i < METHOD_LABELS), "{seen:?}");
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), METHOD_LABELS, "indexes collide: {labels:?}");
        // A label equal in content but not the same string still finds its slot.
        assert_eq!(method_index(&String::from("tools/call")), 5);
    }
}
