//! A stdio pool's server, checked as the edge runs it (`--config`): its command with the
//! pool's environment (and only the variables the edge passes on), one process, over its
//! pipes: it starts and answers `initialize`, lists its tools, answers a tool it does not
//! have, keeps stdout for messages, and stops when its stdin closes.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

use super::{Check, Finding};
use crate::mcp::learned::{Learned, Probe};
use crate::mcp::target::Kind;
use crate::mcp::{client, LATEST_LEGACY};
use crate::stdio::Spec;

const STARTS: Check = Check {
    id: "stdio-initialize",
    title: "the process starts and answers initialize",
    rule: "stdio transport: the client starts the server and initializes it",
    fix: "check the command, its arguments and environment; it must answer initialize within start_timeout_ms",
};
const LISTS: Check = Check {
    id: "stdio-tools-list",
    title: "tools/list answers",
    rule: "tools: tools/list",
    fix: "serve tools/list after initialize",
};
const ABSENT: Check = Check {
    id: "stdio-absent-tool",
    title: "a tool the server does not have gets an answer the edge can learn",
    rule: "policy: a hidden entry is answered as the server answers an absent one",
    fix:
        "answer an unknown tool with an error (or an isError result) naming it; else set absent_as",
};
const STDOUT: Check = Check {
    id: "stdio-stdout",
    title: "stdout carries only JSON-RPC messages",
    rule: "stdio transport: the server MUST NOT write anything to stdout that is not a valid MCP message",
    fix: "send logs to stderr",
};
const STOPS: Check = Check {
    id: "stdio-stop",
    title: "the process ends when its stdin closes",
    rule: "stdio transport shutdown: close stdin, then SIGTERM, then SIGKILL",
    fix: "exit when stdin reaches its end (and on SIGTERM); the edge kills what stays after stop_grace_ms",
};

/// The process's pipes and what it wrote that was not a message.
struct Pipes {
    child: Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<ChildStdout>>,
    noise: Vec<String>,
}

impl Pipes {
    /// Send `message` and read lines until the answer with `id` (within `wait`).
    async fn ask(
        &mut self,
        message: &Value,
        id: &str,
        wait: Duration,
    ) -> Result<(Value, String), String> {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("its stdin: {e}"))?;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let next = tokio::time::timeout_at(deadline, self.lines.next_line()).await;
            let text = match next {
                Err(_) => return Err(format!("no answer within {} ms", wait.as_millis())),
                Ok(Ok(Some(text))) => text,
                Ok(_) => return Err("it closed its stdout (exited?)".into()),
            };
            match serde_json::from_str::<Value>(&text) {
                Ok(v) if v.get("id").and_then(Value::as_str) == Some(id) => return Ok((v, text)),
                Ok(_) => {}
                Err(_) if text.trim().is_empty() => {}
                Err(_) => self.noise.push(text.chars().take(80).collect()),
            }
        }
    }
}

/// Every stdio check for `spec`.
pub async fn examine(spec: &Spec, timeout: Duration) -> Vec<Finding> {
    let scratch = std::env::temp_dir().join(format!("mcp-edge-doctor-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&scratch);
    let fill = |s: &str| {
        s.replace("{scratch}", &scratch.display().to_string())
            .replace("{principal}", "mcp-edge-doctor")
            .replace("{session}", "doctor")
    };
    let Some((program, args)) = spec.command.split_first() else {
        return vec![STARTS.fail("no command")];
    };
    let mut command = Command::new(fill(program));
    let passed = crate::stdio::child::PASSED_ENV
        .iter()
        .filter_map(|k| std::env::var_os(k).map(|v| (*k, v)));
    command
        .args(args.iter().map(|a| fill(a)))
        .env_clear()
        .envs(passed)
        .envs(spec.env.iter().map(|(k, v)| (k.clone(), fill(v))))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    if let Some(cwd) = &spec.cwd {
        command.current_dir(cwd);
    }
    let findings = match command.spawn() {
        Ok(child) => run(child, spec, timeout).await,
        Err(e) => vec![STARTS.fail(format!("{program}: {e}"))],
    };
    let _ = std::fs::remove_dir_all(&scratch);
    findings
}

async fn run(mut child: Child, spec: &Spec, timeout: Duration) -> Vec<Finding> {
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return vec![STARTS.fail("no pipes")];
    };
    let mut p = Pipes {
        child,
        stdin,
        lines: BufReader::new(stdout).lines(),
        noise: Vec::new(),
    };
    let mut out = Vec::new();
    let init = super::probe::value(&client::initialize(
        r#""doctor-init""#,
        LATEST_LEGACY,
        client::DOCTOR,
    ));
    match p.ask(&init, "doctor-init", spec.start_timeout).await {
        Ok((v, _)) if v.get("result").is_some() => {
            let info = v
                .pointer("/result/serverInfo")
                .cloned()
                .unwrap_or(Value::Null);
            let version = v
                .pointer("/result/protocolVersion")
                .cloned()
                .unwrap_or(Value::Null);
            out.push(STARTS.pass(format!("{info} at {version}")));
        }
        Ok((v, _)) => return vec![STARTS.fail(format!("initialize answered {v}"))],
        Err(e) => return vec![STARTS.fail(e)],
    }
    let _ = p
        .stdin
        .write_all(format!("{}\n", client::initialized()).as_bytes())
        .await;
    out.push(tools(&mut p, timeout).await);
    out.push(absent(&mut p, timeout).await);
    out.push(if p.noise.is_empty() {
        STDOUT.pass("only messages")
    } else {
        STDOUT.fail(format!(
            "{} other line(s), first: {:?}",
            p.noise.len(),
            p.noise[0]
        ))
    });
    out.push(stop(p, spec.stop_grace).await);
    out
}

async fn tools(p: &mut Pipes, timeout: Duration) -> Finding {
    let list = json!({"jsonrpc":"2.0","id":"doctor-list","method":"tools/list","params":{}});
    match p.ask(&list, "doctor-list", timeout).await {
        Ok((v, text)) => match v.pointer("/result/tools").and_then(Value::as_array) {
            Some(tools) => LISTS.pass(format!("{} tools", tools.len())),
            None => LISTS.fail(format!(
                "answered {}",
                text.chars().take(80).collect::<String>()
            )),
        },
        Err(e) => LISTS.fail(e),
    }
}

async fn absent(p: &mut Pipes, timeout: Duration) -> Finding {
    let probe = Probe::new(Kind::Tool, 0xd0c7_0000_0000_0001);
    let call = json!({"jsonrpc":"2.0","id":probe.id,"method":"tools/call","params":{"name":probe.name,"arguments":{}}});
    match p.ask(&call, &probe.id, timeout).await {
        Ok((_, text)) if Learned::from_answer(&probe, 200, &text).is_some() => {
            ABSENT.pass("an answer of its own")
        }
        Ok((_, text)) => ABSENT.warn(format!(
            "answered {}",
            text.chars().take(80).collect::<String>()
        )),
        Err(e) => ABSENT.warn(e),
    }
}

/// Close stdin and wait; then SIGTERM and wait; then SIGKILL.
async fn stop(p: Pipes, grace: Duration) -> Finding {
    let Pipes {
        mut child, stdin, ..
    } = p;
    drop(stdin);
    if tokio::time::timeout(grace, child.wait()).await.is_ok() {
        return STOPS.pass("it exited when its stdin closed");
    }
    let terminated = child.id().and_then(|pid| {
        let pid = rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?;
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).ok()
    });
    if terminated.is_some() && tokio::time::timeout(grace, child.wait()).await.is_ok() {
        return STOPS.warn(format!(
            "it outlived its stdin's end by {} ms and stopped on SIGTERM",
            grace.as_millis()
        ));
    }
    let _ = child.kill().await;
    STOPS.fail(format!(
        "it ignored its stdin's end and SIGTERM for {} ms each, and was killed",
        grace.as_millis()
    ))
}
