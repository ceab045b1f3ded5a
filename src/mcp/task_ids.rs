//! Streaming rewrite of task ids in JSON-RPC messages, as they pass through.
//!
//! A server that answers with a task (Tasks extension, SEP-2663) names it in `result.taskId`;
//! `notifications/tasks/status` names it in `params.taskId`. The edge swaps those string
//! values (and nothing else) for sealed ids that carry the member holding the task. Bodies
//! are not buffered: [`JsonScan`] follows the JSON structure byte by byte and holds back only
//! the string being replaced, so a tool result of any size costs a few bytes of state.
//! [`SseScan`] runs the same scan over the `data:` lines of an event stream, one event at a
//! time. Every other byte goes out exactly as it came, in the same chunks.

use bytes::{Bytes, BytesMut};

/// A task id longer than this is passed through unchanged (its sealed form would not fit
/// in a token).
pub const MAX_ID_BYTES: usize = 1024;

/// Only the top-level object and the objects in its members need their state kept (keys are
/// looked at there); deeper nesting is a count, so `[[[[…` costs no memory.
const KEPT_FRAMES: usize = 2;

/// Keys are compared when at most this long (`result`, `params`, `taskId`).
const MAX_KEY_BYTES: usize = 8;

/// Maps a task id (decoded) to its replacement; `None` leaves it as it is.
pub type Swap<'a> = dyn FnMut(&str) -> Option<String> + 'a;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    /// An object, expecting a key next (after `{` or `,`).
    ObjectKey,
    /// An object, after a key (until its value ends).
    ObjectValue,
    Array,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Str {
    Outside,
    /// Inside a string; `escaped` after a backslash.
    Inside {
        escaped: bool,
    },
}

/// Which member of the top-level object we are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Top {
    Other,
    /// `result` or `params`: their `taskId` is a task id.
    Holder,
}

/// The nesting: kept frames, then a count of deeper levels.
#[derive(Debug, Default)]
struct Stack {
    frames: Vec<Frame>,
    deeper: usize,
}

impl Stack {
    fn push(&mut self, frame: Frame) {
        if self.deeper == 0 && self.frames.len() < KEPT_FRAMES {
            self.frames.push(frame);
        } else {
            self.deeper += 1;
        }
    }
    fn pop(&mut self) {
        if self.deeper > 0 {
            self.deeper -= 1;
        } else {
            self.frames.pop();
        }
    }
    /// The innermost frame, when it is a kept one.
    fn last(&self) -> Option<&Frame> {
        if self.deeper > 0 {
            None
        } else {
            self.frames.last()
        }
    }
    fn last_mut(&mut self) -> Option<&mut Frame> {
        if self.deeper > 0 {
            None
        } else {
            self.frames.last_mut()
        }
    }
    fn len(&self) -> usize {
        self.frames.len() + self.deeper
    }
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Follows one JSON text (or several in a row) and replaces the string values at
/// `result.taskId` and `params.taskId` of the top-level object.
#[derive(Debug)]
pub struct JsonScan {
    stack: Stack,
    string: Str,
    /// The string being read is a key (its bytes collect in `key`).
    in_key: bool,
    key: Vec<u8>,
    key_overflow: bool,
    /// The key just read at depth 1 / depth 2.
    top: Top,
    /// The value now starting is a task id.
    target: bool,
    /// The held task id string (raw JSON, without quotes), while `capturing`.
    held: Vec<u8>,
    capturing: bool,
}

impl Default for JsonScan {
    fn default() -> Self {
        JsonScan {
            stack: Stack::default(),
            string: Str::Outside,
            in_key: false,
            key: Vec::new(),
            key_overflow: false,
            top: Top::Other,
            target: false,
            held: Vec::new(),
            capturing: false,
        }
    }
}

impl JsonScan {
    pub fn new() -> Self {
        JsonScan::default()
    }

    /// Scan `chunk`, appending what may go out now to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut BytesMut, swap: &mut Swap<'_>) {
        // `chunk[from..]` is what has not gone out yet.
        let mut from = 0;
        for (i, &b) in chunk.iter().enumerate() {
            if self.capturing {
                if self.capture(b, out, swap) {
                    from = i + 1;
                }
            } else if let Str::Inside { escaped } = self.string {
                self.in_string(b, escaped);
            } else if self.structure(b) {
                // A task id starts: hold it from the next byte on.
                out.extend_from_slice(&chunk[from..=i]);
                from = i + 1;
            }
        }
        if !self.capturing {
            out.extend_from_slice(&chunk[from..]);
        }
    }

    /// A byte of a task id being held; true when what was held went out (the id ended, or
    /// grew too long to be one).
    fn capture(&mut self, b: u8, out: &mut BytesMut, swap: &mut Swap<'_>) -> bool {
        match self.string {
            Str::Inside { escaped: true } => {
                self.string = Str::Inside { escaped: false };
                self.held.push(b);
            }
            Str::Inside { escaped: false } if b == b'\\' => {
                self.string = Str::Inside { escaped: true };
                self.held.push(b);
            }
            Str::Inside { escaped: false } if b == b'"' => {
                self.string = Str::Outside;
                self.capturing = false;
                self.release(out, swap);
                out.extend_from_slice(b"\"");
                self.value_ended();
                return true;
            }
            _ => {
                self.held.push(b);
                if self.held.len() > MAX_ID_BYTES {
                    // Not a task id anyone would mint: let it through as it is.
                    self.capturing = false;
                    out.extend_from_slice(&self.held);
                    self.held.clear();
                    return true;
                }
            }
        }
        false
    }

    /// A byte inside a string that is not held (a key, or a value that is no task id).
    fn in_string(&mut self, b: u8, escaped: bool) {
        if escaped {
            self.string = Str::Inside { escaped: false };
            self.key_byte(b);
        } else if b == b'\\' {
            self.string = Str::Inside { escaped: true };
            self.key_byte(b);
        } else if b == b'"' {
            self.string = Str::Outside;
            if self.in_key {
                self.key_ended();
            } else {
                self.value_ended();
            }
        } else {
            self.key_byte(b);
        }
    }

    /// A byte outside strings; true when it opens a task id (held from the next byte on).
    fn structure(&mut self, b: u8) -> bool {
        match b {
            b'"' => {
                self.string = Str::Inside { escaped: false };
                if self.stack.last() == Some(&Frame::ObjectKey) {
                    self.in_key = true;
                    self.key.clear();
                    self.key_overflow = false;
                } else if self.target {
                    self.capturing = true;
                    self.held.clear();
                    return true;
                }
            }
            b'{' => {
                self.target = false;
                self.stack.push(Frame::ObjectKey);
            }
            b'[' => {
                self.target = false;
                self.stack.push(Frame::Array);
            }
            b'}' | b']' => {
                self.stack.pop();
                self.value_ended();
            }
            b',' => {
                if let Some(top) = self.stack.last_mut() {
                    if *top == Frame::ObjectValue {
                        *top = Frame::ObjectKey;
                    }
                }
                self.target = false;
            }
            b':' => {
                if let Some(top) = self.stack.last_mut() {
                    *top = Frame::ObjectValue;
                }
            }
            // Whitespace and the bytes of numbers, true, false, null.
            _ => {
                if !b.is_ascii_whitespace() {
                    self.target = false;
                }
            }
        }
        false
    }

    /// The text ended (end of body or of an SSE event): whatever is held goes out as is,
    /// and the scan starts afresh.
    pub fn finish(&mut self, out: &mut BytesMut) {
        if self.capturing {
            out.extend_from_slice(&self.held);
        }
        *self = JsonScan::default();
    }

    fn key_byte(&mut self, b: u8) {
        if self.in_key {
            if self.key.len() < MAX_KEY_BYTES {
                self.key.push(b);
            } else {
                self.key_overflow = true;
            }
        }
    }

    fn key_ended(&mut self) {
        self.in_key = false;
        let key: &[u8] = if self.key_overflow { b"" } else { &self.key };
        match self.stack.len() {
            1 => {
                self.top = if key == b"result" || key == b"params" {
                    Top::Holder
                } else {
                    Top::Other
                };
            }
            2 => self.target = self.top == Top::Holder && key == b"taskId",
            _ => {}
        }
    }

    fn value_ended(&mut self) {
        self.target = false;
        if self.stack.len() <= 1 && self.stack.last() != Some(&Frame::ObjectValue) {
            // Left the holder's value, or the whole text.
            self.top = if self.stack.is_empty() {
                Top::Other
            } else {
                self.top
            };
        }
    }

    /// The held id is complete: swap it (as a JSON string body) or put it back.
    fn release(&mut self, out: &mut BytesMut, swap: &mut Swap<'_>) {
        let raw = std::mem::take(&mut self.held);
        let decoded = std::str::from_utf8(&raw)
            .ok()
            .and_then(|s| serde_json::from_str::<String>(&format!("\"{s}\"")).ok());
        let replacement = decoded.and_then(|id| swap(&id));
        match replacement.and_then(|r| serde_json::to_string(&r).ok()) {
            // Without its quotes: the opening one went out already, the closing one follows.
            Some(quoted) => out.extend_from_slice(&quoted.as_bytes()[1..quoted.len() - 1]),
            None => out.extend_from_slice(&raw),
        }
    }
}

/// Where a line of the event stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// At the start of a line: its first bytes are held until the field name is known.
    Start,
    /// In a `data:` line: the value goes through the JSON scan.
    Data,
    /// In any other line: passed through.
    Other,
}

/// [`JsonScan`] over the `data:` lines of an event stream (one JSON-RPC message per event;
/// the scan restarts at each blank line).
#[derive(Debug)]
pub struct SseScan {
    json: JsonScan,
    line: Line,
    /// The start of the current line, until it is known whether it is `data:`.
    prefix: Vec<u8>,
    /// The last byte was a CR (a following LF belongs to the same line end).
    after_cr: bool,
    /// The current line is empty so far (a line end now ends the event).
    empty_line: bool,
}

impl Default for SseScan {
    fn default() -> Self {
        SseScan {
            json: JsonScan::new(),
            line: Line::Start,
            prefix: Vec::new(),
            after_cr: false,
            empty_line: true,
        }
    }
}

impl SseScan {
    pub fn new() -> Self {
        SseScan::default()
    }

    pub fn feed(&mut self, chunk: &[u8], swap: &mut Swap<'_>) -> Bytes {
        let mut out = BytesMut::with_capacity(chunk.len() + 64);
        let mut i = 0;
        while i < chunk.len() {
            let b = chunk[i];
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    out.extend_from_slice(b"\n");
                    i += 1;
                    continue;
                }
            }
            if b == b'\r' || b == b'\n' {
                self.end_line(&mut out);
                out.extend_from_slice(&[b]);
                self.after_cr = b == b'\r';
                i += 1;
                continue;
            }
            self.empty_line = false;
            match self.line {
                Line::Start => {
                    self.prefix.push(b);
                    i += 1;
                    self.classify(&mut out, swap);
                }
                Line::Other => {
                    let end = line_end(chunk, i);
                    out.extend_from_slice(&chunk[i..end]);
                    i = end;
                }
                Line::Data => {
                    let end = line_end(chunk, i);
                    self.json.feed(&chunk[i..end], &mut out, swap);
                    i = end;
                }
            }
        }
        out.freeze()
    }

    /// End of stream: anything held goes out unchanged.
    pub fn finish(&mut self) -> Bytes {
        let mut out = BytesMut::new();
        out.extend_from_slice(&self.prefix);
        self.json.finish(&mut out);
        *self = SseScan::default();
        out.freeze()
    }

    /// Decide what the held line start is, once it can be told.
    fn classify(&mut self, out: &mut BytesMut, swap: &mut Swap<'_>) {
        const DATA: &[u8] = b"data:";
        let p = &self.prefix;
        if p.len() <= DATA.len() && DATA.starts_with(p) {
            return; // Could still be `data:`.
        }
        if p.starts_with(DATA) {
            // `data:` and one more byte: an optional space, then the value.
            let (field, value) = if p[DATA.len()] == b' ' {
                p.split_at(DATA.len() + 1)
            } else {
                p.split_at(DATA.len())
            };
            out.extend_from_slice(field);
            let value = value.to_vec();
            self.prefix.clear();
            self.line = Line::Data;
            self.json.feed(&value, out, swap);
        } else {
            out.extend_from_slice(p);
            self.prefix.clear();
            self.line = Line::Other;
        }
    }

    fn end_line(&mut self, out: &mut BytesMut) {
        if self.line == Line::Start && !self.prefix.is_empty() {
            // A line that ended before it could be told: `data:` with an empty value,
            // or a short other line.
            let held = std::mem::take(&mut self.prefix);
            out.extend_from_slice(&held);
        }
        if self.line == Line::Data && self.json.capturing {
            // No JSON string spans a line: this is not JSON. Put the held bytes back
            // before the line end, and scan no further into this text.
            self.json.finish(out);
        }
        // Otherwise lines of one event's data join with a newline: JSON whitespace.
        if self.empty_line {
            let mut rest = BytesMut::new();
            self.json.finish(&mut rest);
            out.extend_from_slice(&rest);
        }
        self.line = Line::Start;
        self.empty_line = true;
    }
}

fn line_end(chunk: &[u8], from: usize) -> usize {
    chunk[from..]
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .map_or(chunk.len(), |p| from + p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seal(id: &str) -> Option<String> {
        Some(format!("sealed<{id}>"))
    }

    fn json_in_pieces(text: &str, cut: &[usize]) -> String {
        let mut scan = JsonScan::new();
        let mut out = BytesMut::new();
        let mut last = 0;
        for &c in cut.iter().chain(std::iter::once(&text.len())) {
            scan.feed(&text.as_bytes()[last..c], &mut out, &mut seal);
            last = c;
        }
        scan.finish(&mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    fn json(text: &str) -> String {
        json_in_pieces(text, &[])
    }

    #[test]
    fn swaps_only_the_task_ids() {
        let text = r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","taskId":"t-1","status":"working","_meta":{"taskId":"inner"},"content":[{"taskId":"x"}]}}"#;
        let want = text.replace(r#""taskId":"t-1""#, r#""taskId":"sealed<t-1>""#);
        assert_eq!(json(text), want);
        let note = r#"{"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"t-2","status":"completed"}}"#;
        assert_eq!(json(note), note.replace(r#""t-2""#, r#""sealed<t-2>""#));
        // Not at result/params level, or not a string: untouched.
        for same in [
            r#"{"id":1,"result":{"content":[],"structuredContent":{"taskId":"deep"}}}"#,
            r#"{"id":1,"result":{"taskId":7}}"#,
            r#"{"id":1,"error":{"code":-32602,"message":"no","data":{"taskId":"e"}}}"#,
            r#"{"id":1,"taskId":"top","resultx":{"taskId":"a"}}"#,
            r#"[{"result":{"taskId":"in-a-batch"}}]"#,
        ] {
            assert_eq!(json(same), same);
        }
    }

    #[test]
    fn every_split_gives_the_same_bytes() {
        let text = "{ \"result\" : { \"a\\\"taskId\" : \"\\\"\", \"taskId\" : \"t\\u00e9\\\\1\" , \"b\": [\"taskId\", {\"taskId\":\"no\"}] } }";
        let whole = json(text);
        assert!(
            whole.contains("\"taskId\" : \"sealed<té\\\\1>\""),
            "{whole}"
        );
        assert!(whole.contains("{\"taskId\":\"no\"}"), "{whole}");
        for a in 0..text.len() {
            for b in a..text.len() {
                assert_eq!(json_in_pieces(text, &[a, b]), whole, "cut at {a}, {b}");
            }
        }
    }

    #[test]
    fn deep_nesting_is_counted_not_stored() {
        let deep = format!(
            r#"{{"result":{{"a":{}{},"taskId":"x"}}}}"#,
            "[{\"taskId\":\"no\",\"b\":".repeat(5000),
            "0}]".repeat(5000)
        );
        let mut scan = JsonScan::new();
        let mut out = BytesMut::new();
        scan.feed(deep.as_bytes(), &mut out, &mut seal);
        assert!(
            scan.stack.frames.capacity() <= 8,
            "frames kept: {}",
            scan.stack.frames.capacity()
        );
        let out = String::from_utf8(out.to_vec()).unwrap();
        assert_eq!(
            out,
            deep.replace(r#""taskId":"x""#, r#""taskId":"sealed<x>""#)
        );
    }

    #[test]
    fn a_refused_or_oversized_id_passes_unchanged() {
        let text = r#"{"result":{"taskId":"keep"}}"#;
        let mut scan = JsonScan::new();
        let mut out = BytesMut::new();
        scan.feed(text.as_bytes(), &mut out, &mut |_| None);
        assert_eq!(&out[..], text.as_bytes());
        let long = format!(
            r#"{{"result":{{"taskId":"{}"}}}}"#,
            "x".repeat(MAX_ID_BYTES + 10)
        );
        assert_eq!(json(&long), long);
    }

    fn sse_in_pieces(text: &str, cut: &[usize]) -> String {
        let mut scan = SseScan::new();
        let mut out = Vec::new();
        let mut last = 0;
        for &c in cut.iter().chain(std::iter::once(&text.len())) {
            out.extend_from_slice(&scan.feed(&text.as_bytes()[last..c], &mut seal));
            last = c;
        }
        out.extend_from_slice(&scan.finish());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn sse_data_lines_are_scanned_event_by_event() {
        let text = "event: message\r\nid: 7\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tasks/status\",\r\ndata:\"params\":{\"taskId\":\"a\"}}\r\n\r\n: comment \"taskId\":\"c\"\ndata: {\"id\":1,\"result\":{\"taskId\":\"b\"}}\n\ndata\ndata:\n\n";
        let whole = sse_in_pieces(text, &[]);
        let want = text
            .replace("\"taskId\":\"a\"", "\"taskId\":\"sealed<a>\"")
            .replace("\"taskId\":\"b\"", "\"taskId\":\"sealed<b>\"");
        assert_eq!(whole, want);
        for a in 0..text.len() {
            for b in a..text.len() {
                assert_eq!(sse_in_pieces(text, &[a, b]), whole, "cut at {a}, {b}");
            }
        }
    }

    #[test]
    fn an_event_that_breaks_off_does_not_leak_into_the_next() {
        // The first event's JSON is cut short; the next event is scanned afresh.
        let text =
            "data: {\"result\":{\"taskId\":\"half\n\ndata: {\"result\":{\"taskId\":\"b\"}}\n\n";
        let out = sse_in_pieces(text, &[]);
        assert!(out.contains("\"taskId\":\"sealed<b>\""), "{out}");
        assert!(
            out.starts_with("data: {\"result\":{\"taskId\":\"half\n\n"),
            "{out}"
        );
    }
}
