//! The HTTP+SSE streams this replica holds for bridged clients (`bridge_legacy` with an
//! `sse_path`): a 2024-11-05 client's answers belong on the event stream its `GET` opened,
//! which only this replica can write. Each stream is known by a random id sealed in the
//! client's session token (with this replica as its owner, so other replicas hand the
//! client's POSTs here), and holds what the client declared at `initialize`.
//!
//! A stream is an ordered queue of whole events; every answer is queued at once, never
//! awaited: a client that lets [`QUEUE`] events pile up unread loses its stream (the queue
//! is dropped, the stream ends once what was queued is written, and its later POSTs get 404).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use bytes::Bytes;
use ring::rand::{SecureRandom, SystemRandom};
use tokio::sync::mpsc;

use crate::mcp::era::Declared;

/// Events queued for one stream before it counts as not read.
pub const QUEUE: usize = 256;

/// The streams held here, by id.
#[derive(Default)]
pub struct Streams {
    held: Mutex<HashMap<u64, Entry>>,
}

struct Entry {
    events: mpsc::Sender<Bytes>,
    declared: Option<Declared>,
}

/// What the stream's holder reads (events in order) and, dropped, forgets the stream.
pub struct Opened {
    pub id: u64,
    pub events: mpsc::Receiver<Bytes>,
}

impl Drop for Opened {
    fn drop(&mut self) {
        get().forget(self.id);
    }
}

/// Why an event was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// No such stream here (closed, never here).
    Gone,
    /// Its client did not read [`QUEUE`] events: the stream is let go.
    Unread,
}

/// The process's streams (every listener's, the hand-off listener's included).
pub fn get() -> &'static Streams {
    static STREAMS: OnceLock<Streams> = OnceLock::new();
    STREAMS.get_or_init(Streams::default)
}

impl Streams {
    /// A new stream, under an id no other stream here has.
    pub fn open(&self) -> Option<Opened> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let mut held = self.held.lock().ok()?;
        let id = loop {
            let mut bytes = [0u8; 8];
            SystemRandom::new().fill(&mut bytes).ok()?;
            let id = u64::from_be_bytes(bytes);
            if !held.contains_key(&id) {
                break id;
            }
        };
        let entry = Entry {
            events: tx,
            declared: None,
        };
        held.insert(id, entry);
        Some(Opened { id, events: rx })
    }

    /// Is stream `id` held here?
    pub fn holds(&self, id: u64) -> bool {
        self.held.lock().is_ok_and(|h| h.contains_key(&id))
    }

    /// What the client of stream `id` declared at `initialize` (`None`: not initialised, or
    /// not held here).
    pub fn declared(&self, id: u64) -> Option<Declared> {
        let held = self.held.lock().ok()?;
        held.get(&id)?.declared.clone()
    }

    /// Remember what the client of stream `id` declared; `false`: not held here.
    pub fn declare(&self, id: u64, declared: Declared) -> bool {
        let Ok(mut held) = self.held.lock() else {
            return false;
        };
        match held.get_mut(&id) {
            Some(entry) => {
                entry.declared = Some(declared);
                true
            }
            None => false,
        }
    }

    /// Queue one whole event on stream `id`.
    pub fn send(&self, id: u64, event: Bytes) -> Result<(), Lost> {
        let mut held = self.held.lock().map_err(|_| Lost::Gone)?;
        let entry = held.get(&id).ok_or(Lost::Gone)?;
        match entry.events.try_send(event) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                held.remove(&id);
                Err(Lost::Unread)
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                held.remove(&id);
                Err(Lost::Gone)
            }
        }
    }

    /// Streams held now.
    pub fn len(&self) -> usize {
        self.held.lock().map_or(0, |h| h.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn forget(&self, id: u64) {
        if let Ok(mut held) = self.held.lock() {
            held.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared() -> Declared {
        Declared {
            v: "2024-11-05".into(),
            c: serde_json::json!({}),
            i: serde_json::json!({"name": "t"}),
        }
    }

    #[test]
    fn a_stream_is_held_until_its_reader_drops() {
        let streams = get();
        let opened = streams.open().unwrap();
        let id = opened.id;
        assert!(streams.holds(id));
        assert_eq!(streams.declared(id), None);
        assert!(streams.declare(id, declared()));
        assert_eq!(streams.declared(id), Some(declared()));
        drop(opened);
        assert!(!streams.holds(id));
        assert_eq!(streams.send(id, Bytes::from_static(b"x")), Err(Lost::Gone));
        assert!(!streams.declare(id, declared()));
    }

    #[test]
    fn events_come_in_order_and_an_unread_stream_is_let_go() {
        let streams = get();
        let mut opened = streams.open().unwrap();
        let id = opened.id;
        for i in 0..QUEUE {
            streams.send(id, Bytes::from(i.to_string())).unwrap();
        }
        assert_eq!(streams.send(id, Bytes::from_static(b"over")), Err(Lost::Unread));
        assert!(!streams.holds(id));
        // What was queued is still written, in order; then the stream ends.
        for i in 0..QUEUE {
            assert_eq!(opened.events.try_recv().unwrap(), Bytes::from(i.to_string()));
        }
        assert!(matches!(
            opened.events.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
    }
}
