//! The session parameter of an HTTP+SSE messages URL (`/messages?sessionId=…`): finding it,
//! counting it, replacing it.

/// Replace the value of query parameter `name` in a request target (for the way in).
pub fn replace_query_param(path_and_query: &str, name: &str, value: &str) -> String {
    let Some((path, query)) = path_and_query.split_once('?') else {
        return path_and_query.to_string();
    };
    let parts: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if k == name => format!("{k}={value}"),
            _ => pair.to_string(),
        })
        .collect();
    format!("{path}?{}", parts.join("&"))
}

/// How many query parameters name a session, keys percent-decoded as servers decode them
/// (`session%5Fid` is `session_id`). More than one is refused: the edge would check one
/// and the server might act on another.
pub fn count_session_params(query: &str, names: &[String]) -> usize {
    query
        .split('&')
        .filter_map(|pair| pair.split('=').next())
        .filter(|k| {
            let key = k.replace('+', " ");
            let decoded = percent_encoding::percent_decode_str(&key).decode_utf8_lossy();
            names.iter().any(|n| *n == decoded)
        })
        .count()
}

/// The first of `names` present in a query string, with its raw value.
pub fn find_query_param<'q>(query: &'q str, names: &[String]) -> Option<(&'q str, &'q str)> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        names.iter().any(|n| n == k).then_some((k, v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Vec<String> {
        vec!["sessionId".into(), "session_id".into()]
    }

    #[test]
    fn session_parameters_are_counted_with_decoded_keys() {
        let n = |q| count_session_params(q, &params());
        assert_eq!(n("sessionId=a"), 1);
        assert_eq!(n("session_id=t&session%5Fid=raw"), 2);
        assert_eq!(n("sessionId=t&session_id=raw"), 2);
        assert_eq!(n("sessionId=t&sessionId=u"), 2);
        assert_eq!(n("x=1&sessionid=a"), 0);
    }

    #[test]
    fn query_helpers() {
        assert_eq!(
            replace_query_param("/messages?a=1&sessionId=T", "sessionId", "abc"),
            "/messages?a=1&sessionId=abc"
        );
        assert_eq!(
            find_query_param("a=1&session_id=xyz", &params()),
            Some(("session_id", "xyz"))
        );
        assert_eq!(find_query_param("a=1", &params()), None);
    }
}
