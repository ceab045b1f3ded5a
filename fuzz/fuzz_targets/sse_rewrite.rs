//! The SSE scanner and endpoint rewriter on any stream, split anywhere.
//!
//! - Rewriting nothing reproduces the stream exactly.
//! - With a rewrite, the output is the input with exactly one line replaced: the first `data:`
//!   line of the first endpoint event whose URL the rewrite accepted becomes `data: <new URL>`.
//!   So every byte before that line, the rest of that event and every later event are
//!   untouched (stronger than "bytes after the first rewritten event are untouched", and what
//!   src/mcp/sse.rs promises). The rewrite is asked nothing more once it has accepted a URL.
//! - Where the stream is split does not change the output, for streams within the rewriter's
//!   scan limit (past it, how far the scan got depends on the chunking, by design).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_edge::mcp::sse::{rewrite_endpoint_url, EndpointRewriter};

/// `MAX_SCAN_BYTES` in src/mcp/sse.rs: a stream no longer than this is never given up on.
const SCAN_LIMIT: usize = 64 * 1024;

/// A rewrite call: the endpoint URL the rewriter passed and what the rewrite returned.
type Call = (String, Option<String>);

/// The output for `stream` fed in chunks of `step` bytes, and every rewrite call made.
fn run(stream: &[u8], step: usize) -> (Vec<u8>, Vec<Call>) {
    let params = ["sessionId".to_string(), "session_id".to_string()];
    let mut calls = Vec::new();
    let mut swap = |url: &str| {
        let new = rewrite_endpoint_url(url, "/p", &params, &mut |v| Some(format!("T{v}")));
        calls.push((url.to_string(), new.clone()));
        new
    };
    let mut r = EndpointRewriter::new();
    let mut out = Vec::new();
    for chunk in stream.chunks(step) {
        out.extend_from_slice(&r.feed(chunk, &mut swap));
    }
    out.extend_from_slice(&r.finish());
    (out, calls)
}

/// Whether `output` is `input` with one whole line `data:<old>` or `data: <old>` (ending at a
/// CR or LF) replaced by `data: <new>`.
fn one_data_line_replaced(input: &[u8], output: &[u8], old: &str, new: &str) -> bool {
    let replacement = format!("data: {new}");
    let replacement = replacement.as_bytes();
    let common = input.iter().zip(output).take_while(|(a, b)| a == b).count();
    [format!("data: {old}"), format!("data:{old}")]
        .iter()
        .any(|original| {
            let original = original.as_bytes();
            (0..=common).any(|i| {
                let line_start = i == 0 || matches!(input[i - 1], b'\n' | b'\r');
                let after = i + original.len();
                line_start
                    && input[i..].starts_with(original)
                    && matches!(input.get(after), Some(b'\n' | b'\r'))
                    && output[i..].starts_with(replacement)
                    && input[after..] == output[i + replacement.len()..]
            })
        })
}

fuzz_target!(|data: &[u8]| {
    let Some((&step, stream)) = data.split_first() else {
        return;
    };
    let step = (step as usize % 17) + 1;

    // Identity: rewriting nothing reproduces the stream exactly.
    let mut r = EndpointRewriter::new();
    let mut out = Vec::new();
    for chunk in stream.chunks(step) {
        out.extend_from_slice(&r.feed(chunk, &mut |_| None));
    }
    out.extend_from_slice(&r.finish());
    assert_eq!(out, stream);

    // With a rewrite.
    let (out, calls) = run(stream, step);
    if stream.len() <= SCAN_LIMIT {
        let (whole, _) = run(stream, stream.len().max(1));
        assert_eq!(out, whole, "the output depends on the split (step {step})");
    }
    let accepted: Vec<usize> = (0..calls.len()).filter(|&i| calls[i].1.is_some()).collect();
    match accepted[..] {
        [] => assert_eq!(out, stream, "changed without an accepted rewrite"),
        [i] => {
            assert_eq!(i, calls.len() - 1, "asked again after a rewrite: {calls:?}");
            let (old, new) = (&calls[i].0, calls[i].1.as_deref().unwrap_or_default());
            assert!(
                one_data_line_replaced(stream, &out, old, new),
                "not exactly the data line {old:?} -> {new:?} changed:\n in: {:?}\nout: {:?}",
                String::from_utf8_lossy(stream),
                String::from_utf8_lossy(&out)
            );
        }
        _ => panic!("more than one rewrite accepted: {calls:?}"),
    }
});
