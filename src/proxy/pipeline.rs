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
//! nothing there. Each call goes through [`priced`], which the benchmark's priced build keeps
//! out of line to count each stage's instructions (`bench/instructions.py`).

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use super::ctx::Ctx;
use super::edge::Edge;
use super::stage::{Admission, Flow, Outbound, Stage};
use super::stages::*;
use crate::error::Rejection;
use crate::mcp::media::{self, Media};

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
        /// that goes on to a member of this replica's, the admitted stages.
        pub async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
            let mut once_admitted = None;
            $(
                match priced::request::<$request>(a).await? {
                    Flow::Next => {}
                    Flow::AnswerOnceAdmitted(answer) => once_admitted = Some(Flow::Answer(answer)),
                    Flow::Hold(held) => once_admitted = Some(Flow::Hold(held)),
                    done => return Ok(done),
                }
            )*
            if let Some(flow) = once_admitted {
                return Ok(flow);
            }
            let mut flow = Flow::Next;
            $(
                match priced::admitted::<$admitted>(a).await? {
                    Flow::Next => {}
                    Flow::Accepted => flow = Flow::Accepted,
                    done => return Ok(done),
                }
            )*
            Ok(flow)
        }

        pub fn attempt(ctx: &mut Ctx, edge: &Edge) {
            $(priced::attempt::<$attempt>(ctx, edge);)*
        }

        pub fn attempt_failed(ctx: &mut Ctx, error: &pingora::Error) {
            $(priced::attempt_failed::<$failed>(ctx, error);)*
        }

        /// The head a member gets; for a request handed to the replica holding its state,
        /// the relay: the request as the client sent it (that replica runs the stages),
        /// signed.
        pub fn upstream_request(o: &mut Outbound<'_>) -> pingora::Result<()> {
            if o.ctx.handed_off() {
                $(priced::upstream_request::<$relay>(o)?;)*
            } else {
                $(priced::upstream_request::<$upstream>(o)?;)*
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
                $(priced::response::<$response>(head, ctx, edge)?;)*
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
            $(priced::response_body::<$body>(body, end, ctx)?;)*
            Ok(())
        }

        pub fn answer(head: &mut ResponseHeader, body: &mut Bytes, ctx: &mut Ctx) -> pingora::Result<()> {
            $(priced::answer::<$answer>(head, body, ctx)?;)*
            Ok(())
        }

        pub fn logging(session: &Session, ctx: &mut Ctx) {
            $(priced::logging::<$logging>(session, ctx);)*
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

#[cfg(test)]
mod tests {
    use super::*;

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
