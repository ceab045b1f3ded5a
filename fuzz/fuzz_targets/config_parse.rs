//! The configuration parser and validator on arbitrary text, `sessions.keys_file` included.
//!
//! `Config::parse` reads the file that `keys_file` names. A fuzzed path could name anything:
//! `/dev/zero` or `/proc/kcore` would exhaust memory, `/dev/stdin` or a FIFO would hang, and a
//! fuzzer has no business reading arbitrary files. So instead of skipping such inputs, every
//! `keys_file = <string>` is rewritten to name one of three files this target owns, in a
//! private directory under the temporary directory: a valid key ring, an invalid one, or a
//! missing file (which one follows from the original value, so the fuzzer reaches all three
//! branches). The rest of the input is parsed as it is.
//!
//! Why the rewrite catches every way TOML can name the key: a key is a bare key (literal
//! text), a literal-string key (literal text) or a basic-string key, whose only escapes that
//! can yield a key character are `\uXXXX`, `\UXXXXXXXX` (and `\xHH` in TOML 1.1). Those are
//! decoded first (to a fixed point, so decoding cannot assemble a new escape), after which a
//! key equal to `keys_file` is spelled `keys_file` in the text. A string value whose end the
//! rewrite cannot find (TOML would reject it, or the text is in a comment) is replaced up to
//! the end of its line, so no input is skipped and no `keys_file` string escapes the rewrite.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::LazyLock;

const KEY: &str = "keys_file";

/// The only files a fuzzed config may name: [valid ring, invalid ring, missing file].
static FILES: LazyLock<[String; 3]> = LazyLock::new(|| {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("mcp-edge-fuzz-config-parse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the fuzz key directory");
    let ok = dir.join("ring-ok");
    let bad = dir.join("ring-bad");
    std::fs::write(
        &ok,
        "2:ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=\n1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n",
    )
    .expect("write ring-ok");
    std::fs::write(&bad, "1:c2hvcnQ=\n").expect("write ring-bad");
    let missing = dir.join("missing");
    let _ = std::fs::remove_file(&missing);
    [ok, bad, missing].map(|p| {
        let s = p.to_str().expect("a UTF-8 temporary directory").to_string();
        // Written into the config as a TOML literal string, after the escapes were decoded
        // and the key was searched for: it must not end that string or spell the key.
        assert!(
            !s.contains(['\'', '\\', '\n', '\r']) && !s.contains(KEY),
            "unusable temporary directory {s:?}"
        );
        s
    })
});

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let text = confine_keys_file(&decode_key_escapes(text));
    let _ = mcp_edge::config::Config::parse(&text);
});

/// Decode every `\uXXXX`, `\UXXXXXXXX` and `\xHH` that stands for an ASCII letter, digit, `_`
/// or `-` (the characters of a bare key), wherever it is, until none is left.
fn decode_key_escapes(text: &str) -> String {
    let mut text = text.to_string();
    loop {
        let mut out = String::with_capacity(text.len());
        let mut changed = false;
        let mut rest = text.as_str();
        while let Some(i) = rest.find('\\') {
            out.push_str(&rest[..i]);
            rest = &rest[i..];
            let digits = match rest.as_bytes().get(1) {
                Some(b'u') => 4,
                Some(b'U') => 8,
                Some(b'x') => 2,
                _ => 0,
            };
            let decoded = rest
                .get(2..2 + digits)
                .filter(|h| digits > 0 && h.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .and_then(char::from_u32)
                .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-');
            match decoded {
                Some(c) => {
                    out.push(c);
                    rest = &rest[2 + digits..];
                    changed = true;
                }
                None => {
                    out.push('\\');
                    rest = &rest[1..];
                }
            }
        }
        out.push_str(rest);
        if !changed {
            return out;
        }
        text = out;
    }
}

/// Replace the value of every `keys_file = <string>` with one of [`FILES`].
fn confine_keys_file(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    let mut rest = text;
    while let Some(i) = rest.find(KEY) {
        out.push_str(&rest[..i + KEY.len()]);
        rest = &rest[i + KEY.len()..];
        let b = rest.as_bytes();
        // The closing quote of a quoted key, blanks, `=`, blanks.
        let mut j = 0;
        if matches!(b.first(), Some(b'"' | b'\'')) {
            j += 1;
        }
        while matches!(b.get(j), Some(b' ' | b'\t')) {
            j += 1;
        }
        if b.get(j) != Some(&b'=') {
            continue; // not an assignment to this key (a table, a comment, text in a string)
        }
        j += 1;
        while matches!(b.get(j), Some(b' ' | b'\t')) {
            j += 1;
        }
        if !matches!(b.get(j), Some(b'"' | b'\'')) {
            continue; // not a string: never deserializes as a path
        }
        let value = &rest[j..];
        let len = string_len(value).unwrap_or_else(|| value.find('\n').unwrap_or(value.len()));
        let file = &FILES[len % FILES.len()];
        out.push_str(&rest[..j]);
        out.push('\'');
        out.push_str(file);
        out.push('\'');
        rest = &rest[j + len..];
    }
    out.push_str(rest);
    out
}

/// Length of the TOML string token at the start of `s` (basic, literal, or their multi-line
/// forms), or `None` when it is not terminated where TOML requires.
fn string_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let q = *b.first()?;
    let escapes = q == b'"';
    if b.len() >= 3 && b[1] == q && b[2] == q {
        // Multi-line: up to the first unescaped triple quote, plus up to two more quotes.
        let mut i = 3;
        while i < b.len() {
            if escapes && b[i] == b'\\' {
                i += 2;
                continue;
            }
            if b[i] == q && b.get(i + 1) == Some(&q) && b.get(i + 2) == Some(&q) {
                let mut end = i + 3;
                while end < i + 5 && b.get(end) == Some(&q) {
                    end += 1;
                }
                return Some(end);
            }
            i += 1;
        }
        return None;
    }
    // Single line.
    let mut i = 1;
    while i < b.len() {
        match b[i] {
            b'\n' | b'\r' => return None,
            b'\\' if escapes => i += 2,
            c if c == q => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}
