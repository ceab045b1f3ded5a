//! Incremental SSE scanning for the legacy HTTP+SSE `endpoint` event.
//!
//! A 2024-11-05 server opens its stream with `event: endpoint` whose data is the URL the
//! client must POST to, carrying the session identifier (`/messages?sessionId=…`). The edge
//! rewrites that one value; everything before and after passes through untouched. Chunks may
//! split an event anywhere (even inside a CRLF); only the bytes of the not-yet-complete first
//! events are held back, and once the endpoint event has been rewritten the scanner is a no-op.

use bytes::{Bytes, BytesMut};

/// Give up looking (and pass everything through) after this much stream without an endpoint.
const MAX_SCAN_BYTES: usize = 64 * 1024;

#[derive(Debug, Default)]
pub struct EndpointRewriter {
    held: BytesMut,
    done: bool,
}

impl EndpointRewriter {
    pub fn new() -> Self {
        EndpointRewriter::default()
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Feed one chunk; returns what may go to the client now. `rewrite` maps the endpoint
    /// event's data value to its replacement (`None` leaves it unchanged).
    pub fn feed(&mut self, chunk: &[u8], rewrite: &mut dyn FnMut(&str) -> Option<String>) -> Bytes {
        if self.done {
            return Bytes::copy_from_slice(chunk);
        }
        self.held.extend_from_slice(chunk);
        let mut out = BytesMut::new();
        while let Some(end) = event_end(&self.held) {
            let event = self.held.split_to(end);
            match rewrite_endpoint(&event, rewrite) {
                Some(rewritten) => {
                    out.extend_from_slice(&rewritten);
                    out.extend_from_slice(&self.held.split());
                    self.done = true;
                    return out.freeze();
                }
                None => out.extend_from_slice(&event),
            }
        }
        if self.held.len() > MAX_SCAN_BYTES {
            out.extend_from_slice(&self.held.split());
            self.done = true;
        }
        out.freeze()
    }

    /// End of stream: whatever is still held goes out unchanged.
    pub fn finish(&mut self) -> Bytes {
        self.done = true;
        self.held.split().freeze()
    }
}

/// Index just past the blank line ending the first complete event, if any. Lines end in
/// CRLF, LF or CR; a CR at the very end of the buffer may be the first half of a CRLF, so it
/// does not end a line yet.
pub fn event_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    let mut line_start = 0;
    while i < buf.len() {
        let eol_len = match buf[i] {
            b'\n' => 1,
            b'\r' if i + 1 < buf.len() => {
                if buf[i + 1] == b'\n' {
                    2
                } else {
                    1
                }
            }
            b'\r' => return None,
            _ => {
                i += 1;
                continue;
            }
        };
        if i == line_start {
            return Some(i + eol_len);
        }
        i += eol_len;
        line_start = i;
    }
    None
}

/// If `event` is the endpoint event, the event with its data value rewritten.
fn rewrite_endpoint(
    event: &[u8],
    rewrite: &mut dyn FnMut(&str) -> Option<String>,
) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(event).ok()?;
    let is_endpoint = text
        .split_inclusive(['\n', '\r'])
        .any(|l| field(l) == Some(("event", "endpoint")));
    if !is_endpoint {
        return None;
    }
    let mut out = String::with_capacity(text.len() + 128);
    let mut replaced = false;
    for line in text.split_inclusive(['\n', '\r']) {
        match field(line) {
            Some(("data", value)) if !replaced => {
                let new = rewrite(value)?;
                let eol = &line[line.trim_end_matches(['\r', '\n']).len()..];
                out.push_str("data: ");
                out.push_str(&new);
                out.push_str(eol);
                replaced = true;
            }
            _ => out.push_str(line),
        }
    }
    replaced.then(|| out.into_bytes())
}

/// `name: value` of one SSE line (one optional space after the colon).
fn field(line: &str) -> Option<(&str, &str)> {
    let line = line.trim_end_matches(['\r', '\n']);
    let (name, value) = line.split_once(':')?;
    Some((name, value.strip_prefix(' ').unwrap_or(value)))
}

/// Rewrite an endpoint URL: swap the value of the first query parameter named in `params`
/// using `swap`, and put `prefix` in front of an absolute path.
pub fn rewrite_endpoint_url(
    url: &str,
    prefix: &str,
    params: &[String],
    swap: &mut dyn FnMut(&str) -> Option<String>,
) -> Option<String> {
    let (path, query) = url.split_once('?')?;
    let mut swapped = false;
    let parts: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if !swapped && params.iter().any(|p| p == k) => match swap(v) {
                Some(new) => {
                    swapped = true;
                    format!("{k}={new}")
                }
                None => pair.to_string(),
            },
            _ => pair.to_string(),
        })
        .collect();
    if !swapped {
        return None;
    }
    let path = if path.starts_with('/') {
        format!("{prefix}{path}")
    } else {
        path.to_string()
    };
    Some(format!("{path}?{}", parts.join("&")))
}

/// Replace the value of query parameter `name` in a request target (for the way in).
pub fn replace_query_param(path_and_query: &str, name: &str, value: &str) -> String {
    let Some((path, query)) = path_and_query.split_once('?') else {
        return path_and_query.to_string();
    };
    let parts: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if k == name => format!("{k}={value}"),
            _ => pair.to_string(),
        })
        .collect();
    format!("{path}?{}", parts.join("&"))
}

/// How many query parameters name a session, keys percent-decoded as servers decode them
/// (`session%5Fid` is `session_id`). More than one is refused: the edge would check one
/// and the server might act on another.
pub fn count_session_params(query: &str, names: &[String]) -> usize {
    query
        .split('&')
        .filter_map(|pair| pair.split('=').next())
        .filter(|k| {
            let key = k.replace('+', " ");
            let decoded = percent_encoding::percent_decode_str(&key).decode_utf8_lossy();
            names.iter().any(|n| *n == decoded)
        })
        .count()
}

/// The first of `names` present in a query string, with its raw value.
pub fn find_query_param<'q>(query: &'q str, names: &[String]) -> Option<(&'q str, &'q str)> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        names.iter().any(|n| n == k).then_some((k, v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Vec<String> {
        vec!["sessionId".into(), "session_id".into()]
    }

    fn run(chunks: &[&[u8]]) -> Vec<u8> {
        let mut r = EndpointRewriter::new();
        let mut out = Vec::new();
        let mut swap = |url: &str| {
            rewrite_endpoint_url(url, "/team", &params(), &mut |v| Some(format!("T({v})")))
        };
        for c in chunks {
            out.extend_from_slice(&r.feed(c, &mut swap));
        }
        out.extend_from_slice(&r.finish());
        out
    }

    #[test]
    fn session_parameters_are_counted_with_decoded_keys() {
        let n = |q| count_session_params(q, &params());
        assert_eq!(n("sessionId=a"), 1);
        assert_eq!(n("session_id=t&session%5Fid=raw"), 2);
        assert_eq!(n("sessionId=t&session_id=raw"), 2);
        assert_eq!(n("sessionId=t&sessionId=u"), 2);
        assert_eq!(n("x=1&sessionid=a"), 0);
    }

    #[test]
    fn rewrites_ts_and_python_endpoint_events() {
        let ts = b"event: endpoint\ndata: /messages?sessionId=abc\n\nevent: message\ndata: {}\n\n";
        assert_eq!(run(&[ts]), b"event: endpoint\ndata: /team/messages?sessionId=T(abc)\n\nevent: message\ndata: {}\n\n");
        let py = b"event: endpoint\r\ndata: /messages/?session_id=0f9e\r\n\r\n: ping\r\n\r\n";
        assert_eq!(
            run(&[py]),
            b"event: endpoint\r\ndata: /team/messages/?session_id=T(0f9e)\r\n\r\n: ping\r\n\r\n"
        );
    }

    #[test]
    fn every_split_point_gives_the_same_stream() {
        let streams: [&[u8]; 2] = [
            b": hello\n\nevent: endpoint\ndata: /messages?x=1&sessionId=abc\n\nevent: message\ndata: {\"a\":1}\n\n",
            b"event: endpoint\r\ndata: /messages/?session_id=0f9e\r\n\r\nevent: message\r\ndata: {}\r\n\r\n",
        ];
        for s in streams {
            let whole = run(&[s]);
            assert_ne!(whole, s, "must rewrite");
            for i in 0..s.len() {
                for j in i..s.len() {
                    assert_eq!(
                        run(&[&s[..i], &s[i..j], &s[j..]]),
                        whole,
                        "split at {i},{j}"
                    );
                }
            }
        }
    }

    #[test]
    fn other_events_pass_and_only_the_first_endpoint_changes() {
        let s = b"event: message\ndata: /messages?sessionId=zzz\n\nevent: endpoint\ndata: /m?sessionId=a\n\nevent: endpoint\ndata: /m?sessionId=b\n\n";
        let out = String::from_utf8(run(&[s])).unwrap();
        assert!(out.contains("data: /messages?sessionId=zzz\n"), "{out}");
        assert!(
            out.contains("sessionId=T(a)") && out.contains("sessionId=b\n"),
            "{out}"
        );
    }

    #[test]
    fn gives_up_after_the_scan_limit() {
        let mut r = EndpointRewriter::new();
        let big = vec![b'x'; MAX_SCAN_BYTES + 1];
        let out = r.feed(&big, &mut |_| Some("never".into()));
        assert_eq!(out.len(), big.len());
        assert!(r.is_done());
    }

    #[test]
    fn query_helpers() {
        assert_eq!(
            replace_query_param("/messages?a=1&sessionId=T", "sessionId", "abc"),
            "/messages?a=1&sessionId=abc"
        );
        assert_eq!(
            find_query_param("a=1&session_id=xyz", &params()),
            Some(("session_id", "xyz"))
        );
        assert_eq!(find_query_param("a=1", &params()), None);
        assert_eq!(
            rewrite_endpoint_url("/messages", "", &params(), &mut |_| Some("x".into())),
            None
        );
    }
}
