//! What a pool publishes as metrics: its members and their health, the revisions they speak,
//! and, when a reload removed it, that it is gone.

use std::collections::HashSet;

use super::balance::Kind;
use super::Pool;
use crate::mcp::versions::Spoken;
use crate::metrics;

/// A pool's members (label, healthy); drop series of members that left.
pub fn members(pool: &str, members: &[(&str, bool)]) {
    let m = metrics::get();
    m.pools
        .pool_members
        .with_label_values(&[pool])
        .set(members.len() as i64);
    let now: HashSet<String> = members.iter().map(|(l, _)| l.to_string()).collect();
    for (member, healthy) in members {
        m.pools
            .member_healthy
            .with_label_values(&[pool, member])
            .set(i64::from(*healthy));
    }
    let Ok(mut published) = m.published.lock() else {
        return;
    };
    let before = published
        .insert(pool.to_string(), now.clone())
        .unwrap_or_default();
    for gone in before.difference(&now) {
        let _ = m.pools.member_healthy.remove_label_values(&[pool, gone]);
        for kind in ["request", "stream"] {
            let _ = m.balance.in_flight.remove_label_values(&[pool, gone, kind]);
        }
        for reason in <metrics::Ejection as strum::IntoEnumIterator>::iter() {
            let labels = [pool, gone.as_str(), metrics::label(reason)];
            let _ = m.balance.ejections.remove_label_values(&labels);
        }
    }
}

/// Which revisions a pool's members speak.
pub fn spoken(pool: &str, spoken: &Spoken) {
    let m = metrics::get();
    for revision in crate::mcp::revisions() {
        let speaks = if crate::mcp::is_legacy_version(revision) {
            spoken.legacy
        } else {
            spoken
                .modern
                .as_ref()
                .map(|list| list.iter().any(|v| v == revision))
        };
        match speaks {
            Some(yes) => m
                .pools
                .revisions
                .with_label_values(&[pool, revision])
                .set(i64::from(yes)),
            None => {
                let _ = m.pools.revisions.remove_label_values(&[pool, revision]);
            }
        }
    }
}

/// What a pool's servers were learned to answer for absent entries.
pub fn absent(pool: &str, spoken: &Spoken) {
    let m = metrics::get();
    for (era, modern) in [("modern", true), ("legacy", false)] {
        let learned = spoken.absent.as_ref().map(|a| {
            let answers = a.era(modern);
            crate::mcp::learned::KINDS
                .iter()
                .filter(|(kind, _)| answers.get(*kind).is_some())
                .count()
        });
        match learned {
            Some(n) if n > 0 => m
                .pools
                .absent_learned
                .with_label_values(&[pool, era])
                .set(n as i64),
            _ => {
                let _ = m.pools.absent_learned.remove_label_values(&[pool, era]);
            }
        }
    }
}

/// Drop every series of a pool that no longer exists (after a reload removed it).
pub fn forget_pool(name: &str) {
    let m = metrics::get();
    let _ = m.stdio.processes.remove_label_values(&[name]);
    let _ = m.stdio.exits.remove_label_values(&[name]);
    for result in ["ok", "failed"] {
        let _ = m.stdio.starts.remove_label_values(&[name, result]);
    }
    let _ = m.pools.pool_members.remove_label_values(&[name]);
    let _ = m.balance.queue_depth.remove_label_values(&[name]);
    let _ = m.balance.queue_wait.remove_label_values(&[name]);
    for reason in <metrics::balance::Rejection as strum::IntoEnumIterator>::iter() {
        let _ = m
            .balance
            .rejections
            .remove_label_values(&[name, metrics::label(reason)]);
    }
    for revision in crate::mcp::revisions() {
        let _ = m.pools.revisions.remove_label_values(&[name, revision]);
    }
    for era in ["modern", "legacy"] {
        let _ = m.pools.absent_learned.remove_label_values(&[name, era]);
    }
    let Ok(mut published) = m.published.lock() else {
        return;
    };
    for member in published.remove(name).unwrap_or_default() {
        let _ = m.pools.member_healthy.remove_label_values(&[name, &member]);
        for kind in ["request", "stream"] {
            let _ = m
                .balance
                .in_flight
                .remove_label_values(&[name, &member, kind]);
        }
        for reason in <metrics::Ejection as strum::IntoEnumIterator>::iter() {
            let labels = [name, member.as_str(), metrics::label(reason)];
            let _ = m.balance.ejections.remove_label_values(&labels);
        }
    }
}

/// The pool's gauges as they are now (at a scrape; members that left are dropped when the
/// pool publishes its members).
pub fn load(pool: &Pool) {
    let m = &metrics::get().balance;
    m.queue_depth
        .with_label_values(&[&pool.name])
        .set(pool.queued() as i64);
    if pool.balance.max_in_flight.is_some() || pool.balance.max_streams.is_some() {
        // Seen as 0 before the first wait and refusal.
        m.queue_wait.with_label_values(&[&pool.name]);
        for reason in <metrics::balance::Rejection as strum::IntoEnumIterator>::iter() {
            m.rejections
                .with_label_values(&[&pool.name, metrics::label(reason)])
                .inc_by(0);
        }
    }
    for member in pool.members().iter() {
        for (kind, name) in [(Kind::Request, "request"), (Kind::Stream, "stream")] {
            m.in_flight
                .with_label_values(&[&pool.name, &member.label, name])
                .set(i64::from(member.load.held(kind)));
        }
    }
}
