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
    /// Where the search for the end of the held event resumes (a line start).
    scanned: usize,
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
            scanned: 0,
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

    /// The bytes held now (reserved in the memory budget as they come).
    pub fn held(&self) -> usize {
        self.held.len()
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
            while let Some(end) =
                crate::sse::event_end(&self.held[self.scanned..]).map(|e| e + self.scanned)
            {
                let event: Vec<u8> = self.held.drain(..end).collect();
                self.scanned = 0;
                out.extend_from_slice(&self.rewrite_event(&event));
            }
            // Tiny chunks must not make the search quadratic: resume at the last line start.
            self.scanned = self
                .held
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |p| p + 1);
        }
        if self.held.len() > self.limit {
            let held = std::mem::take(&mut self.held);
            self.scanned = 0;
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
        if self.passing.is_some() || self.sse {
            return Bytes::from(held);
        }
        match self.rewrite_message(&held) {
            Some(rewritten) => Bytes::from(rewritten),
            None => Bytes::from(held),
        }
    }

    /// One message rewritten, or `None` when it stays as it came.
    fn rewrite_message(&mut self, data: &[u8]) -> Option<Vec<u8>> {
        let mut rewritten = None;
        if let Some(filter) = &mut self.filter {
            // A hidden entry's name, renamed on an HTTP+SSE POST, comes back as it was (on
            // the event stream, where such answers arrive).
            let restored = filter
                .answering
                .is_none()
                .then(|| policy::restore_hidden(data))
                .flatten();
            let data = restored.as_deref().unwrap_or(data);
            rewritten = restored.clone();
            match policy::filter_list(data, &filter.grant) {
                Filtered::Changed(bytes, hidden) => {
                    filter.hidden += hidden;
                    rewritten = Some(bytes);
                }
                Filtered::Unreadable => {
                    if let Some(id) = &filter.answering {
                        return Some(unreadable(id));
                    }
                }
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
        rewritten
    }

    /// One event with its data rewritten (its lines as `data:` lines where the first one
    /// was), or as it came.
    fn rewrite_event(&mut self, event: &[u8]) -> Vec<u8> {
        let Ok(text) = std::str::from_utf8(event) else {
            if let Some(id) = self.filter.as_ref().and_then(|f| f.answering.as_ref()) {
                // The answer to a list request that cannot be read is not shown.
                return [b"event: message\ndata: ", &unreadable(id)[..], b"\n\n"].concat();
            }
            return event.to_vec();
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
        let Some(rewritten) = self.rewrite_message(data.join("\n").as_bytes()) else {
            return event.to_vec();
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

/// Keep the memory budget's reservation for a rewrite at what it holds (at least what a
/// bridged conversion reserved up front); an answer the budget has no room for is cut.
pub fn account(ctx: &mut super::ctx::Ctx) -> pingora::Result<()> {
    let (Some(rewrite), Some(room)) = (&ctx.convert, ctx.convert_room.as_mut()) else {
        return Ok(());
    };
    let bridged = ctx.admitted.as_ref().is_some_and(|a| a.bridge.is_some());
    let floor = if bridged { MAX_CONVERTED } else { 0 };
    if room.try_fit(rewrite.held().max(floor)) {
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

/// The first bytes of an event name a list key (`"tools"`, `"prompts"`, `"resources"`,
/// `"resourceTemplates"`).
fn looks_like_a_list(held: &[u8]) -> bool {
    [
        "\"tools\"",
        "\"prompts\"",
        "\"resources\"",
        "\"resourceTemplates\"",
    ]
    .iter()
    .any(|key| held.windows(key.len()).any(|w| w == key.as_bytes()))
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
