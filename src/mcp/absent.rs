//! What a server answers for a tool, prompt or resource it does not have, as each SDK
//! answers it ([`absent_answer`]): the edge gives that answer for an entry a route's policy
//! hides. Where the edge cannot answer in a server's place (an HTTP+SSE POST, whose answer
//! travels on a stream), the hidden name goes to the server renamed to one no server has
//! ([`disguise`]), and comes back in its answer ([`restore_hidden`]).

use serde::Deserialize;
use serde_json::value::RawValue;

use super::json;
use super::jsonrpc::{self, code};
use super::target::{Kind, Target};

/// How the edge answers a request naming an entry the policy hides: as this server SDK
/// answers one that does not exist (route key `absent_as`).
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum AbsentAs {
    /// `@modelcontextprotocol/server` 2.x.
    #[default]
    Typescript,
    /// `@modelcontextprotocol/sdk` 1.x.
    TypescriptV1,
    /// The Python `mcp` SDK.
    Python,
}

/// The edge's answer to a request naming a hidden entry: what the server SDK `style`
/// answers for one that does not exist, measured against TS 2.4.0, TS 1.32.2 and Python
/// 2.3.0 servers (status, and the JSON-RPC message with its keys in the SDK's order).
#[allow(clippy::too_many_lines)] // One arm per SDK and entry kind: the catalogue of answers.
pub fn absent_answer(
    style: AbsentAs,
    modern: bool,
    method: &str,
    target: &Target,
    id: &serde_json::Value,
) -> (u16, String) {
    let q = |s: &str| serde_json::Value::String(s.to_owned()).to_string();
    let id = id.to_string();
    let value = &target.value;
    let error = |code: i64, message: &str, data: Option<String>| {
        jsonrpc::error(&id, code, message, data.as_deref())
    };
    let uri_data = || Some(format!("{{\"uri\":{}}}", q(value)));
    let method_kind = match method {
        "tools/call" => Kind::Tool,
        "prompts/get" => Kind::Prompt,
        "resources/read" => Kind::Resource,
        // `resources/subscribe`, `completion/complete`: none of the SDK servers serves
        // them unless it declares the capability; what they answer then is "no method".
        _ => {
            let status = if modern { 404 } else { 200 };
            let data = (style == AbsentAs::Python).then(|| q(method));
            return (
                status,
                error(code::METHOD_NOT_FOUND, "Method not found", data),
            );
        }
    };
    match (style, method_kind) {
        (AbsentAs::Typescript, Kind::Tool) => {
            (200, error(code::INVALID_PARAMS, &format!("Tool {value} not found"), None))
        }
        (AbsentAs::Typescript, Kind::Prompt) => {
            (200, error(code::INVALID_PARAMS, &format!("Prompt {value} not found"), None))
        }
        (AbsentAs::Typescript, Kind::Resource) => (
            200,
            error(code::INVALID_PARAMS, &format!("Resource not found: {value}"), uri_data()),
        ),
        (AbsentAs::TypescriptV1, Kind::Tool) => (
            200,
            format!(
                "{{\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":{}}}],\"isError\":true}},\"jsonrpc\":\"2.0\",\"id\":{id}}}",
                q(&format!("MCP error -32602: Tool {value} not found"))
            ),
        ),
        (AbsentAs::TypescriptV1, Kind::Prompt) => (
            200,
            error(code::INVALID_PARAMS, &format!("MCP error -32602: Prompt {value} not found"), None),
        ),
        (AbsentAs::TypescriptV1, Kind::Resource) => (
            200,
            error(code::INVALID_PARAMS, &format!("MCP error -32602: Resource {value} not found"), None),
        ),
        (AbsentAs::Python, Kind::Tool) => {
            let extra = if modern { ",\"resultType\":\"complete\"" } else { "" };
            (
                200,
                format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"content\":[{{\"text\":{},\"type\":\"text\"}}],\"isError\":true{extra}}}}}",
                    q(&format!("Unknown tool: {value}"))
                ),
            )
        }
        (AbsentAs::Python, Kind::Prompt) if modern => {
            (200, error(code::INTERNAL, "Internal server error", None))
        }
        (AbsentAs::Python, Kind::Prompt) => {
            (200, error(code::PYTHON_UNKNOWN_PROMPT, &format!("Unknown prompt: {value}"), None))
        }
        (AbsentAs::Python, Kind::Resource) => (
            if modern { 400 } else { 200 },
            error(code::INVALID_PARAMS, &format!("Unknown resource: {value}"), uri_data()),
        ),
    }
}

/// What a hidden entry is renamed to on an HTTP+SSE messages POST: a name no server has,
/// carrying the original (base64url), which the edge puts back in the answer on the stream.
/// A URI of a scheme of its own (`mcp-edge-hidden:<base64url>`), so a server that parses
/// resource URIs still finds it well-formed and answers "not found".
pub const HIDDEN_PREFIX: &str = "mcp-edge-hidden:";

/// Over HTTP+SSE the answer to a request travels on the event stream, which another replica
/// may hold: the edge cannot answer for the server there. The request goes on with the
/// entry it names renamed ([`HIDDEN_PREFIX`]), so the server answers "not found" on the
/// stream and runs nothing; [`restore_hidden`] puts the name back in that answer. Every
/// occurrence of the naming key is renamed (a repeated key cannot smuggle the real name).
/// `None` when the body does not have the shape its method names.
pub fn disguise(body: &[u8], method: &str) -> Option<Vec<u8>> {
    let (outer, key) = match method {
        "tools/call" | "prompts/get" => (None, "name"),
        "resources/read" | "resources/subscribe" => (None, "uri"),
        "completion/complete" => (Some("ref"), ""),
        _ => return None,
    };
    let text = std::str::from_utf8(body).ok()?;
    let mut renamed: Vec<(&str, Vec<u8>)> = Vec::new();
    for (k, params) in json::members(text)? {
        if k != "params" {
            continue;
        }
        let objects = match outer {
            None => vec![params],
            Some(outer) => json::members(params.get())?
                .into_iter()
                .filter(|(k, _)| k == outer)
                .map(|(_, v)| v)
                .collect(),
        };
        for object in objects {
            for (k, v) in json::members(object.get())? {
                let names = match outer {
                    Some(_) => k == "name" || k == "uri",
                    None => k == key,
                };
                if let Some(hidden) = names.then(|| hidden_name(v.get())).flatten() {
                    renamed.push((v.get(), hidden.into_bytes()));
                }
            }
        }
    }
    if renamed.is_empty() {
        return None;
    }
    let edits: Vec<(&str, &[u8])> = renamed.iter().map(|(v, w)| (*v, w.as_slice())).collect();
    json::splice(body, &edits)
}

/// The name no server has that carries `value` (a JSON string), as JSON.
fn hidden_name(value: &str) -> Option<String> {
    use base64::Engine;
    let original = serde_json::from_str::<String>(value).ok()?;
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(original.as_bytes());
    Some(format!("\"{HIDDEN_PREFIX}{encoded}\""))
}

/// Put back the names [`disguise`] hid in a message (inside JSON strings: the name comes back
/// JSON-escaped). `None` when there is none.
pub fn restore_hidden(message: &[u8]) -> Option<Vec<u8>> {
    use base64::Engine;
    let prefix = HIDDEN_PREFIX.as_bytes();
    let finder = memchr::memmem::Finder::new(prefix);
    let mut first = finder.find(message)?;
    let mut out = Vec::with_capacity(message.len());
    let mut at = 0;
    loop {
        let start = first + prefix.len();
        let end = message[start..]
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_'))
            .map_or(message.len(), |n| start + n);
        let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&message[start..end])
            .ok()
            .and_then(|d| String::from_utf8(d).ok());
        out.extend_from_slice(&message[at..first]);
        match decoded {
            Some(name) => {
                let quoted = serde_json::Value::String(name).to_string();
                out.extend_from_slice(&quoted.as_bytes()[1..quoted.len() - 1]);
            }
            None => out.extend_from_slice(&message[first..end]),
        }
        at = end;
        match finder.find(&message[at..]) {
            Some(n) => first = at + n,
            None => break,
        }
    }
    out.extend_from_slice(&message[at..]);
    Some(out)
}

/// A JSON-RPC error, or a result flagged `isError`: what a server answers for a name it
/// does not have (where [`restore_hidden`] may put a hidden name back).
pub fn is_an_error(message: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        error: Option<&'a RawValue>,
        #[serde(borrow)]
        result: Option<json::Members<'a>>,
    }
    if message.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return false;
    }
    let Ok(m) = serde_json::from_slice::<Message>(message) else {
        return false;
    };
    m.error.is_some()
        || matches!(m.result, Some(json::Members::Object(fields))
            if fields.iter().any(|(k, v)| k == "isError" && v.get() == "true"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_entries_are_answered_as_the_sdk_answers_absent_ones() {
        let t = |kind, value: &str| Target {
            kind,
            value: value.into(),
        };
        let id = serde_json::json!(7);
        // Bytes measured from the SDK servers (see docs/identity.md).
        assert_eq!(
            absent_answer(AbsentAs::Typescript, true, "tools/call", &t(Kind::Tool, "no_such_tool"), &id),
            (200, r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"Tool no_such_tool not found"}}"#.to_string())
        );
        assert_eq!(
            absent_answer(
                AbsentAs::Typescript,
                false,
                "resources/read",
                &t(Kind::Resource, "file:///no/such"),
                &id
            )
            .1,
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"Resource not found: file:///no/such","data":{"uri":"file:///no/such"}}}"#
        );
        assert_eq!(
            absent_answer(
                AbsentAs::TypescriptV1,
                false,
                "tools/call",
                &t(Kind::Tool, "no_such_tool"),
                &id
            )
            .1,
            r#"{"result":{"content":[{"type":"text","text":"MCP error -32602: Tool no_such_tool not found"}],"isError":true},"jsonrpc":"2.0","id":7}"#
        );
        assert_eq!(
            absent_answer(
                AbsentAs::Python,
                false,
                "tools/call",
                &t(Kind::Tool, "no_such_tool"),
                &id
            )
            .1,
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"text":"Unknown tool: no_such_tool","type":"text"}],"isError":true}}"#
        );
        assert_eq!(
            absent_answer(AbsentAs::Python, true, "resources/read", &t(Kind::Resource, "file:///no/such"), &id),
            (400, r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"Unknown resource: file:///no/such","data":{"uri":"file:///no/such"}}}"#.to_string())
        );
        assert_eq!(
            absent_answer(AbsentAs::Python, true, "completion/complete", &t(Kind::Prompt, "p"), &id),
            (404, r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"Method not found","data":"completion/complete"}}"#.to_string())
        );
    }

    #[test]
    fn a_disguised_name_comes_back_in_the_answer() {
        let body = br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"sec\"ret","arguments":{"name":"keep"},"name":"b_x"}}"#;
        let out = String::from_utf8(disguise(body, "tools/call").unwrap()).unwrap();
        assert!(!out.contains("sec") && !out.contains("b_x"), "{out}");
        assert!(out.contains(r#""arguments":{"name":"keep"}"#), "{out}");
        let answer = format!(
            r#"{{"jsonrpc":"2.0","id":4,"error":{{"code":-32602,"message":"Tool {} not found"}}}}"#,
            out.split(HIDDEN_PREFIX)
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .map(|e| format!("{HIDDEN_PREFIX}{e}"))
                .unwrap()
        );
        let restored = String::from_utf8(restore_hidden(answer.as_bytes()).unwrap()).unwrap();
        assert_eq!(
            restored,
            r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"Tool sec\"ret not found"}}"#
        );
        let complete = br#"{"id":1,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"p"},"argument":{"name":"a","value":""}}}"#;
        let out = String::from_utf8(disguise(complete, "completion/complete").unwrap()).unwrap();
        assert!(
            out.contains(r#""argument":{"name":"a""#) && !out.contains(r#""name":"p""#),
            "{out}"
        );
        assert!(restore_hidden(b"{}").is_none());
    }
}
