//! One JSON-RPC message read strictly, for the edge's edits (stdio pipes, the bridge): each of
//! its keys, and each key the edge edits, appears once (a repeated one is refused: see
//! `mcp/README.md`), and the values are left as written.
//!
//! On a stdio process's pipes only the values the edge owns change: a request's `id` and its
//! `params._meta.progressToken` on the way in (both become the process-unique number the edge
//! chose, [`numbered`]), the same two on the way out, and `params.requestId` of a
//! `notifications/cancelled`. Every other byte is kept as it came.

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
