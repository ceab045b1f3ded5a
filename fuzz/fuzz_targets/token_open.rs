//! Session token opening: arbitrary text, and every mutation of a real token, must fail
//! closed (never panic, never open a token that was altered).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_edge::session::token::{open, seal, Claims};
use mcp_edge::session::KeyRing;
use std::sync::LazyLock;

static RING: LazyLock<KeyRing> =
    LazyLock::new(|| KeyRing::parse("2:ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=\n1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=").expect("ring"));
static TOKEN: LazyLock<String> = LazyLock::new(|| {
    let claims = Claims {
        pool: "main".into(),
        member: "127.0.0.1:3000".into(),
        upstream_id: "sid".into(),
        issued_at: 1_800_000_000,
        credential: None,
        owner: None,
    };
    seal(&RING, &claims).expect("seal")
});

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = open(&RING, text, 1_800_000_000, 86_400);
    }
    // XOR the real token with the input: only an all-zero mask may open.
    let mut t = TOKEN.as_bytes().to_vec();
    let mut changed = false;
    for (b, m) in t.iter_mut().zip(data) {
        changed |= *m != 0;
        *b ^= m;
    }
    if let Ok(s) = String::from_utf8(t) {
        let opened = open(&RING, &s, 1_800_000_000, 86_400);
        if changed && s != *TOKEN {
            assert!(opened.is_err(), "an altered token opened: {s}");
        }
    }
});
