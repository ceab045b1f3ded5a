//! Policy filtering on any bytes: list answers, the streaming rewrite, disguised names.
//!
//! - A filtered list answer is JSON when the input was, and filtering it again changes
//!   nothing (every entry left is one the grant allows).
//! - The message rewrite gives the same bytes however the answer is split (JSON and SSE;
//!   answering a list request and filtering a stream).
//! - Renaming hidden entries keeps a JSON body JSON; putting names back never panics.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use mcp_edge::identity::policy::{self, Filtered, Policy, Rule};
use mcp_edge::proxy::rewrite::{ListFilter, Rewrite};
use wildmatch::WildMatch;

fn grant() -> policy::Grant {
    Policy {
        rules: vec![Arc::new(Rule {
            name: "r".into(),
            subjects: vec![],
            tenants: vec![],
            groups: vec![],
            tools: vec![WildMatch::new("a*")],
            prompts: vec![WildMatch::new("*")],
            resources: vec!["file:///a/".into()],
        })],
    }
    .grant(None)
}

fn rewritten(input: &[u8], step: usize, sse: bool, answering: bool) -> Vec<u8> {
    let content_type: &[u8] = if sse {
        b"text/event-stream"
    } else {
        b"application/json"
    };
    let filter = ListFilter {
        grant: grant(),
        answering: answering.then(|| serde_json::json!(1)),
        hidden: 0,
    };
    let Some(mut rewrite) = Rewrite::new(Some(content_type), None, Some(filter)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for chunk in input.chunks(step) {
        out.extend_from_slice(&rewrite.feed(chunk));
    }
    out.extend_from_slice(&rewrite.finish());
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&step, input)) = data.split_first() else {
        return;
    };
    let step = (step as usize % 13) + 1;
    let g = grant();
    if let Filtered::Changed(out, _) = policy::filter_list(input, &g) {
        if serde_json::from_slice::<serde_json::Value>(input).is_ok() {
            serde_json::from_slice::<serde_json::Value>(&out).expect("still JSON");
        }
        assert_eq!(policy::filter_list(&out, &g), Filtered::Unchanged, "idempotent");
    }
    for sse in [false, true] {
        for answering in [false, true] {
            let whole = rewritten(input, input.len().max(1), sse, answering);
            assert_eq!(rewritten(input, step, sse, answering), whole, "split-independent");
        }
    }
    for method in ["tools/call", "resources/read", "completion/complete"] {
        if let Some(out) = policy::disguise(input, method) {
            if serde_json::from_slice::<serde_json::Value>(input).is_ok() {
                serde_json::from_slice::<serde_json::Value>(&out).expect("still JSON");
            }
        }
    }
    let _ = policy::restore_hidden(input);
    let _ = policy::filter_subscriptions(input, &g);
});
