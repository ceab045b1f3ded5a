//! MCP routing headers: names, single-value extraction and the `=?base64?…?=` value form.

use std::borrow::Cow;

use base64::Engine;
use http::header::AsHeaderName;
use http::HeaderMap;

use crate::error::RoutingHeader;

pub const PROTOCOL_VERSION: &str = RoutingHeader::ProtocolVersion.name();
pub const METHOD: &str = RoutingHeader::Method.name();
pub const NAME: &str = RoutingHeader::Name.name();
pub const SESSION_ID: &str = "mcp-session-id";
pub const ORIGIN: &str = "origin";

/// Why a header value could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderProblem {
    Duplicate,
    InvalidCharacters,
    InvalidBase64,
}

impl HeaderProblem {
    pub fn describe(&self) -> &'static str {
        match self {
            HeaderProblem::Duplicate => "appears more than once",
            HeaderProblem::InvalidCharacters => "contains invalid characters",
            HeaderProblem::InvalidBase64 => "is not a valid =?base64?…?= value",
        }
    }
}

/// The one value of `name`, `None` when absent; a repeated header is an error (a folded
/// `a, b` value would otherwise be compared as one string by some servers and split by others).
pub fn single(
    headers: &HeaderMap,
    name: impl AsHeaderName,
) -> Result<Option<&[u8]>, HeaderProblem> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(HeaderProblem::Duplicate);
    }
    Ok(first.map(|v| v.as_bytes()))
}

const SENTINEL_PREFIX: &[u8] = b"=?base64?";
const SENTINEL_SUFFIX: &[u8] = b"?=";

/// Decode a name-carrying header value (`Mcp-Name`, `Mcp-Param-*`): trim optional
/// whitespace, then either the plain form (visible ASCII, space, tab) or the
/// `=?base64?{Base64(UTF-8)}?=` form with canonical padding.
pub fn decode_value(raw: &[u8]) -> Result<Cow<'_, str>, HeaderProblem> {
    let v = trim_ows(raw);
    if v.len() >= SENTINEL_PREFIX.len() + SENTINEL_SUFFIX.len()
        && v.starts_with(SENTINEL_PREFIX)
        && v.ends_with(SENTINEL_SUFFIX)
    {
        let inner = &v[SENTINEL_PREFIX.len()..v.len() - SENTINEL_SUFFIX.len()];
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(inner)
            .map_err(|_| HeaderProblem::InvalidBase64)?;
        return String::from_utf8(bytes)
            .map(Cow::Owned)
            .map_err(|_| HeaderProblem::InvalidBase64);
    }
    plain_value(v).map(Cow::Borrowed)
}

/// A header value taken as it is (`Mcp-Method`, `MCP-Protocol-Version`: the Base64 form is
/// for names only, and the SDKs compare these raw): optional whitespace trimmed, visible
/// ASCII, space and tab only.
pub fn plain_value(raw: &[u8]) -> Result<&str, HeaderProblem> {
    let v = trim_ows(raw);
    if !v.iter().all(|&c| c == b'\t' || (0x20..=0x7e).contains(&c)) {
        return Err(HeaderProblem::InvalidCharacters);
    }
    // All bytes are ASCII, so this cannot fail; map the impossible case to a problem anyway.
    std::str::from_utf8(v).map_err(|_| HeaderProblem::InvalidCharacters)
}

/// A name for `Mcp-Name`: as it is when it is plain visible ASCII (no spaces), else
/// `=?base64?…?=` (also a plain value that would read as that form).
pub fn encode_value(name: &str) -> String {
    let plain = !name.is_empty()
        && name.bytes().all(|b| (0x21..=0x7e).contains(&b))
        && !(name.starts_with("=?") && name.ends_with("?="));
    if plain {
        name.to_string()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(name)
        )
    }
}

fn trim_ows(v: &[u8]) -> &[u8] {
    let is_ows = |c: &u8| *c == b' ' || *c == b'\t';
    let start = v.iter().position(|c| !is_ows(c)).unwrap_or(v.len());
    let end = v.iter().rposition(|c| !is_ows(c)).map_or(start, |i| i + 1);
    &v[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_need_it_are_encoded() {
        assert_eq!(encode_value("786512e2-9e0d"), "786512e2-9e0d");
        assert_eq!(encode_value("tâche"), "=?base64?dMOiY2hl?=");
        assert_eq!(encode_value("a b"), "=?base64?YSBi?=");
        assert_eq!(
            encode_value("=?base64?eA==?="),
            "=?base64?PT9iYXNlNjQ/ZUE9PT89?="
        );
    }

    #[test]
    fn decode_table() {
        let cases: &[(&[u8], Result<&str, HeaderProblem>)] = &[
            (b"get_weather", Ok("get_weather")),
            (b"  spaced \t", Ok("spaced")),
            (b"=?base64?aMOpbGxv?=", Ok("héllo")),
            (b" =?base64?aMOpbGxv?= ", Ok("héllo")),
            (b"=?base64?aGVsbG8?=", Err(HeaderProblem::InvalidBase64)), // unpadded
            (b"=?base64?aGVsbG8=?=", Ok("hello")),
            (b"=?base64?!!!!?=", Err(HeaderProblem::InvalidBase64)),
            (b"=?base64?/w==?=", Err(HeaderProblem::InvalidBase64)), // not UTF-8
            (b"h\xc3\xa9llo", Err(HeaderProblem::InvalidCharacters)), // raw UTF-8
            (b"a\x01b", Err(HeaderProblem::InvalidCharacters)),
            (b"=?BASE64?aGk=?=", Ok("=?BASE64?aGk=?=")), // markers are case-sensitive
            (b"", Ok("")),
        ];
        for (raw, want) in cases {
            let got = decode_value(raw).map(|c| c.into_owned());
            assert_eq!(
                got,
                want.clone().map(str::to_owned),
                "input {:?}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn duplicates_are_detected() {
        let mut h = HeaderMap::new();
        h.append(METHOD, "tools/list".parse().unwrap());
        assert_eq!(single(&h, METHOD), Ok(Some(&b"tools/list"[..])));
        h.append(METHOD, "tools/list".parse().unwrap());
        assert_eq!(single(&h, METHOD), Err(HeaderProblem::Duplicate));
        assert_eq!(single(&h, NAME), Ok(None));
    }
}
