//! The trace collector of the tests: `otlp-receiver.py` (see tests/peers), and reading the
//! spans it decoded.

use serde_json::Value;

use super::peers::{otlp_receiver, Peer};
use super::{client, poll_until, PATIENCE};

pub struct Collector {
    pub peer: Peer,
}

impl Collector {
    /// A collector that takes every export.
    pub fn start() -> Collector {
        Collector::with(&[])
    }

    /// A collector started with `args` (`--mode refuse`, `--stall SECONDS`).
    pub fn with(args: &[&str]) -> Collector {
        Collector {
            peer: otlp_receiver(args),
        }
    }

    /// Its OTLP/HTTP traces URL.
    pub fn endpoint(&self) -> String {
        format!("http://{}/v1/traces", self.peer.addr)
    }

    /// Every span received so far.
    pub async fn spans(&self) -> Vec<Value> {
        let url = format!("http://{}/spans", self.peer.addr);
        let r = client()
            .get(url)
            .send()
            .await
            .expect("the collector answers");
        r.json().await.expect("spans as JSON")
    }

    /// Export requests that reached it so far.
    pub async fn exports(&self) -> u64 {
        let url = format!("http://{}/exports", self.peer.addr);
        let r = client()
            .get(url)
            .send()
            .await
            .expect("the collector answers");
        r.json().await.expect("a number")
    }

    /// The spans of trace `trace_id`, once `ready` holds for them; panics naming `what`.
    pub async fn trace(
        &self,
        trace_id: &str,
        what: &str,
        ready: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let mut last = Vec::new();
        let found = poll_until(PATIENCE, async || {
            last = self
                .spans()
                .await
                .into_iter()
                .filter(|s| s["trace_id"] == trace_id)
                .collect();
            ready(&last)
        })
        .await;
        assert!(
            found,
            "waited for {what} in trace {trace_id}; have {last:#?}"
        );
        last
    }

    /// The spans for which `matches` holds, once there are at least `n`.
    pub async fn wait_spans(
        &self,
        n: usize,
        what: &str,
        matches: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        let mut last = Vec::new();
        let found = poll_until(PATIENCE, async || {
            last = self.spans().await.into_iter().filter(&matches).collect();
            last.len() >= n
        })
        .await;
        assert!(found, "waited for {n} spans: {what}; have {last:#?}");
        last
    }
}

/// A span's attribute (`Null` when absent).
pub fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

/// The one span of `spans` of this kind (and, given, with this parent); panics otherwise.
pub fn one<'a>(spans: &'a [Value], kind: &str, service: &str) -> &'a Value {
    let found: Vec<&Value> = spans
        .iter()
        .filter(|s| s["kind"] == kind && s["resource"]["service.name"] == service)
        .collect();
    assert_eq!(found.len(), 1, "one {kind} span of {service}: {spans:#?}");
    found[0]
}

/// A random W3C trace id (32 hex digits).
pub fn trace_id() -> String {
    let mut b = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b).unwrap();
    super::mock::hex(&b)
}
