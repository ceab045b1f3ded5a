//! A request to a stdio pool's member (the edge's own server for the pool, see
//! [`crate::stdio`]) carries the pool's secret and who calls (the principal's or the
//! credential's binding, for `per_principal` isolation); whatever the client sent under those
//! names is replaced.

use crate::proxy::stage::{Outbound, Phase, Site, Stage};

pub struct Stdio;

impl Stage for Stdio {
    const NAME: &'static str = "stdio";

    /// A stdio pool.
    fn serves(site: &Site<'_>, _phase: Phase) -> bool {
        matches!(
            site.endpoint.route.pool.source,
            crate::routing::Source::Stdio(_)
        )
    }

    fn upstream_request(o: &mut Outbound<'_>) -> pingora::Result<()> {
        let Some(group) = o.ctx.endpoint()?.route.pool.stdio.get() else {
            return Ok(());
        };
        let principal = o.ctx.request.principal.as_deref();
        let binding = crate::session::binding(o.session.req_header(), principal);
        crate::stdio::mark(o.head, group, binding)
    }
}
