//! The pool maintenance service: re-resolves DNS-discovered pools and runs active health
//! checks, off the request path. It always works on the current runtime snapshot, so a
//! reload takes effect at the next tick.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use crate::routing::health::{check_pool, resolve};
use crate::routing::{CheckKind, Source};
use crate::runtime::Runtime;

const TICK: Duration = Duration::from_millis(100);

pub struct Maintenance {
    pub runtime: Arc<ArcSwap<Runtime>>,
}

#[async_trait]
impl BackgroundService for Maintenance {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut due: HashMap<(String, &'static str), Instant> = HashMap::new();
        loop {
            let snapshot = self.runtime.load_full();
            for pool in snapshot.pools.values() {
                // Room that appeared with no request leaving (an ejection over, a member
                // back, a larger fleet share) goes to the requests waiting for it.
                pool.kick();
                if let Source::Dns { name, interval } = &pool.source {
                    if is_due(&mut due, &pool.name, "dns", *interval) {
                        let (pool, name) = (pool.clone(), name.clone());
                        tokio::spawn(async move { resolve(&pool, &name).await });
                    }
                }
                if pool.health.check != CheckKind::None
                    && is_due(&mut due, &pool.name, "check", pool.health.interval)
                {
                    let pool = pool.clone();
                    tokio::spawn(async move { check_pool(&pool).await });
                }
            }
            identity_upkeep(&snapshot, &mut due);
            if let Some(fleet) = &snapshot.fleet {
                if is_due(&mut due, "", "fleet", fleet.settings.interval) {
                    let fleet = fleet.clone();
                    tokio::spawn(async move { fleet.refresh().await });
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}

/// Fetch the JWKS URL when due (or when a token named an unknown `kid`); forget full rate
/// buckets.
fn identity_upkeep(snapshot: &Runtime, due: &mut HashMap<(String, &'static str), Instant>) {
    let jwks = snapshot
        .identity
        .as_ref()
        .and_then(|i| i.jwt.as_ref())
        .map(|j| j.jwks.clone());
    if let Some(jwks) = jwks {
        if let Some(every) = jwks.refresh_interval() {
            if jwks.wanted() || is_due(due, "", "jwks", every) {
                tokio::spawn(async move { jwks.refresh().await });
            }
        }
    }
    if is_due(due, "", "rate", RATE_SWEEP) {
        for endpoint in snapshot.endpoints.values() {
            if let Some(limit) = &endpoint.route.access.rate {
                limit.sweep();
            }
        }
    }
}

const RATE_SWEEP: Duration = Duration::from_secs(10);

fn is_due(
    due: &mut HashMap<(String, &'static str), Instant>,
    pool: &str,
    what: &'static str,
    every: Duration,
) -> bool {
    let now = Instant::now();
    let key = (pool.to_string(), what);
    match due.get(&key) {
        Some(t) if *t > now => false,
        _ => {
            due.insert(key, now + every);
            true
        }
    }
}
