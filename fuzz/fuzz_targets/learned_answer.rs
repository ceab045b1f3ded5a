//! A server's answer to the edge's absent-entry probe, learned as a template and replayed
//! (`mcp::learned`): whatever a member answers, learning never panics, and a template it
//! keeps renders, for any id and any name, one valid JSON-RPC message carrying that id, with
//! no trace of the probe.
//!
//! The input's first byte picks the status (200, 400, 404, or another); the rest is the
//! answer's text, where `{ID}` and `{NAME}` stand for the probe's quoted id and its name (so
//! the fuzzer reaches answers that name the probe without guessing its random token).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_edge::mcp::learned::{Learned, Probe};
use mcp_edge::mcp::target::Kind;
use serde_json::{json, Value};

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let status = [200, 400, 404, 401, 500][usize::from(first) % 5];
    let probe = Probe::new(Kind::Tool, 0x0123_4567_89ab_cdef);
    let text = String::from_utf8_lossy(rest)
        .replace("{ID}", &format!("\"{}\"", probe.id))
        .replace("{NAME}", &probe.name);
    let Some(learned) = Learned::from_answer(&probe, status, &text) else {
        return;
    };
    assert!(matches!(learned.status, 200 | 400 | 404), "kept a {} answer", learned.status);
    let names = ["echo", "q\"\\\n", "", "é\u{2028}\0", "mcp-edge-absent-x"];
    for (i, id) in [json!(1), json!("a\"b"), Value::Null, json!(-7.5)].iter().enumerate() {
        let name = names[i % names.len()];
        let rendered = learned.render(id, name);
        let v: Value = serde_json::from_str(&rendered)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {rendered}"));
        assert_eq!(v.get("id"), Some(id), "the id: {rendered}");
        // Read in the decoded message (keys and strings): in the raw text an escape such as
        // `\u0000` before the answer's own "123…" would look like the token without being it.
        // An empty name joins the answer's own text on either side of its hole ("…0" + "" +
        // "123…abcdef"), which is not the probe's either; every other name here has a letter
        // no token has, so a token that is in the template shows in their renders.
        assert!(
            name.is_empty() || !decoded_mentions(&v, "0123456789abcdef"),
            "the probe's token leaked: {rendered}"
        );
    }
});

/// Whether any key or string in `v` contains `needle`.
fn decoded_mentions(v: &Value, needle: &str) -> bool {
    match v {
        Value::String(s) => s.contains(needle),
        Value::Array(items) => items.iter().any(|i| decoded_mentions(i, needle)),
        Value::Object(map) => map
            .iter()
            .any(|(k, i)| k.contains(needle) || decoded_mentions(i, needle)),
        _ => false,
    }
}
