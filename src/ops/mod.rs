//! What runs beside the request path: the admin listener ([`admin`]), pool and identity
//! maintenance ([`maintenance`]), reloading ([`reload`]), shutdown ([`shutdown`]), the
//! access-log writer ([`access_log`]) and the export of traces ([`tracing`]).

pub mod access_log;
pub mod admin;
pub mod maintenance;
pub mod reload;
pub mod shutdown;
pub mod tracing;
