//! One stdio server process: its pipes, the requests it owes answers to, and its end.
//!
//! - Every request written to it gets a number unique in this process as its `id` (and as
//!   its `progressToken`, when it has one), so requests from many clients share it; the
//!   answer and its progress go back to the one request with that number, with the
//!   client's own id and token put back.
//! - Lines on stdout are messages (newline-delimited JSON, at most [`MAX_LINE`] bytes; a
//!   longer one ends the process, as a server that broke the framing). stderr goes to the
//!   log, prefixed with the pool and the process id.
//! - When the process ends, every request still waiting gets [`Out::Exited`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot, watch};

use super::wire::{splice, Message};
use super::Spec;

/// The longest stdout line read (a message).
pub const MAX_LINE: usize = 16 * 1024 * 1024;
/// Events (progress, notifications) queued for a slow client before newer ones are dropped.
const EVENTS_QUEUED: usize = 256;

/// What a waiting request receives at its end.
#[derive(Debug)]
pub enum Out {
    /// The answer, with the client's id back.
    Final(String),
    /// The process ended before answering.
    Exited,
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
    stdin: mpsc::Sender<Vec<u8>>,
    pending: Mutex<HashMap<u64, Pending>>,
    next: AtomicU64,
    pub init: std::sync::OnceLock<Init>,
    exited: watch::Receiver<bool>,
    /// The legacy session that owns it (`per_session`): its streams get the process's own
    /// requests and notifications.
    pub owner: Option<Arc<str>>,
    /// Open standalone (GET) streams of sessions on this process.
    listeners: Mutex<Vec<(Arc<str>, mpsc::Sender<String>)>>,
    /// Last use, in [`super::now_ms`] time.
    pub last_used: AtomicU64,
    stopping: AtomicBool,
    /// stdout closed: nothing more will be answered.
    deaf: AtomicBool,
}

impl std::fmt::Debug for Proc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stdio process {} of pool {}", self.pid, self.pool)
    }
}

#[derive(Debug)]
pub enum CallError {
    /// The process has ended (or its stdin is closed).
    Exited,
    /// The message could not be rewritten (not a single JSON-RPC object).
    Unreadable,
}

impl Proc {
    /// Start the process and read its pipes. It is not initialised yet.
    pub fn spawn(
        spec: &Spec,
        pool: Arc<str>,
        owner: Option<Arc<str>>,
    ) -> std::io::Result<Arc<Proc>> {
        let (program, args) = spec
            .command
            .split_first()
            .ok_or_else(|| std::io::Error::other("empty command"))?;
        let mut command = Command::new(program);
        command
            .args(args)
            .envs(spec.env.iter())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        if let Some(cwd) = &spec.cwd {
            command.current_dir(cwd);
        }
        let mut child = command.spawn()?;
        let pid = child.id().unwrap_or(0);
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(std::io::Error::other("the child's pipes are missing"));
        };
        let (lines, mut queued) = mpsc::channel::<Vec<u8>>(1024);
        let (exit_tx, exited) = watch::channel(false);
        let proc = Arc::new(Proc {
            pool: pool.clone(),
            pid,
            stdin: lines,
            pending: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            init: Default::default(),
            exited,
            owner,
            listeners: Mutex::new(Vec::new()),
            last_used: AtomicU64::new(super::now_ms()),
            stopping: AtomicBool::new(false),
            deaf: AtomicBool::new(false),
        });
        tokio::spawn(async move {
            let mut stdin = stdin;
            while let Some(line) = queued.recv().await {
                if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
        });
        tokio::spawn(log_stderr(stderr, pool.clone(), pid));
        let reader = proc.clone();
        tokio::spawn(async move {
            reader.read_stdout(stdout).await;
            // Nothing more can be answered: a request still waiting learns it now.
            reader.fail_pending();
        });
        tokio::spawn(wait(child, pool, pid, exit_tx));
        Ok(proc)
    }

    pub fn is_alive(&self) -> bool {
        !self.deaf.load(Ordering::SeqCst) && !*self.exited.borrow() && !self.stdin.is_closed()
    }

    /// Resolves when the process has ended.
    pub async fn ended(&self) {
        let mut exited = self.exited.clone();
        let _ = exited.wait_for(|e| *e).await;
    }

    /// `initialize` with `params`, then `notifications/initialized`, within `timeout`.
    pub async fn initialize(&self, params: &str, timeout: Duration) -> Result<Init, String> {
        let line = format!(r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{params}}}"#);
        let call = self
            .request(&line, None, false)
            .map_err(|e| format!("{e:?}"))?;
        let answer = tokio::select! {
            a = call.done => a.map_err(|_| "no answer".to_string())?,
            _ = tokio::time::sleep(timeout) => {
                self.forget(call.number);
                return Err(format!("no answer to initialize within {} ms", timeout.as_millis()));
            }
        };
        let Out::Final(text) = answer else {
            return Err("the process ended during initialize".into());
        };
        let init = read_init(&text)?;
        self.send_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .map_err(|_| "the process ended after initialize".to_string())?;
        let _ = self.init.set(init.clone());
        Ok(init)
    }

    /// Write a client's request (`text`, one JSON-RPC request) with a number of this
    /// process's as its id and progress token.
    pub fn request(
        &self,
        text: &str,
        session: Option<Arc<str>>,
        with_events: bool,
    ) -> Result<Call, CallError> {
        let msg = Message::parse(text).ok_or(CallError::Unreadable)?;
        let raw_id = msg.id.ok_or(CallError::Unreadable)?;
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let n = number.to_string();
        let token = msg.progress_token();
        let mut edits = vec![(raw_id, n.as_str())];
        if let Some(t) = token {
            edits.push((t, n.as_str()));
        }
        let mut line = splice(text, &edits).ok_or(CallError::Unreadable)?;
        line.retain(|c| c != '\n' && c != '\r');
        let (done_tx, done) = oneshot::channel();
        let (events_tx, events) = if with_events {
            let (tx, rx) = mpsc::channel(EVENTS_QUEUED);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        self.lock_pending().insert(
            number,
            Pending {
                id: raw_id.get().to_string(),
                token: token.map(|t| t.get().to_string()),
                session,
                events: events_tx,
                done: done_tx,
            },
        );
        self.last_used.store(super::now_ms(), Ordering::Relaxed);
        // Registered before this check, or answered by `fail_pending`: never both missed.
        if self.deaf.load(Ordering::SeqCst) || self.send_line(&line).is_err() {
            self.forget(number);
            return Err(CallError::Exited);
        }
        Ok(Call {
            number,
            events,
            done,
        })
    }

    /// Forward a client's notification or response (`text`), as written.
    pub fn send_line(&self, text: &str) -> Result<(), CallError> {
        let mut line = Vec::with_capacity(text.len() + 1);
        line.extend(text.bytes().filter(|b| *b != b'\n' && *b != b'\r'));
        line.push(b'\n');
        self.stdin.try_send(line).map_err(|_| CallError::Exited)
    }

    /// The client gave up on request `number` (closed its stream): tell the server.
    pub fn cancel(&self, number: u64) {
        if self.lock_pending().remove(&number).is_some() {
            let _ = self.send_line(&format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{number},"reason":"the client went away"}}}}"#
            ));
        }
    }

    /// A client's `notifications/cancelled` (`text`) for one of its requests: forwarded
    /// with the process's number for it, if the request is still waiting.
    pub fn forward_cancel(&self, text: &str, session: Option<&str>) {
        let Some(msg) = Message::parse(text) else {
            return;
        };
        let Some(request_id) = msg.param("requestId") else {
            return;
        };
        let number = {
            let pending = self.lock_pending();
            pending
                .iter()
                .find(|(_, p)| p.id == request_id.get() && p.session.as_deref() == session)
                .map(|(n, _)| *n)
        };
        let Some(number) = number else {
            return;
        };
        if let Some(line) = splice(text, &[(request_id, &number.to_string())]) {
            self.lock_pending().remove(&number);
            let _ = self.send_line(&line);
        }
    }

    /// Forget request `number` without telling the server (it timed out at the edge).
    pub fn forget(&self, number: u64) {
        self.lock_pending().remove(&number);
    }

    /// A session's standalone stream: the process's own messages for it.
    pub fn listen(&self, session: Arc<str>, sink: mpsc::Sender<String>) {
        let mut listeners = self.lock_listeners();
        listeners.retain(|(s, tx)| *s != session && !tx.is_closed());
        listeners.push((session, sink));
    }

    pub fn unlisten(&self, session: &str) {
        self.lock_listeners().retain(|(s, _)| &**s != session);
    }

    /// Ask the process to stop (SIGTERM), and kill it (SIGKILL) if it has not ended within
    /// `grace`.
    pub async fn stop(&self, grace: Duration) {
        if self.stopping.swap(true, Ordering::Relaxed) || !self.is_alive() {
            return;
        }
        let pid = nix::unistd::Pid::from_raw(self.pid as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        if tokio::time::timeout(grace, self.ended()).await.is_err() {
            log::warn!(
                "stdio pool {}: process {} did not stop within {} ms of SIGTERM; killing it",
                self.pool,
                self.pid,
                grace.as_millis()
            );
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
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
                    let pid = nix::unistd::Pid::from_raw(self.pid as i32);
                    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                    return;
                }
                Ok(_) => {}
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

    /// One message from the process.
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
        if msg.is_response() {
            let number = msg.id.and_then(|id| id.get().parse::<u64>().ok());
            let Some(pending) = number.and_then(|n| self.lock_pending().remove(&n)) else {
                return;
            };
            let Some(id) = msg.id else { return };
            let answer = splice(text, &[(id, &pending.id)]).unwrap_or_else(|| text.to_string());
            let _ = pending.done.send(Out::Final(answer));
            return;
        }
        let method = msg.method.as_deref().unwrap_or_default();
        if msg.is_request() {
            self.server_request(text, &msg, method);
            return;
        }
        if method == "notifications/progress" {
            let Some(token) = msg.param("progressToken") else {
                return;
            };
            let Some(number) = token.get().parse::<u64>().ok() else {
                return;
            };
            let pending = self.lock_pending();
            let Some(p) = pending.get(&number) else {
                return;
            };
            let (Some(events), Some(original)) = (&p.events, &p.token) else {
                return;
            };
            if let Some(line) = splice(text, &[(token, original)]) {
                let _ = events.try_send(line);
            }
            return;
        }
        // A notification of the server's own (logging, list changes, resource updates):
        // the owning session's streams, or every session's standalone stream on this
        // process.
        self.to_sessions(text);
    }

    /// A request from the server to its client (elicitation, sampling, roots, ping).
    fn server_request(&self, text: &str, msg: &Message<'_>, method: &str) {
        let Some(id) = msg.id else { return };
        if method == "ping" {
            let _ = self.send_line(&format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#,
                id.get()
            ));
            return;
        }
        if self.owner.is_some() && self.to_sessions(text) {
            return;
        }
        let why = if self.owner.is_some() {
            "mcp-edge: the client has no open stream to receive this request"
        } else {
            "Method not found (mcp-edge: server-to-client requests reach clients only on pools with isolation = \"per_session\")"
        };
        let code = if self.owner.is_some() { -32603 } else { -32601 };
        let _ = self.send_line(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":{code},"message":{}}}}}"#,
            id.get(),
            serde_json::Value::from(why)
        ));
    }

    /// Deliver a message to the owning session (an open request's event stream first,
    /// else its standalone stream), or to every standalone stream; true if one took it.
    fn to_sessions(&self, text: &str) -> bool {
        if let Some(owner) = &self.owner {
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

    fn fail_pending(&self) {
        self.deaf.store(true, Ordering::SeqCst);
        let pending: Vec<Pending> = self.lock_pending().drain().map(|(_, p)| p).collect();
        for p in pending {
            let _ = p.done.send(Out::Exited);
        }
        self.lock_listeners().clear();
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_listeners(&self) -> std::sync::MutexGuard<'_, Vec<(Arc<str>, mpsc::Sender<String>)>> {
        self.listeners.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Requests still waiting for an answer.
    pub fn in_flight(&self) -> usize {
        self.lock_pending().len()
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

async fn log_stderr(stderr: tokio::process::ChildStderr, pool: Arc<str>, pid: u32) {
    let mut lines = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut lines)
            .take(64 * 1024)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                log::info!("stdio {pool}[{pid}]: {}", clip(text.trim_end()));
            }
        }
    }
}

async fn wait(mut child: Child, pool: Arc<str>, pid: u32, exited: watch::Sender<bool>) {
    match child.wait().await {
        Ok(status) => log::warn!("stdio pool {pool}: process {pid} exited ({status})"),
        Err(e) => log::warn!("stdio pool {pool}: process {pid}: cannot wait for it: {e}"),
    }
    let _ = exited.send(true);
}

fn clip(text: &str) -> &str {
    match text.char_indices().nth(2000) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}
