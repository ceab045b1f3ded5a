//! The conversions both ways, byte for byte where they promise it, and at every split of a
//! stream.

use serde_json::json;
use serde_json::value::RawValue;
use serde_json::Value;

use super::*;
use crate::mcp::message::Message;
use crate::mcp::rewrite::Rewrite;

fn converting(sse: bool, initialize: Option<&str>) -> Rewrite {
    let mut r = Rewrite::new(sse);
    r.push(Box::new(ToLegacy {
        initialize: initialize.map(str::to_string),
        asks: false,
    }));
    r
}

fn declared() -> Declared {
    Declared {
        v: "2025-06-18".into(),
        c: json!({}),
        i: json!({"name": "c", "version": "1"}),
    }
}

fn enveloped(body: &str) -> Result<String, EdgeError> {
    #[derive(serde::Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        params: Option<&'a RawValue>,
    }
    let message: Message = serde_json::from_str(body).unwrap();
    let out = with_envelope(body.as_bytes(), message.params, &declared())?;
    Ok(String::from_utf8(out).unwrap())
}

const ENV: &str = r#""io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}"#;

#[test]
fn the_envelope_is_written_into_the_params_and_nothing_else_changes() {
    let cases = [
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo", "_meta" : {"progressToken":7} }}"#,
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo", "_meta" : {{"progressToken":7,{ENV}}} }}}}"#),
        ),
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{ }}"#,
            format!(r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{{ "_meta":{{{ENV}}}}}}}"#),
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"cursor":"a"}}"#,
            format!(r#"{{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{{"cursor":"a","_meta":{{{ENV}}}}}}}"#),
        ),
        (
            "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\"}\n",
            format!("{{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\",\"params\":{{\"_meta\":{{{ENV}}}}}}}\n"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"x","params":{"_meta":{}}}"#,
            format!(r#"{{"jsonrpc":"2.0","id":5,"method":"x","params":{{"_meta":{{{ENV}}}}}}}"#),
        ),
    ];
    for (body, want) in cases {
        let out = enveloped(body).unwrap();
        assert_eq!(out, want);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
            MODERN_VERSION
        );
    }
    assert!(enveloped(r#"{"id":1,"method":"x","params":[1]}"#).is_err());
    assert!(enveloped(r#"{"id":1,"method":"x","params":{"_meta":3}}"#).is_err());
}

#[test]
fn capabilities_keep_what_bridges() {
    let client = json!({"sampling": {}, "elicitation": {"form": {}}, "roots": {"listChanged": true}, "experimental": {"x": {}}, "extensions": {"io.modelcontextprotocol/tasks": {}}});
    assert_eq!(
        client_capabilities(Some(&client), false),
        json!({"experimental": {"x": {}}})
    );
    // A client the edge can ask (HTTP+SSE) keeps what it can be asked.
    assert_eq!(
        client_capabilities(Some(&client), true),
        json!({"sampling": {}, "elicitation": {"form": {}}, "roots": {"listChanged": true}, "experimental": {"x": {}}})
    );
    let server = json!({"tools": {"listChanged": true}, "resources": {"subscribe": true, "listChanged": true}, "logging": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}});
    assert_eq!(
        server_capabilities(Some(&server)),
        json!({"tools": {}, "resources": {}, "logging": {}})
    );
}

fn run(c: &mut Rewrite, stream: &[u8], step: usize) -> String {
    let mut out = Vec::new();
    for chunk in stream.chunks(step) {
        out.extend_from_slice(&c.feed(chunk));
    }
    out.extend_from_slice(&c.finish());
    String::from_utf8(out).unwrap()
}

#[test]
fn answers_come_back_in_the_legacy_shape() {
    let stream = "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\r\n\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"content\":[],\"resultType\":\"complete\",\"ttlMs\":0}}\r\nid: 7\r\n\r\n";
    for step in 1..=stream.len() {
        let mut c = converting(true, None);
        let out = run(&mut c, stream.as_bytes(), step);
        assert_eq!(
            out,
            "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\r\n\r\nevent: message\r\ndata: {\"id\":3,\"jsonrpc\":\"2.0\",\"result\":{\"content\":[]}}\r\nid: 7\r\n\r\n",
            "step {step}"
        );
    }
    let mut c = converting(false, None);
    let asked = br#"{"jsonrpc":"2.0","id":"x","result":{"resultType":"input_required","inputRequests":{}}}"#;
    let v: Value = serde_json::from_str(&run(&mut c, asked, 5)).unwrap();
    assert_eq!(v["id"], "x");
    assert_eq!(v["error"]["code"], -32603);
    // A client that can be asked gets the questions from the bridge: the answer passes.
    let mut c = Rewrite::new(false);
    c.push(Box::new(ToLegacy {
        initialize: None,
        asks: true,
    }));
    assert_eq!(run(&mut c, asked, 5).as_bytes(), &asked[..]);
    // An answer needing no change keeps its bytes.
    let mut c = converting(false, None);
    let plain = r#"{"jsonrpc":"2.0", "id":1,"result":{"content":[]}}"#;
    assert_eq!(run(&mut c, plain.as_bytes(), 3), plain);
}

#[test]
fn an_oversized_event_passes_and_the_next_one_is_converted() {
    let big = format!("data: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{{\"data\":\"{}\"}}}}\r\n\r\n", "x".repeat(MAX_CONVERTED + 10));
    let after =
        "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"resultType\":\"input_required\"}}\n\n";
    let stream = format!("{big}{after}");
    for step in [1000, 4096, 70_000, stream.len()] {
        let mut c = converting(true, None);
        let out = run(&mut c, stream.as_bytes(), step);
        assert!(out.starts_with(&big), "step {step}");
        let tail = &out[big.len()..];
        assert!(tail.contains("\"error\""), "step {step}: {tail}");
    }
}

#[test]
fn a_discover_result_answers_initialize() {
    let discover = r#"{"jsonrpc":"2.0","id":0,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{"listChanged":true}},"resultType":"complete","ttlMs":0,"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":"2"}},"instructions":"hi"}}"#;
    let mut c = converting(false, Some("2025-06-18"));
    let v: Value = serde_json::from_str(&run(&mut c, discover.as_bytes(), 9)).unwrap();
    assert_eq!(
        v,
        json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "2"},
            "instructions": "hi"}})
    );
}

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
        strip_envelope(text, msg.params).unwrap(),
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":3},"arguments":{}}}"#
    );
    let escaped = r#"{"id":1,"method":"x","params":{"_meta":{"io.modelcontextprotocol\/protocolVersion":"2026-07-28","\u0069o.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let msg = Message::parse(escaped).unwrap();
    assert_eq!(
        strip_envelope(escaped, msg.params).unwrap(),
        r#"{"id":1,"method":"x","params":{"_meta":{}}}"#,
        "keys written with escapes are envelope keys too"
    );
    let plain = r#"{"id":1,"method":"tools/list","params":{}}"#;
    let msg = Message::parse(plain).unwrap();
    assert_eq!(strip_envelope(plain, msg.params).unwrap(), plain);
    // Two `_meta`: the process may read either copy, so neither is edited (the request is
    // refused). Found by the stdio_wire fuzz target.
    let twice = r#"{"id":1,"method":"tools/call","params":{"_meta":{},"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
    let msg = Message::parse(twice).unwrap();
    assert_eq!(strip_envelope(twice, msg.params), None);
}

#[test]
fn input_required_questions_and_the_retry() {
    let asked = json!({"jsonrpc": "2.0", "id": 4, "result": {"resultType": "input_required",
        "inputRequests": {"confirm": {"method": "elicitation/create", "params": {"message": "ok?"}},
                          "where": {"method": "roots/list"}},
        "requestState": "s1"}});
    let questions = input_required(&asked).unwrap();
    assert_eq!(questions.state, Some(json!("s1")));
    assert_eq!(
        questions.requests,
        vec![
            (
                "confirm".to_string(),
                json!({"method": "elicitation/create", "params": {"message": "ok?"}})
            ),
            (
                "where".to_string(),
                json!({"method": "roots/list", "params": {}})
            ),
        ]
    );
    // Not a question a legacy client knows, or not input_required at all.
    let odd = json!({"id": 1, "result": {"resultType": "input_required", "inputRequests": {"k": {"method": "tasks/get"}}}});
    assert_eq!(input_required(&odd), None);
    assert_eq!(input_required(&json!({"id": 1, "result": {}})), None);
    let body = br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"c","requestState":"old","_meta":{"a":1}}}"#;
    let mut responses = Map::new();
    responses.insert("confirm".into(), json!({"action": "accept"}));
    let retry: Value =
        serde_json::from_slice(&with_input_responses(body, responses, Some(json!("s1"))).unwrap())
            .unwrap();
    assert_eq!(
        retry,
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "c", "requestState": "s1", "_meta": {"a": 1}, "inputResponses": {"confirm": {"action": "accept"}}}})
    );
}
