//! The edge's capabilities, one file each, as stages of the pipeline
//! ([`super::pipeline`] lists them in order). A stage reads the request's core
//! ([`super::ctx::Ctx`]), writes the core fields its doc there names, and keeps anything
//! else it needs between its phases in its own part of [`State`].

pub mod access_log;
pub mod balance;
pub mod bridge;
pub mod cors;
pub mod credential;
pub mod forwarding;
pub mod handoff;
pub mod identity;
pub mod legacy;
pub mod limits;
pub mod method;
pub mod metrics;
pub mod outcome;
pub mod policy;
pub mod rate;
pub mod route;
pub mod rules;
pub mod scopes;
pub mod sse_bridge;
pub mod stdio;
pub mod tasks;
pub mod trace;

/// Each stage's own per-request state (boxed where few requests need it: the context lives
/// as long as an idle event stream).
#[derive(Default)]
pub struct State {
    pub cors: cors::State,
    pub credential: credential::State,
    pub limits: limits::State,
    pub method: method::State,
    pub metrics: metrics::State,
    pub outcome: outcome::State,
    pub access_log: access_log::State,
    pub balance: balance::State,
    pub trace: Option<Box<trace::State>>,
    pub tasks: Option<Box<tasks::State>>,
    pub bridge: Option<Box<bridge::State>>,
    pub sse_bridge: Option<Box<sse_bridge::State>>,
    pub legacy: Option<Box<legacy::State>>,
    pub handoff: Option<Box<handoff::State>>,
    pub policy: Option<Box<policy::State>>,
}
