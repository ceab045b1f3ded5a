//! What runs beside the request path: the admin listener ([`admin`]), pool and identity
//! maintenance ([`maintenance`]), reloading ([`reload`]), shutdown ([`shutdown`]) and the
//! access-log writer ([`access_log`]).

pub mod access_log;
pub mod admin;
pub mod maintenance;
pub mod reload;
pub mod shutdown;
