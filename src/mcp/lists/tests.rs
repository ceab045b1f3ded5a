//! Lists, subscriptions, absent answers and disguised names, against the grant of a caller
//! who may see `a_*` and `echo` tools, `p_*` prompts and resources under `file:///a/`.

use super::*;

struct A;

impl Visibility for A {
    fn shows(&self, kind: Kind, name: &str) -> bool {
        match kind {
            Kind::Tool => name.starts_with("a_") || name == "echo",
            Kind::Prompt => name.starts_with("p_"),
            Kind::Resource => name.starts_with("file:///a/"),
        }
    }
    fn shows_template(&self, template: &str) -> bool {
        template
            .split('{')
            .next()
            .is_some_and(|h| h.starts_with("file:///a/"))
    }
}

#[test]
fn subscriptions_lose_hidden_uris() {
    let a = A;
    let body = br#"{"jsonrpc":"2.0","id":"s","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true,"resourceSubscriptions":["file:///a/1","file:///b/2"]},"_meta":{}}}"#;
    let out = String::from_utf8(filter_subscriptions(body, &a).unwrap().unwrap()).unwrap();
    assert!(
        out.contains(r#""resourceSubscriptions":["file:///a/1"]},"_meta":{}"#),
        "{out}"
    );
    let twice = br#"{"params":{"notifications":{"resourceSubscriptions":[],"resourceSubscriptions":["file:///b/2"]}}}"#;
    assert!(filter_subscriptions(twice, &a).is_err());
    assert_eq!(filter_subscriptions(br#"{"params":{}}"#, &a), Ok(None));
    assert_eq!(
        filter_list(br#"[{"result":{"tools":[{"name":"b_x"}]}}]"#, &a),
        Filtered::Unreadable
    );
}

#[test]
fn lists_lose_hidden_entries_and_nothing_else() {
    let a = A;
    let body = br#"{"jsonrpc":"2.0","id":7,"result":{"tools":[ {"name":"a_one","x":[1,{"name":"b_x"}]} ,{"name":"b_two"},{"name":"echo"}],"nextCursor":"c2"}}"#;
    let Filtered::Changed(out, hidden) = filter_list(body, &a) else {
        panic!("not changed");
    };
    assert_eq!(hidden, 1);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"{"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"a_one","x":[1,{"name":"b_x"}]},{"name":"echo"}],"nextCursor":"c2"}}"#
    );
    let templates = br#"{"id":1,"result":{"resourceTemplates":[{"uriTemplate":"file:///a/{n}"},{"uriTemplate":"file:///{n}"}]}}"#;
    let Filtered::Changed(out, 1) = filter_list(templates, &a) else {
        panic!("templates");
    };
    assert!(String::from_utf8(out)
        .unwrap()
        .contains(r#"[{"uriTemplate":"file:///a/{n}"}]"#));
    assert_eq!(
        filter_list(br#"{"id":1,"result":{"tools":[{"name":"echo"}]}}"#, &a),
        Filtered::Unchanged
    );
    assert_eq!(
        filter_list(br#"{"id":1,"result":{"content":[]}}"#, &a),
        Filtered::NotAList
    );
    // A repeated key or a repeated name is not guessed at.
    assert_eq!(
        filter_list(
            br#"{"id":1,"result":{"tools":[],"tools":[{"name":"b_x"}]}}"#,
            &a
        ),
        Filtered::Unreadable
    );
    let Filtered::Changed(out, 1) = filter_list(
        br#"{"id":1,"result":{"tools":[{"name":"echo","name":"b_x"}]}}"#,
        &a,
    ) else {
        panic!("repeated name");
    };
    assert!(String::from_utf8(out).unwrap().contains(r#""tools":[]"#));
    // An escaped name is read as the server reads it.
    let Filtered::Changed(_, 1) =
        filter_list(br#"{"id":1,"result":{"tools":[{"name":"b\u005fx"}]}}"#, &a)
    else {
        panic!("escaped");
    };
}
