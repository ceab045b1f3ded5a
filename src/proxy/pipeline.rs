//! The request's way through the edge, in order: one list of stages per phase.
//!
//! Each capability is a [`Stage`] in a file of its own under [`super::stages`], implementing
//! the phases it needs (the others do nothing). A Pingora hook runs its phase's list in
//! order ([`super`]); the lists below are the whole order, and `src/README.md`'s stage table
//! is checked against them by a test. Adding a capability is one file and one line in each
//! list whose phase it implements (and, if it keeps state between phases, one field in
//! [`super::stages::State`]).
//!
//! Stage calls are resolved at compile time: a stage that does nothing in a phase costs
//! nothing there.

use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::Session;

use super::answer::Answer;
use super::ctx::Ctx;
use super::stages::*;
use super::Edge;
use crate::error::Rejection;

/// What a request stage decided.
pub enum Flow {
    /// On to the next stage (after the last one, to a member).
    Next,
    /// The edge answers now; the stages after this one do not run.
    Answer(Answer),
    /// The edge answers once the stages after this one let the request through: their
    /// checks (the rate limit, the policy) still apply to a message the edge answers itself.
    AnswerOnceAdmitted(Answer),
    /// The stage wrote the answer itself (a CORS preflight).
    Written,
}

/// A request on its way in, before a member is chosen.
pub struct Admission<'a> {
    pub edge: &'a Edge,
    pub session: &'a mut Session,
    pub ctx: &'a mut Ctx,
}

/// The head a member is about to get.
pub struct Outbound<'a> {
    pub edge: &'a Edge,
    /// The client's request (its head as the client sent it).
    pub session: &'a Session,
    pub head: &'a mut RequestHeader,
    pub ctx: &'a mut Ctx,
}

/// One capability of the edge, by phase. Every phase does nothing unless the stage says.
#[allow(async_fn_in_trait)]
pub trait Stage {
    /// Its name in the lists and in `src/README.md`.
    const NAME: &'static str;

    /// `request_filter`: a check or a decision before a member is chosen; a refusal is
    /// answered by the error boundary and the request never reaches a member.
    async fn request(_a: &mut Admission<'_>) -> Result<Flow, Rejection> {
        Ok(Flow::Next)
    }

    /// `upstream_request_filter`: the head the member gets.
    fn upstream_request(_o: &mut Outbound<'_>) -> pingora::Result<()> {
        Ok(())
    }

    /// `upstream_response_filter`: the member's response head, on its way to the client.
    fn response(_head: &mut ResponseHeader, _ctx: &mut Ctx, _edge: &Edge) -> pingora::Result<()> {
        Ok(())
    }

    /// `upstream_response_body_filter`: one chunk of the member's response body (`None` and
    /// `end`: the end). A stage holding bytes back leaves `Some(Bytes::new())`: `None` would
    /// end the body.
    fn response_body(_body: &mut Option<Bytes>, _end: bool, _ctx: &mut Ctx) -> pingora::Result<()> {
        Ok(())
    }

    /// The head of an answer the edge writes itself (an error, a bridged or hidden entry's
    /// answer, a metadata document).
    fn answer(_head: &mut ResponseHeader, _ctx: &Ctx) -> pingora::Result<()> {
        Ok(())
    }

    /// `logging`: the request is over, however it ended.
    fn logging(_session: &Session, _ctx: &mut Ctx) {}
}

/// Declares each phase's list, in order, and the function that runs it.
macro_rules! pipeline {
    (
        request: [$($request:ty),* $(,)?],
        upstream_request: [$($upstream:ty),* $(,)?],
        response: [$($response:ty),* $(,)?],
        response_body: [$($body:ty),* $(,)?],
        answer: [$($answer:ty),* $(,)?],
        logging: [$($logging:ty),* $(,)?] $(,)?
    ) => {
        /// The stages of each phase, in order, by name.
        pub const REQUEST: &[&str] = &[$(<$request as Stage>::NAME),*];
        pub const UPSTREAM_REQUEST: &[&str] = &[$(<$upstream as Stage>::NAME),*];
        pub const RESPONSE: &[&str] = &[$(<$response as Stage>::NAME),*];
        pub const RESPONSE_BODY: &[&str] = &[$(<$body as Stage>::NAME),*];
        pub const ANSWER: &[&str] = &[$(<$answer as Stage>::NAME),*];
        pub const LOGGING: &[&str] = &[$(<$logging as Stage>::NAME),*];

        /// Every request stage in order, until one answers or refuses.
        pub async fn request(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
            let mut once_admitted = None;
            $(
                match <$request as Stage>::request(a).await? {
                    Flow::Next => {}
                    Flow::AnswerOnceAdmitted(answer) => once_admitted = Some(answer),
                    done => return Ok(done),
                }
            )*
            Ok(once_admitted.map_or(Flow::Next, Flow::Answer))
        }

        pub fn upstream_request(o: &mut Outbound<'_>) -> pingora::Result<()> {
            $(<$upstream as Stage>::upstream_request(o)?;)*
            Ok(())
        }

        pub fn response(
            head: &mut ResponseHeader,
            ctx: &mut Ctx,
            edge: &Edge,
        ) -> pingora::Result<()> {
            $(<$response as Stage>::response(head, ctx, edge)?;)*
            Ok(())
        }

        pub fn response_body(
            body: &mut Option<Bytes>,
            end: bool,
            ctx: &mut Ctx,
        ) -> pingora::Result<()> {
            $(<$body as Stage>::response_body(body, end, ctx)?;)*
            Ok(())
        }

        pub fn answer(head: &mut ResponseHeader, ctx: &Ctx) -> pingora::Result<()> {
            $(<$answer as Stage>::answer(head, ctx)?;)*
            Ok(())
        }

        pub fn logging(session: &Session, ctx: &mut Ctx) {
            $(<$logging as Stage>::logging(session, ctx);)*
        }
    };
}

pipeline! {
    request: [
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
        tasks::Tasks,
        bridge::Bridge,
        limits::Streams,
        legacy::Legacy,
        policy::Policy,
    ],
    upstream_request: [
        method::Method,
        identity::Identify,
        route::Route,
        legacy::Legacy,
        tasks::Tasks,
        bridge::Bridge,
        policy::Policy,
        forwarding::Forwarding,
        stdio::Stdio,
    ],
    response: [
        metrics::Metrics,
        limits::Streams,
        policy::Policy,
        bridge::Bridge,
        legacy::Legacy,
        cors::Cors,
        tasks::Tasks,
    ],
    response_body: [
        tasks::Tasks,
        super::rewrite::Rewrite,
        legacy::Legacy,
    ],
    answer: [
        cors::Cors,
    ],
    logging: [
        metrics::Metrics,
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
            UPSTREAM_REQUEST,
            RESPONSE,
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
