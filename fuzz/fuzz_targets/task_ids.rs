//! The task-id scans (JSON and SSE) on any bytes, split anywhere.
//!
//! - Swapping nothing reproduces the input exactly.
//! - Where the input is split does not change the output.
//! - Nothing changes without a swap: when the swap was never asked, output = input.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use mcp_edge::mcp::task_ids::{JsonScan, SseScan};

fn json(input: &[u8], step: usize, swap: &mut dyn FnMut(&str) -> Option<String>) -> Vec<u8> {
    let mut scan = JsonScan::new();
    let mut out = BytesMut::new();
    for chunk in input.chunks(step) {
        scan.feed(chunk, &mut out, swap);
    }
    scan.finish(&mut out);
    out.to_vec()
}

fn sse(input: &[u8], step: usize, swap: &mut dyn FnMut(&str) -> Option<String>) -> Vec<u8> {
    let mut scan = SseScan::new();
    let mut out = Vec::new();
    for chunk in input.chunks(step) {
        out.extend_from_slice(&scan.feed(chunk, swap));
    }
    out.extend_from_slice(&scan.finish());
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&step, input)) = data.split_first() else {
        return;
    };
    let step = (step as usize % 13) + 1;
    let whole = input.len().max(1);
    type Run = fn(&[u8], usize, &mut dyn FnMut(&str) -> Option<String>) -> Vec<u8>;
    for run in [json as Run, sse as Run] {
        assert_eq!(run(input, step, &mut |_| None), input, "identity");
        let mut seen = Vec::new();
        let mut mark = |id: &str| {
            seen.push(id.to_string());
            Some(format!("<{}>", seen.len()))
        };
        let split = run(input, step, &mut mark);
        let mut again = 0;
        let unsplit = run(input, whole, &mut |_| {
            again += 1;
            Some(format!("<{again}>"))
        });
        assert_eq!(split, unsplit, "the output depends on the split (step {step})");
        if seen.is_empty() {
            assert_eq!(split, input, "changed without a swap");
        }
    }
});
