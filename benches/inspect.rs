//! Body inspection throughput (benchmark P5): validating a 1 MiB 2026-07-28 `tools/call`
//! (peek + header rules) in GB/s. Run with `cargo bench --bench inspect`.

use std::hint::black_box;
use std::time::Instant;

use http::HeaderMap;
use mcp_edge::mcp::rules::{check_post, VersionPolicy};

fn body(size: usize, nested: bool) -> Vec<u8> {
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;
    let mut args = String::new();
    if nested {
        // Many small values: a document as JSON structure rather than one string.
        let mut i = 0;
        args.push_str(r#"{"rows":["#);
        while args.len() < size - 400 {
            args.push_str(&format!(
                r#"{{"id":{i},"name":"row {i}","tags":["a","b"],"ok":true,"score":{i}.5}},"#
            ));
            i += 1;
        }
        args.pop();
        args.push_str("]}");
    } else {
        let pad = size - 300;
        args = format!(r#"{{"data":"{}"}}"#, "x".repeat(pad));
    }
    format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"digest","arguments":{args},{meta}}}}}"#).into_bytes()
}

fn main() {
    let quick = cfg!(debug_assertions) || std::env::args().any(|a| a == "--quick");
    let rounds = if quick { 3 } else { 200 };
    let mut headers = HeaderMap::new();
    headers.insert(
        "mcp-protocol-version",
        "2026-07-28".parse().expect("header"),
    );
    headers.insert("mcp-method", "tools/call".parse().expect("header"));
    headers.insert("mcp-name", "digest".parse().expect("header"));
    let policy = VersionPolicy::new(vec!["2026-07-28".into()]);
    for (label, nested) in [
        ("one 1 MiB string argument", false),
        ("1 MiB of nested JSON", true),
    ] {
        let b = body(1024 * 1024, nested);
        assert!(
            check_post(&headers, &b, &policy).is_ok(),
            "benchmark body must validate"
        );
        let mut rates = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            for _ in 0..rounds {
                black_box(check_post(black_box(&headers), black_box(&b), &policy)).ok();
            }
            rates.push((b.len() * rounds) as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
        rates.sort_by(|a, b| a.total_cmp(b));
        println!(
            "inspect {label} ({} bytes): {:.2} GB/s (median of 5 x {rounds})",
            b.len(),
            rates[2]
        );
    }
}
