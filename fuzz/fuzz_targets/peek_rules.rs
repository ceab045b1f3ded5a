//! JSON-RPC peek and the header/body rules on arbitrary bodies and routing header values.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_edge::mcp::rules::{check_post, VersionPolicy};

fuzz_target!(|data: &[u8]| {
    // First byte: how many of the next bytes form the Mcp-Name header value.
    let (split, rest) = match data.split_first() {
        Some((n, rest)) => ((*n as usize) % 64, rest),
        None => return,
    };
    let split = split.min(rest.len());
    let (name, body) = rest.split_at(split);
    let mut headers = http::HeaderMap::new();
    headers.insert("mcp-protocol-version", http::HeaderValue::from_static("2026-07-28"));
    headers.insert("mcp-method", http::HeaderValue::from_static("tools/call"));
    if let Ok(v) = http::HeaderValue::from_bytes(name) {
        headers.insert("mcp-name", v);
    }
    let policy = VersionPolicy::new(vec!["2026-07-28".into(), "2025-11-25".into()]);
    if let Err(rejection) = check_post(&headers, body, &policy) {
        // Every rejection renders as a JSON-RPC error body.
        let bytes = rejection.error.body(rejection.id.as_ref());
        assert!(bytes.starts_with(b"{"));
    }
    let _ = mcp_edge::mcp::peek::peek(body);
});
