//! A request body read whole (see the method stage, `stages/method.rs`), and the memory it
//! holds in the budget until the member has it.

use bytes::Bytes;

use crate::net::budget::Reservation;

pub struct Body {
    bytes: Bytes,
    /// Held as long as the body is (released with it).
    _room: Reservation,
    /// A stage changed it (its length is sent as `Content-Length`).
    rewritten: bool,
}

impl Body {
    pub fn new(bytes: Bytes, room: Reservation) -> Body {
        Body {
            bytes,
            _room: room,
            rewritten: false,
        }
    }

    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The body a stage made of it (tasks, bridge, policy): every byte but those it owns as
    /// the client sent it (see `mcp/README.md`).
    pub fn replace(&mut self, bytes: impl Into<Bytes>) {
        self.bytes = bytes.into();
        self.rewritten = true;
    }

    /// Its length when a stage changed it.
    pub fn rewritten_len(&self) -> Option<usize> {
        self.rewritten.then_some(self.bytes.len())
    }
}
