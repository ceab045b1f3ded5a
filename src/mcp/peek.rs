//! A borrowing peek at a JSON-RPC body: only the fields routing needs.
//!
//! `jsonrpc`, `id`, `method`, whether the message is a response, and from `params` the
//! `name` / `uri` / `taskId` and the `_meta` protocol-version claim. Everything else is
//! skipped with `IgnoredAny`; strings are borrowed from the body where they have no escapes.
//! Duplicate keys resolve last-wins, as in JavaScript's `JSON.parse` and Python's `json`, so
//! the edge reads the same value the upstream will.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::json::other_arms;

/// Longest id (as JSON text) the edge keeps to echo in its own error answers; a longer one is
/// answered with `id: null`.
pub const MAX_ID_BYTES: usize = 1024;

/// `params._meta` key carrying the modern protocol-version claim.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

/// An object key, borrowed from the body unless it has escapes. (serde's own `Cow<str>`
/// always copies: every key of every request would be an allocation.)
struct Key<'a>(Cow<'a, str>);

impl AsRef<str> for Key<'_> {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A JSON value that is either a string (borrowed when possible) or something else.
#[derive(Debug, Clone, PartialEq)]
pub enum Field<'a> {
    Str(Cow<'a, str>),
    Other,
}

impl<'a> Field<'a> {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Field::Str(s) => Some(s),
            Field::Other => None,
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Field<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Field<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Field::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Field::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Field::Str(Cow::Owned(v)))
            }
            other_arms!(@scalars Field::Other);
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Field::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Field::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// What routing needs from `params`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Params<'a> {
    pub name: Option<Field<'a>>,
    pub uri: Option<Field<'a>>,
    pub task_id: Option<Field<'a>>,
    /// `_meta["io.modelcontextprotocol/protocolVersion"]`, when present (any type).
    pub claim: Option<Field<'a>>,
    /// `params.protocolVersion` (legacy `initialize`).
    pub protocol_version: Option<Field<'a>>,
    /// `params._meta` is present (with or without a claim).
    pub has_meta: bool,
    /// `params.ref` of `completion/complete`: its `type`, `name` and `uri`, when an object.
    pub reference: Option<Box<[Option<Field<'a>>; 3]>>,
    /// The client declared the Tasks extension on this request
    /// (`_meta["io.modelcontextprotocol/clientCapabilities"].extensions["io.modelcontextprotocol/tasks"]`).
    pub tasks: bool,
}

/// `params` when it is an object; anything else reads as no params.
struct LenientParams<'a>(Params<'a>);

impl<'de: 'a, 'a> Deserialize<'de> for LenientParams<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LenientParams<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("params")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut p = Params::default();
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match key.as_ref() {
                        "name" => p.name = Some(map.next_value()?),
                        "uri" => p.uri = Some(map.next_value()?),
                        "taskId" => p.task_id = Some(map.next_value()?),
                        "protocolVersion" => p.protocol_version = Some(map.next_value()?),
                        "ref" => p.reference = map.next_value::<Reference>()?.0,
                        "_meta" => {
                            p.has_meta = true;
                            let meta = map.next_value::<MetaClaim>()?;
                            p.claim = meta.0;
                            p.tasks = meta.1;
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(LenientParams(p))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(LenientParams(Params::default()))
            }
            other_arms!(LenientParams(Params::default()));
        }
        d.deserialize_any(V)
    }
}

/// `params.ref`: `[type, name, uri]` when an object, else nothing.
struct Reference<'a>(Option<Box<[Option<Field<'a>>; 3]>>);

impl<'de: 'a, 'a> Deserialize<'de> for Reference<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Reference<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut r: [Option<Field<'de>>; 3] = [None, None, None];
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    let slot = match key.as_ref() {
                        "type" => 0,
                        "name" => 1,
                        "uri" => 2,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    r[slot] = Some(map.next_value()?);
                }
                Ok(Reference(Some(Box::new(r))))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Reference(None))
            }
            other_arms!(Reference(None));
        }
        d.deserialize_any(V)
    }
}

/// `params._meta` key carrying the per-request client capabilities.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The Tasks extension's identifier.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The protocol-version claim inside `_meta`, when `_meta` is an object holding it, and
/// whether the client capabilities there declare the Tasks extension.
struct MetaClaim<'a>(Option<Field<'a>>, bool);

/// Whether an object (client capabilities, then its `extensions`) holds `key`; anything
/// else reads as no.
struct Holds<const DEPTH: u8>(bool);

impl<'de, const DEPTH: u8> Deserialize<'de> for Holds<DEPTH> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const DEPTH: u8>;
        impl<'de, const DEPTH: u8> Visitor<'de> for V<DEPTH> {
            type Value = Holds<DEPTH>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("client capabilities")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut found = false;
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    found = match (DEPTH, key.as_ref()) {
                        (0, "extensions") => map.next_value::<Holds<1>>()?.0,
                        (1, TASKS_EXTENSION) => {
                            map.next_value::<IgnoredAny>()?;
                            true
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            found
                        }
                    };
                }
                Ok(Holds(found))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Holds(false))
            }
            other_arms!(Holds(false));
        }
        d.deserialize_any(V::<DEPTH>)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for MetaClaim<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MetaClaim<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("_meta")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut claim = None;
                let mut tasks = false;
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    if key.as_ref() == META_PROTOCOL_VERSION {
                        claim = Some(map.next_value()?);
                    } else if key.as_ref() == META_CLIENT_CAPABILITIES {
                        tasks = map.next_value::<Holds<0>>()?.0;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(MetaClaim(claim, tasks))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(MetaClaim(None, false))
            }
            other_arms!(MetaClaim(None, false));
        }
        d.deserialize_any(V)
    }
}

/// One JSON-RPC message, as far as routing needs it.
#[derive(Debug, Default, Clone)]
pub struct Message<'a> {
    pub jsonrpc: Option<Field<'a>>,
    /// The raw `id` when the key is present (`null` included).
    pub id: Option<&'a RawValue>,
    pub method: Option<Field<'a>>,
    /// Carries `result` or `error`: a response, not a request.
    pub is_response: bool,
    pub params: Params<'a>,
    /// Set when the message is not an object at all.
    pub not_an_object: bool,
}

impl<'a> Message<'a> {
    pub fn method(&self) -> Option<&str> {
        self.method.as_ref().and_then(Field::as_str)
    }

    /// The id as a JSON value, for error bodies. Only ids that are strings or numbers are
    /// echoed; anything else becomes `null` without being built (an id of millions of array
    /// elements would otherwise cost far more memory than its bytes).
    pub fn id_value(&self) -> Option<serde_json::Value> {
        let raw = self.id?.get();
        let echoable = raw.starts_with(|c: char| c == '"' || c == '-' || c.is_ascii_digit());
        // The id is kept for the whole request (a stream may last a day): a huge one is not.
        if !echoable || raw.len() > MAX_ID_BYTES {
            return None;
        }
        // Most ids are small integers: the raw value is valid JSON already (no leading zero,
        // no sign but `-`), so its digits read as the number serde_json would build.
        if raw.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(n) = raw.parse::<u64>() {
                return Some(serde_json::Value::from(n));
            }
        }
        match serde_json::from_str::<serde_json::Value>(raw) {
            Ok(v @ (serde_json::Value::String(_) | serde_json::Value::Number(_))) => Some(v),
            _ => None,
        }
    }
}

impl<'a> Message<'a> {
    /// A body that is valid JSON but not an object (null, a number, a string, an array).
    fn not_an_object() -> Self {
        Message {
            not_an_object: true,
            ..Message::default()
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Message<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(MessageVisitor)
    }
}

struct MessageVisitor;

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Message<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON-RPC message")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut m = Message::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match key.as_ref() {
                "jsonrpc" => m.jsonrpc = Some(map.next_value()?),
                "id" => m.id = Some(map.next_value::<&'de RawValue>()?),
                "method" => m.method = Some(map.next_value()?),
                "params" => m.params = map.next_value::<LenientParams>()?.0,
                "result" | "error" => {
                    map.next_value::<IgnoredAny>()?;
                    m.is_response = true;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(m)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Message::not_an_object())
    }
    other_arms!(Message::not_an_object());
}

/// A whole body: one message or a batch.
#[derive(Debug)]
pub enum Body<'a> {
    Single(Message<'a>),
    Batch(Batch),
}

/// What the rules need from a batch. Its messages are read one at a time and dropped, so a
/// batch of millions of tiny elements costs no more memory than one of them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    pub len: usize,
    /// Some message carries a `_meta` protocol-version claim (a 2026-07-28 message).
    pub any_claim: bool,
    pub responses: usize,
    pub not_objects: usize,
}

impl<'de> Deserialize<'de> for Batch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(BatchVisitor)
    }
}

struct BatchVisitor;

impl<'de> Visitor<'de> for BatchVisitor {
    type Value = Batch;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON-RPC batch")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut batch = Batch::default();
        while let Some(m) = seq.next_element::<Message<'de>>()? {
            batch.len += 1;
            batch.any_claim |= m.params.claim.is_some();
            batch.responses += usize::from(m.is_response);
            batch.not_objects += usize::from(m.not_an_object);
        }
        Ok(batch)
    }
}

/// Does the body look like a batch (its first non-blank byte is `[`)? Costs no parsing.
pub fn is_batch(body: &[u8]) -> bool {
    trim_ascii_start(body).first() == Some(&b'[')
}

/// Parse a body. Errors are JSON syntax errors (including invalid UTF-8 and nesting deeper
/// than serde_json's recursion limit); shape problems are left to the rules.
pub fn peek(body: &[u8]) -> Result<Body<'_>, serde_json::Error> {
    if is_batch(body) {
        Ok(Body::Batch(serde_json::from_slice(body)?))
    } else {
        Ok(Body::Single(serde_json::from_slice(body)?))
    }
}

fn trim_ascii_start(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    &b[start..]
}

#[cfg(test)]
mod tests;
