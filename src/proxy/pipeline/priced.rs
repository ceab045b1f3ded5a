//! Each stage's call in each phase, as a function of its own: what `bench/instructions.py`
//! prices. Built with `--features price-tags` (and v0 symbol names, so a generic function's
//! name says which stage it runs), every function here stays out of line and callgrind counts
//! each stage's instructions under its own name; otherwise each is the stage's own call,
//! inlined, and costs nothing.

use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

use super::super::ctx::Ctx;
use super::super::edge::Edge;
use super::super::stage::{Admission, Flow, Outbound, Stage};
use crate::error::Rejection;

/// A request stage: its future's `poll` is priced under the stage's name ([`tagged::Request`]).
#[cfg(feature = "price-tags")]
pub async fn request<S: Stage>(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
    tagged::Request::<S, _>::new(S::request(a)).await
}

#[cfg(not(feature = "price-tags"))]
#[inline(always)]
pub async fn request<S: Stage>(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
    S::request(a).await
}

/// An admitted stage, priced like a request stage.
#[cfg(feature = "price-tags")]
pub async fn admitted<S: Stage>(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
    tagged::Request::<S, _>::new(S::admitted(a)).await
}

#[cfg(not(feature = "price-tags"))]
#[inline(always)]
pub async fn admitted<S: Stage>(a: &mut Admission<'_>) -> Result<Flow, Rejection> {
    S::admitted(a).await
}

/// The functions below: out of line when priced, else inlined as if called directly.
macro_rules! priced {
    ($(fn $name:ident($($arg:ident: $ty:ty),*) $(-> $out:ty)?;)*) => {$(
        #[cfg_attr(feature = "price-tags", inline(never))]
        #[cfg_attr(not(feature = "price-tags"), inline(always))]
        pub fn $name<S: Stage>($($arg: $ty),*) $(-> $out)? {
            S::$name($($arg),*)
        }
    )*};
}

priced! {
    fn attempt(ctx: &mut Ctx, edge: &Edge);
    fn attempt_failed(ctx: &mut Ctx, error: &pingora::Error);
    fn upstream_request(o: &mut Outbound<'_>) -> pingora::Result<()>;
    fn response(head: &mut ResponseHeader, ctx: &mut Ctx, edge: &Edge) -> pingora::Result<()>;
    fn response_body(body: &mut Option<Bytes>, end: bool, ctx: &mut Ctx) -> pingora::Result<()>;
    fn answer(head: &mut ResponseHeader, body: &mut Bytes, ctx: &mut Ctx) -> pingora::Result<()>;
    fn logging(session: &Session, ctx: &mut Ctx);
}

#[cfg(feature = "price-tags")]
mod tagged {
    use std::future::Future;
    use std::marker::PhantomData;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use super::{Flow, Rejection, Stage};

    /// A request stage's future, polled under the stage's name (boxed, to be polled without
    /// pin projection; only in the priced build).
    pub struct Request<S, F> {
        future: Pin<Box<F>>,
        stage: PhantomData<fn() -> S>,
    }

    impl<S: Stage, F: Future<Output = Result<Flow, Rejection>>> Request<S, F> {
        pub fn new(future: F) -> Self {
            Request {
                future: Box::pin(future),
                stage: PhantomData,
            }
        }
    }

    impl<S: Stage, F: Future<Output = Result<Flow, Rejection>>> Future for Request<S, F> {
        type Output = Result<Flow, Rejection>;

        #[inline(never)]
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            self.get_mut().future.as_mut().poll(cx)
        }
    }
}
