//! Finding a value's place in JSON text and replacing it, every other byte as it came: the
//! one way the edge edits a message (see `mcp/README.md`, "Byte-exact edits").
//!
//! A value is found by deserializing a borrowed [`RawValue`] (its text is a slice of the
//! message), then [`span`] tells where that slice lies. [`members`] reads an object's members
//! in order with their duplicates, for the callers that must refuse a repeated key
//! ([`member`]).

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// The `visit_*` arms of a visitor that reads every scalar JSON value as `$value`
/// (`@scalars`: every one but a string, which the visitor reads itself).
macro_rules! other_arms {
    (@scalars $value:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
    ($value:expr) => {
        other_arms!(@scalars $value);
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}
pub(crate) use other_arms;

/// A key appears more than once where the edge must know which one counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ambiguous;

/// Where `inner`, a slice borrowed from `outer` (a [`RawValue`]'s text), lies in it; `None`
/// when it is not a slice of `outer`.
pub fn span(outer: &[u8], inner: &str) -> Option<Range<usize>> {
    let start = (inner.as_ptr() as usize).checked_sub(outer.as_ptr() as usize)?;
    let end = start.checked_add(inner.len())?;
    (end <= outer.len()).then_some(start..end)
}

/// `text` with each edited value replaced: an edit names a slice of `text` (a value found
/// with a borrowed [`RawValue`]) and its new bytes. `None` when an edit is not from `text` or
/// two overlap. Edits may come in any order.
pub fn splice(text: &[u8], edits: &[(&str, &[u8])]) -> Option<Vec<u8>> {
    let mut spans = edits
        .iter()
        .map(|(value, with)| span(text, value).map(|s| (s, *with)))
        .collect::<Option<Vec<_>>>()?;
    spans.sort_by_key(|(s, _)| s.start);
    let grown: usize = spans.iter().map(|(_, with)| with.len()).sum();
    let mut out = Vec::with_capacity(text.len() + grown);
    let mut at = 0;
    for (s, with) in spans {
        if s.start < at {
            return None;
        }
        out.extend_from_slice(&text[at..s.start]);
        out.extend_from_slice(with);
        at = s.end;
    }
    out.extend_from_slice(&text[at..]);
    Some(out)
}

/// [`splice`] on text: UTF-8 edited with UTF-8 stays UTF-8.
pub fn splice_str(text: &str, edits: &[(&str, &str)]) -> Option<String> {
    let edits: Vec<(&str, &[u8])> = edits.iter().map(|(v, w)| (*v, w.as_bytes())).collect();
    splice(text.as_bytes(), &edits).and_then(|out| String::from_utf8(out).ok())
}

/// `text` with `member` (`"key":value`, written by the caller) added as the last member of
/// `object`, a slice of `text` holding a JSON object; a comma goes before it when the object
/// has members.
pub fn append_member(text: &[u8], object: &str, member: &str) -> Option<Vec<u8>> {
    let s = span(text, object)?;
    let inner = object.strip_prefix('{')?.strip_suffix('}')?;
    let close = s.end - 1;
    let comma: &[u8] = if inner.trim().is_empty() { b"" } else { b"," };
    let mut out = Vec::with_capacity(text.len() + comma.len() + member.len());
    out.extend_from_slice(&text[..close]);
    out.extend_from_slice(comma);
    out.extend_from_slice(member.as_bytes());
    out.extend_from_slice(&text[close..]);
    Some(out)
}

/// A value's text is a JSON object.
pub fn is_object(raw: &str) -> bool {
    raw.trim_start().starts_with('{')
}

/// An object's members in order, duplicates included, each value as written; `None` when
/// `object` is not a JSON object.
pub fn members(object: &str) -> Option<Vec<(Cow<'_, str>, &RawValue)>> {
    match serde_json::from_str::<Members>(object).ok()? {
        Members::Object(members) => Some(members),
        Members::Other => None,
    }
}

/// The value of `key` in `object`: `Ok(None)` when it is absent or `object` is not an
/// object, [`Ambiguous`] when the key appears more than once.
pub fn member<'a>(object: &'a str, key: &str) -> Result<Option<&'a RawValue>, Ambiguous> {
    let Some(members) = members(object) else {
        return Ok(None);
    };
    let mut found = members
        .into_iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v);
    let first = found.next();
    match found.next() {
        Some(_) => Err(Ambiguous),
        None => Ok(first),
    }
}

/// The string value of `key` in `object`, unescaped (borrowed when it has no escapes);
/// `None` when it is absent, repeated or not a string, or `object` is not an object.
pub fn string_member<'a>(object: &'a str, key: &str) -> Option<Cow<'a, str>> {
    let raw = member(object, key).ok()??;
    serde_json::from_str::<Cow<'a, str>>(raw.get()).ok()
}

/// A JSON value read as an object's members (values left raw), or as something else (a
/// field type for derived structs that must see every member).
pub enum Members<'a> {
    Object(Vec<(Cow<'a, str>, &'a RawValue)>),
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for Members<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(k) = map.next_key::<Cow<'de, str>>()? {
                    let v: &'de RawValue = map.next_value()?;
                    out.push((k, v));
                }
                Ok(Members::Object(out))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Members::Other)
            }
            other_arms!(Members::Other);
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str, key: &str) -> &'static str {
        // Leaked for the test's convenience: the slice must borrow from `text`.
        let text: &'static str = Box::leak(text.to_string().into_boxed_str());
        member(text, key).unwrap().unwrap().get()
    }

    #[test]
    fn splices_replace_values_and_nothing_else() {
        let text = r#"{ "id" : "a\"b", "x":{"id":3}, "n": 7 }"#;
        let id = member(text, "id").unwrap().unwrap().get();
        let n = member(text, "n").unwrap().unwrap().get();
        assert_eq!(
            splice_str(text, &[(n, "8"), (id, "12")]).unwrap(),
            r#"{ "id" : 12, "x":{"id":3}, "n": 8 }"#
        );
        assert!(
            splice_str(text, &[(id, "1"), (id, "2")]).is_none(),
            "overlap"
        );
        assert!(splice_str(text, &[(raw("{\"id\":1}", "id"), "2")]).is_none());
    }

    #[test]
    fn members_keep_order_and_duplicates() {
        let m = members(r#"{"b":1,"a":[2],"b":"3"}"#).unwrap();
        let keys: Vec<&str> = m.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(keys, ["b", "a", "b"]);
        assert!(matches!(member(r#"{"b":1,"b":2}"#, "b"), Err(Ambiguous)));
        assert_eq!(
            member(r#"{"a\u0062":1}"#, "ab").unwrap().unwrap().get(),
            "1"
        );
        assert!(member("[1]", "a").unwrap().is_none());
        assert!(members("3").is_none());
    }

    #[test]
    fn members_are_appended_inside_the_object() {
        let text = r#"{"params":{ },"x":{"a":1}}"#;
        let empty = member(text, "params").unwrap().unwrap().get();
        let full = member(text, "x").unwrap().unwrap().get();
        let out = |object, m| String::from_utf8(append_member(text.as_bytes(), object, m).unwrap());
        assert_eq!(
            out(empty, r#""k":1"#).unwrap(),
            r#"{"params":{ "k":1},"x":{"a":1}}"#
        );
        assert_eq!(
            out(full, r#""k":1"#).unwrap(),
            r#"{"params":{ },"x":{"a":1,"k":1}}"#
        );
    }
}
