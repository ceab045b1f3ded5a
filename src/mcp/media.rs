//! What a body is (`Content-Type`) and what a client takes (`Accept`): the one place the
//! edge tells JSON from an event stream. Media types compare case-insensitively (RFC 9110
//! §8.3.1), parameters (`; charset=utf-8`) aside.

use http::HeaderMap;

pub const JSON: &str = "application/json";
pub const EVENT_STREAM: &str = "text/event-stream";

/// The kind of body a `Content-Type` value names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Media {
    Json,
    EventStream,
    Other,
}

impl Media {
    /// The kind a `Content-Type` value names (`None`: no header).
    pub fn of(content_type: Option<&[u8]>) -> Media {
        let Some(value) = content_type else {
            return Media::Other;
        };
        if starts_with_ignoring_case(value, EVENT_STREAM) {
            Media::EventStream
        } else if starts_with_ignoring_case(value, JSON) {
            Media::Json
        } else {
            Media::Other
        }
    }

    /// The kind `headers`' `Content-Type` names.
    pub fn of_headers(headers: &HeaderMap) -> Media {
        Media::of(
            headers
                .get(http::header::CONTENT_TYPE)
                .map(|v| v.as_bytes()),
        )
    }
}

/// A `Content-Type` whose essence (before any `;`) is exactly JSON: what a POST must carry.
pub fn is_json_essence(content_type: &[u8]) -> bool {
    let essence = content_type.split(|&c| c == b';').next().unwrap_or(b"");
    essence.trim_ascii().eq_ignore_ascii_case(JSON.as_bytes())
}

/// Any `Accept` value names an event stream.
pub fn accepts_event_stream(headers: &HeaderMap) -> bool {
    let wanted = EVENT_STREAM.as_bytes();
    headers.get_all(http::header::ACCEPT).iter().any(|v| {
        v.as_bytes()
            .windows(wanted.len())
            .any(|w| w.eq_ignore_ascii_case(wanted))
    })
}

/// The body is compressed (a `Content-Encoding` other than `identity`): the edge reads and
/// rewrites only plain bodies.
pub fn is_encoded(headers: &HeaderMap) -> bool {
    headers
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"))
}

fn starts_with_ignoring_case(value: &[u8], prefix: &str) -> bool {
    value
        .get(..prefix.len())
        .is_some_and(|v| v.eq_ignore_ascii_case(prefix.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_compare_in_any_case() {
        assert_eq!(Media::of(Some(b"Text/Event-Stream")), Media::EventStream);
        assert_eq!(
            Media::of(Some(b"application/json; charset=utf-8")),
            Media::Json
        );
        assert_eq!(Media::of(Some(b"text/plain")), Media::Other);
        assert_eq!(Media::of(None), Media::Other);
        assert!(is_json_essence(b" Application/JSON ; charset=utf-8"));
        assert!(!is_json_essence(b"application/json-seq"));
        let mut h = HeaderMap::new();
        h.append(http::header::ACCEPT, "application/json".parse().unwrap());
        assert!(!accepts_event_stream(&h));
        h.append(http::header::ACCEPT, "TEXT/EVENT-STREAM".parse().unwrap());
        assert!(accepts_event_stream(&h));
        h.append(http::header::CONTENT_ENCODING, "Identity".parse().unwrap());
        assert!(!is_encoded(&h));
        h.append(http::header::CONTENT_ENCODING, "gzip".parse().unwrap());
        assert!(is_encoded(&h));
    }
}
