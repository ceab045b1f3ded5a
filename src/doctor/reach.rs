//! Why a request got no answer: the connection refused, the name not resolved, the TLS
//! handshake failed, no answer within the timeout, the connection reset or closed. A server
//! the doctor cannot reach has nothing to check ([`super::REACH`]); the doctor says so and
//! exits 3 (`main`), apart from a server that broke a rule (1).

use std::error::Error as _;

/// Why a request got no answer, in a few words, then the error itself.
pub fn cause(e: &reqwest::Error) -> String {
    let chain = chain(e);
    let lower = chain.to_ascii_lowercase();
    let kind = io_kind(e);
    use std::io::ErrorKind as K;
    let why = if e.is_timeout() || kind == Some(K::TimedOut) {
        "timed out: no answer within the timeout"
    } else if kind == Some(K::ConnectionRefused) {
        "connection refused: nothing listens there"
    } else if lower.contains("dns error") || lower.contains("failed to lookup address") {
        "DNS: the name does not resolve"
    } else if is_tls(e) || lower.contains("tls") || lower.contains("certificate") {
        "TLS handshake failed"
    } else if matches!(
        kind,
        Some(K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof)
    ) || lower.contains("connection closed")
        || lower.contains("reset")
    {
        "connection reset: closed before an answer"
    } else {
        "no answer"
    };
    format!("{why} ({chain})")
}

/// The error and its sources, one after another.
fn chain(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The kind of the first I/O error among the sources.
fn io_kind(e: &reqwest::Error) -> Option<std::io::ErrorKind> {
    let mut source = e.source();
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        source = s.source();
    }
    None
}

/// A TLS error among the sources (rustls, also inside an I/O error).
fn is_tls(e: &reqwest::Error) -> bool {
    let mut source = e.source();
    while let Some(s) = source {
        let inner = s
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .is_some_and(|i| i.is::<rustls::Error>());
        if s.is::<rustls::Error>() || inner {
            return true;
        }
        source = s.source();
    }
    false
}
