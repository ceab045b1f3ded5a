//! Tool, prompt and resource policy per route.
//!
//! A route's rules are read **in order and the first rule that matches the caller
//! decides** what it may see and use; a caller no rule matches may use nothing. A rule
//! matches when each of its `subjects`, `tenants` and `groups` lists that is not empty
//! names the caller (any of its entries); a rule with none of them matches everyone,
//! anonymous callers included (the only rules they can match).
//!
//! The decision is enforced twice: list answers (`tools/list`, `prompts/list`,
//! `resources/list`, `resources/templates/list`) lose the entries it hides
//! ([`filter_list`]), and requests naming a hidden entry are answered by the edge as the
//! server answers an absent one and never forwarded.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;
use wildmatch::WildMatch;

use super::Principal;

/// How the edge answers a request naming an entry the policy hides: as this server SDK
/// answers one that does not exist (route key `absent_as`).
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum AbsentAs {
    /// `@modelcontextprotocol/server` 2.x.
    #[default]
    Typescript,
    /// `@modelcontextprotocol/sdk` 1.x.
    TypescriptV1,
    /// The Python `mcp` SDK.
    Python,
}

/// What a rule lists.
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

#[derive(Debug)]
pub struct Rule {
    /// The `rule` label of the refusal metric (`rule-N` when unnamed).
    pub name: String,
    pub subjects: Vec<String>,
    pub tenants: Vec<String>,
    pub groups: Vec<String>,
    pub tools: Vec<WildMatch>,
    pub prompts: Vec<WildMatch>,
    /// URI prefixes.
    pub resources: Vec<String>,
}

impl Rule {
    /// Matches everyone (no subject, tenant or group condition).
    pub fn is_catch_all(&self) -> bool {
        self.subjects.is_empty() && self.tenants.is_empty() && self.groups.is_empty()
    }

    fn matches(&self, who: Option<&Principal>) -> bool {
        if self.is_catch_all() {
            return true;
        }
        let Some(p) = who else {
            return false;
        };
        (self.subjects.is_empty() || self.subjects.contains(&p.subject))
            && (self.tenants.is_empty()
                || p.tenant.as_ref().is_some_and(|t| self.tenants.contains(t)))
            && (self.groups.is_empty() || p.groups.iter().any(|g| self.groups.contains(g)))
    }
}

/// A route's rules, in order.
#[derive(Debug, Default)]
pub struct Policy {
    pub rules: Vec<Arc<Rule>>,
}

/// The label of refusals no rule decided.
pub const NO_RULE: &str = "no-rule";

impl Policy {
    pub fn grant(&self, who: Option<&Principal>) -> Grant {
        Grant(self.rules.iter().find(|r| r.matches(who)).cloned())
    }
}

/// What one caller may use on one route: the rule that matched it, if any.
#[derive(Debug, Clone)]
pub struct Grant(Option<Arc<Rule>>);

impl Grant {
    pub fn rule(&self) -> &str {
        self.0.as_ref().map_or(NO_RULE, |r| r.name.as_str())
    }

    pub fn allows(&self, kind: Kind, value: &str) -> bool {
        let Some(rule) = &self.0 else {
            return false;
        };
        match kind {
            Kind::Tool => rule.tools.iter().any(|p| p.matches(value)),
            Kind::Prompt => rule.prompts.iter().any(|p| p.matches(value)),
            Kind::Resource => rule.resources.iter().any(|p| under(p, value)),
        }
    }

    /// A resource template is shown when every URI it can produce is under an allowed
    /// prefix: its literal head (up to the first `{`) must be.
    fn allows_template(&self, template: &str) -> bool {
        let head = template.split('{').next().unwrap_or("");
        let Some(rule) = &self.0 else {
            return false;
        };
        rule.resources
            .iter()
            .any(|p| head.len() >= p.len() && under(p, head))
    }
}

/// `uri` is under `prefix`, and the rest cannot climb out of it on a server that
/// normalises paths (no `.`/`..` segment, no encoded dot, slash or backslash).
fn under(prefix: &str, uri: &str) -> bool {
    // URL parsers drop tabs and line breaks (`.\t./` becomes `..`): no control character or
    // space anywhere.
    if uri.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return false;
    }
    let Some(rest) = uri.strip_prefix(prefix) else {
        return false;
    };
    let lower = rest.to_ascii_lowercase();
    let climbs = lower.split(['/', '?', '#']).any(|s| s == "." || s == "..")
        || ["%2e", "%2f", "%5c", "\\"]
            .iter()
            .any(|b| lower.contains(b));
    !climbs
}

/// The edge's answer to a request naming a hidden entry: what the server SDK `style`
/// answers for one that does not exist, measured against TS 2.4.0, TS 1.32.2 and Python
/// 2.3.0 servers (status, and the JSON-RPC message with its keys in the SDK's order).
pub fn absent_answer(
    style: AbsentAs,
    modern: bool,
    method: &str,
    target: &Target,
    id: &serde_json::Value,
) -> (u16, String) {
    let q = |s: &str| serde_json::Value::String(s.to_owned()).to_string();
    let id = id.to_string();
    let value = &target.value;
    let error = |code: i64, message: &str, data: Option<String>| {
        let data = data.map(|d| format!(",\"data\":{d}")).unwrap_or_default();
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":{code},\"message\":{}{data}}}}}",
            q(message)
        )
    };
    let uri_data = || Some(format!("{{\"uri\":{}}}", q(value)));
    let method_kind = match method {
        "tools/call" => Kind::Tool,
        "prompts/get" => Kind::Prompt,
        "resources/read" => Kind::Resource,
        // `resources/subscribe`, `completion/complete`: none of the SDK servers serves
        // them unless it declares the capability; what they answer then is "no method".
        _ => {
            let status = if modern { 404 } else { 200 };
            let data = (style == AbsentAs::Python).then(|| q(method));
            return (status, error(-32601, "Method not found", data));
        }
    };
    match (style, method_kind) {
        (AbsentAs::Typescript, Kind::Tool) => {
            (200, error(-32602, &format!("Tool {value} not found"), None))
        }
        (AbsentAs::Typescript, Kind::Prompt) => {
            (200, error(-32602, &format!("Prompt {value} not found"), None))
        }
        (AbsentAs::Typescript, Kind::Resource) => (
            200,
            error(-32602, &format!("Resource not found: {value}"), uri_data()),
        ),
        (AbsentAs::TypescriptV1, Kind::Tool) => (
            200,
            format!(
                "{{\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":{}}}],\"isError\":true}},\"jsonrpc\":\"2.0\",\"id\":{id}}}",
                q(&format!("MCP error -32602: Tool {value} not found"))
            ),
        ),
        (AbsentAs::TypescriptV1, Kind::Prompt) => (
            200,
            error(-32602, &format!("MCP error -32602: Prompt {value} not found"), None),
        ),
        (AbsentAs::TypescriptV1, Kind::Resource) => (
            200,
            error(-32602, &format!("MCP error -32602: Resource {value} not found"), None),
        ),
        (AbsentAs::Python, Kind::Tool) => {
            let extra = if modern { ",\"resultType\":\"complete\"" } else { "" };
            (
                200,
                format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"content\":[{{\"text\":{},\"type\":\"text\"}}],\"isError\":true{extra}}}}}",
                    q(&format!("Unknown tool: {value}"))
                ),
            )
        }
        (AbsentAs::Python, Kind::Prompt) if modern => {
            (200, error(-32603, "Internal server error", None))
        }
        (AbsentAs::Python, Kind::Prompt) => {
            (200, error(0, &format!("Unknown prompt: {value}"), None))
        }
        (AbsentAs::Python, Kind::Resource) => (
            if modern { 400 } else { 200 },
            error(-32602, &format!("Unknown resource: {value}"), uri_data()),
        ),
    }
}

/// What a hidden entry is renamed to on an HTTP+SSE messages POST: a name no server has,
/// carrying the original (base64url), which the edge puts back in the answer on the stream.
/// A URI of a scheme of its own (`mcp-edge-hidden:<base64url>`), so a server that parses
/// resource URIs still finds it well-formed and answers "not found".
pub const HIDDEN_PREFIX: &str = "mcp-edge-hidden:";

/// Over HTTP+SSE the answer to a request travels on the event stream, which another replica
/// may hold: the edge cannot answer for the server there. The request goes on with the
/// entry it names renamed ([`HIDDEN_PREFIX`]), so the server answers "not found" on the
/// stream and runs nothing; [`restore_hidden`] puts the name back in that answer. Every
/// occurrence of the naming key is renamed (a repeated key cannot smuggle the real name).
/// `None` when the body does not have the shape its method names.
pub fn disguise(body: &[u8], method: &str) -> Option<Vec<u8>> {
    let (outer, key) = match method {
        "tools/call" | "prompts/get" => (None, "name"),
        "resources/read" | "resources/subscribe" => (None, "uri"),
        "completion/complete" => (Some("ref"), ""),
        _ => return None,
    };
    let text = std::str::from_utf8(body).ok()?;
    let message = object_fields(text)?;
    let mut cuts: Vec<(usize, usize, String)> = Vec::new();
    for (k, params) in &message {
        if k != "params" {
            continue;
        }
        let mut objects = vec![*params];
        if let Some(outer) = outer {
            objects = object_fields(params.get())?
                .into_iter()
                .filter(|(k, _)| k == outer)
                .map(|(_, v)| v)
                .collect();
        }
        for object in objects {
            for (k, v) in object_fields(object.get())? {
                let renamed = if outer.is_some() {
                    k == "name" || k == "uri"
                } else {
                    k == key
                };
                if !renamed {
                    continue;
                }
                let Ok(original) = serde_json::from_str::<String>(v.get()) else {
                    continue;
                };
                use base64::Engine;
                let encoded =
                    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(original.as_bytes());
                let start = offset(body, v.get())?;
                cuts.push((
                    start,
                    start + v.get().len(),
                    format!("\"{HIDDEN_PREFIX}{encoded}\""),
                ));
            }
        }
    }
    if cuts.is_empty() {
        return None;
    }
    cuts.sort_by_key(|c| c.0);
    let mut out = Vec::with_capacity(body.len() + 32);
    let mut at = 0;
    for (start, end, replacement) in cuts {
        out.extend_from_slice(body.get(at..start)?);
        out.extend_from_slice(replacement.as_bytes());
        at = end;
    }
    out.extend_from_slice(&body[at..]);
    Some(out)
}

/// Put back the names [`disguise`] hid in a message (inside JSON strings: the name comes back
/// JSON-escaped). `None` when there is none.
pub fn restore_hidden(message: &[u8]) -> Option<Vec<u8>> {
    use base64::Engine;
    let prefix = HIDDEN_PREFIX.as_bytes();
    let finder = memchr::memmem::Finder::new(prefix);
    let mut first = finder.find(message)?;
    let mut out = Vec::with_capacity(message.len());
    let mut at = 0;
    loop {
        let start = first + prefix.len();
        let end = message[start..]
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_'))
            .map_or(message.len(), |n| start + n);
        let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&message[start..end])
            .ok()
            .and_then(|d| String::from_utf8(d).ok());
        out.extend_from_slice(&message[at..first]);
        match decoded {
            Some(name) => {
                let quoted = serde_json::Value::String(name).to_string();
                out.extend_from_slice(&quoted.as_bytes()[1..quoted.len() - 1]);
            }
            None => out.extend_from_slice(&message[first..end]),
        }
        at = end;
        match finder.find(&message[at..]) {
            Some(n) => first = at + n,
            None => break,
        }
    }
    out.extend_from_slice(&message[at..]);
    Some(out)
}

/// A request the edge will not guess at (a repeated key).
#[derive(Debug, PartialEq, Eq)]
pub struct Ambiguous;

/// A `subscriptions/listen` request with the hidden URIs cut from
/// `params.notifications.resourceSubscriptions` (as if the client had not asked for them):
/// `Ok(None)` when nothing is hidden, `Err` when the body is ambiguous (a repeated key).
pub fn filter_subscriptions(body: &[u8], grant: &Grant) -> Result<Option<Vec<u8>>, Ambiguous> {
    let text = std::str::from_utf8(body).map_err(|_| Ambiguous)?;
    fn single<'a>(object: &'a str, key: &str) -> Result<Option<&'a RawValue>, Ambiguous> {
        let fields = object_fields(object).ok_or(Ambiguous)?;
        let mut found = fields.into_iter().filter(|(k, _)| k == key).map(|(_, v)| v);
        let first = found.next();
        if found.next().is_some() {
            return Err(Ambiguous);
        }
        Ok(first)
    }
    let Some(params) = single(text, "params")? else {
        return Ok(None);
    };
    if !params.get().trim_start().starts_with('{') {
        return Ok(None);
    }
    let Some(notifications) = single(params.get(), "notifications")? else {
        return Ok(None);
    };
    if !notifications.get().trim_start().starts_with('{') {
        return Ok(None);
    }
    let Some(list) = single(notifications.get(), "resourceSubscriptions")? else {
        return Ok(None);
    };
    let Ok(uris) = serde_json::from_str::<Vec<&RawValue>>(list.get()) else {
        return Ok(None);
    };
    let kept: Vec<&str> = uris
        .iter()
        .filter(|u| {
            serde_json::from_str::<String>(u.get())
                .is_ok_and(|uri| grant.allows(Kind::Resource, &uri))
        })
        .map(|u| u.get())
        .collect();
    if kept.len() == uris.len() {
        return Ok(None);
    }
    let start = offset(body, list.get()).ok_or(Ambiguous)?;
    let mut out = Vec::with_capacity(body.len());
    out.extend_from_slice(&body[..start]);
    out.extend_from_slice(format!("[{}]", kept.join(",")).as_bytes());
    out.extend_from_slice(&body[start + list.get().len()..]);
    Ok(Some(out))
}

/// A JSON-RPC error, or a result flagged `isError`: what a server answers for a name it
/// does not have (where [`restore_hidden`] may put a hidden name back).
pub fn is_an_error(message: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        error: Option<&'a RawValue>,
        #[serde(borrow)]
        result: Option<Fields<'a>>,
    }
    if message.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return false;
    }
    let Ok(m) = serde_json::from_slice::<Message>(message) else {
        return false;
    };
    m.error.is_some()
        || matches!(m.result, Some(Fields::Object(fields))
            if fields.iter().any(|(k, v)| k == "isError" && v.get() == "true"))
}

/// Where a list answer keeps its entries, and which field names them.
const LISTS: [(&str, Kind, &str); 4] = [
    ("tools", Kind::Tool, "name"),
    ("prompts", Kind::Prompt, "name"),
    ("resources", Kind::Resource, "uri"),
    ("resourceTemplates", Kind::Resource, "uriTemplate"),
];

/// What filtering did to one JSON-RPC message.
#[derive(Debug, PartialEq, Eq)]
pub enum Filtered {
    /// Not a list answer (no `result` with an entry array): untouched.
    NotAList,
    /// A list answer the grant allows whole.
    Unchanged,
    /// The message with the hidden entries cut out (every other byte as it was), and how
    /// many were hidden.
    Changed(Vec<u8>, usize),
    /// Not readable as JSON-RPC (or ambiguous, such as a repeated key): refuse it rather
    /// than let entries through unfiltered.
    Unreadable,
}

/// Cut the entries `grant` hides out of a list answer, byte-exact elsewhere (the
/// `nextCursor` and everything else stay as they are).
pub fn filter_list(message: &[u8], grant: &Grant) -> Filtered {
    // The result's fields are read in the same pass as the message.
    #[derive(Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        result: Option<Fields<'a>>,
    }
    // An object (a derived struct would also read an array, position by position).
    if message.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Filtered::Unreadable;
    }
    let Ok(m) = serde_json::from_slice::<Message>(message) else {
        return Filtered::Unreadable;
    };
    let Some(Fields::Object(fields)) = m.result else {
        return Filtered::NotAList;
    };
    let mut cuts: Vec<(usize, usize, Vec<u8>)> = Vec::new();
    let mut hidden = 0;
    let mut seen = std::collections::HashSet::new();
    let mut any_list = false;
    for (key, value) in fields {
        if !seen.insert(key.clone()) {
            // A repeated key: which one a client reads is not ours to guess.
            return Filtered::Unreadable;
        }
        let Some((_, kind, field)) = LISTS.iter().find(|(k, _, _)| *k == key) else {
            continue;
        };
        any_list = true;
        let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(value.get()) else {
            return Filtered::Unreadable;
        };
        let kept: Vec<&str> = items
            .iter()
            .filter(|item| {
                let name = entry_name(item.get(), field);
                match (name, *field) {
                    (Some(n), "uriTemplate") => grant.allows_template(&n),
                    (Some(n), _) => grant.allows(*kind, &n),
                    (None, _) => false,
                }
            })
            .map(|item| item.get())
            .collect();
        if kept.len() == items.len() {
            continue;
        }
        hidden += items.len() - kept.len();
        let Some(start) = offset(message, value.get()) else {
            return Filtered::Unreadable;
        };
        let replacement = format!("[{}]", kept.join(",")).into_bytes();
        cuts.push((start, start + value.get().len(), replacement));
    }
    if !any_list {
        return Filtered::NotAList;
    }
    if cuts.is_empty() {
        return Filtered::Unchanged;
    }
    cuts.sort_by_key(|c| c.0);
    let mut out = Vec::with_capacity(message.len());
    let mut at = 0;
    for (start, end, replacement) in cuts {
        out.extend_from_slice(&message[at..start]);
        out.extend_from_slice(&replacement);
        at = end;
    }
    out.extend_from_slice(&message[at..]);
    Filtered::Changed(out, hidden)
}

/// The top-level fields of a JSON object, in order, duplicates included (`None` when it
/// is not one).
fn object_fields(object: &str) -> Option<Vec<(String, &RawValue)>> {
    match serde_json::from_str::<Fields>(object).ok()? {
        Fields::Object(fields) => Some(
            fields
                .into_iter()
                .map(|(k, v)| (k.into_owned(), v))
                .collect(),
        ),
        Fields::Other => None,
    }
}

/// A JSON value read as an object's fields, in order, duplicates included (each value
/// left raw), or as something else.
enum Fields<'a> {
    Object(Vec<(std::borrow::Cow<'a, str>, &'a RawValue)>),
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for Fields<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(k) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    let v: &'de RawValue = map.next_value()?;
                    out.push((k, v));
                }
                Ok(Fields::Object(out))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Fields::Other)
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Fields::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Fields::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Fields::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Fields::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Fields::Other)
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Fields::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// An entry's `name` / `uri` / `uriTemplate`; `None` when missing, repeated or not a
/// string (such an entry is hidden).
fn entry_name<'a>(item: &'a str, field: &str) -> Option<std::borrow::Cow<'a, str>> {
    use std::borrow::Cow;
    // Derived: other fields are skipped unparsed; a repeated one is an error.
    #[derive(Deserialize)]
    struct Entry<'a> {
        #[serde(borrow)]
        name: Option<Cow<'a, str>>,
        #[serde(borrow)]
        uri: Option<Cow<'a, str>>,
        #[serde(borrow, rename = "uriTemplate")]
        uri_template: Option<Cow<'a, str>>,
    }
    if !item.trim_start().starts_with('{') {
        return None;
    }
    let entry: Entry<'a> = serde_json::from_str(item).ok()?;
    match field {
        "name" => entry.name,
        "uri" => entry.uri,
        _ => entry.uri_template,
    }
}

/// Where `inner` (borrowed from `outer`) starts in it.
fn offset(outer: &[u8], inner: &str) -> Option<usize> {
    let start = (inner.as_ptr() as usize).checked_sub(outer.as_ptr() as usize)?;
    (start + inner.len() <= outer.len()).then_some(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str, tenants: &[&str], tools: &[&str], resources: &[&str]) -> Arc<Rule> {
        Arc::new(Rule {
            name: name.into(),
            subjects: vec![],
            tenants: tenants.iter().map(|s| s.to_string()).collect(),
            groups: vec![],
            tools: tools.iter().map(|p| WildMatch::new(p)).collect(),
            prompts: vec![WildMatch::new("p_*")],
            resources: resources.iter().map(|s| s.to_string()).collect(),
        })
    }

    fn who(tenant: &str) -> Principal {
        Principal {
            issuer: "i".into(),
            subject: "s".into(),
            tenant: Some(tenant.into()),
            groups: vec![],
        }
    }

    fn policy() -> Policy {
        Policy {
            rules: vec![
                rule("a", &["a"], &["a_*", "echo"], &["file:///a/"]),
                rule("b", &["b"], &["b_*"], &["file:///b/"]),
            ],
        }
    }

    #[test]
    fn the_first_matching_rule_decides_and_nobody_else_gets_anything() {
        let p = policy();
        let a = p.grant(Some(&who("a")));
        assert_eq!(a.rule(), "a");
        assert!(a.allows(Kind::Tool, "a_secret") && a.allows(Kind::Tool, "echo"));
        assert!(!a.allows(Kind::Tool, "b_secret"));
        assert!(a.allows(Kind::Resource, "file:///a/x.txt"));
        assert!(!a.allows(Kind::Resource, "file:///a/../b/x.txt"));
        assert!(!a.allows(Kind::Resource, "file:///a/%2e%2E/b/x.txt"));
        assert!(!a.allows(Kind::Resource, "file:///ab"));
        let nobody = p.grant(None);
        assert_eq!(nobody.rule(), NO_RULE);
        assert!(!nobody.allows(Kind::Tool, "echo"));
        assert!(!p.grant(Some(&who("c"))).allows(Kind::Tool, "echo"));
    }

    #[test]
    fn hidden_entries_are_answered_as_the_sdk_answers_absent_ones() {
        let t = |kind, value: &str| Target {
            kind,
            value: value.into(),
        };
        let id = serde_json::json!(7);
        // Bytes measured from the SDK servers (see docs/identity.md).
        assert_eq!(
            absent_answer(AbsentAs::Typescript, true, "tools/call", &t(Kind::Tool, "no_such_tool"), &id),
            (200, r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"Tool no_such_tool not found"}}"#.to_string())
        );
        assert_eq!(
            absent_answer(
                AbsentAs::Typescript,
                false,
                "resources/read",
                &t(Kind::Resource, "file:///no/such"),
                &id
            )
            .1,
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"Resource not found: file:///no/such","data":{"uri":"file:///no/such"}}}"#
        );
        assert_eq!(
            absent_answer(
                AbsentAs::TypescriptV1,
                false,
                "tools/call",
                &t(Kind::Tool, "no_such_tool"),
                &id
            )
            .1,
            r#"{"result":{"content":[{"type":"text","text":"MCP error -32602: Tool no_such_tool not found"}],"isError":true},"jsonrpc":"2.0","id":7}"#
        );
        assert_eq!(
            absent_answer(
                AbsentAs::Python,
                false,
                "tools/call",
                &t(Kind::Tool, "no_such_tool"),
                &id
            )
            .1,
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"text":"Unknown tool: no_such_tool","type":"text"}],"isError":true}}"#
        );
        assert_eq!(
            absent_answer(AbsentAs::Python, true, "resources/read", &t(Kind::Resource, "file:///no/such"), &id),
            (400, r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"Unknown resource: file:///no/such","data":{"uri":"file:///no/such"}}}"#.to_string())
        );
        assert_eq!(
            absent_answer(AbsentAs::Python, true, "completion/complete", &t(Kind::Prompt, "p"), &id),
            (404, r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"Method not found","data":"completion/complete"}}"#.to_string())
        );
    }

    #[test]
    fn a_disguised_name_comes_back_in_the_answer() {
        let body = br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"sec\"ret","arguments":{"name":"keep"},"name":"b_x"}}"#;
        let out = String::from_utf8(disguise(body, "tools/call").unwrap()).unwrap();
        assert!(!out.contains("sec") && !out.contains("b_x"), "{out}");
        assert!(out.contains(r#""arguments":{"name":"keep"}"#), "{out}");
        let answer = format!(
            r#"{{"jsonrpc":"2.0","id":4,"error":{{"code":-32602,"message":"Tool {} not found"}}}}"#,
            out.split(HIDDEN_PREFIX)
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .map(|e| format!("{HIDDEN_PREFIX}{e}"))
                .unwrap()
        );
        let restored = String::from_utf8(restore_hidden(answer.as_bytes()).unwrap()).unwrap();
        assert_eq!(
            restored,
            r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"Tool sec\"ret not found"}}"#
        );
        let complete = br#"{"id":1,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"p"},"argument":{"name":"a","value":""}}}"#;
        let out = String::from_utf8(disguise(complete, "completion/complete").unwrap()).unwrap();
        assert!(
            out.contains(r#""argument":{"name":"a""#) && !out.contains(r#""name":"p""#),
            "{out}"
        );
        assert!(restore_hidden(b"{}").is_none());
    }

    #[test]
    fn subscriptions_lose_hidden_uris_and_controls_never_match() {
        let a = policy().grant(Some(&who("a")));
        let body = br#"{"jsonrpc":"2.0","id":"s","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true,"resourceSubscriptions":["file:///a/1","file:///b/2"]},"_meta":{}}}"#;
        let out = String::from_utf8(filter_subscriptions(body, &a).unwrap().unwrap()).unwrap();
        assert!(
            out.contains(r#""resourceSubscriptions":["file:///a/1"]},"_meta":{}"#),
            "{out}"
        );
        let twice = br#"{"params":{"notifications":{"resourceSubscriptions":[],"resourceSubscriptions":["file:///b/2"]}}}"#;
        assert!(filter_subscriptions(twice, &a).is_err());
        assert_eq!(filter_subscriptions(br#"{"params":{}}"#, &a), Ok(None));
        // URL parsers drop tabs and line breaks, then resolve the dot segments they leave.
        assert!(!a.allows(Kind::Resource, "file:///a/.\t./b/x"));
        assert!(!a.allows(Kind::Resource, "file:///a/.\n./b/x"));
        assert!(!a.allows(Kind::Resource, "file:///a/x y"));
        assert_eq!(
            filter_list(br#"[{"result":{"tools":[{"name":"b_x"}]}}]"#, &a),
            Filtered::Unreadable
        );
    }

    #[test]
    fn lists_lose_hidden_entries_and_nothing_else() {
        let a = policy().grant(Some(&who("a")));
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
}
