//! Serving 2026-07-28 clients from a process initialised in a 2025 revision: what the edge
//! rewrites on the way (and only that; every other byte as written).

use serde_json::value::RawValue;

use super::wire::{field, splice, Message};
use crate::mcp::MODERN_VERSION;

/// A 2026-07-28 request as the process (initialised in a 2025 revision) takes it: without
/// the `io.modelcontextprotocol/` envelope in `params._meta` (a Python server refuses a
/// request carrying it on a 2025 connection). Only `_meta` is rewritten (its other keys
/// kept, their order not).
pub fn strip_envelope<'t>(text: &'t str, msg: &Message<'_>) -> std::borrow::Cow<'t, str> {
    const ENVELOPE: &str = "io.modelcontextprotocol/";
    let Some(meta) = msg.param("_meta") else {
        return text.into();
    };
    // A key may be written with escapes (`io.modelcontextprotocol\/…`, `\u0069o…`).
    let raw = meta.get();
    if !raw.contains("io.modelcontextprotocol") && !raw.contains('\\') {
        return text.into();
    }
    let Ok(mut map) =
        serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(meta.get())
    else {
        return text.into();
    };
    map.retain(|k, _| !k.starts_with(ENVELOPE));
    let with = serde_json::Value::Object(map).to_string();
    splice(text, &[(meta, &with)]).map_or(text.into(), Into::into)
}

/// `server/discover` answered from an `initialize` result.
pub fn discover_answer(id: &RawValue, init: &str) -> String {
    let get = |key: &str| {
        serde_json::from_str::<&RawValue>(init)
            .ok()
            .and_then(|r| field(r, key))
            .map(|v| v.get().to_string())
    };
    let mut out = format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"resultType":"complete","supportedVersions":["{MODERN_VERSION}"],"capabilities":{}"#,
        id.get(),
        get("capabilities").unwrap_or_else(|| "{}".into())
    );
    if let Some(i) = get("instructions") {
        out.push_str(&format!(r#","instructions":{i}"#));
    }
    out.push_str(r#","ttlMs":0,"cacheScope":"private""#);
    if let Some(info) = get("serverInfo") {
        out.push_str(&format!(
            r#","_meta":{{"io.modelcontextprotocol/serverInfo":{info}}}"#
        ));
    }
    out.push_str("}}");
    out
}

/// Methods whose 2026-07-28 results must carry cache hints (`ttlMs`, `cacheScope`).
pub const CACHEABLE: &[&str] = &[
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// A 2026-07-28 result as the revision requires it, from a server that answered in a 2025
/// one: `resultType: "complete"`, and on cacheable results `ttlMs: 0` and `cacheScope:
/// "private"` (the SDK servers' own defaults), each only where the server left it out.
pub fn mark_modern(answer: String, cacheable: bool) -> String {
    let Some(msg) = Message::parse(&answer) else {
        return answer;
    };
    let Some(result) = msg.result else {
        return answer;
    };
    if !result.get().trim_start().starts_with('{') {
        return answer;
    }
    let mut add = Vec::new();
    if field(result, "resultType").is_none() {
        add.push(r#""resultType":"complete""#);
    }
    if cacheable && field(result, "ttlMs").is_none() {
        add.push(r#""ttlMs":0"#);
    }
    if cacheable && field(result, "cacheScope").is_none() {
        add.push(r#""cacheScope":"private""#);
    }
    if add.is_empty() {
        return answer;
    }
    let Some(rest) = result.get().trim_start().strip_prefix('{') else {
        return answer;
    };
    let empty = rest.trim_start().starts_with('}');
    let with = format!("{{{}{}{rest}", add.join(","), if empty { "" } else { "," });
    splice(&answer, &[(result, &with)]).unwrap_or(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modern_results_are_marked_complete_and_nothing_else_changes() {
        assert_eq!(
            mark_modern(
                r#"{"jsonrpc":"2.0","id":"x","result":{ "content":[]}}"#.into(),
                false
            ),
            r#"{"jsonrpc":"2.0","id":"x","result":{"resultType":"complete", "content":[]}}"#
        );
        assert_eq!(
            mark_modern(r#"{"id":1,"result":{}}"#.into(), true),
            r#"{"id":1,"result":{"resultType":"complete","ttlMs":0,"cacheScope":"private"}}"#
        );
        assert_eq!(
            mark_modern(r#"{"id":1,"result":{"tools":[],"ttlMs":5}}"#.into(), true),
            r#"{"id":1,"result":{"resultType":"complete","cacheScope":"private","tools":[],"ttlMs":5}}"#
        );
        let kept = r#"{"id":1,"result":{"resultType":"input_required"}}"#;
        assert_eq!(mark_modern(kept.into(), false), kept);
        let error = r#"{"id":1,"error":{"code":-32601,"message":"x"}}"#;
        assert_eq!(mark_modern(error.into(), true), error);
    }

    #[test]
    fn discover_carries_the_initialize_answer() {
        let id = RawValue::from_string("7".into()).unwrap();
        let init = r#"{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"s","version":"1"},"instructions":"hi"}"#;
        let v: serde_json::Value = serde_json::from_str(&discover_answer(&id, init)).unwrap();
        assert_eq!(v["id"], 7);
        assert_eq!(v["result"]["supportedVersions"][0], MODERN_VERSION);
        assert_eq!(v["result"]["capabilities"]["tools"]["listChanged"], true);
        assert_eq!(v["result"]["instructions"], "hi");
        assert_eq!(
            v["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
            "s"
        );
    }
    #[test]
    fn only_the_envelope_leaves_meta() {
        let text = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":3,"io.modelcontextprotocol/clientCapabilities":{}},"arguments":{}}}"#;
        let msg = Message::parse(text).unwrap();
        assert_eq!(
            strip_envelope(text, &msg),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":3},"arguments":{}}}"#
        );
        let escaped = r#"{"id":1,"method":"x","params":{"_meta":{"io.modelcontextprotocol\/protocolVersion":"2026-07-28","\u0069o.modelcontextprotocol/clientCapabilities":{}}}}"#;
        let msg = Message::parse(escaped).unwrap();
        assert_eq!(
            strip_envelope(escaped, &msg),
            r#"{"id":1,"method":"x","params":{"_meta":{}}}"#,
            "keys written with escapes are envelope keys too"
        );
        let plain = r#"{"id":1,"method":"tools/list","params":{}}"#;
        let msg = Message::parse(plain).unwrap();
        assert_eq!(strip_envelope(plain, &msg), plain);
    }
}
