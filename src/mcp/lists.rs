//! What the edge says about tools, prompts and resources a route's policy hides: list answers
//! without the hidden entries ([`filter_list`], [`ListFilter`] for answers as they stream), a
//! `subscriptions/listen` without hidden URIs ([`filter_subscriptions`]), the answer a server
//! SDK gives for an absent entry ([`absent_answer`]), and hidden names renamed on their way to
//! a server and put back in its answer ([`disguise`], [`restore_hidden`]).
//!
//! Which entries are hidden is the caller's grant's business ([`Visibility`]); here is only
//! how lists, requests and answers carry them. A repeated key in a list answer or a
//! subscription is refused (see `mcp/README.md`).

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::json::{self, Ambiguous};
use super::jsonrpc;
use super::rewrite::{Pass, Rewritten, Transform};
use super::target::{Kind, Target};
use crate::error::code;

/// What a caller may see, asked entry by entry.
pub trait Visibility {
    fn shows(&self, kind: Kind, name: &str) -> bool;
    /// A resource template: shown when every URI it can produce would be.
    fn shows_template(&self, template: &str) -> bool;
}

/// The requests whose answers a policy filters.
pub const LIST_METHODS: [&str; 4] = [
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
];

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
    let message = json::members(text)?;
    let mut cuts: Vec<(usize, usize, String)> = Vec::new();
    for (k, params) in &message {
        if k != "params" {
            continue;
        }
        let mut objects = vec![*params];
        if let Some(outer) = outer {
            objects = json::members(params.get())?
                .into_iter()
                .filter(|(k, _)| k == outer)
                .map(|(_, v)| v)
                .collect();
        }
        for object in objects {
            for (k, v) in json::members(object.get())? {
                let renamed = if outer.is_some() {
                    k == "name" || k == "uri"
                } else {
                    k == key
                };
                if !renamed {
                    continue;
                }
                let Ok(original) = serde_json::from_str::<String>(v.get()) else {
                    continue;
                };
                use base64::Engine;
                let encoded =
                    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(original.as_bytes());
                let start = json::span(body, v.get())?.start;
                cuts.push((
                    start,
                    start + v.get().len(),
                    format!("\"{HIDDEN_PREFIX}{encoded}\""),
                ));
            }
        }
    }
    if cuts.is_empty() {
        return None;
    }
    cuts.sort_by_key(|c| c.0);
    let mut out = Vec::with_capacity(body.len() + 32);
    let mut at = 0;
    for (start, end, replacement) in cuts {
        out.extend_from_slice(body.get(at..start)?);
        out.extend_from_slice(replacement.as_bytes());
        at = end;
    }
    out.extend_from_slice(&body[at..]);
    Some(out)
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

/// A `subscriptions/listen` request with the hidden URIs cut from
/// `params.notifications.resourceSubscriptions` (as if the client had not asked for them):
/// `Ok(None)` when nothing is hidden, `Err` when the body is ambiguous (a repeated key).
pub fn filter_subscriptions(
    body: &[u8],
    shown: &impl Visibility,
) -> Result<Option<Vec<u8>>, Ambiguous> {
    let text = std::str::from_utf8(body).map_err(|_| Ambiguous)?;
    fn single<'a>(object: &'a str, key: &str) -> Result<Option<&'a RawValue>, Ambiguous> {
        let fields = json::members(object).ok_or(Ambiguous)?;
        let mut found = fields.into_iter().filter(|(k, _)| k == key).map(|(_, v)| v);
        let first = found.next();
        if found.next().is_some() {
            return Err(Ambiguous);
        }
        Ok(first)
    }
    let Some(params) = single(text, "params")? else {
        return Ok(None);
    };
    if !params.get().trim_start().starts_with('{') {
        return Ok(None);
    }
    let Some(notifications) = single(params.get(), "notifications")? else {
        return Ok(None);
    };
    if !notifications.get().trim_start().starts_with('{') {
        return Ok(None);
    }
    let Some(list) = single(notifications.get(), "resourceSubscriptions")? else {
        return Ok(None);
    };
    let Ok(uris) = serde_json::from_str::<Vec<&RawValue>>(list.get()) else {
        return Ok(None);
    };
    let kept: Vec<&str> = uris
        .iter()
        .filter(|u| {
            serde_json::from_str::<String>(u.get())
                .is_ok_and(|uri| shown.shows(Kind::Resource, &uri))
        })
        .map(|u| u.get())
        .collect();
    if kept.len() == uris.len() {
        return Ok(None);
    }
    let start = json::span(body, list.get()).ok_or(Ambiguous)?.start;
    let mut out = Vec::with_capacity(body.len());
    out.extend_from_slice(&body[..start]);
    out.extend_from_slice(format!("[{}]", kept.join(",")).as_bytes());
    out.extend_from_slice(&body[start + list.get().len()..]);
    Ok(Some(out))
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

/// Where a list answer keeps its entries, and which field names them.
const LISTS: [(&str, Kind, &str); 4] = [
    ("tools", Kind::Tool, "name"),
    ("prompts", Kind::Prompt, "name"),
    ("resources", Kind::Resource, "uri"),
    ("resourceTemplates", Kind::Resource, "uriTemplate"),
];

/// What filtering did to one JSON-RPC message.
#[derive(Debug, PartialEq, Eq)]
pub enum Filtered {
    /// Not a list answer (no `result` with an entry array): untouched.
    NotAList,
    /// A list answer the grant allows whole.
    Unchanged,
    /// The message with the hidden entries cut out (every other byte as it was), and how
    /// many were hidden.
    Changed(Vec<u8>, usize),
    /// Not readable as JSON-RPC (or ambiguous, such as a repeated key): refuse it rather
    /// than let entries through unfiltered.
    Unreadable,
}

/// Cut the entries `grant` hides out of a list answer, byte-exact elsewhere (the
/// `nextCursor` and everything else stay as they are).
pub fn filter_list(message: &[u8], shown: &impl Visibility) -> Filtered {
    // The result's fields are read in the same pass as the message.
    #[derive(Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        result: Option<json::Members<'a>>,
    }
    // An object (a derived struct would also read an array, position by position).
    if message.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Filtered::Unreadable;
    }
    let Ok(m) = serde_json::from_slice::<Message>(message) else {
        return Filtered::Unreadable;
    };
    let Some(json::Members::Object(fields)) = m.result else {
        return Filtered::NotAList;
    };
    let mut cuts: Vec<(usize, usize, Vec<u8>)> = Vec::new();
    let mut hidden = 0;
    let mut seen = std::collections::HashSet::new();
    let mut any_list = false;
    for (key, value) in fields {
        if !seen.insert(key.clone()) {
            // A repeated key: which one a client reads is not ours to guess.
            return Filtered::Unreadable;
        }
        let Some((_, kind, field)) = LISTS.iter().find(|(k, _, _)| *k == key) else {
            continue;
        };
        any_list = true;
        let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(value.get()) else {
            return Filtered::Unreadable;
        };
        let kept: Vec<&str> = items
            .iter()
            .filter(|item| {
                let name = entry_name(item.get(), field);
                match (name, *field) {
                    (Some(n), "uriTemplate") => shown.shows_template(&n),
                    (Some(n), _) => shown.shows(*kind, &n),
                    (None, _) => false,
                }
            })
            .map(|item| item.get())
            .collect();
        if kept.len() == items.len() {
            continue;
        }
        hidden += items.len() - kept.len();
        let Some(start) = json::span(message, value.get()).map(|s| s.start) else {
            return Filtered::Unreadable;
        };
        let replacement = format!("[{}]", kept.join(",")).into_bytes();
        cuts.push((start, start + value.get().len(), replacement));
    }
    if !any_list {
        return Filtered::NotAList;
    }
    if cuts.is_empty() {
        return Filtered::Unchanged;
    }
    cuts.sort_by_key(|c| c.0);
    let mut out = Vec::with_capacity(message.len());
    let mut at = 0;
    for (start, end, replacement) in cuts {
        out.extend_from_slice(&message[at..start]);
        out.extend_from_slice(&replacement);
        at = end;
    }
    out.extend_from_slice(&message[at..]);
    Filtered::Changed(out, hidden)
}

/// An entry's `name` / `uri` / `uriTemplate`; `None` when missing, repeated or not a
/// string (such an entry is hidden).
fn entry_name<'a>(item: &'a str, field: &str) -> Option<std::borrow::Cow<'a, str>> {
    use std::borrow::Cow;
    // Derived: other fields are skipped unparsed; a repeated one is an error.
    #[derive(Deserialize)]
    struct Entry<'a> {
        #[serde(borrow)]
        name: Option<Cow<'a, str>>,
        #[serde(borrow)]
        uri: Option<Cow<'a, str>>,
        #[serde(borrow, rename = "uriTemplate")]
        uri_template: Option<Cow<'a, str>>,
    }
    if !item.trim_start().starts_with('{') {
        return None;
    }
    let entry: Entry<'a> = serde_json::from_str(item).ok()?;
    match field {
        "name" => entry.name,
        "uri" => entry.uri,
        _ => entry.uri_template,
    }
}

/// The most of a list answer held for filtering (about 500 tools with their schemas).
pub const MAX_LIST: usize = 1024 * 1024;
/// The most of a legacy stream's event held for filtering.
pub const MAX_STREAM_EVENT: usize = 256 * 1024;

/// List filtering of one answer or stream, as a [`Transform`]:
/// - the answer to a list request (`answering`, its id) fails closed: one too large or that
///   cannot be read is replaced by a JSON-RPC error;
/// - on a stream that may carry list answers (a legacy GET stream), an event too large or
///   unreadable that looks like a list answer is not shown, and everything else passes;
/// - a name [`disguise`] hid comes back in an error answer ([`restore_hidden`]).
pub struct ListFilter<V> {
    pub shown: V,
    /// The answer to a list request with this id.
    pub answering: Option<Value>,
    /// Told how many entries each filtered answer lost.
    pub on_hidden: Option<Box<dyn Fn(usize) + Send + Sync>>,
}

impl<V: Visibility + Send + Sync> Transform for ListFilter<V> {
    fn limit(&self) -> usize {
        if self.answering.is_some() {
            MAX_LIST
        } else {
            MAX_STREAM_EVENT
        }
    }

    fn message(&mut self, data: &[u8]) -> Rewritten {
        // A hidden entry's name, renamed on an HTTP+SSE POST, comes back as it was: on the
        // event stream, where such answers arrive, in an answer that says so.
        let restored = self
            .answering
            .is_none()
            .then(|| restore_hidden(data).filter(|_| is_an_error(data)))
            .flatten();
        let data = restored.as_deref().unwrap_or(data);
        match filter_list(data, &self.shown) {
            Filtered::Changed(bytes, hidden) => {
                if let Some(told) = &self.on_hidden {
                    told(hidden);
                }
                Rewritten::New(bytes)
            }
            Filtered::Unreadable => match &self.answering {
                Some(id) => Rewritten::New(unreadable(id).into_bytes()),
                // On a stream: what cannot be read but looks like a list is not shown.
                None if looks_like_a_list(data) => Rewritten::Drop,
                None => restored.map_or(Rewritten::Same, Rewritten::New),
            },
            Filtered::NotAList | Filtered::Unchanged => {
                restored.map_or(Rewritten::Same, Rewritten::New)
            }
        }
    }

    fn undecodable(&mut self, event: &[u8]) -> Rewritten {
        match &self.answering {
            // The answer to a list request that cannot be read is not shown.
            Some(id) => {
                Rewritten::New(super::sse::message_event(&unreadable(id), "\n").into_bytes())
            }
            None if looks_like_a_list(event) => Rewritten::Drop,
            None => Rewritten::Same,
        }
    }

    fn oversized(&mut self, held: &[u8], sse: bool, out: &mut Vec<u8>) -> Pass {
        if let Some(id) = &self.answering {
            let error = too_large(id);
            if sse {
                out.extend_from_slice(super::sse::message_event(&error, "\n").as_bytes());
            } else {
                out.extend_from_slice(error.as_bytes());
            }
            return Pass::Drop;
        }
        if looks_like_a_list(held) {
            log::warn!(
                "a list answer over {MAX_STREAM_EVENT} bytes on an event stream was dropped: it cannot be filtered"
            );
            return Pass::Drop;
        }
        Pass::Keep
    }
}

/// An event or message whose `result` starts with a list key (`tools`, `prompts`,
/// `resources`, `resourceTemplates`; where the SDK servers put it), within its first 4 KiB.
pub fn looks_like_a_list(bytes: &[u8]) -> bool {
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

fn too_large(id: &Value) -> String {
    let message = format!(
        "The list is larger than the edge filters ({MAX_LIST} bytes); ask for smaller pages"
    );
    jsonrpc::error(&id.to_string(), code::INTERNAL, &message, None)
}

fn unreadable(id: &Value) -> String {
    let message = "The server's list answer could not be read to apply the route's policy";
    jsonrpc::error(&id.to_string(), code::INTERNAL, message, None)
}

#[cfg(test)]
mod tests;
