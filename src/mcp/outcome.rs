//! How an answer ended, read as it streams by without holding it: the JSON-RPC error code of
//! a response (`error.code`), or a tool result flagged `isError`. [`Outcome`] follows the JSON
//! structure byte by byte and keeps a few bytes of state; over an event stream it reads each
//! event's data as a message of its own ([`Outcome::feed_event_stream`]).

/// Keys are compared when at most this long (`error`, `result`, `code`, `isError`).
const MAX_KEY: usize = 8;
/// A number longer than this is no JSON-RPC code anyone sends.
const MAX_CODE: usize = 12;

/// What an answer said about how its request ended.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Ended {
    /// The JSON-RPC error code of an error response (its text, `-32602`).
    pub error_code: Option<String>,
    /// A result with `isError: true` (a tool that failed).
    pub tool_error: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Top {
    Other,
    Error,
    Result,
}

/// The scan of one answer (a JSON body, or the messages of an event stream).
#[derive(Debug, Default)]
pub struct Outcome {
    ended: Ended,
    json: Scan,
    /// Event stream framing: at the start of a line, in a `data:` line's value, elsewhere.
    line: Line,
    prefix: Vec<u8>,
    after_cr: bool,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Line {
    #[default]
    Start,
    Data,
    Other,
}

/// The JSON structure follower.
#[derive(Debug)]
struct Scan {
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// Reading a key at depth 1 or 2 (its bytes collect in `key`).
    in_key: bool,
    key: Short<{ MAX_KEY + 1 }>,
    /// The member of the top-level object we are in.
    top: Top,
    /// The value now starting is the one looked for: `error.code`, `result.isError`.
    wanted: Option<Wanted>,
    value: Short<{ MAX_CODE + 1 }>,
    /// Collecting the wanted scalar value's bytes into `value`.
    collecting: bool,
    /// After a key's colon, before its value.
    expect_value: bool,
    /// After `{` or `,`: a string now is a key.
    expect_key: bool,
}

/// The bytes that change the scan outside a string.
const STRUCTURE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    let bytes = *b"\"{}[],:";
    while i < bytes.len() {
        t[bytes[i] as usize] = true;
        i += 1;
    }
    t
};

/// At most `N` bytes kept in place; a longer run keeps its first `N` (and says so: its
/// length is `N`, one more than any key or code compared).
#[derive(Debug, Clone, Copy)]
struct Short<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> Default for Short<N> {
    fn default() -> Self {
        Short {
            bytes: [0; N],
            len: 0,
        }
    }
}

impl<const N: usize> Short<N> {
    fn push(&mut self, b: u8) {
        if let Some(slot) = self.bytes.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }

    fn clear(&mut self) {
        self.len = 0;
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wanted {
    Code,
    IsError,
}

impl Default for Scan {
    fn default() -> Self {
        Scan {
            depth: 0,
            in_string: false,
            escaped: false,
            in_key: false,
            key: Short::default(),
            top: Top::Other,
            wanted: None,
            value: Short::default(),
            collecting: false,
            expect_value: false,
            expect_key: false,
        }
    }
}

impl Outcome {
    pub fn new() -> Outcome {
        Outcome::default()
    }

    /// What the answer said so far.
    pub fn ended(&self) -> &Ended {
        &self.ended
    }

    /// One chunk of a JSON body.
    pub fn feed_json(&mut self, chunk: &[u8]) {
        self.json.feed(chunk, &mut self.ended);
    }

    /// One chunk of an event stream: the `data:` lines of each event are one message.
    pub fn feed_event_stream(&mut self, chunk: &[u8]) {
        let mut i = 0;
        while i < chunk.len() {
            let b = chunk[i];
            if std::mem::take(&mut self.after_cr) && b == b'\n' {
                i += 1;
                continue;
            }
            if b == b'\r' || b == b'\n' {
                self.end_line();
                self.after_cr = b == b'\r';
                i += 1;
                continue;
            }
            match self.line {
                Line::Start => {
                    self.prefix.push(b);
                    self.classify();
                    i += 1;
                }
                // The rest of the line at once: data to the scan, anything else skipped.
                Line::Data | Line::Other => {
                    let rest = &chunk[i..];
                    let end = memchr::memchr2(b'\r', b'\n', rest).unwrap_or(rest.len());
                    if self.line == Line::Data {
                        self.json.feed(&rest[..end], &mut self.ended);
                    }
                    i += end;
                }
            }
        }
    }

    fn classify(&mut self) {
        const DATA: &[u8] = b"data:";
        let p = &self.prefix;
        if p.len() <= DATA.len() && DATA.starts_with(p) {
            return;
        }
        if p.starts_with(DATA) {
            self.line = Line::Data;
            let rest = p[DATA.len()..].to_vec();
            self.prefix.clear();
            // One optional space after the colon.
            let value = rest.strip_prefix(b" ").unwrap_or(&rest);
            self.json.feed(value, &mut self.ended);
        } else {
            self.line = Line::Other;
            self.prefix.clear();
        }
    }

    fn end_line(&mut self) {
        let blank = self.line == Line::Start && self.prefix.is_empty();
        if blank {
            // An event ends: the next data is another message.
            self.json = Scan::default();
        }
        if self.line == Line::Data {
            // Lines of one event's data join with a newline: JSON whitespace.
            self.json.byte(b'\n', &mut self.ended);
        }
        self.line = Line::Start;
        self.prefix.clear();
    }
}

/// A whole JSON answer that holds neither `"error"` nor `"isError"` anywhere ended as the
/// scan of it would say, without a scan: the scan sets `error_code` only under a top-level
/// key whose raw bytes are `error`, and `tool_error` only under a key whose raw bytes are
/// `isError` (keys are compared as written, escapes included), and either key is those
/// bytes between quotes, contiguous in a whole answer. `None`: one of them is there (in a
/// key or anywhere else): scan it.
pub fn whole_json(answer: &[u8]) -> Option<Ended> {
    let absent = |needle: &[u8]| memchr::memmem::find(answer, needle).is_none();
    (absent(b"\"error\"") && absent(b"\"isError\"")).then(Ended::default)
}

/// How many bytes of a string's inside come before its next quote or backslash (all of
/// `rest` when none does). Most strings of an answer are short (keys, `"text"`, ids): their
/// first bytes are looked at one by one, and only a longer run goes to the vectorised search,
/// whose setup costs more than a short string's whole scan.
fn string_run(rest: &[u8]) -> usize {
    const SHORT: usize = 16;
    let head = &rest[..rest.len().min(SHORT)];
    match head.iter().position(|&b| b == b'"' || b == b'\\') {
        Some(at) => at,
        None if rest.len() <= SHORT => rest.len(),
        None => SHORT + memchr::memchr2(b'"', b'\\', &rest[SHORT..]).unwrap_or(rest.len() - SHORT),
    }
}

impl Scan {
    /// A run of bytes; the inside of a string that is not a key is skipped to its next quote
    /// or backslash at once (most of an answer is text in strings).
    fn feed(&mut self, bytes: &[u8], ended: &mut Ended) {
        let mut i = 0;
        while i < bytes.len() {
            if self.in_string && !self.escaped {
                // A string's bytes up to its next quote or backslash at once: a value's
                // skipped, a key's kept (its first bytes: keys compared are short).
                let rest = &bytes[i..];
                let at = string_run(rest);
                if self.in_key {
                    for &b in &rest[..at.min(MAX_KEY + 1)] {
                        self.key.push(b);
                    }
                }
                i += at;
                if i == bytes.len() {
                    return;
                }
            } else if !self.in_string && !self.collecting && !self.expect_value {
                // Outside strings only the structure matters: whitespace and the bytes of
                // values nobody looks for change nothing.
                match bytes[i..].iter().position(|b| STRUCTURE[usize::from(*b)]) {
                    Some(at) => i += at,
                    None => return,
                }
            }
            self.byte(bytes[i], ended);
            i += 1;
        }
    }

    fn byte(&mut self, b: u8, ended: &mut Ended) {
        if self.in_string {
            self.string_byte(b);
            return;
        }
        if self.collecting {
            if matches!(b, b',' | b'}' | b']') || b.is_ascii_whitespace() {
                self.collecting = false;
                self.finish_value(ended);
            } else {
                // One byte over the bound marks the value unreadable (never a prefix of it).
                self.value.push(b);
                return;
            }
        }
        match b {
            b'"' => {
                self.in_string = true;
                self.in_key = self.is_key_position();
                self.key.clear();
                if !self.in_key {
                    self.wanted = None;
                }
                self.expect_value = false;
                self.expect_key = false;
            }
            b'{' | b'[' => {
                self.depth += 1;
                self.wanted = None;
                self.expect_value = false;
                self.expect_key = b == b'{';
            }
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                if self.depth <= 1 {
                    self.top = if self.depth == 0 {
                        Top::Other
                    } else {
                        self.top
                    };
                }
            }
            b':' => self.expect_value = self.wanted.is_some(),
            b',' => {
                self.wanted = None;
                self.expect_key = true;
            }
            _ if b.is_ascii_whitespace() => {}
            _ => {
                if self.expect_value {
                    // A scalar value starts: collect it.
                    self.expect_value = false;
                    self.collecting = true;
                    self.value.clear();
                    self.value.push(b);
                }
            }
        }
    }

    /// A key sits at depth 1 (top level) or 2 (inside `error` or `result`), before a colon.
    fn is_key_position(&self) -> bool {
        self.expect_key && (self.depth == 1 || (self.depth == 2 && self.top != Top::Other))
    }

    fn string_byte(&mut self, b: u8) {
        if self.escaped {
            self.escaped = false;
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.in_string = false;
            if self.in_key {
                self.in_key = false;
                self.key_ended();
            }
            return;
        }
        if self.in_key {
            self.key.push(b);
        }
    }

    fn key_ended(&mut self) {
        let key = self.key.as_slice();
        match self.depth {
            1 => {
                self.top = match key {
                    b"error" => Top::Error,
                    b"result" => Top::Result,
                    _ => Top::Other,
                };
            }
            2 => {
                self.wanted = match (self.top, key) {
                    (Top::Error, b"code") => Some(Wanted::Code),
                    (Top::Result, b"isError") => Some(Wanted::IsError),
                    _ => None,
                };
            }
            _ => {}
        }
    }

    fn finish_value(&mut self, ended: &mut Ended) {
        let value = std::mem::take(&mut self.value);
        let value = value.as_slice();
        match self.wanted.take() {
            Some(Wanted::Code) => {
                // An integer as JSON writes one (no leading zeros, no fraction), within
                // the bound; its canonical text.
                let code = std::str::from_utf8(value).ok().filter(|v| {
                    let digits = v.strip_prefix('-').unwrap_or(v);
                    value.len() <= MAX_CODE
                        && !digits.is_empty()
                        && digits.bytes().all(|b| b.is_ascii_digit())
                        && (digits == "0" || !digits.starts_with('0'))
                });
                if let Some(code) = code.and_then(|c| c.parse::<i64>().ok()) {
                    ended.error_code = Some(code.to_string());
                }
            }
            Some(Wanted::IsError) => ended.tool_error |= value == b"true",
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(text: &str, step: usize) -> Ended {
        let mut o = Outcome::new();
        for chunk in text.as_bytes().chunks(step) {
            o.feed_json(chunk);
        }
        o.ended().clone()
    }

    #[test]
    fn a_whole_answer_without_the_keys_reads_as_its_scan_would() {
        let answers = [
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","content":[{"type":"text","text":"ok"}]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"\"error\""}]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"\u0065rror":{"code":5}}"#,
            r#"{"id":1,"result":{"is\u0045rror":true}}"#,
            r#"{"error""#,
            "",
            "[]",
        ];
        let mut skipped = 0;
        for answer in answers {
            let scanned = json(answer, answer.len().max(1));
            if let Some(ended) = whole_json(answer.as_bytes()) {
                assert_eq!(ended, scanned, "{answer}");
                skipped += 1;
            } else {
                assert!(
                    answer.contains("\"error\"") || answer.contains("\"isError\""),
                    "{answer}"
                );
            }
        }
        assert_eq!(skipped, 6, "the answers without either key are not scanned");
    }

    #[test]
    fn a_string_run_ends_where_a_search_of_every_byte_ends() {
        for len in 0..48 {
            for stop in [None, Some(b'"'), Some(b'\\')] {
                for at in 0..=len {
                    let mut run = vec![b'x'; len];
                    if let (Some(b), true) = (stop, at < len) {
                        run[at] = b;
                    }
                    let expected = run
                        .iter()
                        .position(|&b| b == b'"' || b == b'\\')
                        .unwrap_or(len);
                    assert_eq!(string_run(&run), expected, "{len} {stop:?} {at}");
                }
            }
        }
    }

    #[test]
    fn error_codes_and_tool_errors_are_read_at_any_split() {
        let error =
            r#"{"jsonrpc":"2.0","id":1,"error":{"message":"x","code": -32602 ,"data":{"code":7}}}"#;
        let tool = r#"{"jsonrpc":"2.0","id":"a","result":{"content":[{"type":"text","text":"\"isError\":true"}],"isError":true}}"#;
        let fine = r#"{"jsonrpc":"2.0","id":2,"result":{"content":[],"isError":false,"error":{"code":1}}}"#;
        for step in 1..=error.len() {
            assert_eq!(
                json(error, step).error_code.as_deref(),
                Some("-32602"),
                "step {step}"
            );
            assert!(json(tool, step).tool_error, "step {step}");
            assert_eq!(json(fine, step), Ended::default(), "step {step}");
        }
        let nested = r#"{"result":{"x":{"isError":true}},"id":{"error":{"code":5}}}"#;
        assert_eq!(
            json(nested, 3),
            Ended::default(),
            "only the top-level members count"
        );
        for odd in ["-326001234567890", "-32600000000.5", "-0032601", "1e3", "-"] {
            let text = format!(r#"{{"error":{{"code":{odd},"message":"m"}}}}"#);
            assert_eq!(json(&text, 1).error_code, None, "{odd} is no code");
        }
        let values = r#"{"id":"error","jsonrpc":"result","result":{"isError":false}}"#;
        assert_eq!(
            json(values, 2),
            Ended::default(),
            "values named like keys are values"
        );
    }

    #[test]
    fn each_event_of_a_stream_is_a_message() {
        let stream = "event: message\r\ndata: {\"method\":\"notifications/progress\",\"params\":{\"error\":{\"code\":9}}}\r\n\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\r\ndata: \"error\":{\"code\":-32603,\"message\":\"m\"}}\r\n\r\n";
        for step in 1..=stream.len() {
            let mut o = Outcome::new();
            for chunk in stream.as_bytes().chunks(step) {
                o.feed_event_stream(chunk);
            }
            assert_eq!(
                o.ended().error_code.as_deref(),
                Some("-32603"),
                "step {step}"
            );
        }
    }
}
