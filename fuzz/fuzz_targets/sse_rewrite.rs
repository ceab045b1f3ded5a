//! The SSE scanner and endpoint rewriter: any stream, split anywhere, must pass through
//! unchanged when nothing is rewritten, and never panic when something is.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_edge::sse::{rewrite_endpoint_url, EndpointRewriter};

fuzz_target!(|data: &[u8]| {
    let Some((&step, stream)) = data.split_first() else { return };
    let step = (step as usize % 17) + 1;
    // Identity: rewriting nothing reproduces the stream exactly.
    let mut r = EndpointRewriter::new();
    let mut out = Vec::new();
    for chunk in stream.chunks(step) {
        out.extend_from_slice(&r.feed(chunk, &mut |_| None));
    }
    out.extend_from_slice(&r.finish());
    assert_eq!(out, stream);
    // With a rewrite: no panic; bytes after the first rewritten event are untouched.
    let params = vec!["sessionId".to_string(), "session_id".to_string()];
    let mut r = EndpointRewriter::new();
    let mut swap = |url: &str| rewrite_endpoint_url(url, "/p", &params, &mut |v| Some(format!("T{v}")));
    for chunk in stream.chunks(step) {
        let _ = r.feed(chunk, &mut swap);
    }
    let _ = r.finish();
});
