//! Answers rewritten message by message on their way to the client: a bridged answer
//! converted to the client's revision ([`super::bridge`]), and list answers filtered by
//! the route's policy ([`crate::identity::policy`]).
//!
//! A JSON body, or each event of a stream, is held whole up to a limit and rewritten;
//! every other byte passes as it came. What happens to a body or event over the limit
//! depends on why the edge looks at it:
//! - converting (bridge) or filtering a stream that may carry list answers (a legacy GET
//!   stream): it passes as it is, and rewriting resumes at the next event; except that a
//!   stream event that looks like a list answer (its first bytes name a list key) is
//!   dropped, since it cannot be filtered;
//! - filtering the answer to a list request: it is replaced by a JSON-RPC error (fail
//!   closed), as is an answer the edge cannot read.

use bytes::Bytes;
use serde_json::Value;

use crate::identity::policy::{self, Filtered, Grant};

/// The most of one body or event held for conversion or stream filtering.
pub const MAX_CONVERTED: usize = 64 * 1024;
/// The most of a list answer held for filtering (about 500 tools with their schemas).
pub const MAX_LIST: usize = 1024 * 1024;
/// The most of a legacy stream's event held for filtering.
pub const MAX_STREAM_EVENT: usize = 256 * 1024;

/// List filtering for one answer or stream.
#[derive(Debug)]
pub struct ListFilter {
    pub grant: Grant,
    /// The answer to a list request with this id: fail closed.
    pub answering: Option<Value>,
    /// Entries hidden so far.
    pub hidden: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Passing the rest of an oversized body or event as it is.
    Keep,
    /// Dropping it (it was replaced, or cannot be shown).
    Drop,
}

#[derive(Debug)]
pub struct Rewrite {
    sse: bool,
    /// Converting a bridged answer (answering an `initialize` with this revision).
    bridge: Option<Option<String>>,
    pub filter: Option<ListFilter>,
    limit: usize,
    held: Vec<u8>,
    /// Where the search for the end of the held event resumes, and where the line it is in
    /// started (so a long `data:` line arriving in small chunks is scanned once).
    scan_at: usize,
    line_start: usize,
    passing: Option<Pass>,
    /// While passing an event: the last byte ended a line (`at_line_start`), was a CR.
    at_line_start: bool,
    after_cr: bool,
}

fn starts(t: &[u8], with: &[u8]) -> bool {
    t.len() >= with.len() && t[..with.len()].eq_ignore_ascii_case(with)
}

impl Rewrite {
    /// For an answer of this content type (JSON or an event stream), if any.
    pub fn new(
        content_type: Option<&[u8]>,
        bridge: Option<Option<String>>,
        filter: Option<ListFilter>,
    ) -> Option<Rewrite> {
        let sse = match content_type {
            Some(t) if starts(t, b"text/event-stream") => true,
            Some(t) if starts(t, b"application/json") => false,
            _ => return None,
        };
        let limit = match &filter {
            Some(f) if f.answering.is_some() => MAX_LIST,
            Some(_) => MAX_STREAM_EVENT,
            None => MAX_CONVERTED,
        };
        Some(Rewrite {
            sse,
            bridge,
            filter,
            limit,
            held: Vec::new(),
            scan_at: 0,
            line_start: 0,
            passing: None,
            at_line_start: true,
            after_cr: false,
        })
    }

    /// Filter list answers too; the limit becomes the larger one.
    pub fn set_filter(&mut self, filter: ListFilter) {
        let limit = if filter.answering.is_some() {
            MAX_LIST
        } else {
            MAX_STREAM_EVENT
        };
        self.limit = self.limit.max(limit);
        self.filter = Some(filter);
    }

    /// The memory held now (reserved in the memory budget as it grows and shrinks).
    pub fn held(&self) -> usize {
        self.held.capacity()
    }

    /// The end of the first held event (past its blank line), resuming where the last
    /// search stopped.
    fn next_event_end(&mut self) -> Option<usize> {
        let buf = &self.held;
        let (mut i, mut line_start) = (self.scan_at, self.line_start);
        while i < buf.len() {
            let Some(n) = memchr::memchr2(b'\n', b'\r', &buf[i..]) else {
                i = buf.len();
                break;
            };
            i += n;
            let eol = match (buf[i], buf.get(i + 1)) {
                (b'\n', _) => 1,
                // A CR at the end: whether an LF follows decides where the line ends.
                (_, None) => break,
                (_, Some(b'\n')) => 2,
                (_, Some(_)) => 1,
            };
            if i == line_start {
                self.scan_at = 0;
                self.line_start = 0;
                return Some(i + eol);
            }
            i += eol;
            line_start = i;
        }
        self.scan_at = i;
        self.line_start = line_start;
        None
    }

    pub fn feed(&mut self, chunk: &[u8]) -> Bytes {
        let mut out = Vec::new();
        let mut rest = chunk;
        if let Some(pass) = self.passing {
            if !self.sse {
                return match pass {
                    Pass::Keep => Bytes::copy_from_slice(chunk),
                    Pass::Drop => Bytes::new(),
                };
            }
            match self.skip_event(rest) {
                Some(end) => {
                    if pass == Pass::Keep {
                        out.extend_from_slice(&rest[..end]);
                    }
                    rest = &rest[end..];
                    self.passing = None;
                }
                None if pass == Pass::Keep => return Bytes::copy_from_slice(chunk),
                None => return Bytes::new(),
            }
        }
        self.held.extend_from_slice(rest);
        if self.sse {
            while let Some(end) = self.next_event_end() {
                let event: Vec<u8> = self.held.drain(..end).collect();
                out.extend_from_slice(&self.rewrite_event(&event));
            }
            if self.held.capacity() > MAX_CONVERTED && self.held.len() < self.held.capacity() / 4 {
                // A large event went: give its room back.
                self.held.shrink_to(self.held.len().max(4096));
            }
        }
        if self.held.len() > self.limit {
            let held = std::mem::take(&mut self.held);
            self.scan_at = 0;
            self.line_start = 0;
            let pass = self.oversized(&held, &mut out);
            self.passing = Some(pass);
            if self.sse {
                // Follow the passed bytes to find where this event ends.
                self.at_line_start = false;
                self.after_cr = false;
                if let Some(end) = self.skip_event(&held) {
                    if pass == Pass::Keep {
                        out.extend_from_slice(&held[..end]);
                    }
                    self.passing = None;
                    let tail = held[end..].to_vec();
                    out.extend_from_slice(&self.feed(&tail));
                    return Bytes::from(out);
                }
            }
            if pass == Pass::Keep {
                out.extend_from_slice(&held);
            }
        }
        Bytes::from(out)
    }

    /// A body or event over the limit: keep passing it, or drop it (writing what replaces
    /// it into `out`).
    fn oversized(&mut self, held: &[u8], out: &mut Vec<u8>) -> Pass {
        let Some(filter) = &self.filter else {
            return Pass::Keep;
        };
        if let Some(id) = &filter.answering {
            let error = too_large(id);
            if self.sse {
                out.extend_from_slice(b"event: message\ndata: ");
                out.extend_from_slice(&error);
                out.extend_from_slice(b"\n\n");
            } else {
                out.extend_from_slice(&error);
            }
            return Pass::Drop;
        }
        if looks_like_a_list(held) {
            log::warn!(
                "a list answer over {} bytes on an event stream was dropped: it cannot be filtered",
                self.limit
            );
            return Pass::Drop;
        }
        Pass::Keep
    }

    /// While passing an event: the index just past the blank line that ends it, if in
    /// `bytes`.
    fn skip_event(&mut self, bytes: &[u8]) -> Option<usize> {
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

    pub fn finish(&mut self) -> Bytes {
        let held = std::mem::take(&mut self.held);
        if self.passing.is_some() || held.is_empty() {
            return Bytes::from(held);
        }
        if self.sse {
            // A last event the stream did not end with a blank line.
            return Bytes::from(self.rewrite_event(&held));
        }
        match self.rewrite_message(&held) {
            Rewritten::Same => Bytes::from(held),
            Rewritten::New(bytes) => Bytes::from(bytes),
            Rewritten::Drop => Bytes::new(),
        }
    }

    /// One message rewritten.
    fn rewrite_message(&mut self, data: &[u8]) -> Rewritten {
        let mut rewritten = None;
        if let Some(filter) = &mut self.filter {
            // A hidden entry's name, renamed on an HTTP+SSE POST, comes back as it was: on
            // the event stream, where such answers arrive, in an answer that says so.
            let restored = filter
                .answering
                .is_none()
                .then(|| policy::restore_hidden(data).filter(|_| policy::is_an_error(data)))
                .flatten();
            let data = restored.as_deref().unwrap_or(data);
            rewritten = restored.clone();
            match policy::filter_list(data, &filter.grant) {
                Filtered::Changed(bytes, hidden) => {
                    filter.hidden += hidden;
                    rewritten = Some(bytes);
                }
                Filtered::Unreadable => match &filter.answering {
                    Some(id) => return Rewritten::New(unreadable(id)),
                    // On a stream: what cannot be read but looks like a list is not shown.
                    None if looks_like_a_list(data) => return Rewritten::Drop,
                    None => {}
                },
                Filtered::NotAList | Filtered::Unchanged => {}
            }
        }
        if let Some(initialize) = &self.bridge {
            let source = rewritten.as_deref().unwrap_or(data);
            if let Some(converted) = serde_json::from_slice::<Value>(source)
                .ok()
                .and_then(|m| super::bridge::convert_message(m, initialize.as_deref()))
            {
                rewritten = Some(converted.to_string().into_bytes());
            }
        }
        rewritten.map_or(Rewritten::Same, Rewritten::New)
    }

    /// One event with its data rewritten (its lines as `data:` lines where the first one
    /// was), as it came, or dropped.
    fn rewrite_event(&mut self, event: &[u8]) -> Vec<u8> {
        let Ok(text) = std::str::from_utf8(event) else {
            return match self.filter.as_ref() {
                // The answer to a list request that cannot be read is not shown.
                Some(ListFilter {
                    answering: Some(id),
                    ..
                }) => [b"event: message\ndata: ", &unreadable(id)[..], b"\n\n"].concat(),
                Some(_) if looks_like_a_list(event) => Vec::new(),
                _ => event.to_vec(),
            };
        };
        let lines = split_lines(text);
        let data: Vec<&str> = lines
            .iter()
            .filter_map(|(line, _)| line.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if data.is_empty() {
            return event.to_vec();
        }
        let rewritten = match self.rewrite_message(data.join("\n").as_bytes()) {
            Rewritten::Same => return event.to_vec(),
            Rewritten::Drop => return Vec::new(),
            Rewritten::New(bytes) => bytes,
        };
        let rewritten = String::from_utf8_lossy(&rewritten);
        let mut out = String::with_capacity(event.len());
        let mut written = false;
        for (line, end) in lines {
            if line.starts_with("data:") {
                if !written {
                    for data in rewritten.split('\n') {
                        out.push_str("data: ");
                        out.push_str(data);
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
}

/// What became of one message.
enum Rewritten {
    Same,
    New(Vec<u8>),
    /// Not shown at all.
    Drop,
}

/// Keep the memory budget's reservation for a rewrite at what it holds; an answer the
/// budget has no room for is cut.
pub fn account(ctx: &mut super::ctx::Ctx) -> pingora::Result<()> {
    let (Some(rewrite), Some(room)) = (&ctx.convert, ctx.convert_room.as_mut()) else {
        return Ok(());
    };
    if room.try_fit(rewrite.held()) {
        return Ok(());
    }
    Err(pingora::Error::because(
        pingora::ErrorType::HTTPStatus(503),
        "rewriting an answer",
        crate::error::EdgeError::Overloaded {
            limit: "memory budget",
        },
    ))
}

/// An event or message whose `result` starts with a list key (`tools`, `prompts`,
/// `resources`, `resourceTemplates`; where the SDK servers put it), within its first 4 KiB.
fn looks_like_a_list(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(4096)];
    let skip_ws = |mut i: usize| {
        while head.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
            i += 1;
        }
        i
    };
    memchr::memmem::find_iter(head, b"\"result\"").any(|at| {
        let mut i = skip_ws(at + 8);
        if head.get(i) != Some(&b':') {
            return false;
        }
        i = skip_ws(i + 1);
        if head.get(i) != Some(&b'{') {
            return false;
        }
        i = skip_ws(i + 1);
        let rest = &head[i.min(head.len())..];
        [
            &b"\"tools\""[..],
            b"\"prompts\"",
            b"\"resources\"",
            b"\"resourceTemplates\"",
        ]
        .iter()
        .any(|key| rest.starts_with(key))
    })
}

fn too_large(id: &Value) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32603,"message":"The list is larger than the edge filters ({MAX_LIST} bytes); ask for smaller pages"}}}}"#
    )
    .into_bytes()
}

fn unreadable(id: &Value) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32603,"message":"The server's list answer could not be read to apply the route's policy"}}}}"#
    )
    .into_bytes()
}

/// Lines with their line ends (CRLF, CR or LF).
fn split_lines(text: &str) -> Vec<(&str, &str)> {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::identity::policy::{Policy, Rule};

    fn stream_filter() -> Rewrite {
        let grant = Policy {
            rules: vec![Arc::new(Rule {
                name: "r".into(),
                subjects: vec![],
                tenants: vec![],
                groups: vec![],
                tools: vec![wildmatch::WildMatch::new("a*")],
                prompts: vec![],
                resources: vec![],
            })],
        }
        .grant(None);
        let filter = ListFilter {
            grant,
            answering: None,
            hidden: 0,
        };
        Rewrite::new(Some(b"text/event-stream"), None, Some(filter)).unwrap()
    }

    fn run(r: &mut Rewrite, input: &[u8], step: usize) -> String {
        let mut out = Vec::new();
        for chunk in input.chunks(step) {
            out.extend_from_slice(&r.feed(chunk));
        }
        out.extend_from_slice(&r.finish());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn stream_events_are_filtered_whatever_their_framing() {
        // Multi-line data, CRLF, a last event without its blank line.
        let input = "event: message\r\ndata: {\"id\":1,\"result\":{\"tools\":[{\"name\":\"a1\"},\r\ndata: {\"name\":\"b1\"}]}}\r\n\r\n: keep-alive\n\ndata: {\"id\":2,\"result\":{\"tools\":[{\"name\":\"b2\"}]}}";
        for step in [1, 3, 7, input.len()] {
            let out = run(&mut stream_filter(), input.as_bytes(), step);
            assert_eq!(
                out,
                "event: message\r\ndata: {\"id\":1,\"result\":{\"tools\":[{\"name\":\"a1\"}]}}\r\n\r\n: keep-alive\n\ndata: {\"id\":2,\"result\":{\"tools\":[]}}\n",
                "step {step}"
            );
        }
        // What cannot be read but starts as a list is not shown; anything else passes.
        let broken = "data: {\"result\": {\"tools\":[{\"name\":\"b\"}\n\ndata: not json\n\n";
        assert_eq!(
            run(&mut stream_filter(), broken.as_bytes(), 5),
            "data: not json\n\n"
        );
        // A name renamed by the edge comes back in an error answer, and only there.
        let disguised = "data: {\"id\":3,\"error\":{\"code\":-32602,\"message\":\"Tool mcp-edge-hidden:YjE not found\"}}\n\ndata: {\"id\":4,\"result\":{\"content\":[{\"text\":\"mcp-edge-hidden:YjE\"}]}}\n\n";
        let out = run(&mut stream_filter(), disguised.as_bytes(), 4);
        assert!(out.contains("Tool b1 not found"), "{out}");
        assert!(out.contains("\"text\":\"mcp-edge-hidden:YjE\""), "{out}");
    }
}
