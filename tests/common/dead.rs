//! Pool members that are surely dead. A port that was free a moment ago is not: another test
//! may bind it meanwhile and answer. A TCP socket bound to a port but never listening keeps
//! the port reserved (no one else can bind it, and the kernel never picks a bound port as an
//! ephemeral one), while every connection to it is refused with a reset at once.
//!
//! Why not "silent" (a listener that never accepts): the kernel completes the handshake from
//! the backlog, so the edge sees a connected member that never answers, a read timeout rather
//! than a connect failure. The tests that need silence use the mock's `Behavior::Stall`.

use std::net::SocketAddr;

use tokio::net::TcpSocket;

use super::mock::{Behavior, Mock};

/// A local address that refuses connections for as long as this value lives.
pub struct Refusing {
    pub addr: SocketAddr,
    socket: TcpSocket,
}

/// Reserve a port on 127.0.0.1 that refuses every connection.
pub fn refusing() -> Refusing {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("bind 127.0.0.1:0");
    let addr = socket.local_addr().expect("bound address");
    Refusing { addr, socket }
}

impl Refusing {
    /// Bring the member to life on the same port: the reserved socket starts listening, so no
    /// one can take the port in between.
    pub fn revive(self, behavior: Behavior) -> Mock {
        let listener = self
            .socket
            .listen(1024)
            .expect("listen on the reserved port");
        Mock::serve(listener, behavior)
    }
}
