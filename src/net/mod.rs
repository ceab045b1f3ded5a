//! Client connections below the HTTP layer: accepting them within `limits.max_connections`
//! and the memory budget, the first request head read under its deadline and handed back
//! ([`rewind`]), TLS listeners ([`tls`]), the budget itself ([`budget`]) and the requests and streams in
//! flight ([`load`]).

pub mod budget;
pub mod connections;
pub mod load;
pub mod rewind;
pub mod tls;
