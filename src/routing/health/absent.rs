//! Learning what a server answers for a tool, prompt and resource it does not have
//! ([`crate::mcp::learned`]): once per server identity, after a good `mcp` check, in each era
//! the member speaks. The probes name entries no server has (nothing runs); a legacy probe
//! opens its own session and deletes it.

use std::sync::Arc;

use serde_json::Value;

use super::{end_legacy, exchange, open_legacy, Answer};
use crate::mcp::learned::{AbsentAnswers, Answers, Framing, Learned, Probe, KINDS};
use crate::mcp::target::Kind;
use crate::mcp::versions::Speaks;
use crate::mcp::{client, jsonrpc, MODERN_VERSION};
use crate::routing::{CheckKind, Member, Pool};

/// Times a server identity is asked before the edge gives up on it (the catalogue answers).
const ATTEMPTS: u8 = 3;

/// Ask `member` what it answers for absent entries, while its identity's answers are not
/// whole (at most [`ATTEMPTS`] times). The caller holds the member's learning.
pub async fn learn(pool: &Pool, member: &Member) {
    let CheckKind::Mcp { path, .. } = &pool.health.check else {
        return;
    };
    let Some((identity, modern, legacy, before)) = due(member) else {
        return;
    };
    let mut learned = AbsentAnswers {
        identity,
        ..AbsentAnswers::default()
    };
    if modern {
        learned.modern = ask_modern(pool, member, path).await;
    }
    if legacy {
        if let Some(answers) = ask_legacy(pool, member, path).await {
            learned.legacy = answers;
        }
    }
    // What an earlier round of the same identity learned fills what this one missed.
    if let Some(before) = before.filter(|b| b.identity == learned.identity) {
        merge(&mut learned.modern, &before.modern);
        merge(&mut learned.legacy, &before.legacy);
    }
    // Every era it speaks answered every probe: settled. Otherwise asked again next round.
    let whole = (!modern || whole(&learned.modern)) && (!legacy || whole(&learned.legacy));
    if learned.modern.is_empty() && learned.legacy.is_empty() {
        return;
    }
    if let Ok(mut speaks) = member.speaks.lock() {
        if speaks.identity.as_deref() != Some(learned.identity.as_str()) {
            return;
        }
        log::info!(
            "pool {}: learned what {} ({}) answers for absent tools, prompts and resources{}",
            pool.name,
            member.label,
            learned.identity.escape_debug(),
            if whole { "" } else { " (in part)" }
        );
        if whole {
            speaks.absent_attempts = ATTEMPTS;
        }
        speaks.absent = Some(Arc::new(learned));
    }
}

/// What to ask `member` now, if anything: its identity, the eras it speaks (modern,
/// legacy), and what was learned of it before (an attempt is counted).
fn due(member: &Member) -> Option<(String, bool, bool, Option<Arc<AbsentAnswers>>)> {
    let mut speaks = member.speaks.lock().ok()?;
    let whole_before = speaks.absent.as_ref().is_some_and(|a| {
        (!modern_spoken(&speaks) || whole(&a.modern))
            && (speaks.legacy != Some(true) || whole(&a.legacy))
    });
    if whole_before || speaks.absent_attempts >= ATTEMPTS {
        return None;
    }
    let identity = speaks.identity.clone()?;
    // Each era once its question is settled: a modern answer to discover, and the legacy
    // question answered (or given up on).
    if speaks.legacy.is_none() && speaks.legacy_attempts < Speaks::LEGACY_ATTEMPTS {
        return None;
    }
    speaks.absent_attempts += 1;
    let before = speaks.absent.clone();
    Some((
        identity,
        modern_spoken(&speaks),
        speaks.legacy == Some(true),
        before,
    ))
}

fn merge(into: &mut Answers, before: &Answers) {
    let had = !into.is_empty();
    for (kind, _) in KINDS {
        if into.get(kind).is_none() {
            into.set(kind, before.get(kind).cloned());
        }
    }
    if !had {
        into.framing = before.framing;
    }
}

fn modern_spoken(speaks: &Speaks) -> bool {
    speaks
        .modern
        .as_ref()
        .is_some_and(|list| list.iter().any(|v| v == MODERN_VERSION))
}

fn whole(answers: &Answers) -> bool {
    answers.tool.is_some() && answers.prompt.is_some() && answers.resource.is_some()
}

/// A token no server has seen: the probes' names are made of it.
fn token() -> u64 {
    use ring::rand::SecureRandom as _;
    let mut b = [0u8; 8];
    let _ = ring::rand::SystemRandom::new().fill(&mut b);
    u64::from_le_bytes(b) | 1
}

/// The names a server lists (tools, prompts, resources): an answer that mentions one is not
/// replayed (it would show hidden entries). `headers`: the era's (and session's).
async fn listed(
    pool: &Pool,
    member: &Member,
    path: &str,
    modern: bool,
    headers: &[(&str, &str)],
) -> Vec<String> {
    let mut names = Vec::new();
    for (method, key, field) in [
        ("tools/list", "tools", "name"),
        ("prompts/list", "prompts", "name"),
        ("resources/list", "resources", "uri"),
    ] {
        let id = r#""mcp-edge-absent-list""#;
        let body = if modern {
            client::enveloped(id, method, client::HEALTH)
        } else {
            jsonrpc::request(id, method, "{}")
        };
        let mut with = headers.to_vec();
        if modern {
            with.push(("mcp-method", method));
        }
        let t = pool.health.timeout;
        let Ok(Some(mut answer)) =
            tokio::time::timeout(t, exchange(pool, member, "POST", path, &body, &with)).await
        else {
            continue;
        };
        let reply = tokio::time::timeout(t, answer.reply("mcp-edge-absent-list"))
            .await
            .ok()
            .flatten();
        if let Some(list) = reply
            .as_ref()
            .and_then(|r| r.pointer(&format!("/result/{key}")))
            .and_then(Value::as_array)
        {
            names.extend(
                list.iter()
                    .filter_map(|e| e.get(field)?.as_str().map(str::to_owned)),
            );
        }
    }
    names
}

/// `answers` without those that mention a listed name.
fn unlisting(mut answers: Answers, names: &[String]) -> Answers {
    for (kind, _) in KINDS {
        let mentions = answers
            .get(kind)
            .is_some_and(|l| l.mentions_any(names.iter().map(String::as_str)));
        if mentions {
            answers.set(kind, None);
        }
    }
    answers
}

/// The three probes as 2026-07-28 requests (stateless, with their mirrored headers).
async fn ask_modern(pool: &Pool, member: &Member, path: &str) -> Answers {
    let mut answers = Answers::default();
    for (kind, method) in KINDS {
        let probe = Probe::new(kind, token());
        let [version, method_header] = client::modern_headers(method);
        let headers = [version, method_header, ("mcp-name", probe.name.as_str())];
        let body = probe.body(method, kind, true);
        let answer = ask(pool, member, path, &body, &headers, &probe).await;
        if let Some((learned, framing)) = answer {
            answers.framing = framing;
            answers.set(kind, Some(learned));
        }
    }
    let names = listed(
        pool,
        member,
        path,
        true,
        &[("mcp-protocol-version", MODERN_VERSION)],
    )
    .await;
    unlisting(answers, &names)
}

/// The three probes in a legacy session of their own (initialize, initialized, the probes,
/// DELETE); whether the answers' events ended their lines in CRLF.
async fn ask_legacy(pool: &Pool, member: &Member, path: &str) -> Option<Answers> {
    let t = pool.health.timeout;
    let init = Probe::new(Kind::Tool, token());
    let opened = open_legacy(pool, member, path, &init.id).await?;
    let mut headers = vec![("mcp-protocol-version", opened.revision.as_str())];
    if let Some(s) = &opened.session {
        headers.push(("mcp-session-id", s.as_str()));
    }
    let learned = match &opened.reply {
        Some(r) if r.get("result").is_some() => {
            let initialized = client::initialized();
            let _ = tokio::time::timeout(
                t,
                exchange(pool, member, "POST", path, initialized, &headers),
            )
            .await;
            let mut answers = Answers::default();

            for (kind, method) in KINDS {
                let probe = Probe::new(kind, token());
                let body = probe.body(method, kind, false);
                let answer = ask(pool, member, path, &body, &headers, &probe).await;
                if let Some((learned, framing)) = answer {
                    answers.framing = framing;
                    answers.set(kind, Some(learned));
                }
            }
            let names = listed(pool, member, path, false, &headers).await;
            Some(unlisting(answers, &names))
        }
        _ => None,
    };
    end_legacy(pool, member, path, &opened).await;
    learned
}

/// One probe's answer, learned, and how it was framed.
async fn ask(
    pool: &Pool,
    member: &Member,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
    probe: &Probe,
) -> Option<(Learned, Framing)> {
    let t = pool.health.timeout;
    let mut answer: Answer =
        tokio::time::timeout(t, exchange(pool, member, "POST", path, body, headers))
            .await
            .ok()??;
    let (message, crlf) = tokio::time::timeout(t, answer.message(&probe.id))
        .await
        .ok()??;
    let learned = Learned::from_answer(probe, answer.status, &message)?;
    let framing = Framing {
        sse: answer.sse,
        crlf: answer.sse && crlf,
    };
    Some((learned, framing))
}
