//! Answers for absent entries, learned from the servers themselves: the `mcp` health check
//! asks each server identity once, per era, for a tool, a prompt and a resource no server has
//! ([`probe`]), and keeps what it answers as a template ([`Learned`]) whose request id and
//! name are holes. Policy fills them for an entry it hides ([`Learned::render`]): the answer
//! is then the server's own, byte for byte, whatever its SDK or version. `absent_as` (the
//! catalogue in [`super::absent`]) stays an override, and the fallback while nothing is
//! learned.

use serde_json::Value;

use super::target::Kind;

/// The kinds of entry a policy hides, with the method that names one.
pub const KINDS: [(Kind, &str); 3] = [
    (Kind::Tool, "tools/call"),
    (Kind::Prompt, "prompts/get"),
    (Kind::Resource, "resources/read"),
];

/// The longest answer kept (a server's answer for an absent entry is a line or two).
const MAX_ANSWER: usize = 4096;

/// Holes (the id and the name, where they appear) an answer may have: the SDKs' have at
/// most three.
const MAX_HOLES: usize = 6;

/// One probe: the name it asks for (no server has it: random) and its request id.
#[derive(Debug, Clone)]
pub struct Probe {
    pub name: String,
    pub id: String,
}

impl Probe {
    /// A probe for `kind`: a tool or prompt named `mcp-edge-absent-<hex>`, a resource
    /// `mcp-edge-absent:<hex>` (a URI of a scheme of its own). Letters, digits, `-` and `:`
    /// only: no JSON encoder escapes them, so they appear in an answer as sent.
    pub fn new(kind: Kind, token: u64) -> Probe {
        let name = match kind {
            Kind::Resource => format!("mcp-edge-absent:{token:016x}"),
            _ => format!("mcp-edge-absent-{token:016x}"),
        };
        Probe {
            name,
            id: format!("mcp-edge-absent-probe-{token:016x}"),
        }
    }

    /// The JSON-RPC request for `method` naming the probe's entry; `modern`: with the
    /// 2026-07-28 `_meta` envelope.
    pub fn body(&self, method: &str, kind: Kind, modern: bool) -> String {
        let key = if kind == Kind::Resource {
            "uri"
        } else {
            "name"
        };
        let meta = if modern {
            format!(r#","_meta":{}"#, super::client::meta(super::client::HEALTH))
        } else {
            String::new()
        };
        let arguments = if kind == Kind::Tool {
            r#","arguments":{}"#
        } else {
            ""
        };
        format!(
            r#"{{"jsonrpc":"2.0","id":"{}","method":"{method}","params":{{"{key}":"{}"{arguments}{meta}}}}}"#,
            self.id, self.name
        )
    }
}

/// A piece of a learned answer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    /// The request's id, as JSON.
    Id,
    /// The entry's name, as the inside of a JSON string.
    Name,
}

/// A server's answer to a request naming an entry it does not have: its HTTP status and
/// its JSON-RPC message with the id and the name as holes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Learned {
    pub status: u16,
    parts: Vec<Part>,
}

impl Learned {
    /// What `probe` was answered: `message`, one JSON-RPC message (a JSON body, or an SSE
    /// event's data). `None` for anything that is not a "not found" answer to the probe:
    /// another id, a status other than 200, 400 or 404, neither an `error` nor a `result`
    /// with `isError: true` (a catch-all "success" must not make a hidden tool look
    /// present), more holes than an answer needs, the probe's token or prefix appearing
    /// other than as sent, or a template that does not render valid JSON with a name
    /// given back intact. The catalogue stands then.
    pub fn from_answer(probe: &Probe, status: u16, message: &str) -> Option<Learned> {
        if !matches!(status, 200 | 400 | 404) || message.len() > MAX_ANSWER {
            return None;
        }
        let v: Value = serde_json::from_str(message).ok()?;
        let not_found =
            v.get("error").is_some() || v.pointer("/result/isError") == Some(&Value::Bool(true));
        if v.get("id").and_then(Value::as_str) != Some(probe.id.as_str()) || !not_found {
            return None;
        }
        let quoted_id = format!("\"{}\"", probe.id);
        let mut parts = Vec::new();
        for (i, piece) in message.split(quoted_id.as_str()).enumerate() {
            if i > 0 {
                parts.push(Part::Id);
            }
            for (j, text) in piece.split(probe.name.as_str()).enumerate() {
                if j > 0 {
                    parts.push(Part::Name);
                }
                if !text.is_empty() {
                    parts.push(Part::Text(text.to_owned()));
                }
            }
        }
        // The token or the probe's prefix anywhere else (escaped, cut, in another shape): a
        // template would leak it into every answer.
        let token = &probe.id[probe.id.len() - 16..];
        let leaks = parts.iter().any(
            |p| matches!(p, Part::Text(t) if t.contains(token) || t.contains("mcp-edge-absent")),
        );
        let holes = parts.iter().filter(|p| !matches!(p, Part::Text(_))).count();
        if leaks || holes > MAX_HOLES {
            return None;
        }
        let learned = Learned { status, parts };
        // Rendered for a name of quotes, backslashes and a line end, the answer must stay
        // one valid JSON-RPC message carrying the name as given.
        let tricky = "q\"\\\n";
        let rendered: Value =
            serde_json::from_str(&learned.render(&Value::from(7), tricky)).ok()?;
        let names = learned.parts.contains(&Part::Name);
        let intact = rendered.get("id") == Some(&Value::from(7))
            && (!names || holds_text(&rendered, tricky));
        intact.then_some(learned)
    }

    /// Whether the answer's text names one of `names` as a whole word (an answer listing
    /// what a server has would show hidden entries to every principal). Only string values
    /// are read, split at anything that cannot be part of a name or URI.
    pub fn mentions_any<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> bool {
        let Ok(v) = serde_json::from_str::<Value>(&self.render(&Value::Null, "")) else {
            return true;
        };
        let mut words = std::collections::HashSet::new();
        collect_words(&v, &mut words);
        names
            .into_iter()
            .any(|n| !n.is_empty() && words.contains(n))
    }

    /// The answer for a request with `id` naming `name` (a name is at most what a request
    /// body holds, and an answer has at most [`MAX_HOLES`] of them).
    pub fn render(&self, id: &Value, name: &str) -> String {
        let id = id.to_string();
        let quoted = Value::String(name.to_owned()).to_string();
        let inner = &quoted[1..quoted.len() - 1];
        let mut out = String::with_capacity(256);
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Id => out.push_str(&id),
                Part::Name => out.push_str(inner),
            }
        }
        out
    }
}

/// The words of every string value in `v` (split at characters no name or URI has).
fn collect_words<'v>(v: &'v Value, words: &mut std::collections::HashSet<&'v str>) {
    match v {
        Value::String(s) => words.extend(
            s.split(|c: char| {
                !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | ':' | '@' | '+'))
            })
            .filter(|w| !w.is_empty()),
        ),
        Value::Array(a) => a.iter().for_each(|x| collect_words(x, words)),
        Value::Object(o) => o.values().for_each(|x| collect_words(x, words)),
        _ => {}
    }
}

/// Whether a string (or key) anywhere in `v` contains `needle`.
fn holds_text(v: &Value, needle: &str) -> bool {
    match v {
        Value::String(s) => s.contains(needle),
        Value::Array(a) => a.iter().any(|x| holds_text(x, needle)),
        Value::Object(o) => o
            .iter()
            .any(|(k, x)| k.contains(needle) || holds_text(x, needle)),
        _ => false,
    }
}

/// What one server identity answers for absent entries, per era: a tool, a prompt, a
/// resource (each `None` when its answer could not be learned).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AbsentAnswers {
    /// The server identity they were learned from (`serverInfo` name and version).
    pub identity: String,
    pub modern: Answers,
    pub legacy: Answers,
}

/// How a server framed its answers in one era.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Framing {
    /// As an SSE event (else a JSON body).
    pub sse: bool,
    /// The event's lines ended in CRLF.
    pub crlf: bool,
}

/// One era's learned answers, and how they came.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answers {
    pub tool: Option<Learned>,
    pub prompt: Option<Learned>,
    pub resource: Option<Learned>,
    pub framing: Framing,
}

impl Answers {
    pub fn get(&self, kind: Kind) -> Option<&Learned> {
        match kind {
            Kind::Tool => self.tool.as_ref(),
            Kind::Prompt => self.prompt.as_ref(),
            Kind::Resource => self.resource.as_ref(),
        }
    }

    pub fn set(&mut self, kind: Kind, learned: Option<Learned>) {
        match kind {
            Kind::Tool => self.tool = learned,
            Kind::Prompt => self.prompt = learned,
            Kind::Resource => self.resource = learned,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.tool.is_none() && self.prompt.is_none() && self.resource.is_none()
    }
}

impl AbsentAnswers {
    pub fn era(&self, modern: bool) -> &Answers {
        if modern {
            &self.modern
        } else {
            &self.legacy
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_becomes_a_template_with_the_id_and_the_name_as_holes() {
        let p = Probe::new(Kind::Tool, 0xabc);
        let answer = format!(
            r#"{{"result":{{"content":[{{"type":"text","text":"MCP error -32602: Tool {} not found"}}],"isError":true}},"jsonrpc":"2.0","id":"{}"}}"#,
            p.name, p.id
        );
        let learned = Learned::from_answer(&p, 200, &answer).unwrap();
        assert_eq!(
            learned.render(&serde_json::json!(7), "say \"hi\""),
            r#"{"result":{"content":[{"type":"text","text":"MCP error -32602: Tool say \"hi\" not found"}],"isError":true},"jsonrpc":"2.0","id":7}"#
        );
        assert_eq!(
            learned.render(&serde_json::json!("a"), "x"),
            answer
                .replace(&p.name, "x")
                .replace(&format!("\"{}\"", p.id), "\"a\"")
        );
    }

    #[test]
    fn what_is_not_an_answer_to_the_probe_is_not_learned() {
        let p = Probe::new(Kind::Resource, 1);
        let ok = format!(
            r#"{{"jsonrpc":"2.0","id":"{}","error":{{"code":-32602,"message":"Unknown resource: {}","data":{{"uri":"{}"}}}}}}"#,
            p.id, p.name, p.name
        );
        assert!(Learned::from_answer(&p, 400, &ok).is_some());
        assert!(Learned::from_answer(&p, 500, &ok).is_none(), "a 5xx");
        let other_id = ok.replace(&p.id, "1");
        assert!(Learned::from_answer(&p, 200, &other_id).is_none());
        let neither = format!(r#"{{"jsonrpc":"2.0","id":"{}"}}"#, p.id);
        assert!(Learned::from_answer(&p, 200, &neither).is_none());
        // The token in another shape (cut from its name here) would leak into every answer.
        let token = &p.id[p.id.len() - 16..];
        let leaky = ok.replace("Unknown resource", &format!("Unknown {token}"));
        assert!(Learned::from_answer(&p, 200, &leaky).is_none());
        assert!(Learned::from_answer(&p, 200, "not json").is_none());
        // A catch-all "success" would make a hidden entry look present; a 401 would send
        // clients into an authorization flow.
        let success = format!(
            r#"{{"jsonrpc":"2.0","id":"{}","result":{{"content":[],"isError":false}}}}"#,
            p.id
        );
        assert!(Learned::from_answer(&p, 200, &success).is_none());
        assert!(Learned::from_answer(&p, 401, &ok).is_none());
        let listing = ok.replace(
            "Unknown resource",
            "Unknown resource (we have: admin_purge, echo)",
        );
        let learned = Learned::from_answer(&p, 400, &listing).unwrap();
        assert!(learned.mentions_any(["echo", "ab"]));
        assert!(
            !learned.mentions_any(["whoami", "ab"]),
            "names under 3 bytes are not looked for"
        );
    }

    #[test]
    fn a_pool_replays_answers_only_when_every_member_has_the_same() {
        use crate::mcp::versions::{Speaks, Spoken};
        use std::sync::Arc;
        let answers = |identity: &str| {
            Some(Arc::new(AbsentAnswers {
                identity: identity.into(),
                ..AbsentAnswers::default()
            }))
        };
        let member = |absent| Speaks {
            absent,
            ..Speaks::default()
        };
        let (a, a2, b, none) = (
            member(answers("a 1")),
            member(answers("a 1")),
            member(answers("b 2")),
            member(None),
        );
        assert!(Spoken::combine([&a, &a2]).absent.is_some());
        assert!(Spoken::combine([&a, &b]).absent.is_none(), "a rollout");
        assert!(
            Spoken::combine([&a, &none]).absent.is_none(),
            "one not learned yet"
        );
        assert!(Spoken::combine([&none, &a]).absent.is_none());
    }

    #[test]
    fn probes_name_what_no_server_has_in_both_eras() {
        let p = Probe::new(Kind::Prompt, 0xfeed);
        let modern: Value =
            serde_json::from_str(&p.body("prompts/get", Kind::Prompt, true)).unwrap();
        assert_eq!(modern["params"]["name"], p.name.as_str());
        assert!(modern["params"]["_meta"].is_object());
        let legacy: Value =
            serde_json::from_str(&p.body("resources/read", Kind::Resource, false)).unwrap();
        assert!(legacy["params"].get("_meta").is_none());
        let tool: Value = serde_json::from_str(&p.body("tools/call", Kind::Tool, true)).unwrap();
        assert_eq!(tool["params"]["arguments"], serde_json::json!({}));
    }
}
