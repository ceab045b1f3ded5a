//! stdio pools on any bytes: the messages a client sends and a process writes.
//!
//! - A request numbered for a process stays one JSON line carrying the number as its id.
//! - Taking the 2026-07-28 envelope out of `_meta` and marking a 2025 result for a
//!   2026-07-28 client keep JSON JSON; a marked object result has a `resultType`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_edge::mcp::era::{mark_modern, strip_envelope};
use mcp_edge::mcp::message::{numbered, Message};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // What the edge writes is JSON when what it read was (serde_json reads some bodies as
    // raw values that it will not make a `Value` of, such as 1e999).
    let json = serde_json::from_str::<Value>(text).is_ok();
    if let Some(n) = numbered(text, 42) {
        assert!(!n.line.contains('\n') && !n.line.contains('\r'));
        if json {
            let v: Value = serde_json::from_str(&n.line).expect("a numbered request is JSON");
            assert_eq!(v["id"], 42, "{}", n.line);
        }
    }
    let Some(msg) = Message::parse(text) else {
        return;
    };
    if !json {
        let _ = strip_envelope(text, msg.params);
        let _ = mark_modern(text.to_string(), true);
        return;
    }
    // `None`: `params` repeats `_meta` (the request is refused).
    if let Some(stripped) = strip_envelope(text, msg.params) {
        let Ok(v) = serde_json::from_str::<Value>(&stripped) else {
            panic!("stripping broke JSON: {stripped}");
        };
        let meta = &v["params"]["_meta"];
        if let Some(m) = meta.as_object() {
            assert!(!m.keys().any(|k| k.starts_with("io.modelcontextprotocol/")));
        }
    }
    for cacheable in [false, true] {
        let marked = mark_modern(text.to_string(), cacheable);
        let v: Value = serde_json::from_str(&marked).expect("a marked answer is JSON");
        if let Some(result) = v.get("result").and_then(Value::as_object) {
            assert!(result.contains_key("resultType"), "{marked}");
        }
    }
});
