//! Lists without what a route's policy hides: list answers without the hidden entries
//! ([`filter_list`], and [`ListFilter`] for answers as they stream, putting back a name
//! [`super::absent::disguise`] hid), a `subscriptions/listen` without hidden URIs
//! ([`filter_subscriptions`]). What the edge answers for a hidden entry is
//! [`super::absent`]'s.
//!
//! Which entries are hidden is the caller's grant's business ([`Visibility`]); here is only
//! how lists, requests and answers carry them. A repeated key in a list answer or a
//! subscription is refused (see `mcp/README.md`).

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::absent::{is_an_error, restore_hidden};
use super::json::{self, Ambiguous};
use super::jsonrpc;
use super::rewrite::{Pass, Rewritten, Transform};
use super::target::Kind;
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
    let mut cuts: Vec<(&str, Vec<u8>)> = Vec::new();
    let (mut hidden, mut any_list) = (0, false);
    let mut seen = std::collections::HashSet::new();
    for (key, value) in fields {
        if !seen.insert(key.clone()) {
            // A repeated key: which one a client reads is not ours to guess.
            return Filtered::Unreadable;
        }
        let Some((_, kind, field)) = LISTS.iter().find(|(k, _, _)| *k == key) else {
            continue;
        };
        any_list = true;
        match kept(value.get(), *kind, field, shown) {
            None => return Filtered::Unreadable,
            Some((_, 0)) => {}
            Some((list, cut)) => {
                hidden += cut;
                cuts.push((value.get(), list.into_bytes()));
            }
        }
    }
    if !any_list {
        return Filtered::NotAList;
    }
    if cuts.is_empty() {
        return Filtered::Unchanged;
    }
    let edits: Vec<(&str, &[u8])> = cuts.iter().map(|(v, w)| (*v, w.as_slice())).collect();
    match json::splice(message, &edits) {
        Some(out) => Filtered::Changed(out, hidden),
        None => Filtered::Unreadable,
    }
}

/// A list of entries (`list`, JSON text) with those `shown` hides left out, and how many
/// were; `None` when it is not a list.
fn kept(list: &str, kind: Kind, field: &str, shown: &impl Visibility) -> Option<(String, usize)> {
    let items = serde_json::from_str::<Vec<&RawValue>>(list).ok()?;
    let kept: Vec<&str> = items
        .iter()
        .filter(
            |item| match (json::string_member(item.get(), field), field) {
                (Some(n), "uriTemplate") => shown.shows_template(&n),
                (Some(n), _) => shown.shows(kind, &n),
                (None, _) => false,
            },
        )
        .map(|item| item.get())
        .collect();
    Some((format!("[{}]", kept.join(",")), items.len() - kept.len()))
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
/// - a name [`super::absent::disguise`] hid comes back in an error answer ([`restore_hidden`]).
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
