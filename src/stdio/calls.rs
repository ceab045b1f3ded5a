//! The requests a stdio process owes answers to, and where what it writes goes: every
//! request written to it gets a number unique in this process as its `id` (and as its
//! `progressToken`, when it has one), so requests from many clients share it; the answer and
//! its progress go back to the one request with that number, with the client's own id and
//! token put back. The server's own requests and notifications go to the sessions it serves.
//!
//! [`Calls`] is the table and nothing else: it writes nothing to the process itself; what
//! must be written back (an answer to the server's `ping`, a cancellation) it returns, and
//! the process ([`super::process::Proc`]) writes it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{mpsc, oneshot};

use crate::error::code;
use crate::mcp::json;
use crate::mcp::jsonrpc;
use crate::mcp::message::{numbered, Message, Numbered};

/// Events (progress, notifications) queued for a slow client before newer ones are dropped.
const EVENTS_QUEUED: usize = 64;

/// What a waiting request receives at its end.
#[derive(Debug)]
pub enum Out {
    /// The answer, with the client's id back.
    Final(String),
    /// The process ended before answering.
    Exited,
    /// The process stopped answering (it is hung, and stopped).
    Hung,
    /// The client cancelled it (`notifications/cancelled`).
    Cancelled,
}

/// A request the process owes an answer to.
struct Pending {
    /// The client's id and progress token, as written.
    id: String,
    token: Option<String>,
    /// The legacy session it came from.
    session: Option<Arc<str>>,
    events: Option<mpsc::Sender<String>>,
    done: oneshot::Sender<Out>,
}

/// A request in flight: its number, its events and its answer.
pub struct Call {
    pub number: u64,
    pub events: Option<mpsc::Receiver<String>>,
    pub done: oneshot::Receiver<Out>,
}

#[derive(Debug)]
pub enum CallError {
    /// The process has ended (or its stdin is closed).
    Exited,
    /// The message could not be rewritten (not a single JSON-RPC object).
    Unreadable,
    /// Its stdin is too far behind ([`super::process::MAX_QUEUED`]).
    Busy,
}

/// Who a process serves, which decides where its own messages go.
#[derive(Debug, Clone)]
pub struct Serves {
    /// One caller only (its session's, `per_session`, or its principal's): the server's own
    /// notifications all go to its sessions. A process serving everyone passes on only list
    /// changes.
    pub private: bool,
    /// The legacy session that owns it (`per_session`): its streams get the process's own
    /// requests and notifications.
    pub owner: Option<Arc<str>>,
}

/// The table of one process's requests and standalone streams.
pub struct Calls {
    serves: Serves,
    pending: Mutex<HashMap<u64, Pending>>,
    next: AtomicU64,
    /// Open standalone (GET) streams of sessions on this process.
    listeners: Mutex<Vec<(Arc<str>, mpsc::Sender<String>)>>,
}

impl Calls {
    pub fn new(serves: Serves) -> Calls {
        Calls {
            serves,
            pending: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            listeners: Mutex::new(Vec::new()),
        }
    }

    pub fn serves(&self) -> &Serves {
        &self.serves
    }

    /// A client's request (`text`, one JSON-RPC request) numbered and registered: the line
    /// to write, and the call its answer comes to.
    pub fn register(
        &self,
        text: &str,
        session: Option<Arc<str>>,
        with_events: bool,
    ) -> Result<(String, Call), CallError> {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let Numbered { line, id, token } = numbered(text, number).ok_or(CallError::Unreadable)?;
        let (done_tx, done) = oneshot::channel();
        let (events_tx, events) = match with_events {
            true => {
                let (tx, rx) = mpsc::channel(EVENTS_QUEUED);
                (Some(tx), Some(rx))
            }
            false => (None, None),
        };
        let pending = Pending {
            id,
            token,
            session,
            events: events_tx,
            done: done_tx,
        };
        self.lock_pending().insert(number, pending);
        let call = Call {
            number,
            events,
            done,
        };
        Ok((line, call))
    }

    /// Forget request `number` without telling the server; whether it was still waiting.
    pub fn forget(&self, number: u64) -> bool {
        self.lock_pending().remove(&number).is_some()
    }

    /// The client gave up on request `number`: the cancellation to write, if the request was
    /// still waiting.
    pub fn cancel(&self, number: u64) -> Option<String> {
        self.forget(number).then(|| {
            let params = format!(r#"{{"requestId":{number},"reason":"the client went away"}}"#);
            jsonrpc::notification("notifications/cancelled", &params)
        })
    }

    /// A client's `notifications/cancelled` (`text`) for one of its requests: the line to
    /// write (with the process's number for it), if the request is still waiting.
    pub fn forward_cancel(&self, text: &str, session: Option<&str>) -> Option<String> {
        let msg = Message::parse(text)?;
        let request_id = msg.param("requestId")?;
        let number = {
            let pending = self.lock_pending();
            pending
                .iter()
                .find(|(_, p)| p.id == request_id.get() && p.session.as_deref() == session)
                .map(|(n, _)| *n)?
        };
        let line = json::splice_str(text, &[(request_id.get(), &number.to_string())])?;
        if let Some(p) = self.lock_pending().remove(&number) {
            let _ = p.done.send(Out::Cancelled);
        }
        Some(line)
    }

    /// A session's standalone stream: the process's own messages for it. False when the
    /// session already has one open (the client gets 409, as from an SDK server).
    pub fn listen(&self, session: Arc<str>, sink: mpsc::Sender<String>) -> bool {
        let mut listeners = self.lock_listeners();
        listeners.retain(|(_, tx)| !tx.is_closed());
        if listeners.iter().any(|(s, _)| *s == session) {
            return false;
        }
        listeners.push((session, sink));
        true
    }

    pub fn unlisten(&self, session: &str) {
        self.lock_listeners().retain(|(s, _)| &**s != session);
    }

    /// One message from the process (`msg`, read from `text`): an answer to its request,
    /// progress to its stream, the server's own message to its sessions. Returns what must be
    /// written back to the process (the answer to a request of the server's that no client
    /// takes).
    pub fn deliver(&self, text: &str, msg: &Message<'_>) -> Option<String> {
        if msg.is_response() {
            let number = msg.id.and_then(|id| id.get().parse::<u64>().ok())?;
            let pending = self.lock_pending().remove(&number)?;
            let id = msg.id?;
            let answer = json::splice_str(text, &[(id.get(), &pending.id)])
                .unwrap_or_else(|| text.to_string());
            let _ = pending.done.send(Out::Final(answer));
            return None;
        }
        let method = msg.method.as_deref().unwrap_or_default();
        if msg.is_request() {
            return self.server_request(text, msg, method);
        }
        if method == "notifications/progress" {
            self.progress(text, msg);
            return None;
        }
        // A notification of the server's own (logging, list changes, resource updates):
        // the owning session's streams, or the standalone streams of the sessions on this
        // process. A process serving everyone passes on only list changes: a log line or a
        // resource update may be about one client's call, and nothing says whose.
        if self.serves.private || method.ends_with("/list_changed") {
            self.to_sessions(text);
        }
        None
    }

    /// Progress for one of the requests: to its event stream, with the client's token back.
    fn progress(&self, text: &str, msg: &Message<'_>) {
        let Some(token) = msg.param("progressToken") else {
            return;
        };
        let Some(number) = token.get().parse::<u64>().ok() else {
            return;
        };
        let pending = self.lock_pending();
        let Some(Pending {
            events: Some(events),
            token: Some(original),
            ..
        }) = pending.get(&number)
        else {
            return;
        };
        if let Some(line) = json::splice_str(text, &[(token.get(), original)]) {
            let _ = events.try_send(line);
        }
    }

    /// A request from the server to its client (elicitation, sampling, roots, ping): to the
    /// owning session's streams, else answered here.
    fn server_request(&self, text: &str, msg: &Message<'_>, method: &str) -> Option<String> {
        let id = msg.id?;
        if method == "ping" {
            return Some(jsonrpc::result(id.get(), "{}"));
        }
        let owned = self.serves.owner.is_some();
        if owned && self.to_sessions(text) {
            return None;
        }
        let (code, why) = match owned {
            true => (
                code::INTERNAL,
                "mcp-edge: the client has no open stream to receive this request",
            ),
            false => (
                code::METHOD_NOT_FOUND,
                "Method not found (mcp-edge: server-to-client requests reach clients only on pools with isolation = \"per_session\")",
            ),
        };
        Some(jsonrpc::error(id.get(), code, why, None))
    }

    /// Deliver a message to the owning session (an open request's event stream first,
    /// else its standalone stream), or to every standalone stream; true if one took it.
    fn to_sessions(&self, text: &str) -> bool {
        if let Some(owner) = &self.serves.owner {
            let pending = self.lock_pending();
            let open = pending
                .values()
                .filter(|p| p.session.as_deref() == Some(&**owner))
                .filter_map(|p| p.events.as_ref())
                .find(|tx| !tx.is_closed());
            if let Some(tx) = open {
                return tx.try_send(text.to_string()).is_ok();
            }
        }
        let mut took = false;
        let mut listeners = self.lock_listeners();
        listeners.retain(|(_, tx)| !tx.is_closed());
        for (_, tx) in listeners.iter() {
            took |= tx.try_send(text.to_string()).is_ok();
        }
        took
    }

    /// The process can answer nothing more: every waiting request learns it now (`hung`:
    /// that it stopped answering).
    pub fn fail_all(&self, hung: bool) {
        let pending: Vec<Pending> = self.lock_pending().drain().map(|(_, p)| p).collect();
        for p in pending {
            let _ = p.done.send(if hung { Out::Hung } else { Out::Exited });
        }
        self.lock_listeners().clear();
    }

    /// Requests still waiting for an answer.
    pub fn in_flight(&self) -> usize {
        self.lock_pending().len()
    }

    fn lock_pending(&self) -> MutexGuard<'_, HashMap<u64, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_listeners(&self) -> MutexGuard<'_, Vec<(Arc<str>, mpsc::Sender<String>)>> {
        self.listeners.lock().unwrap_or_else(|e| e.into_inner())
    }
}
