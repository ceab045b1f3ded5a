//! One table row per validation rule: headers, body, expected outcome.

use super::*;
use serde_json::json;

const MODERN: &str = "2026-07-28";

fn policy() -> VersionPolicy {
    VersionPolicy::new(vec![
        MODERN.into(),
        "2025-11-25".into(),
        "2025-06-18".into(),
        "2025-03-26".into(),
    ])
}

fn modern_only() -> VersionPolicy {
    VersionPolicy::new(vec![MODERN.into()])
}

fn call(method: &str, id: Value, params: Value) -> String {
    let mut params = params;
    if params.get("_meta").is_none() {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {}
        });
    }
    json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string()
}

fn hdrs(pairs: &[(&str, &[u8])]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            http::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            http::HeaderValue::from_bytes(v).unwrap(),
        );
    }
    h
}

/// Expected outcome: era label on success, or (HTTP status, JSON-RPC code, kind, echoed id).
#[derive(Debug)]
enum Want {
    Ok(&'static str),
    Err(u16, i64, &'static str, Value),
}

struct Case {
    what: &'static str,
    headers: Vec<(&'static str, &'static [u8])>,
    body: String,
    policy: VersionPolicy,
    want: Want,
}

fn std_headers(
    method: &'static str,
    name: Option<&'static [u8]>,
) -> Vec<(&'static str, &'static [u8])> {
    let mut v: Vec<(&'static str, &'static [u8])> = vec![
        ("mcp-protocol-version", MODERN.as_bytes()),
        ("mcp-method", method.as_bytes()),
    ];
    if let Some(n) = name {
        v.push(("mcp-name", n));
    }
    v
}

fn cases() -> Vec<Case> {
    let tool = |name: &str| {
        call(
            "tools/call",
            json!(1),
            json!({"name": name, "arguments": {}}),
        )
    };
    let p = policy();
    vec![
        Case { what: "valid tools/call", headers: std_headers("tools/call", Some(b"echo")), body: tool("echo"), policy: p.clone(), want: Want::Ok("modern") },
        Case { what: "valid tools/list, no Mcp-Name needed", headers: std_headers("tools/list", None), body: call("tools/list", json!("a"), json!({})), policy: p.clone(), want: Want::Ok("modern") },
        Case { what: "Mcp-Name with surrounding spaces", headers: std_headers("tools/call", Some(b"  echo ")), body: tool("echo"), policy: p.clone(), want: Want::Ok("modern") },
        Case { what: "Mcp-Name base64 form", headers: std_headers("tools/call", Some(b"=?base64?aMOpbGxv?=")), body: tool("héllo"), policy: p.clone(), want: Want::Ok("modern") },
        Case { what: "Mcp-Name raw UTF-8", headers: std_headers("tools/call", Some("héllo".as_bytes())), body: tool("héllo"), policy: p.clone(), want: Want::Err(400, -32020, "header_mismatch_name", json!(1)) },
        Case { what: "Mcp-Name unpadded base64", headers: std_headers("tools/call", Some(b"=?base64?aGVsbG8?=")), body: tool("hello"), policy: p.clone(), want: Want::Err(400, -32020, "header_mismatch_name", json!(1)) },
        Case { what: "Mcp-Name differs", headers: std_headers("tools/call", Some(b"foo")), body: tool("bar"), policy: p.clone(), want: Want::Err(400, -32020, "header_mismatch_name", json!(1)) },
        Case { what: "Mcp-Name missing", headers: std_headers("tools/call", None), body: tool("echo"), policy: p.clone(), want: Want::Err(400, -32020, "header_mismatch_name", json!(1)) },
        Case { what: "Mcp-Name vs resources/read uri", headers: std_headers("resources/read", Some(b"mem://info")), body: call("resources/read", json!(2), json!({"uri":"mem://info"})), policy: p.clone(), want: Want::Ok("modern") },
        Case { what: "Mcp-Name vs wrong uri", headers: std_headers("resources/read", Some(b"mem://other")), body: call("resources/read", json!(2), json!({"uri":"mem://info"})), policy: p.clone(), want: Want::Err(400, -32020, "header_mismatch_name", json!(2)) },
        Case { what: "Mcp-Name vs prompts/get name", headers: std_headers("prompts/get", Some(b"greet")), body: call("prompts/get", json!(3), json!({"name":"greet"})), policy: p.clone(), want: Want::Ok("modern") },
        Case { what: "Mcp-Name vs tasks/get taskId", headers: std_headers("tasks/get", Some(b"t-9")), body: call("tasks/get", json!(4), json!({"taskId":"t-1"})), policy: p.clone(), want: Want::Err(400, -32020, "header_mismatch_name", json!(4)) },
        Case { what: "non-string name needs no header", headers: std_headers("tools/call", None), body: call("tools/call", json!(5), json!({"name": 5})), policy: p.clone(), want: Want::Ok("modern") },
        Case { what: "duplicate Mcp-Name", headers: { let mut h = std_headers("tools/call", Some(b"echo")); h.push(("mcp-name", b"echo")); h }, body: tool("echo"), policy: p.clone(), want: Want::Err(400, -32020, "header_mismatch_name", json!(1)) },
        Case { what: "Mcp-Method differs", headers: std_headers("tools/list", Some(b"echo")), body: tool("echo"), policy: p.clone(), want: Want::Err(400, -32020, "header_mismatch_method", json!(1)) },
        Case { what: "Mcp-Method missing", headers: vec![("mcp-protocol-version", MODERN.as_bytes()), ("mcp-name", b"echo")], body: tool("echo"), policy: p.clone(), want: Want::Err(400, -32020, "header_mismatch_method", json!(1)) },
        Case { what: "duplicate Mcp-Method", headers: { let mut h = std_headers("tools/call", Some(b"echo")); h.push(("mcp-method", b"tools/call")); h }, body: tool("echo"), policy: p.clone(), want: Want::Err(400, -32020, "header_mismatch_method", json!(1)) },
        Case { what: "Mcp-Method base64 form is not decoded (names only)", headers: vec![("mcp-protocol-version", MODERN.as_bytes()), ("mcp-method", b"=?base64?dG9vbHMvbGlzdA==?=")], body: call("tools/list", json!(1), json!({})), policy: p.clone(), want: Want::Err(400, -32020, "header_mismatch_method", json!(1)) },
        Case { what: "MCP-Protocol-Version base64 form is not decoded", headers: vec![("mcp-protocol-version", b"=?base64?MjAyNi0wNy0yOA==?="), ("mcp-method", b"tools/list")], body: call("tools/list", json!(1), json!({})), policy: p.clone(), want: Want::Err(400, -32020, "header_mismatch_protocol_version", json!(1)) },
        Case { what: "a tools/call notification needs no Mcp-Name", headers: vec![("mcp-protocol-version", MODERN.as_bytes())], body: { let mut v: Value = serde_json::from_str(&call("tools/call", json!(1), json!({"name": "echo"}))).unwrap(); v.as_object_mut().unwrap().remove("id"); v.to_string() }, policy: p.clone(), want: Want::Ok("modern") },
        Case { what: "a notification's Mcp-Name, when present, must match", headers: vec![("mcp-protocol-version", MODERN.as_bytes()), ("mcp-name", b"other")], body: { let mut v: Value = serde_json::from_str(&call("tools/call", json!(1), json!({"name": "echo"}))).unwrap(); v.as_object_mut().unwrap().remove("id"); v.to_string() }, policy: p.clone(), want: Want::Err(400, -32020, "header_mismatch_name", Value::Null) },
        Case { what: "version header missing (stripped)", headers: vec![("mcp-method", b"tools/call"), ("mcp-name", b"echo")], body: tool("echo"), policy: p.clone(), want: Want::Err(400, -32020, "header_mismatch_protocol_version", json!(1)) },
        Case { what: "version header differs", headers: vec![("mcp-protocol-version", b"2025-11-25"), ("mcp-method", b"tools/call"), ("mcp-name", b"echo")], body: tool("echo"), policy: p.clone(), want: Want::Err(400, -32020, "header_mismatch_protocol_version", json!(1)) },
        Case { what: "duplicate version header", headers: { let mut h = std_headers("tools/list", None); h.push(("mcp-protocol-version", MODERN.as_bytes())); h }, body: call("tools/list", json!(9), json!({})), policy: p.clone(), want: Want::Err(400, -32020, "header_mismatch_protocol_version", json!(9)) },
        Case { what: "unsupported version", headers: vec![("mcp-protocol-version", b"2099-01-01"), ("mcp-method", b"tools/list")], body: call("tools/list", json!(6), json!({"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01"}})), policy: p.clone(), want: Want::Err(400, -32022, "unsupported_version", json!(6)) },
        Case { what: "modern header, no _meta, accepted version (as the servers: -32602)", headers: std_headers("tools/list", None), body: json!({"jsonrpc":"2.0","id":7,"method":"tools/list"}).to_string(), policy: p.clone(), want: Want::Err(400, -32602, "invalid_meta", json!(7)) },
        Case { what: "modern header, _meta without the version (as the servers: -32602)", headers: std_headers("tools/list", None), body: json!({"jsonrpc":"2.0","id":8,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}}).to_string(), policy: p.clone(), want: Want::Err(400, -32602, "invalid_meta", json!(8)) },
        Case { what: "unknown header version, no claim", headers: vec![("mcp-protocol-version", b"2099-01-01")], body: json!({"jsonrpc":"2.0","id":7,"method":"tools/list"}).to_string(), policy: p.clone(), want: Want::Err(400, -32022, "unsupported_version", json!(7)) },
        Case { what: "claim not a string", headers: std_headers("tools/list", None), body: call("tools/list", json!(8), json!({"_meta":{"io.modelcontextprotocol/protocolVersion":1}})), policy: p.clone(), want: Want::Err(400, -32602, "invalid_meta", json!(8)) },
        Case { what: "legacy initialize", headers: vec![], body: json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}).to_string(), policy: p.clone(), want: Want::Ok("legacy") },
        Case { what: "legacy call with legacy header", headers: vec![("mcp-protocol-version", b"2025-11-25")], body: json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}).to_string(), policy: p.clone(), want: Want::Ok("legacy") },
        Case { what: "legacy initialize on modern-only route", headers: vec![], body: json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}).to_string(), policy: modern_only(), want: Want::Err(400, -32022, "unsupported_version", json!(0)) },
        Case { what: "legacy response posted", headers: vec![("mcp-protocol-version", b"2025-11-25")], body: json!({"jsonrpc":"2.0","id":1,"result":{}}).to_string(), policy: p.clone(), want: Want::Ok("legacy") },
        Case { what: "response posted on modern path", headers: std_headers("tools/list", None), body: json!({"jsonrpc":"2.0","id":1,"result":{}}).to_string(), policy: p.clone(), want: Want::Err(400, -32600, "invalid_request", json!(1)) },
        Case { what: "modern batch", headers: std_headers("tools/list", None), body: format!("[{}]", call("tools/list", json!(1), json!({}))), policy: p.clone(), want: Want::Err(400, -32600, "invalid_request", Value::Null) },
        Case { what: "batch with a claim, no headers", headers: vec![], body: format!("[{}]", call("tools/list", json!(1), json!({}))), policy: p.clone(), want: Want::Err(400, -32600, "invalid_request", Value::Null) },
        Case { what: "legacy batch", headers: vec![], body: r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#.into(), policy: p.clone(), want: Want::Ok("legacy") },
        Case { what: "empty batch", headers: vec![], body: "[]".into(), policy: p.clone(), want: Want::Err(400, -32600, "invalid_request", Value::Null) },
        Case { what: "malformed JSON", headers: std_headers("tools/list", None), body: r#"{"jsonrpc":"2.0","id":1,"#.into(), policy: p.clone(), want: Want::Err(400, -32700, "parse_error", Value::Null) },
        Case { what: "scalar body", headers: vec![], body: "42".into(), policy: p.clone(), want: Want::Err(400, -32600, "invalid_request", Value::Null) },
        Case { what: "modern without jsonrpc", headers: std_headers("tools/list", None), body: json!({"id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":MODERN}}}).to_string(), policy: p.clone(), want: Want::Err(400, -32600, "invalid_request", json!(1)) },
        Case { what: "modern null id", headers: std_headers("tools/list", None), body: call("tools/list", Value::Null, json!({})), policy: p.clone(), want: Want::Err(400, -32600, "invalid_request", Value::Null) },
        Case { what: "modern object id", headers: std_headers("tools/list", None), body: call("tools/list", json!({"a":1}), json!({})), policy: p.clone(), want: Want::Err(400, -32600, "invalid_request", Value::Null) },
        Case { what: "modern notification without Mcp-Method", headers: vec![("mcp-protocol-version", MODERN.as_bytes())], body: json!({"jsonrpc":"2.0","method":"notifications/x","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":MODERN}}}).to_string(), policy: p.clone(), want: Want::Ok("modern") },
        Case { what: "modern notification with wrong Mcp-Method", headers: vec![("mcp-protocol-version", MODERN.as_bytes()), ("mcp-method", b"other")], body: json!({"jsonrpc":"2.0","method":"notifications/x","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":MODERN}}}).to_string(), policy: p.clone(), want: Want::Err(400, -32020, "header_mismatch_method", Value::Null) },
        Case { what: "string id echoed", headers: std_headers("tools/call", Some(b"x")), body: call("tools/call", json!("req-1"), json!({"name":"y"})), policy: p.clone(), want: Want::Err(400, -32020, "header_mismatch_name", json!("req-1")) },
    ]
}

#[test]
fn rule_table() {
    for case in cases() {
        let h = hdrs(&case.headers);
        let got = check_post(&h, case.body.as_bytes(), &case.policy);
        match (&case.want, got) {
            (Want::Ok(era), Ok(v)) => {
                assert_eq!(<&str>::from(v.era.label()), *era, "{}", case.what)
            }
            (Want::Err(status, code, kind, id), Err(r)) => {
                assert_eq!(r.error.status(), *status, "{}: {:?}", case.what, r.error);
                assert_eq!(r.error.code(), *code, "{}: {:?}", case.what, r.error);
                assert_eq!(
                    r.error.kind().as_str(),
                    *kind,
                    "{}: {:?}",
                    case.what,
                    r.error
                );
                let body: Value = serde_json::from_slice(&r.error.body(r.id.as_ref())).unwrap();
                assert_eq!(&body["id"], id, "{}", case.what);
            }
            (want, got) => panic!("{}: wanted {want:?}, got {got:?}", case.what),
        }
    }
}

#[test]
fn mismatch_message_names_the_header() {
    let h = hdrs(&std_headers("tools/call", Some(b"foo")));
    let err = check_post(
        &h,
        call("tools/call", json!(1), json!({"name":"bar"})).as_bytes(),
        &policy(),
    )
    .unwrap_err();
    let msg = err.error.message();
    assert!(
        msg.contains("Mcp-Name") && msg.contains("foo") && msg.contains("bar"),
        "{msg}"
    );
}

#[test]
fn unsupported_version_lists_supported_and_requested() {
    let h = hdrs(&[
        ("mcp-protocol-version", b"2099-01-01"),
        ("mcp-method", b"tools/list"),
    ]);
    let body = call(
        "tools/list",
        json!(6),
        json!({"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01"}}),
    );
    let r = check_post(&h, body.as_bytes(), &modern_only()).unwrap_err();
    let v: Value = serde_json::from_slice(&r.error.body(r.id.as_ref())).unwrap();
    assert_eq!(
        v["error"]["data"],
        json!({"supported":["2026-07-28"],"requested":"2099-01-01"})
    );
}

#[test]
fn a_refused_message_still_says_what_it_asked_for() {
    let body = call("tools/call", json!(3), json!({"name": "echo"}));
    let mismatch = hdrs(&[
        ("mcp-protocol-version", MODERN.as_bytes()),
        ("mcp-method", b"tools/call"),
        ("mcp-name", b"other"),
    ]);
    assert!(check_post(&mismatch, body.as_bytes(), &policy()).is_err());
    let read = refused(&mismatch, body.as_bytes()).expect("a readable message");
    assert_eq!(read.era, Era::Modern(MODERN.into()));
    assert_eq!(read.method.as_deref(), Some("tools/call"));
    assert_eq!(read.id, Some(json!(3)));
    assert_eq!(read.target.map(|t| t.value), Some("echo".to_string()));
    assert_eq!(read.name, None, "the header's name was not believed");
    // No claim: the header's revision, else legacy.
    let bare = json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}).to_string();
    let header = hdrs(&[("mcp-protocol-version", MODERN.as_bytes())]);
    let era = |h: &HeaderMap| refused(h, bare.as_bytes()).map(|v| v.era);
    assert_eq!(era(&header), Some(Era::Modern(MODERN.into())));
    assert_eq!(era(&HeaderMap::new()), Some(Era::Legacy));
    // Nothing to say of a body that is no single readable message.
    for body in ["not json", "[1,2]", "7"] {
        assert_eq!(refused(&HeaderMap::new(), body.as_bytes()), None, "{body}");
    }
    let odd_claim = r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":7}}}"#;
    assert_eq!(refused(&HeaderMap::new(), odd_claim.as_bytes()), None);
}
