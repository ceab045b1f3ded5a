use super::*;

fn single(body: &str) -> Message<'_> {
    match peek(body.as_bytes()).unwrap() {
        Body::Single(m) => m,
        Body::Batch(_) => panic!("expected a single message"),
    }
}

#[test]
fn reads_routing_fields_and_skips_the_rest() {
    let m = single(
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo",
        "arguments":{"big":[1,2,{"x":"y"}]},"_meta":{"progressToken":1,
        "io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
    );
    assert_eq!(m.method(), Some("tools/call"));
    assert_eq!(m.id.unwrap().get(), "7");
    assert_eq!(m.params.name.as_ref().and_then(Field::as_str), Some("echo"));
    assert_eq!(
        m.params.claim.as_ref().and_then(Field::as_str),
        Some("2026-07-28")
    );
    assert!(!m.is_response);
}

#[test]
fn escaped_strings_are_decoded() {
    let m = single(r#"{"method":"tools/call","params":{"name":"h\u00e9llo"}}"#);
    assert_eq!(
        m.params.name.as_ref().and_then(Field::as_str),
        Some("héllo")
    );
    // Keys too: an escaped key is the same key (it is copied, not borrowed).
    let m = single(
        r#"{"meth\u006fd":"tools/call","params":{"n\u0061me":"echo","_meta":
        {"io.modelcontextprotocol\/protocolVersion":"2026-07-28"}}}"#,
    );
    assert_eq!(m.method(), Some("tools/call"));
    assert_eq!(m.params.name.as_ref().and_then(Field::as_str), Some("echo"));
    assert_eq!(
        m.params.claim.as_ref().and_then(Field::as_str),
        Some("2026-07-28")
    );
}

#[test]
fn an_id_is_the_value_serde_json_reads() {
    for id in [
        "0",
        "7",
        "18446744073709551615",
        "18446744073709551616",
        "-1",
        "1.5",
        "1e3",
        "\"a\"",
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        let expected = serde_json::from_str::<serde_json::Value>(id).ok();
        assert_eq!(single(&body).id_value(), expected, "{id}");
    }
}

#[test]
fn odd_shapes_do_not_fail_the_parse() {
    let m = single(r#"{"method":5,"params":[1,2],"id":{"a":1}}"#);
    assert_eq!(m.method(), None);
    assert_eq!(m.id_value(), None);
    let m = single(r#"{"params":{"name":3,"_meta":"x"}}"#);
    assert_eq!(m.params.name, Some(Field::Other));
    assert_eq!(m.params.claim, None);
}

#[test]
fn null_id_is_present_but_not_echoed() {
    let m = single(r#"{"id":null,"method":"x"}"#);
    assert!(m.id.is_some());
    assert_eq!(m.id_value(), None);
}

#[test]
fn duplicate_keys_last_wins() {
    let m = single(r#"{"method":"a","method":"b"}"#);
    assert_eq!(m.method(), Some("b"));
}

#[test]
fn batches_and_responses() {
    match peek(br#" [{"id":1,"result":{}},{"method":"x"}]"#).unwrap() {
        Body::Batch(b) => {
            assert_eq!((b.len, b.responses, b.any_claim), (2, 1, false));
        }
        Body::Single(_) => panic!("expected batch"),
    }
}

#[test]
fn syntax_errors_fail() {
    assert!(peek(b"{\"method\":").is_err());
    assert!(peek(b"\xff\xfe").is_err());
    assert!(
        peek(b"{\"method\":\"\xff\"}").is_err(),
        "invalid UTF-8 in a string"
    );
}

#[test]
fn deep_nesting_is_skipped_without_recursion() {
    // Skipped values are walked iteratively by serde_json: no stack overflow, no error.
    let deep = "[".repeat(100_000) + &"]".repeat(100_000);
    match peek(deep.as_bytes()).unwrap() {
        Body::Batch(b) => assert!(b.len == 1 && b.not_objects == 1),
        Body::Single(_) => panic!("expected batch"),
    }
    let deep_params = format!(
        r#"{{"method":"tools/call","params":{{"x":{}{},"name":"n"}}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let m = single(&deep_params);
    assert_eq!(m.params.name.as_ref().and_then(Field::as_str), Some("n"));
}
