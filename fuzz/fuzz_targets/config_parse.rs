//! The configuration parser and validator on arbitrary text.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        // Keep fuzzed configs from reading arbitrary files through keys_file.
        if text.contains("keys_file") {
            return;
        }
        let _ = mcp_edge::config::Config::parse(text);
    }
});
