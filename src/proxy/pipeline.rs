//! The request's way through the edge, in order: one list of stages per phase.
//!
//! Each capability is a [`Stage`] (see [`super::stage`]) in a file of its own under
//! [`super::stages`], implementing the phases it needs (the others do nothing). A Pingora hook runs its phase's list in
//! order ([`super`]); the lists below are the whole order, and `src/README.md`'s stage table
//! is checked against them by a test. Adding a capability is one file and one line in each
//! list whose phase it implements (and, if it keeps state between phases, one field in
//! [`super::stages::State`]).
//!
//! Stage calls are resolved at compile time: a stage that does nothing in a phase costs
//! nothing there. Which stages a request calls is compiled when a snapshot is loaded: each
//! endpoint's plan ([`plan`], from each stage's [`Stage::serves`]) and each listener's
//! ([`listener_plan`], [`Stage::listens`]) keep a bit per stage, and a request calls only the
//! stages whose bit is set (the route stage sets the request's plan; until then its
//! listener's). Each call goes through [`priced`], which the benchmark's priced build keeps
//! out of line to count each stage's instructions (`bench/instructions.py`).

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use super::ctx::Ctx;
use super::edge::{Edge, Listening};
use super::stage::{Admission, Flow, Outbound, Phase, Site, Stage};
use super::stages::*;
use crate::error::Rejection;
use crate::mcp::media::{self, Media};
use crate::runtime::{Endpoint, Plan, Runtime};

mod priced;

/// Declares each phase's list, in order, and the function that runs it.
macro_rules! pipeline {
    (
        request: [$($request:ty),* $(,)?],
        admitted: [$($admitted:ty),* $(,)?],
        attempt: [$($attempt:ty),* $(,)?],
        attempt_failed: [$($failed:ty),* $(,)?],
        upstream_request: [$($upstream:ty),* $(,)?],
        relay: [$($relay:ty),* $(,)?],
        response: [$($response:ty),* $(,)?],
        relay_response: [$($relay_response:ty),* $(,)?],
        response_body: [$($body:ty),* $(,)?],
        answer: [$($answer:ty),* $(,)?],
        logging: [$($logging:ty),* $(,)?] $(,)?
    ) => {
        /// The stages of each phase, in order, by name.
        pub const REQUEST: &[&str] = &[$(<$request as Stage>::NAME),*];
        pub const ADMITTED: &[&str] = &[$(<$admitted as Stage>::NAME),*];
        pub const ATTEMPT: &[&str] = &[$(<$attempt as Stage>::NAME),*];
        pub const ATTEMPT_FAILED: &[&str] = &[$(<$failed as Stage>::NAME),*];
        pub const UPSTREAM_REQUEST: &[&str] = &[$(<$upstream as Stage>::NAME),*];
        pub const RELAY: &[&str] = &[$(<$relay as Stage>::NAME),*];
        pub const RESPONSE: &[&str] = &[$(<$response as Stage>::NAME),*];
        pub const RELAY_RESPONSE: &[&str] = &[$(<$relay_response as Stage>::NAME),*];
        pub const RESPONSE_BODY: &[&str] = &[$(<$body as Stage>::NAME),*];
        pub const ANSWER: &[&str] = &[$(<$answer as Stage>::NAME),*];
        pub const LOGGING: &[&str] = &[$(<$logging as Stage>::NAME),*];

        /// Every request stage in order, until one answers or refuses; then, for a request
        /// that goes on to a member of this replica's, the admitted stages. Each only where
        /// the request's plan calls it (its listener's until the route stage finds its
        /// endpoint, then the endpoint's).
        pub async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
            let mut once_admitted = None;
            $(
                if a.ctx.plan.request & const { bit(REQUEST, <$request as Stage>::NAME) } != 0 {
                    match priced::request::<$request>(a).await? {
                        Flow::Next => {}
                        Flow::AnswerOnceAdmitted(answer) => once_admitted = Some(Flow::Answer(answer)),
                        Flow::Hold(held) => once_admitted = Some(Flow::Hold(held)),
                        done => return Ok(done),
                    }
                }
            )*
            if let Some(flow) = once_admitted {
                return Ok(flow);
            }
            let mut flow = Flow::Next;
            $(
                if a.ctx.plan.admitted & const { bit(ADMITTED, <$admitted as Stage>::NAME) } != 0 {
                    match priced::admitted::<$admitted>(a).await? {
                        Flow::Next => {}
                        Flow::Accepted => flow = Flow::Accepted,
                        done => return Ok(done),
                    }
                }
            )*
            Ok(flow)
        }

        pub fn attempt(ctx: &mut Ctx, edge: &Edge) {
            $(
                if ctx.plan.attempt & const { bit(ATTEMPT, <$attempt as Stage>::NAME) } != 0 {
                    priced::attempt::<$attempt>(ctx, edge);
                }
            )*
        }

        pub fn attempt_failed(ctx: &mut Ctx, error: &pingora::Error) {
            $(
                if ctx.plan.attempt_failed & const { bit(ATTEMPT_FAILED, <$failed as Stage>::NAME) } != 0 {
                    priced::attempt_failed::<$failed>(ctx, error);
                }
            )*
        }

        /// The head a member gets; for a request handed to the replica holding its state,
        /// the relay: the request as the client sent it (that replica runs the stages),
        /// signed.
        pub fn upstream_request(o: &mut Outbound<'_>) -> pingora::Result<()> {
            if o.ctx.handed_off() {
                $(priced::upstream_request::<$relay>(o)?;)*
            } else {
                $(
                    if o.ctx.plan.upstream_request & const { bit(UPSTREAM_REQUEST, <$upstream as Stage>::NAME) } != 0 {
                        priced::upstream_request::<$upstream>(o)?;
                    }
                )*
            }
            Ok(())
        }

        /// What the member's head says, then the response stages; for a request handed to
        /// another replica, the relay's (that replica wrote the answer: it passes as it is).
        pub fn response(
            head: &mut ResponseHeader,
            ctx: &mut Ctx,
            edge: &Edge,
        ) -> pingora::Result<()> {
            ctx.response.media = Media::of_headers(&head.headers);
            ctx.response.encoded = media::is_encoded(&head.headers);
            if ctx.handed_off() {
                $(priced::response::<$relay_response>(head, ctx, edge)?;)*
            } else {
                $(
                    if ctx.plan.response & const { bit(RESPONSE, <$response as Stage>::NAME) } != 0 {
                        priced::response::<$response>(head, ctx, edge)?;
                    }
                )*
            }
            Ok(())
        }

        /// A chunk of the member's answer (a relayed answer passes as it is).
        pub fn response_body(
            body: &mut Option<Bytes>,
            end: bool,
            ctx: &mut Ctx,
        ) -> pingora::Result<()> {
            if ctx.handed_off() {
                return Ok(());
            }
            $(
                if ctx.plan.response_body & const { bit(RESPONSE_BODY, <$body as Stage>::NAME) } != 0 {
                    priced::response_body::<$body>(body, end, ctx)?;
                }
            )*
            Ok(())
        }

        pub fn answer(head: &mut ResponseHeader, body: &mut Bytes, ctx: &mut Ctx) -> pingora::Result<()> {
            $(
                if ctx.plan.answer & const { bit(ANSWER, <$answer as Stage>::NAME) } != 0 {
                    priced::answer::<$answer>(head, body, ctx)?;
                }
            )*
            Ok(())
        }

        pub fn logging(session: &Session, ctx: &mut Ctx) {
            $(
                if ctx.plan.logging & const { bit(LOGGING, <$logging as Stage>::NAME) } != 0 {
                    priced::logging::<$logging>(session, ctx);
                }
            )*
        }

        /// An endpoint's plan: the stages of each phase that serve it ([`Stage::serves`]).
        pub fn plan(endpoint: &Endpoint, runtime: &Runtime) -> Plan {
            let site = &Site { endpoint, runtime };
            Plan {
                request: bits([$(<$request as Stage>::serves(site, Phase::Request)),*]),
                admitted: bits([$(<$admitted as Stage>::serves(site, Phase::Admitted)),*]),
                attempt: bits([$(<$attempt as Stage>::serves(site, Phase::Attempt)),*]),
                attempt_failed: bits([$(<$failed as Stage>::serves(site, Phase::AttemptFailed)),*]),
                upstream_request: bits([$(<$upstream as Stage>::serves(site, Phase::UpstreamRequest)),*]),
                response: bits([$(<$response as Stage>::serves(site, Phase::Response)),*]),
                response_body: bits([$(<$body as Stage>::serves(site, Phase::ResponseBody)),*]),
                answer: bits([$(<$answer as Stage>::serves(site, Phase::Answer)),*]),
                logging: bits([$(<$logging as Stage>::serves(site, Phase::Logging)),*]),
            }
        }

        /// A listener's plan: the stages that can act on its requests ([`Stage::listens`]).
        pub fn listener_plan(listening: &Listening) -> Plan {
            Plan {
                request: bits([$(<$request as Stage>::listens(listening)),*]),
                admitted: bits([$(<$admitted as Stage>::listens(listening)),*]),
                attempt: bits([$(<$attempt as Stage>::listens(listening)),*]),
                attempt_failed: bits([$(<$failed as Stage>::listens(listening)),*]),
                upstream_request: bits([$(<$upstream as Stage>::listens(listening)),*]),
                response: bits([$(<$response as Stage>::listens(listening)),*]),
                response_body: bits([$(<$body as Stage>::listens(listening)),*]),
                answer: bits([$(<$answer as Stage>::listens(listening)),*]),
                logging: bits([$(<$logging as Stage>::listens(listening)),*]),
            }
        }
    };
}

pipeline! {
    request: [
        handoff::Arrival,
        trace::Trace,
        limits::Requests,
        route::Head,
        identity::Metadata,
        route::Route,
        cors::Origin,
        route::Host,
        cors::Preflight,
        identity::Identify,
        method::Method,
        rules::Rules,
        handoff::HandOff,
        access_log::AccessLog,
        tasks::Tasks,
        sse_bridge::SseBridge,
        bridge::Bridge,
        limits::Streams,
        legacy::Legacy,
        rate::Rate,
        policy::Policy,
        scopes::Scopes,
    ],
    admitted: [
        credential::Credentials,
        balance::Balance,
        sse_bridge::SseBridge,
    ],
    attempt: [
        trace::Trace,
    ],
    attempt_failed: [
        trace::Trace,
    ],
    upstream_request: [
        method::Method,
        identity::Identify,
        credential::Credentials,
        route::Route,
        sse_bridge::SseBridge,
        legacy::Legacy,
        tasks::Tasks,
        bridge::Bridge,
        policy::Policy,
        forwarding::Forwarding,
        stdio::Stdio,
        trace::Trace,
    ],
    relay: [
        method::Method,
        trace::Trace,
        handoff::HandOff,
    ],
    response: [
        balance::Balance,
        metrics::Metrics,
        limits::Streams,
        outcome::Outcome,
        trace::Trace,
        policy::Policy,
        bridge::Bridge,
        legacy::Legacy,
        cors::Cors,
        tasks::Tasks,
        sse_bridge::SseBridge,
    ],
    relay_response: [
        handoff::HandOff,
    ],
    response_body: [
        outcome::Outcome,
        tasks::Tasks,
        super::rewrite::Rewrite,
        legacy::Legacy,
        sse_bridge::SseBridge,
    ],
    answer: [
        outcome::Outcome,
        cors::Cors,
        sse_bridge::SseBridge,
    ],
    logging: [
        sse_bridge::SseBridge,
        balance::Balance,
        metrics::Metrics,
        trace::Trace,
        access_log::AccessLog,
    ],
}

/// A stage's bit in its phase's plan: its place in the phase's list.
const fn bit(list: &[&str], name: &str) -> u32 {
    let mut i = 0;
    while i < list.len() {
        if same(list[i].as_bytes(), name.as_bytes()) {
            return 1 << i;
        }
        i += 1;
    }
    panic!("a stage is missing from its phase's list")
}

const fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// A phase's plan from whether each of its stages serves, in list order.
fn bits<const N: usize>(serves: [bool; N]) -> u32 {
    const { assert!(N <= 32, "a phase's plan holds 32 stages") };
    serves
        .iter()
        .enumerate()
        .fold(0, |plan, (i, &s)| if s { plan | 1 << i } else { plan })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, TraceContext};

    const TWO_ROUTES: &str = r#"
        [[listeners]]
        address = "127.0.0.1:8080"
        [[pools]]
        name = "main"
        members = ["127.0.0.1:9001"]
        [[routes]]
        path = "/mcp"
        pool = "main"
        versions = ["2026-07-28"]
        [[routes]]
        path = "/guarded/mcp"
        pool = "main"
        versions = ["2026-07-28"]
        allowed_hosts = ["example.com"]
        [routes.rate_limit]
        requests_per_second = 10
    "#;

    /// Whether `plan` (one phase's bits) calls the stage `name` of `list`.
    fn calls(list: &[&str], plan: u32, name: &str) -> bool {
        plan & bit(list, name) != 0
    }

    #[test]
    fn an_endpoint_calls_only_the_stages_its_route_needs() {
        let mut config = Config::parse(TWO_ROUTES).unwrap();
        config.runtime.compile(plan);
        let runtime = &config.runtime;
        let plain = runtime.endpoint("/mcp").unwrap().plan;
        let guarded = runtime.endpoint("/guarded/mcp").unwrap().plan;
        // What every MCP request needs, on both.
        for p in [plain, guarded] {
            for stage in ["route", "method", "rules", "legacy"] {
                assert!(calls(REQUEST, p.request, stage), "{stage}");
            }
            assert!(calls(ADMITTED, p.admitted, "balance"));
            assert!(calls(UPSTREAM_REQUEST, p.upstream_request, "forwarding"));
            assert!(calls(LOGGING, p.logging, "access_log"));
            // No auth, policy, bridge, fleet, credential or stdio pool on either.
            for stage in [
                "identity",
                "policy",
                "scopes",
                "bridge",
                "sse_bridge",
                "handoff",
            ] {
                assert!(!calls(REQUEST, p.request, stage), "{stage}");
            }
            assert!(!calls(ADMITTED, p.admitted, "credential"));
            assert!(!calls(UPSTREAM_REQUEST, p.upstream_request, "stdio"));
            assert!(!calls(UPSTREAM_REQUEST, p.upstream_request, "credential"));
            assert!(!calls(RESPONSE, p.response, "policy"));
            // Without `auth` the caller's `Authorization` goes on as it came
            // (`forward_credential`'s default): no identity stage on the member's head either.
            assert!(!calls(UPSTREAM_REQUEST, p.upstream_request, "identity"));
        }
        // What only the guarded route has.
        assert!(calls(REQUEST, guarded.request, "rate") && !calls(REQUEST, plain.request, "rate"));
        assert!(calls(REQUEST, guarded.request, "host") && !calls(REQUEST, plain.request, "host"));
        // What a request to the plain route calls on a listener without tracing (the
        // bench's route: docs/benchmarks.md, "Code footprint and layout").
        let listener = listener_plan(&Listening {
            tls: false,
            tracing: None,
            trace_context: TraceContext::default(),
            handoff: false,
        });
        let called = plain.and(listener);
        let counts = [
            called.request,
            called.admitted,
            called.attempt,
            called.attempt_failed,
            called.upstream_request,
            called.response,
            called.response_body,
            called.answer,
            called.logging,
        ]
        .map(u32::count_ones);
        assert_eq!(counts, [11, 1, 0, 0, 4, 7, 4, 2, 3]);
        // A snapshot nobody compiled calls every stage.
        let fresh = Config::parse(TWO_ROUTES).unwrap();
        assert_eq!(fresh.runtime.endpoint("/mcp").unwrap().plan, Plan::ALL);
    }

    #[test]
    fn a_listener_calls_the_trace_and_arrival_stages_only_when_it_has_them() {
        let plain = listener_plan(&Listening {
            tls: false,
            tracing: None,
            trace_context: TraceContext::default(),
            handoff: false,
        });
        assert!(!calls(REQUEST, plain.request, "trace"));
        assert!(!calls(REQUEST, plain.request, "arrival"));
        assert!(!calls(LOGGING, plain.logging, "trace"));
        assert_eq!(plain.attempt & bit(ATTEMPT, "trace"), 0);
        assert!(calls(REQUEST, plain.request, "route"));
        let handoff = listener_plan(&Listening {
            tls: false,
            tracing: None,
            trace_context: TraceContext::default(),
            handoff: true,
        });
        assert!(calls(REQUEST, handoff.request, "arrival"));
    }

    #[test]
    fn no_stage_appears_twice_in_a_phase() {
        for list in [
            REQUEST,
            ADMITTED,
            ATTEMPT,
            ATTEMPT_FAILED,
            UPSTREAM_REQUEST,
            RELAY,
            RESPONSE,
            RELAY_RESPONSE,
            RESPONSE_BODY,
            ANSWER,
            LOGGING,
        ] {
            let mut names = list.to_vec();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), list.len(), "{list:?}");
        }
    }
}
