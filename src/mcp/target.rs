//! What a request names: a tool, a prompt or a resource, and its name or URI.

/// What kind of entry: what a list answer lists and a policy rule names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tool,
    Prompt,
    /// A resource URI (or a resource template's URI template).
    Resource,
}

/// The entry a request names (`tools/call` → its tool, `resources/read` → its URI, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub kind: Kind,
    pub value: String,
}

/// A resource URI as logs and traces carry it: without its query, fragment and userinfo
/// (where a presigned URL keeps its signature, a URL its password).
pub fn redacted_uri(uri: &str) -> std::borrow::Cow<'_, str> {
    let end = uri.find(['?', '#']).unwrap_or(uri.len());
    let uri = &uri[..end];
    let Some(scheme_end) = uri.find("://") else {
        return uri.into();
    };
    let authority_start = scheme_end + 3;
    let rest = &uri[authority_start..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}{}", &uri[..authority_start], &rest[at + 1..]).into(),
        None => uri.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::redacted_uri;

    #[test]
    fn secrets_in_a_uri_are_not_kept() {
        assert_eq!(redacted_uri("mem://info"), "mem://info");
        assert_eq!(
            redacted_uri("https://bob:pw@files.example/a/b?sig=xyz#f"),
            "https://files.example/a/b"
        );
        assert_eq!(redacted_uri("file:///tmp/a?x"), "file:///tmp/a");
        assert_eq!(redacted_uri("s3://bucket/key@v2"), "s3://bucket/key@v2");
        assert_eq!(redacted_uri("urn:x?y"), "urn:x");
    }
}
