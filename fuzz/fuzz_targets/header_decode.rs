//! Routing header value decoding (plain and `=?base64?…?=`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_edge::mcp::headers::decode_value;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = decode_value(data) {
        // A decoded value never keeps surrounding optional whitespace unless base64 said so.
        let plain = !data.trim_ascii().starts_with(b"=?base64?");
        if plain {
            assert_eq!(v.trim_matches([' ', '\t']), v.as_ref());
        }
    }
});
