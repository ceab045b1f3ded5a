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
use mcp_edge::identity::policy::{self, Policy, Rule};
use mcp_edge::mcp::absent;
use mcp_edge::mcp::lists::{self, Filtered, ListFilter};
use mcp_edge::mcp::rewrite::Rewrite;
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
    let filter = ListFilter {
        shown: grant(),
        answering: answering.then(|| serde_json::json!(1)),
        on_hidden: None,
    };
    let mut rewrite = Rewrite::new(sse);
    rewrite.push(Box::new(filter));
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
    if let Filtered::Changed(out, _) = lists::filter_list(input, &g) {
        if serde_json::from_slice::<serde_json::Value>(input).is_ok() {
            serde_json::from_slice::<serde_json::Value>(&out).expect("still JSON");
        }
        assert_eq!(lists::filter_list(&out, &g), Filtered::Unchanged, "idempotent");
    }
    for sse in [false, true] {
        for answering in [false, true] {
            let whole = rewritten(input, input.len().max(1), sse, answering);
            assert_eq!(rewritten(input, step, sse, answering), whole, "split-independent");
        }
    }
    for method in ["tools/call", "resources/read", "completion/complete"] {
        if let Some(out) = absent::disguise(input, method) {
            if serde_json::from_slice::<serde_json::Value>(input).is_ok() {
                serde_json::from_slice::<serde_json::Value>(&out).expect("still JSON");
            }
        }
    }
    let _ = absent::restore_hidden(input);
    let _ = lists::filter_subscriptions(input, &g);
});
