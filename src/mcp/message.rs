//! One JSON-RPC message read strictly, for the edge's edits (stdio pipes, the bridge): each of
//! its keys, and each key the edge edits, appears once (a repeated one is refused: see
//! `mcp/README.md`), and the values are left as written.
//!
//! On a stdio process's pipes only the values the edge owns change: a request's `id` and its
//! `params._meta.progressToken` on the way in (both become the process-unique number the edge
//! chose, [`numbered`]), the same two on the way out, and `params.requestId` of a
//! `notifications/cancelled`; and a request or notification without a trace context of its
//! own gets the one the edge's headers carried in `params._meta` ([`with_trace_context`]:
//! a pipe has no headers). Every other byte is kept as it came.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::json;

/// The parts of a message the bridge reads, borrowed from the line.
#[derive(Debug, Deserialize)]
pub struct Message<'a> {
    #[serde(borrow, default)]
    pub id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub error: Option<&'a RawValue>,
}

impl<'a> Message<'a> {
    /// One JSON-RPC message (a batch, or anything that is not an object, is refused).
    pub fn parse(text: &'a str) -> Option<Message<'a>> {
        if !text.trim_start().starts_with('{') {
            return None;
        }
        serde_json::from_str(text).ok()
    }

    /// A request: a method and an id (`null` is not an id).
    pub fn is_request(&self) -> bool {
        self.method.is_some() && self.id.is_some_and(|id| id.get() != "null")
    }

    pub fn is_notification(&self) -> bool {
        self.method.is_some() && self.id.is_none()
    }

    /// A response: an id and no method (`"result": null` is a result).
    pub fn is_response(&self) -> bool {
        self.method.is_none() && self.id.is_some()
    }

    /// `params._meta.progressToken`, as written.
    pub fn progress_token(&self) -> Option<&'a RawValue> {
        field(field(self.params?, "_meta")?, "progressToken")
    }

    /// `params.<key>`, as written.
    pub fn param(&self, key: &str) -> Option<&'a RawValue> {
        field(self.params?, key)
    }
}

/// A client's request as a process gets it: `number` as its id and progress token.
#[derive(Debug)]
pub struct Numbered {
    /// One line (no newline in it).
    pub line: String,
    /// The client's id and progress token, as written.
    pub id: String,
    pub token: Option<String>,
}

/// `text` (one JSON-RPC request) with `number` as its `id` and its
/// `params._meta.progressToken` (when it has one); `None` if it is not one request.
pub fn numbered(text: &str, number: u64) -> Option<Numbered> {
    let msg = Message::parse(text)?;
    let id = msg.id?;
    let n = number.to_string();
    let token = msg.progress_token();
    if msg.params.is_some_and(has_repeated_progress_token) {
        return None;
    }
    let mut edits = vec![(id.get(), n.as_str())];
    if let Some(t) = token {
        edits.push((t.get(), n.as_str()));
    }
    let mut line = json::splice_str(text, &edits)?;
    line.retain(|c| c != '\n' && c != '\r');
    Some(Numbered {
        line,
        id: id.get().to_string(),
        token: token.map(|t| t.get().to_string()),
    })
}

/// W3C trace context as HTTP headers carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceHeaders {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

impl TraceHeaders {
    /// From header values: a well-formed `traceparent` (version, ids and flags in lower-case
    /// hex) and a `tracestate` of visible ASCII, at most 512 bytes (else left out).
    pub fn new(traceparent: &str, tracestate: Option<&str>) -> Option<TraceHeaders> {
        let parts: Vec<&str> = traceparent.split('-').collect();
        let hex = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        let well_formed = parts.len() >= 4
            && hex(parts[0], 2)
            && hex(parts[1], 32)
            && hex(parts[2], 16)
            && hex(parts[3], 2)
            && traceparent.len() <= 256;
        if !well_formed {
            return None;
        }
        let tracestate = tracestate
            .filter(|s| !s.is_empty() && s.len() <= 512)
            .filter(|s| s.bytes().all(|b| (b' '..=b'~').contains(&b)));
        Some(TraceHeaders {
            traceparent: traceparent.to_string(),
            tracestate: tracestate.map(str::to_string),
        })
    }
}

/// `text` (one request or notification) with `trace` in `params._meta` (as the MCP
/// conventions carry trace context in a message): `traceparent` and `tracestate` added as
/// the last members of `_meta`, which is added to `params` (and `params` to the message)
/// when absent. `None` when nothing changes: the message carries a trace context of its own
/// (`traceparent` or `tracestate`: the body is the client's), it is not a request or
/// notification, or `params` or `_meta` is not one object (`"params": null` included).
pub fn with_trace_context(text: &str, trace: &TraceHeaders) -> Option<String> {
    let msg = Message::parse(text)?;
    msg.method.as_ref()?;
    let string = |v: &str| serde_json::to_string(v).ok();
    let mut members = format!(r#""traceparent":{}"#, string(&trace.traceparent)?);
    if let Some(state) = &trace.tracestate {
        members.push_str(&format!(r#","tracestate":{}"#, string(state)?));
    }
    let top = text.trim();
    // The raw member: `Message` reads `"params": null` as no params.
    let out = match json::member(top, "params").ok()? {
        None => json::append_member(
            text.as_bytes(),
            top,
            &format!(r#""params":{{"_meta":{{{members}}}}}"#),
        )?,
        Some(params) if json::is_object(params.get()) => {
            match json::member(params.get(), "_meta").ok()? {
                None => json::append_member(
                    text.as_bytes(),
                    params.get(),
                    &format!(r#""_meta":{{{members}}}"#),
                )?,
                Some(meta) if json::is_object(meta.get()) => {
                    let has = |key| json::member(meta.get(), key).map_or(true, |v| v.is_some());
                    if has("traceparent") || has("tracestate") {
                        return None;
                    }
                    json::append_member(text.as_bytes(), meta.get(), &members)?
                }
                Some(_) => return None,
            }
        }
        Some(_) => return None,
    };
    String::from_utf8(out).ok()
}

/// `params._meta.progressToken` (or `params._meta`) appears more than once: which one a
/// server reads is not the edge's to guess, so it cannot be the one renumbered.
fn has_repeated_progress_token(params: &RawValue) -> bool {
    match json::member(params.get(), "_meta") {
        Err(_) => true,
        Ok(Some(meta)) => json::member(meta.get(), "progressToken").is_err(),
        Ok(None) => false,
    }
}

/// `key` of a JSON object, borrowed; `None` when absent, not an object, or repeated.
pub fn field<'a>(object: &'a RawValue, key: &str) -> Option<&'a RawValue> {
    json::member(object.get(), key).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_and_progress_token_are_replaced_and_nothing_else() {
        let line = r#"{ "jsonrpc":"2.0", "id" : "a\"b", "method":"tools/call","params":{"name":"slow","_meta":{"progressToken": 7 ,"x":1},"arguments":{"id":3}}}"#;
        let m = Message::parse(line).unwrap();
        assert!(m.is_request());
        assert_eq!(m.method.as_deref(), Some("tools/call"));
        let token = m.progress_token().unwrap();
        assert_eq!(token.get(), "7");
        let out =
            json::splice_str(line, &[(token.get(), "12"), (m.id.unwrap().get(), "12")]).unwrap();
        assert_eq!(
            out,
            r#"{ "jsonrpc":"2.0", "id" : 12, "method":"tools/call","params":{"name":"slow","_meta":{"progressToken": 12 ,"x":1},"arguments":{"id":3}}}"#
        );
    }

    #[test]
    fn trace_context_goes_into_meta_and_nothing_else_changes() {
        let t = TraceHeaders::new(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            Some("a=1"),
        )
        .unwrap();
        let tp = r#""traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"a=1""#;
        assert_eq!(
            with_trace_context(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#, &t).unwrap(),
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"_meta":{{{tp}}}}}}}"#
            )
        );
        assert_eq!(
            with_trace_context(r#"{"id":1,"method":"x","params":{ "a" : [1] }}"#, &t).unwrap(),
            format!(r#"{{"id":1,"method":"x","params":{{ "a" : [1] ,"_meta":{{{tp}}}}}}}"#)
        );
        assert_eq!(
            with_trace_context(
                r#"{"id":1,"method":"x","params":{"_meta":{"progressToken":3}}}"#,
                &t
            )
            .unwrap(),
            format!(r#"{{"id":1,"method":"x","params":{{"_meta":{{"progressToken":3,{tp}}}}}}}"#)
        );
        let own = r#"{"id":1,"method":"x","params":{"_meta":{"traceparent":"00-1-2-01"}}}"#;
        assert!(
            with_trace_context(own, &t).is_none(),
            "the client's own context stays"
        );
        let state = r#"{"id":1,"method":"x","params":{"_meta":{"tracestate":"a=2"}}}"#;
        assert!(
            with_trace_context(state, &t).is_none(),
            "never two tracestate keys"
        );
        let null = r#"{"id":1,"method":"x","params":null}"#;
        assert!(with_trace_context(null, &t).is_none(), "no second params");
        let twice = r#"{"id":1,"method":"x","params":{"_meta":{},"_meta":{}}}"#;
        assert!(
            with_trace_context(twice, &t).is_none(),
            "an ambiguous _meta is left alone"
        );
        assert!(with_trace_context(r#"{"id":1,"result":{}}"#, &t).is_none());
        assert!(TraceHeaders::new("00-xyz-b7ad6b7169203331-01", None).is_none());
        let bad_state = TraceHeaders::new(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            Some("a=\"\n"),
        )
        .unwrap();
        assert_eq!(
            bad_state.tracestate, None,
            "a state that is not visible ASCII is left out"
        );
    }

    #[test]
    fn kinds_and_refusals() {
        let n =
            Message::parse(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert!(n.is_notification() && !n.is_request());
        let r = Message::parse(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#).unwrap();
        assert!(r.is_response());
        let null = Message::parse(r#"{"jsonrpc":"2.0","id":5,"result":null}"#).unwrap();
        assert!(null.is_response(), "a null result is a result");
        let null_id = Message::parse(r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#).unwrap();
        assert!(!null_id.is_request());
        assert!(Message::parse("[{}]").is_none(), "batches are refused");
        assert!(Message::parse("not json").is_none());
        assert!(
            Message::parse(r#"{"id":1,"id":2,"method":"x"}"#).is_none(),
            "a duplicate id is ambiguous"
        );
        assert!(
            numbered(
                r#"{"id":1,"method":"x","params":{"_meta":{"progressToken":1,"progressToken":2}}}"#,
                5
            )
            .is_none(),
            "a repeated progress token is ambiguous"
        );
        let n = numbered(
            r#"{"id":"a","method":"x","params":{"_meta":{"progressToken":"t"}}}"#,
            5,
        )
        .unwrap();
        assert_eq!(
            (n.line.as_str(), n.id.as_str(), n.token.as_deref()),
            (
                r#"{"id":5,"method":"x","params":{"_meta":{"progressToken":5}}}"#,
                r#""a""#,
                Some(r#""t""#)
            )
        );
    }
}
