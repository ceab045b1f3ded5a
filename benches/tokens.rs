//! Session token cost: seal and open, nanoseconds per operation (median of several batches).
//! Run with `cargo bench --bench tokens`. Not a test: numbers depend on the machine.

use std::hint::black_box;
use std::time::Instant;

use mcp_edge::session::token::{self, Claims};
use mcp_edge::session::{credential_digest, KeyRing};

const BATCH: usize = 100_000;
const BATCHES: usize = 7;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    // Under `cargo test` (a debug build) this runs as a smoke test of the harness.
    let quick = cfg!(debug_assertions) || std::env::args().any(|a| a == "--quick");
    let (batch, batches) = if quick { (1_000, 3) } else { (BATCH, BATCHES) };
    let ring = KeyRing::parse("2:ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=\n1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=").expect("ring");
    let claims = Claims {
        pool: "tools".into(),
        member: "10.0.0.12:3000".into(),
        upstream_id: "0b7a3c1e-5f0c-4e43-9d1c-2f8d5b9f6a10".into(),
        issued_at: 1_800_000_000,
        credential: credential_digest(Some(b"Bearer eyJhbGciOiJSUzI1NiJ9.example")),
        owner: None,
    };
    let sample = token::seal(&ring, &claims).expect("seal");

    let mut seal_ns = Vec::new();
    let mut open_ns = Vec::new();
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..batch {
            black_box(token::seal(&ring, black_box(&claims)).expect("seal"));
        }
        seal_ns.push(t.elapsed().as_nanos() as f64 / batch as f64);
        let t = Instant::now();
        for _ in 0..batch {
            black_box(token::open(&ring, black_box(&sample), 1_800_000_100, 86_400).expect("open"));
        }
        open_ns.push(t.elapsed().as_nanos() as f64 / batch as f64);
    }
    println!("token length: {} chars", sample.len());
    println!(
        "seal: {:.0} ns/op (median of {batches} x {batch})",
        median(seal_ns)
    );
    println!(
        "open: {:.0} ns/op (median of {batches} x {batch})",
        median(open_ns)
    );
}
