//! An answer to one JSON-RPC request judged the same way whatever its framing, a JSON body or
//! the event of an event stream that answers it: `jsonrpc` is `"2.0"`, the id is the
//! request's, exactly one of `result` and `error`, an error has an integer `code` and a string
//! `message` (JSON-RPC 2.0 §5), and the body is labelled `application/json` or
//! `text/event-stream` (2026-07-28 Streamable HTTP). In an event stream the answer is the
//! first response among the messages ([`is_response`]); notifications before it are not.

use serde_json::Value;

use super::media::Media;

/// What is wrong with an answer's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flaw {
    /// `jsonrpc` missing, or not `"2.0"`.
    Version,
    /// The id is not the request's (the one it has, as JSON).
    OtherId(String),
    ResultAndError,
    NeitherResultNorError,
    /// An error without an integer `code` or a string `message`.
    ErrorShape,
    /// A message in a body labelled neither JSON nor an event stream (its `Content-Type`).
    Media(String),
}

impl std::fmt::Display for Flaw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Flaw::Version => f.write_str("no \"jsonrpc\": \"2.0\""),
            Flaw::OtherId(id) => write!(f, "the id is {id}, not the request's"),
            Flaw::ResultAndError => f.write_str("both result and error"),
            Flaw::NeitherResultNorError => f.write_str("neither result nor error"),
            Flaw::ErrorShape => f.write_str("an error without an integer code and a message"),
            Flaw::Media(t) => write!(f, "labelled {t:?}, not JSON or an event stream"),
        }
    }
}

/// A response (a result or an error, no method): what answers a request among the messages
/// of an event stream, before its id is compared.
pub fn is_response(message: &Value) -> bool {
    message.get("method").is_none()
        && (message.get("result").is_some() || message.get("error").is_some())
}

/// The flaws of `message`, the answer to the request whose id is `id`.
pub fn flaws(message: &Value, id: &Value) -> Vec<Flaw> {
    let mut out = Vec::new();
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        out.push(Flaw::Version);
    }
    match message.get("id") {
        Some(seen) if seen == id => {}
        Some(seen) => out.push(Flaw::OtherId(seen.to_string())),
        None => out.push(Flaw::OtherId("missing".to_owned())),
    }
    match (message.get("result"), message.get("error")) {
        (Some(_), Some(_)) => out.push(Flaw::ResultAndError),
        (None, None) => out.push(Flaw::NeitherResultNorError),
        (None, Some(e)) => {
            let code = e.get("code").is_some_and(|c| c.is_i64() || c.is_u64());
            let text = e.get("message").is_some_and(Value::is_string);
            if !(code && text) {
                out.push(Flaw::ErrorShape);
            }
        }
        (Some(_), None) => {}
    }
    out
}

/// The flaw of the label of a body that carried a message, if any.
pub fn media_flaw(content_type: Option<&str>) -> Option<Flaw> {
    match Media::of(content_type.map(str::as_bytes)) {
        Media::Json | Media::EventStream => None,
        Media::Other => Some(Flaw::Media(content_type.unwrap_or("nothing").to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_flaw_is_named() {
        let id = json!("r-1");
        let cases = [
            (json!({"jsonrpc":"2.0","id":"r-1","result":{}}), vec![]),
            (
                json!({"jsonrpc":"2.0","id":"r-1","error":{"code":-32602,"message":"x"}}),
                vec![],
            ),
            (json!({"id":"r-1","result":{}}), vec![Flaw::Version]),
            (
                json!({"jsonrpc":"2.0","id":1,"result":{}}),
                vec![Flaw::OtherId("1".into())],
            ),
            (
                json!({"jsonrpc":"2.0","result":{}}),
                vec![Flaw::OtherId("missing".into())],
            ),
            (
                json!({"jsonrpc":"2.0","id":"r-1","result":{},"error":{"code":1,"message":"x"}}),
                vec![Flaw::ResultAndError],
            ),
            (
                json!({"jsonrpc":"2.0","id":"r-1"}),
                vec![Flaw::NeitherResultNorError],
            ),
            (
                json!({"jsonrpc":"2.0","id":"r-1","error":{"code":"-1"}}),
                vec![Flaw::ErrorShape],
            ),
        ];
        for (message, expected) in cases {
            assert_eq!(flaws(&message, &id), expected, "{message}");
        }
        assert!(is_response(&json!({"id":1,"error":{}})));
        assert!(!is_response(&json!({"method":"notifications/progress"})));
        assert_eq!(media_flaw(Some("Application/JSON; charset=utf-8")), None);
        assert_eq!(media_flaw(Some("text/event-stream")), None);
        assert_eq!(
            media_flaw(Some("text/plain")),
            Some(Flaw::Media("text/plain".into()))
        );
    }
}
