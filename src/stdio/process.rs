//! One stdio server process: its pipes, the requests it owes answers to, and its end.
//!
//! - The requests it owes answers to, and where what it writes goes, are its [`Calls`].
//! - Lines on stdout are messages (newline-delimited JSON, at most [`MAX_LINE`] bytes; a
//!   longer one ends the process, as a server that broke the framing). stderr goes to the
//!   log, prefixed with the pool and the process id, at most `stderr_bytes_per_second`
//!   (the rest is dropped and counted).
//! - When the process can answer nothing more (it exited, closed its stdout, or was given
//!   up as hung or over its memory), every request still waiting learns it at once. The
//!   process itself, and everything it started, is stopped by its [`Child`].
//! - It gets only a small part of the edge's environment ([`super::child::PASSED_ENV`]) plus the pool's
//!   `env`: the edge's own secrets (a key ring in `keys_env`, say) never reach it.
//! - What waits to be written to its stdin is bounded in bytes ([`MAX_QUEUED`]); over it a
//!   request is refused as busy, never queued.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};

use super::calls::{Call, CallError, Calls, Out, Serves};
use super::child::{self, Cause, Child};
use super::scratch::Place;
use super::stderr::clip;
use super::Spec;
use crate::mcp::message::Message;
use crate::mcp::{client, jsonrpc};

/// The longest stdout line read (a message).
pub const MAX_LINE: usize = 16 * 1024 * 1024;
/// Bytes waiting for the process's stdin at most (a line alone may be longer).
pub const MAX_QUEUED: usize = 8 * 1024 * 1024;

/// What the process said at `initialize`.
#[derive(Debug, Clone)]
pub struct Init {
    /// The `result` object, as written.
    pub result: String,
    /// Its `protocolVersion`.
    pub version: String,
}

pub struct Proc {
    pub pool: Arc<str>,
    pub pid: u32,
    /// The operating-system side: the process and what it started.
    pub child: Arc<Child>,
    stdin: mpsc::UnboundedSender<Vec<u8>>,
    /// The requests it owes answers to.
    calls: Calls,
    pub init: std::sync::OnceLock<Init>,
    /// stdout closed: nothing more will be answered.
    closed: watch::Receiver<bool>,
    /// Given up (hung, over its memory limit): nothing more will be answered.
    given_up: watch::Sender<bool>,
    /// Bytes queued for stdin.
    queued: Arc<AtomicUsize>,
    /// Last use, in [`super::now_ms`] time.
    pub last_used: AtomicU64,
    /// The last line read from stdout, in [`super::now_ms`] time.
    last_read: AtomicU64,
    /// stdout closed, or given up (set before the requests waiting are answered).
    deaf: AtomicBool,
}

impl std::fmt::Debug for Proc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stdio process {} of pool {}", self.pid, self.pool)
    }
}

/// Why a process could not be initialised.
#[derive(Debug)]
pub struct StartError {
    pub message: String,
    /// The server answered `initialize` with an error: that answer (id 0).
    pub refused: Option<String>,
}

impl StartError {
    fn new(message: impl Into<String>) -> StartError {
        StartError {
            message: message.into(),
            refused: None,
        }
    }
}

impl Proc {
    /// Start the process (for `place`) and read its pipes. It is not initialised yet.
    pub fn spawn(
        spec: &Arc<Spec>,
        pool: Arc<str>,
        serves: Serves,
        place: &Place,
    ) -> std::io::Result<Arc<Proc>> {
        let (child, pipes) = child::spawn(spec, &pool, place)?;
        let (lines, queue) = mpsc::unbounded_channel::<Vec<u8>>();
        let (closed_tx, closed) = watch::channel(false);
        let queued = Arc::new(AtomicUsize::new(0));
        let proc = Arc::new(Proc {
            pool: pool.clone(),
            pid: child.pid,
            child,
            stdin: lines,
            calls: Calls::new(serves),
            init: Default::default(),
            closed,
            given_up: watch::channel(false).0,
            queued: queued.clone(),
            last_used: AtomicU64::new(super::now_ms()),
            last_read: AtomicU64::new(super::now_ms()),
            deaf: AtomicBool::new(false),
        });
        tokio::spawn(write_stdin(pipes.stdin, queue, queued, proc.closed.clone()));
        let bound = super::stderr::Bound::new(spec.stderr_bytes_per_second);
        tokio::spawn(super::stderr::log(
            pipes.stderr,
            pool.clone(),
            proc.pid,
            bound,
        ));
        let reader = proc.clone();
        tokio::spawn(async move {
            reader.read_stdout(pipes.stdout).await;
            // Nothing more can be answered: a request still waiting learns it now.
            reader.fail_pending(false);
            let _ = closed_tx.send(true);
        });
        tokio::spawn(wait(proc.clone(), spec.stop_grace));
        Ok(proc)
    }

    /// Serves one caller only.
    pub fn is_private(&self) -> bool {
        self.calls.serves().private
    }

    /// The legacy session that owns it (`per_session`).
    pub fn owner(&self) -> Option<&Arc<str>> {
        self.calls.serves().owner.as_ref()
    }

    /// Write a client's request (`text`, one JSON-RPC request) with a number of this
    /// process's as its id and progress token.
    pub fn request(
        &self,
        text: &str,
        session: Option<Arc<str>>,
        with_events: bool,
    ) -> Result<Call, CallError> {
        let (line, call) = self.calls.register(text, session, with_events)?;
        self.touch();
        // Registered before this check, or answered by `fail_pending`: never both missed.
        if self.deaf.load(Ordering::SeqCst) {
            self.calls.forget(call.number);
            return Err(CallError::Exited);
        }
        if let Err(e) = self.send_line(&line) {
            self.calls.forget(call.number);
            return Err(e);
        }
        Ok(call)
    }

    /// Write a line to the process: a client's notification or response as written, or the
    /// edge's own.
    pub fn send_line(&self, text: &str) -> Result<(), CallError> {
        let mut line = Vec::with_capacity(text.len() + 1);
        line.extend(text.bytes().filter(|b| *b != b'\n' && *b != b'\r'));
        line.push(b'\n');
        let len = line.len();
        let before = self.queued.fetch_add(len, Ordering::Relaxed);
        if before > 0 && before + len > MAX_QUEUED {
            self.queued.fetch_sub(len, Ordering::Relaxed);
            return Err(CallError::Busy);
        }
        self.stdin.send(line).map_err(|_| {
            self.queued.fetch_sub(len, Ordering::Relaxed);
            CallError::Exited
        })
    }

    /// The client gave up on request `number` (closed its stream): tell the server.
    pub fn cancel(&self, number: u64) {
        if let Some(line) = self.calls.cancel(number) {
            let _ = self.send_line(&line);
        }
    }

    /// A client's `notifications/cancelled` (`text`) for one of its requests: forwarded
    /// with the process's number for it, if the request is still waiting.
    pub fn forward_cancel(&self, text: &str, session: Option<&str>) {
        if let Some(line) = self.calls.forward_cancel(text, session) {
            let _ = self.send_line(&line);
        }
    }

    /// A session's standalone stream (see [`Calls::listen`]).
    pub fn listen(&self, session: Arc<str>, sink: mpsc::Sender<String>) -> bool {
        self.calls.listen(session, sink)
    }

    pub fn unlisten(&self, session: &str) {
        self.calls.unlisten(session)
    }

    /// Requests still waiting for an answer.
    pub fn in_flight(&self) -> usize {
        self.calls.in_flight()
    }

    pub fn is_alive(&self) -> bool {
        !self.deaf.load(Ordering::SeqCst) && !self.child.has_exited()
    }

    /// Resolves when the process can answer nothing more: it exited, closed its stdout, or
    /// was given up (and must be stopped).
    pub async fn ended(&self) {
        let mut closed = self.closed.clone();
        let mut given_up = self.given_up.subscribe();
        tokio::select! {
            _ = closed.wait_for(|e| *e) => {}
            _ = self.child.exited() => {}
            _ = given_up.wait_for(|g| *g) => {}
        }
    }

    /// How long since it last wrote a line.
    pub fn silent_for(&self) -> Duration {
        let last = self.last_read.load(Ordering::Relaxed);
        Duration::from_millis(super::now_ms().saturating_sub(last))
    }

    /// An MCP `ping` on its pipe: `true` when anything comes back within `timeout` (the
    /// answer, or any other line: it is not stuck).
    pub async fn ping(&self, timeout: Duration) -> bool {
        let sent = super::now_ms();
        let line = jsonrpc::request("0", "ping", "{}");
        let Ok((line, call)) = self.calls.register(&line, None, false) else {
            return true;
        };
        if self.send_line(&line).is_err() {
            // Its queue is full or it is gone: the wait below decides.
            self.calls.forget(call.number);
        }
        let answered = tokio::time::timeout(timeout, call.done).await.is_ok();
        self.calls.forget(call.number);
        answered || self.last_read.load(Ordering::Relaxed) > sent
    }

    /// Give it up (hung, over its memory limit): waiting requests are answered now, and it
    /// is stopped whole in a task of its own.
    pub fn give_up(self: &Arc<Self>, cause: Cause, grace: Duration) {
        // Recorded before anyone can learn it ended: whoever stops it, it counts as this.
        self.child.mark(cause);
        self.fail_pending(cause == Cause::Hung);
        self.given_up.send_replace(true);
        let child = self.child.clone();
        tokio::spawn(async move { child.stop(grace, cause).await });
    }

    /// `initialize` with `params`, then `notifications/initialized`, within `timeout`.
    pub async fn initialize(&self, params: &str, timeout: Duration) -> Result<Init, StartError> {
        let line = client::initialize_with("0", params);
        let call = self
            .request(&line, None, false)
            .map_err(|e| StartError::new(format!("cannot send initialize: {e:?}")))?;
        let answer = tokio::select! {
            a = call.done => a.map_err(|_| StartError::new("no answer"))?,
            _ = tokio::time::sleep(timeout) => {
                self.calls.forget(call.number);
                return Err(StartError::new(format!("no answer to initialize within {} ms", timeout.as_millis())));
            }
        };
        let Out::Final(text) = answer else {
            return Err(StartError::new("the process ended during initialize"));
        };
        let init = read_init(&text).map_err(|message| StartError {
            message,
            refused: Some(text.clone()),
        })?;
        self.send_line(client::initialized())
            .map_err(|_| StartError::new("the process ended after initialize"))?;
        let _ = self.init.set(init.clone());
        Ok(init)
    }

    /// Stop it and everything it started (SIGTERM, then SIGKILL after `grace`); every
    /// caller waits for the end.
    pub async fn stop(&self, grace: Duration) {
        self.child.stop(grace, Cause::Asked).await;
    }

    async fn read_stdout(&self, stdout: tokio::process::ChildStdout) {
        let mut reader = BufReader::with_capacity(64 * 1024, stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            let read = (&mut reader)
                .take(MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut line)
                .await;
            match read {
                Ok(0) | Err(_) => return,
                Ok(_) if line.len() > MAX_LINE => {
                    log::error!(
                        "stdio pool {}: process {} wrote a line over {} bytes; stopping it",
                        self.pool,
                        self.pid,
                        MAX_LINE
                    );
                    // Its stdout is not read again: `ended` resolves, and it is stopped.
                    return;
                }
                Ok(_) => self.last_read.store(super::now_ms(), Ordering::Relaxed),
            }
            match std::str::from_utf8(&line) {
                Ok(text) if !text.trim().is_empty() => self.deliver(text.trim_end()),
                Ok(_) => {}
                Err(_) => log::warn!(
                    "stdio pool {}: process {} wrote a line that is not UTF-8; dropped",
                    self.pool,
                    self.pid
                ),
            }
        }
    }

    /// Count a use (a request's end, a session's activity) against the idle reaper.
    /// One message from the process: to its request or sessions; what the server asked that
    /// nobody takes is answered here.
    fn deliver(&self, text: &str) {
        let Some(msg) = Message::parse(text) else {
            log::warn!(
                "stdio pool {}: process {} wrote a line that is not a JSON-RPC message; dropped: {}",
                self.pool,
                self.pid,
                clip(text)
            );
            return;
        };
        if let Some(reply) = self.calls.deliver(text, &msg) {
            let _ = self.send_line(&reply);
        }
    }

    /// Nothing more can be answered: every request still waiting learns it now (`hung`:
    /// that the process stopped answering).
    fn fail_pending(&self, hung: bool) {
        self.deaf.store(true, Ordering::SeqCst);
        self.calls.fail_all(hung);
    }

    pub fn touch(&self) {
        self.last_used.store(super::now_ms(), Ordering::Relaxed);
    }
}

/// The `initialize` answer's `result` and `protocolVersion`.
fn read_init(text: &str) -> Result<Init, String> {
    let msg = Message::parse(text).ok_or("unreadable answer to initialize")?;
    if let Some(error) = msg.error {
        return Err(format!("initialize failed: {}", clip(error.get())));
    }
    let result = msg.result.ok_or("answer to initialize without a result")?;
    #[derive(serde::Deserialize)]
    struct Result<'a> {
        #[serde(rename = "protocolVersion", borrow)]
        version: std::borrow::Cow<'a, str>,
    }
    let read: Result<'_> = serde_json::from_str(result.get())
        .map_err(|_| "initialize result without a protocolVersion".to_string())?;
    Ok(Init {
        result: result.get().to_string(),
        version: read.version.into_owned(),
    })
}

/// Write what is queued for the process's stdin until it closes (or its stdout did: a
/// server that reads stdin then sees its end).
async fn write_stdin(
    mut stdin: tokio::process::ChildStdin,
    mut queue: mpsc::UnboundedReceiver<Vec<u8>>,
    queued: Arc<AtomicUsize>,
    mut gone: watch::Receiver<bool>,
) {
    loop {
        let line = tokio::select! {
            line = queue.recv() => line,
            _ = gone.wait_for(|c| *c) => None,
        };
        let Some(line) = line else { break };
        let written = stdin.write_all(&line).await.is_ok() && stdin.flush().await.is_ok();
        queued.fetch_sub(line.len(), Ordering::Relaxed);
        if !written {
            break;
        }
    }
}

/// Watch for its end: a process that ended on its own is logged, and what it started is
/// stopped with it; requests still waiting learn it once its stdout closes (its last
/// answers read first), or after a moment if something outside it holds stdout open.
async fn wait(proc: Arc<Proc>, grace: Duration) {
    let exit = proc.child.exited().await;
    let (pool, pid) = (&proc.pool, proc.pid);
    log::warn!("stdio pool {pool}: process {pid} exited ({exit})");
    let child = proc.child.clone();
    tokio::spawn(async move { child.stop(grace, Cause::Asked).await });
    let mut closed = proc.closed.clone();
    let drained = closed.wait_for(|c| *c);
    if tokio::time::timeout(Duration::from_secs(1), drained)
        .await
        .is_err()
    {
        proc.fail_pending(false);
    }
}
