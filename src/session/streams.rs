//! The HTTP+SSE streams this replica holds for bridged clients (`bridge_legacy` with an
//! `sse_path`): a 2024-11-05 client's answers belong on the event stream its `GET` opened,
//! which only this replica can write. Each stream is known by a random id sealed in the
//! client's session token (with this replica as its owner, so other replicas hand the
//! client's POSTs here), and holds what the client declared at `initialize`.
//!
//! A 2026-07-28 server asks a client for input (elicitation, sampling, roots) by answering
//! `input_required`; the edge asks the client on its stream instead, with requests of its
//! own ids, keeps the request until every answer came ([`Asked`]), and the POST carrying the
//! last answer becomes the retry (see `proxy/stages/sse_bridge.rs`).
//!
//! A stream is an ordered queue of whole events; every answer is queued at once, never
//! awaited: a client that lets [`QUEUE`] events or [`MAX_QUEUED_BYTES`] pile up unread loses
//! its stream (the queue is dropped, the stream ends once what was queued is written, and its
//! later POSTs get 404).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::mcp::era::Declared;

/// Events queued for one stream before it counts as not read.
pub const QUEUE: usize = 256;
/// Bytes queued for one stream before it counts as not read.
pub const MAX_QUEUED_BYTES: usize = 8 * 1024 * 1024;
/// Requests of one stream waiting for the client's answers to their questions.
pub const MAX_ASKED: usize = 16;

/// The streams held here, by id.
#[derive(Default)]
pub struct Streams {
    held: Mutex<HashMap<u64, Entry>>,
}

/// Where a stream's queued bytes are counted (the edge's memory budget): `fit` makes the
/// count exactly `bytes`, false (and unchanged) when growing to it does not fit.
pub trait Room: Send {
    fn fit(&mut self, bytes: usize) -> bool;
}

/// The bytes queued and not yet taken by the stream's holder, and the room they hold.
struct Queued {
    bytes: usize,
    room: Box<dyn Room>,
}

impl Queued {
    fn set(&mut self, bytes: usize) -> bool {
        let fits = self.room.fit(bytes);
        if fits {
            self.bytes = bytes;
        }
        fits
    }
}

struct Entry {
    events: mpsc::Sender<Bytes>,
    queued: Arc<Mutex<Queued>>,
    declared: Option<Declared>,
    /// Requests waiting for answers, by number; the number of each question's id.
    asked: HashMap<u64, Asked>,
    questions: HashMap<String, u64>,
    next: u64,
}

/// A request the server answered `input_required`, waiting for the client's answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Asked {
    /// The request's id (JSON text), as the client sent it: its answer's.
    pub id: String,
    pub method: String,
    /// Its `Mcp-Name` subject.
    pub name: Option<String>,
    /// The request as it went to the member.
    pub body: Bytes,
    /// The `requestState` the retry echoes.
    pub state: Option<Value>,
    /// What the client answered, by the server's key.
    pub answers: Map<String, Value>,
    /// The keys not answered yet, by the id the edge asked with.
    waiting: HashMap<String, String>,
}

impl Asked {
    pub fn new(id: String, method: String, name: Option<String>, body: Bytes) -> Asked {
        Asked {
            id,
            method,
            name,
            body,
            state: None,
            answers: Map::new(),
            waiting: HashMap::new(),
        }
    }
}

/// What a client's answer to a question did.
#[derive(Debug, PartialEq)]
pub enum Answered {
    /// No question on this stream has that id (asked elsewhere, answered already).
    Unknown,
    /// Recorded; other questions of the request wait.
    Waiting,
    /// The last answer: the request to retry with every answer.
    Complete(Box<Asked>),
    /// The client answered with an error (`Value`): the request cannot go on.
    Refused(Box<Asked>, Value),
}

/// What the stream's holder reads (events in order) and, dropped, forgets the stream.
pub struct Opened {
    pub id: u64,
    pub events: mpsc::Receiver<Bytes>,
    /// Released when the holder drops what is left in the queue.
    queued: Arc<Mutex<Queued>>,
}

impl Opened {
    /// An event of `len` bytes was taken from the queue.
    pub fn taken(&self, len: usize) {
        if let Ok(mut q) = self.queued.lock() {
            let left = q.bytes.saturating_sub(len);
            q.set(left);
        }
    }
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
    /// A new stream, under an id no other stream here has; what it queues is counted in
    /// `room`.
    pub fn open(&self, room: Box<dyn Room>) -> Option<Opened> {
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
        let queued = Arc::new(Mutex::new(Queued { bytes: 0, room }));
        let entry = Entry {
            events: tx,
            queued: queued.clone(),
            declared: None,
            asked: HashMap::new(),
            questions: HashMap::new(),
            next: 0,
        };
        held.insert(id, entry);
        Some(Opened {
            id,
            events: rx,
            queued,
        })
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
        let len = event.len();
        let fits = entry.queued.lock().is_ok_and(|mut q| {
            let want = q.bytes + len;
            want <= MAX_QUEUED_BYTES && q.set(want)
        });
        if !fits {
            // Not read, or no room in the memory budget for more: let go.
            held.remove(&id);
            return Err(Lost::Unread);
        }
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

    /// Keep `asked` until the client answers `questions` (the server's key and its request,
    /// `method` and `params`); the requests to send the client, with the edge's ids. `None`:
    /// the stream is gone, or [`MAX_ASKED`] requests wait already.
    pub fn ask(
        &self,
        stream: u64,
        mut asked: Asked,
        questions: Vec<(String, Value)>,
        state: Option<Value>,
    ) -> Option<Vec<Value>> {
        let mut held = self.held.lock().ok()?;
        let entry = held.get_mut(&stream)?;
        if entry.asked.len() >= MAX_ASKED || questions.is_empty() {
            return None;
        }
        let number = entry.next;
        entry.next += 1;
        let mut requests = Vec::with_capacity(questions.len());
        for (i, (key, request)) in questions.into_iter().enumerate() {
            let id = format!("mcp-edge-ask-{number}-{i}");
            let mut message = json!({"jsonrpc": "2.0", "id": id});
            if let (Some(m), Value::Object(r)) = (message.as_object_mut(), request) {
                m.extend(r);
            }
            requests.push(message);
            entry.questions.insert(id.clone(), number);
            asked.waiting.insert(id, key);
        }
        asked.state = state;
        entry.asked.insert(number, asked);
        Some(requests)
    }

    /// The client's answer to question `id`: its result, or its error.
    pub fn answer(&self, stream: u64, id: &str, answer: Result<Value, Value>) -> Answered {
        let Ok(mut held) = self.held.lock() else {
            return Answered::Unknown;
        };
        let Some(entry) = held.get_mut(&stream) else {
            return Answered::Unknown;
        };
        let Some(number) = entry.questions.remove(id) else {
            return Answered::Unknown;
        };
        let Some(asked) = entry.asked.get_mut(&number) else {
            return Answered::Unknown;
        };
        let key = asked.waiting.remove(id).unwrap_or_default();
        let error = match answer {
            Ok(result) => {
                asked.answers.insert(key, result);
                if !asked.waiting.is_empty() {
                    return Answered::Waiting;
                }
                None
            }
            Err(error) => Some(error),
        };
        let Some(asked) = entry.asked.remove(&number) else {
            return Answered::Unknown;
        };
        for question in asked.waiting.keys() {
            entry.questions.remove(question);
        }
        match error {
            None => Answered::Complete(Box::new(asked)),
            Some(error) => Answered::Refused(Box::new(asked), error),
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

    /// A room without a limit.
    struct Free;

    impl Room for Free {
        fn fit(&mut self, _bytes: usize) -> bool {
            true
        }
    }

    fn open() -> Opened {
        get().open(Box::new(Free)).unwrap()
    }

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
        let opened = open();
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
    fn a_stream_holding_too_many_bytes_unread_is_let_go() {
        let streams = get();
        let opened = open();
        let id = opened.id;
        let big = Bytes::from(vec![b'x'; MAX_QUEUED_BYTES / 2]);
        streams.send(id, big.clone()).unwrap();
        // Taken by the holder: room again.
        opened.taken(big.len());
        streams.send(id, big.clone()).unwrap();
        streams.send(id, big.clone()).unwrap();
        assert_eq!(
            streams.send(id, Bytes::from_static(b"x")),
            Err(Lost::Unread)
        );
        assert!(!streams.holds(id));
    }

    /// A room of so many bytes.
    struct Limited(usize);

    impl Room for Limited {
        fn fit(&mut self, bytes: usize) -> bool {
            bytes <= self.0
        }
    }

    #[test]
    fn a_stream_the_memory_budget_has_no_room_for_is_let_go() {
        let streams = get();
        let opened = streams.open(Box::new(Limited(10))).unwrap();
        let id = opened.id;
        streams.send(id, Bytes::from_static(b"0123456789")).unwrap();
        assert_eq!(
            streams.send(id, Bytes::from_static(b"x")),
            Err(Lost::Unread)
        );
        assert!(!streams.holds(id));
    }

    #[test]
    fn a_request_waits_for_every_answer_once() {
        let streams = get();
        let opened = open();
        let id = opened.id;
        let asked = Asked::new(
            "7".into(),
            "tools/call".into(),
            Some("c".into()),
            Bytes::from_static(b"{}"),
        );
        let questions = vec![
            (
                "a".to_string(),
                json!({"method": "elicitation/create", "params": {"m": 1}}),
            ),
            (
                "b".to_string(),
                json!({"method": "roots/list", "params": {}}),
            ),
        ];
        let requests = streams.ask(id, asked, questions, Some(json!("s"))).unwrap();
        assert_eq!(
            requests,
            vec![
                json!({"jsonrpc": "2.0", "id": "mcp-edge-ask-0-0", "method": "elicitation/create", "params": {"m": 1}}),
                json!({"jsonrpc": "2.0", "id": "mcp-edge-ask-0-1", "method": "roots/list", "params": {}}),
            ]
        );
        assert_eq!(
            streams.answer(id, "mcp-edge-ask-9-9", Ok(json!({}))),
            Answered::Unknown
        );
        assert_eq!(
            streams.answer(id, "mcp-edge-ask-0-0", Ok(json!({"action": "accept"}))),
            Answered::Waiting
        );
        // The same answer again is not counted twice.
        assert_eq!(
            streams.answer(id, "mcp-edge-ask-0-0", Ok(json!({}))),
            Answered::Unknown
        );
        let Answered::Complete(done) =
            streams.answer(id, "mcp-edge-ask-0-1", Ok(json!({"roots": []})))
        else {
            panic!("complete");
        };
        assert_eq!(done.id, "7");
        assert_eq!(done.state, Some(json!("s")));
        assert_eq!(done.answers.get("a"), Some(&json!({"action": "accept"})));
        assert_eq!(done.answers.get("b"), Some(&json!({"roots": []})));
    }

    #[test]
    fn an_error_ends_a_request_and_few_requests_wait() {
        let streams = get();
        let opened = open();
        let id = opened.id;
        // An error ends the request and forgets its other questions.
        let asked = Asked::new("8".into(), "tools/call".into(), None, Bytes::new());
        let two = vec![
            ("a".to_string(), json!({"method": "roots/list"})),
            ("b".to_string(), json!({"method": "roots/list"})),
        ];
        streams.ask(id, asked, two, None).unwrap();
        assert!(matches!(
            streams.answer(id, "mcp-edge-ask-0-0", Err(json!({"code": 1}))),
            Answered::Refused(..)
        ));
        assert_eq!(
            streams.answer(id, "mcp-edge-ask-0-1", Ok(json!({}))),
            Answered::Unknown
        );
        // At most MAX_ASKED wait.
        for _ in 0..MAX_ASKED {
            let asked = Asked::new("9".into(), "tools/call".into(), None, Bytes::new());
            streams
                .ask(
                    id,
                    asked,
                    vec![("k".into(), json!({"method": "roots/list"}))],
                    None,
                )
                .unwrap();
        }
        let asked = Asked::new("9".into(), "tools/call".into(), None, Bytes::new());
        assert_eq!(
            streams.ask(
                id,
                asked,
                vec![("k".into(), json!({"method": "roots/list"}))],
                None
            ),
            None
        );
    }

    #[test]
    fn events_come_in_order_and_an_unread_stream_is_let_go() {
        let streams = get();
        let mut opened = open();
        let id = opened.id;
        for i in 0..QUEUE {
            streams.send(id, Bytes::from(i.to_string())).unwrap();
        }
        assert_eq!(
            streams.send(id, Bytes::from_static(b"over")),
            Err(Lost::Unread)
        );
        assert!(!streams.holds(id));
        // What was queued is still written, in order; then the stream ends.
        for i in 0..QUEUE {
            assert_eq!(
                opened.events.try_recv().unwrap(),
                Bytes::from(i.to_string())
            );
        }
        assert!(matches!(
            opened.events.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
    }
}
