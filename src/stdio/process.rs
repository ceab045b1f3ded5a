//! One stdio server process: its pipes, the requests it owes answers to, and its end.
//!
//! - The requests it owes answers to, and where what it writes goes, are its [`Calls`].
//! - Lines on stdout are messages (newline-delimited JSON, at most [`MAX_LINE`] bytes; a
//!   longer one ends the process, as a server that broke the framing). stderr goes to the
//!   log, prefixed with the pool and the process id.
//! - When the process ends (its stdout closes), every request still waiting gets
//!   [`Out::Exited`]. It runs in a process group of its own: stopping it (SIGTERM, then
//!   SIGKILL) reaches whatever it started, and when it exits, what it left behind is killed.
//! - It gets only a small part of the edge's environment ([`PASSED_ENV`]) plus the pool's
//!   `env`: the edge's own secrets (a key ring in `keys_env`, say) never reach it.
//! - What waits to be written to its stdin is bounded in bytes ([`MAX_QUEUED`]); over it a
//!   request is refused as busy, never queued.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};

use super::calls::{Call, CallError, Calls, Out, Serves};
use super::Spec;
use crate::mcp::jsonrpc;
use crate::mcp::message::Message;

/// The longest stdout line read (a message).
pub const MAX_LINE: usize = 16 * 1024 * 1024;
/// Bytes waiting for the process's stdin at most (a line alone may be longer).
pub const MAX_QUEUED: usize = 8 * 1024 * 1024;
/// The edge's environment variables a process gets (as the MCP SDKs' stdio clients pass).
pub const PASSED_ENV: &[&str] = &[
    "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR",
];

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
    stdin: mpsc::UnboundedSender<Vec<u8>>,
    /// The requests it owes answers to.
    calls: Calls,
    pub init: std::sync::OnceLock<Init>,
    exited: watch::Receiver<bool>,
    /// stdout closed: nothing more will be answered.
    closed: watch::Receiver<bool>,
    /// Bytes queued for stdin.
    queued: Arc<AtomicUsize>,
    /// Last use, in [`super::now_ms`] time.
    pub last_used: AtomicU64,
    stopping: AtomicBool,
    /// stdout closed (set before the requests waiting are answered).
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
    /// Start the process and read its pipes. It is not initialised yet.
    pub fn spawn(spec: &Spec, pool: Arc<str>, serves: Serves) -> std::io::Result<Arc<Proc>> {
        let mut child = command(spec)?.spawn()?;
        let Some(pid) = child.id().filter(|p| *p > 0 && *p <= i32::MAX as u32) else {
            return Err(std::io::Error::other("the child has no process id"));
        };
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(std::io::Error::other("the child's pipes are missing"));
        };
        let (lines, queue) = mpsc::unbounded_channel::<Vec<u8>>();
        let (exit_tx, exited) = watch::channel(false);
        let (closed_tx, closed) = watch::channel(false);
        let queued = Arc::new(AtomicUsize::new(0));
        let proc = Arc::new(Proc {
            pool: pool.clone(),
            pid,
            stdin: lines,
            calls: Calls::new(serves),
            init: Default::default(),
            exited,
            closed,
            queued: queued.clone(),
            last_used: AtomicU64::new(super::now_ms()),
            stopping: AtomicBool::new(false),
            deaf: AtomicBool::new(false),
        });
        tokio::spawn(write_stdin(stdin, queue, queued, proc.closed.clone()));
        tokio::spawn(log_stderr(stderr, pool.clone(), pid));
        let reader = proc.clone();
        tokio::spawn(async move {
            reader.read_stdout(stdout).await;
            // Nothing more can be answered: a request still waiting learns it now.
            reader.fail_pending();
            let _ = closed_tx.send(true);
        });
        tokio::spawn(wait(child, proc.clone(), exit_tx));
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
        !self.deaf.load(Ordering::SeqCst) && !*self.exited.borrow()
    }

    /// Resolves when the process can answer nothing more: it exited, or it closed its
    /// stdout (and must be stopped).
    pub async fn ended(&self) {
        let mut closed = self.closed.clone();
        let mut exited = self.exited.clone();
        tokio::select! {
            _ = closed.wait_for(|e| *e) => {}
            _ = exited.wait_for(|e| *e) => {}
        }
    }

    fn group(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.pid as i32)
    }

    /// `initialize` with `params`, then `notifications/initialized`, within `timeout`.
    pub async fn initialize(&self, params: &str, timeout: Duration) -> Result<Init, StartError> {
        let line = jsonrpc::request("0", "initialize", params);
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
        self.send_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .map_err(|_| StartError::new("the process ended after initialize"))?;
        let _ = self.init.set(init.clone());
        Ok(init)
    }

    /// Ask the process to stop (SIGTERM to its group), and kill the group (SIGKILL) if it
    /// has not exited within `grace`. Every caller waits for that, the second one too.
    pub async fn stop(&self, grace: Duration) {
        if *self.exited.borrow() && *self.closed.borrow() {
            return;
        }
        if !self.stopping.swap(true, Ordering::Relaxed) {
            let _ = nix::sys::signal::killpg(self.group(), nix::sys::signal::Signal::SIGTERM);
        }
        // Gone: the process exited and its stdout closed (what it started, which shares
        // the pipe, has gone too).
        let (mut exited, mut closed) = (self.exited.clone(), self.closed.clone());
        let exit = async move {
            let _ = exited.wait_for(|e| *e).await;
            let _ = closed.wait_for(|c| *c).await;
        };
        if tokio::time::timeout(grace, exit).await.is_err() {
            log::warn!(
                "stdio pool {}: process {} did not stop within {} ms of SIGTERM; killing it",
                self.pool,
                self.pid,
                grace.as_millis()
            );
            let _ = nix::sys::signal::killpg(self.group(), nix::sys::signal::Signal::SIGKILL);
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
                    let _ =
                        nix::sys::signal::killpg(self.group(), nix::sys::signal::Signal::SIGKILL);
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

    /// Nothing more can be answered: every request still waiting learns it now.
    fn fail_pending(&self) {
        self.deaf.store(true, Ordering::SeqCst);
        self.calls.fail_all();
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

/// The process's command: its own group, only the environment it is given, pipes.
fn command(spec: &Spec) -> std::io::Result<Command> {
    let (program, args) = spec
        .command
        .split_first()
        .ok_or_else(|| std::io::Error::other("empty command"))?;
    let mut command = Command::new(program);
    let passed = PASSED_ENV
        .iter()
        .filter_map(|k| std::env::var_os(k).map(|v| (*k, v)));
    command
        .args(args)
        .env_clear()
        .envs(passed)
        .envs(spec.env.iter())
        .process_group(0)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    if let Some(cwd) = &spec.cwd {
        command.current_dir(cwd);
    }
    Ok(command)
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

async fn wait(mut child: Child, proc: Arc<Proc>, exited: watch::Sender<bool>) {
    let (pool, pid) = (&proc.pool, proc.pid);
    match child.wait().await {
        Ok(status) => log::warn!("stdio pool {pool}: process {pid} exited ({status})"),
        Err(e) => log::warn!("stdio pool {pool}: process {pid}: cannot wait for it: {e}"),
    }
    let _ = exited.send(true);
    // Ended on its own: what it started and left behind (holding its pipes, say) goes with
    // it. Being stopped: the rest of its group has the rest of the grace (`stop`).
    if !proc.stopping.load(Ordering::Relaxed) {
        let _ = nix::sys::signal::killpg(proc.group(), nix::sys::signal::Signal::SIGKILL);
    }
    // Its last answers are read until its stdout closes; if something outside its group
    // holds stdout open, the requests still waiting learn after a moment that nothing
    // more will come.
    let mut closed = proc.closed.clone();
    let drained = closed.wait_for(|c| *c);
    if tokio::time::timeout(Duration::from_secs(1), drained)
        .await
        .is_err()
    {
        proc.fail_pending();
    }
}

fn clip(text: &str) -> &str {
    match text.char_indices().nth(2000) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}
