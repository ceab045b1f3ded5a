//! Server-Sent Events on the wire: where events end in a stream that arrives in arbitrary
//! chunks ([`EventEnds`], [`EventSkip`]), an event's lines and data, the events the edge writes
//! itself ([`message_event`]), and the HTTP+SSE `endpoint` event's rewrite
//! ([`EndpointRewriter`]).
//!
//! Lines end in CRLF, LF or CR; a CR at the very end of what has arrived may be the first half
//! of a CRLF, so it ends no line yet. An event ends at a blank line.
//!
//! A 2024-11-05 server opens its stream with `event: endpoint` whose data is the URL the client
//! must POST to, carrying the session identifier (`/messages?sessionId=…`). The edge rewrites
//! that one value; everything before and after passes through untouched. Only the bytes of the
//! not-yet-complete first events are held back, and once the endpoint event has been rewritten
//! the rewriter is a no-op.

use bytes::{Bytes, BytesMut};

/// Where held events end, the search resuming where the last one stopped (a long `data:` line
/// arriving in small chunks is scanned once). Call [`EventEnds::consumed`] when the caller
/// takes the bytes up to an end it was given.
#[derive(Debug, Default)]
pub struct EventEnds {
    scan_at: usize,
    line_start: usize,
}

impl EventEnds {
    /// The end of the first complete event in `held` (just past its blank line).
    pub fn next(&mut self, held: &[u8]) -> Option<usize> {
        let (mut i, mut line_start) = (self.scan_at, self.line_start);
        while i < held.len() {
            let Some(n) = memchr::memchr2(b'\n', b'\r', &held[i..]) else {
                i = held.len();
                break;
            };
            i += n;
            let eol = match (held[i], held.get(i + 1)) {
                (b'\n', _) => 1,
                // A CR at the end: whether an LF follows decides where the line ends.
                (_, None) => break,
                (_, Some(b'\n')) => 2,
                (_, Some(_)) => 1,
            };
            if i == line_start {
                self.consumed();
                return Some(i + eol);
            }
            i += eol;
            line_start = i;
        }
        self.scan_at = i;
        self.line_start = line_start;
        None
    }

    /// The held bytes were taken (up to an end [`EventEnds::next`] gave) or dropped: the next
    /// search starts at the beginning.
    pub fn consumed(&mut self) {
        self.scan_at = 0;
        self.line_start = 0;
    }
}

/// The end of the first complete event in `buf`, if any.
pub fn event_end(buf: &[u8]) -> Option<usize> {
    EventEnds::default().next(buf)
}

/// The `endpoint` event an HTTP+SSE stream opens with: the URL its messages are POSTed to.
pub fn endpoint_event(url: &str) -> String {
    format!("event: endpoint\ndata: {url}\n\n")
}

/// The data of the first complete `endpoint` event in an SSE text (an HTTP+SSE stream's
/// messages URL), trimmed.
pub fn endpoint(text: &str) -> Option<String> {
    let mut rest = text;
    while let Some(end) = event_end(rest.as_bytes()) {
        let event = lines(&rest[..end]);
        let named = |(line, _): &(&str, &str)| line.trim() == "event: endpoint";
        if event.iter().any(named) {
            return data(&event).map(|d| d.trim().to_owned());
        }
        rest = &rest[end..];
    }
    None
}

/// Following a stream's bytes without holding them: where the event being passed ends.
#[derive(Debug)]
pub struct EventSkip {
    at_line_start: bool,
    after_cr: bool,
}

impl Default for EventSkip {
    fn default() -> Self {
        EventSkip {
            at_line_start: true,
            after_cr: false,
        }
    }
}

impl EventSkip {
    /// Following an event whose start has gone by (the bytes given so far ended mid-line).
    pub fn mid_line() -> EventSkip {
        EventSkip {
            at_line_start: false,
            after_cr: false,
        }
    }

    /// The index just past the blank line that ends the event, if it is in `bytes`.
    pub fn end_in(&mut self, bytes: &[u8]) -> Option<usize> {
        for (i, &b) in bytes.iter().enumerate() {
            let after_cr = std::mem::replace(&mut self.after_cr, false);
            match b {
                b'\n' if after_cr => {}
                b'\n' | b'\r' => {
                    if self.at_line_start {
                        // A blank line; a CRLF's LF is part of it.
                        let end = if b == b'\r' && bytes.get(i + 1) == Some(&b'\n') {
                            i + 2
                        } else {
                            i + 1
                        };
                        self.at_line_start = true;
                        return Some(end);
                    }
                    self.at_line_start = true;
                    self.after_cr = b == b'\r';
                }
                _ => self.at_line_start = false,
            }
        }
        None
    }
}

/// The data of each event as a stream completes it, the stream read in chunks split anywhere
/// (a reader that must find messages in an event stream: the doctor's answers, a listen
/// stream). Only the event not yet complete is held.
#[derive(Debug, Default)]
pub struct EventData {
    held: Vec<u8>,
    ends: EventEnds,
}

impl EventData {
    /// Feed one chunk: the data of the events it completed (events without data left out).
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<String> {
        self.held.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(end) = self.ends.next(&self.held) {
            let event: Vec<u8> = self.held.drain(..end).collect();
            if let Some(d) = data(&lines(&String::from_utf8_lossy(&event))) {
                out.push(d);
            }
        }
        out
    }

    /// The stream ended: a CR it ended with was a whole line end (it can end an event).
    pub fn finish(&mut self) -> Vec<String> {
        if self.held.last() == Some(&b'\r') {
            self.feed(b"\n")
        } else {
            Vec::new()
        }
    }
}

/// An event's lines with their line ends (CRLF, CR or LF; the last line may have none).
pub fn lines(text: &str) -> Vec<(&str, &str)> {
    let mut lines = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let Some(i) = rest.find(['\r', '\n']) else {
            lines.push((rest, ""));
            break;
        };
        let len = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
        lines.push((&rest[..i], &rest[i..i + len]));
        rest = &rest[i + len..];
    }
    lines
}

/// The data of an event (its `data:` lines' values, joined with LF), or `None` without any.
pub fn data(lines: &[(&str, &str)]) -> Option<String> {
    let data: Vec<&str> = lines
        .iter()
        .filter_map(|(line, _)| line.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    (!data.is_empty()).then(|| data.join("\n"))
}

/// The event with its data replaced by `data` (as `data:` lines where the first one was,
/// each ended as the first was); its other lines as they came.
pub fn with_data(lines: &[(&str, &str)], data: &str, capacity: usize) -> Vec<u8> {
    let mut out = String::with_capacity(capacity);
    let mut written = false;
    for (line, end) in lines {
        if line.starts_with("data:") {
            if !written {
                for part in data.split('\n') {
                    out.push_str("data: ");
                    out.push_str(part);
                    out.push_str(if end.is_empty() { "\n" } else { end });
                }
                written = true;
            }
        } else {
            out.push_str(line);
            out.push_str(end);
        }
    }
    out.into_bytes()
}

/// The event the edge writes for a JSON-RPC message: `event: message`, its `data:` line, a
/// blank line; lines ended with `eol` (LF; a Python server's streams end them with CRLF).
pub fn message_event(message: &str, eol: &str) -> String {
    format!("event: message{eol}data: {message}{eol}{eol}")
}

/// Give up looking (and pass everything through) after this much stream without an endpoint.
const MAX_SCAN_BYTES: usize = 64 * 1024;

#[derive(Debug, Default)]
pub struct EndpointRewriter {
    held: BytesMut,
    ends: EventEnds,
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
        while let Some(end) = self.ends.next(&self.held) {
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_endpoint_event_is_found_once_complete() {
        let opened = format!(": hi\r\n\r\n{}", super::endpoint_event("/m?s=1"));
        assert_eq!(super::endpoint(&opened).as_deref(), Some("/m?s=1"));
        assert_eq!(super::endpoint("event: endpoint\r\ndata: /m\r\n"), None);
    }

    #[test]
    fn event_data_comes_whole_however_the_stream_is_split() {
        let stream =
            b": keep-alive\r\n\r\nevent: message\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\ndata: x\n\n";
        for at in 0..=stream.len() {
            let mut reader = EventData::default();
            let mut seen = reader.feed(&stream[..at]);
            seen.extend(reader.feed(&stream[at..]));
            assert_eq!(seen, ["{\"a\":\n1}", "x"], "split at {at}");
        }
        // A CR at the very end ends a line only once the stream has ended.
        let mut reader = EventData::default();
        assert!(reader.feed(b"data: y\r\r").is_empty());
        assert_eq!(reader.finish(), ["y"]);
        let mut reader = EventData::default();
        reader.feed(b"data: y\n");
        assert!(reader.finish().is_empty(), "no blank line: not an event");
    }

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
    fn an_endpoint_url_without_the_parameter_is_left_alone() {
        assert_eq!(
            rewrite_endpoint_url("/messages", "", &params(), &mut |_| Some("x".into())),
            None
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
    fn event_ends_resume_and_wait_for_a_crlf_half() {
        let mut ends = EventEnds::default();
        assert_eq!(
            ends.next(b"data: a\r"),
            None,
            "a CR at the end may be half a CRLF"
        );
        assert_eq!(ends.next(b"data: a\r\n\r"), None);
        assert_eq!(ends.next(b"data: a\r\n\r\nx"), Some(11));
        assert_eq!(
            event_end(b"data: a\rdata: b\r\r"),
            None,
            "the last CR may be half a CRLF"
        );
        assert_eq!(event_end(b"data: a\rdata: b\r\rx"), Some(17));
        let mut skip = EventSkip::default();
        assert_eq!(skip.end_in(b"data: x\r"), None);
        assert_eq!(skip.end_in(b"\n\r\nnext"), Some(3));
        let text = "event: message\r\ndata: {\"a\":\ndata: 1}\n";
        let l = lines(text);
        assert_eq!(data(&l).as_deref(), Some("{\"a\":\n1}"));
        assert_eq!(
            String::from_utf8(with_data(&l, "{}", 0)).unwrap(),
            "event: message\r\ndata: {}\n",
            "data lines end as the first one did"
        );
        assert_eq!(message_event("{}", "\n"), "event: message\ndata: {}\n\n");
    }
}
