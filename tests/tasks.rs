//! Tasks that stay with their server (Tasks extension, SEP-2663): a task created through one
//! edge replica is polled, updated and cancelled through another, and every request reaches
//! the member holding it, with no shared store. The members are fault-injecting servers that
//! keep tasks to themselves and count every request for a task they do not hold.

mod common;

use common::mock::{Behavior, Mock};
use common::*;
use serde_json::{json, Value};

fn tasks_server(prefix: &str) -> Behavior {
    Behavior::Tasks {
        prefix: prefix.to_string(),
    }
}

/// A modern `tools/call`, declaring the Tasks extension when `declare`.
fn call(id: u64, declare: bool) -> Value {
    let mut body = modern_body(
        json!(id),
        "tools/call",
        json!({"name": "long", "arguments": {}}),
    );
    if declare {
        body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
            json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    }
    body
}

/// POST a `tasks/*` request naming `task` in `Mcp-Name` and `params.taskId`.
async fn follow(url: &str, method: &str, id: u64, task: &str) -> reqwest::Response {
    let mut params = json!({ "taskId": task });
    if method == "tasks/update" {
        params["inputResponses"] = json!({"name": {"action": "accept", "content": {}}});
    }
    let body = modern_body(json!(id), method, params);
    modern_request(&client(), url, &body)
        .header("mcp-name", task)
        .send()
        .await
        .unwrap()
}

/// The JSON-RPC messages of a JSON or SSE response body.
async fn messages(r: reqwest::Response) -> Vec<Value> {
    let sse = r
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let text = r.text().await.unwrap();
    if !sse {
        return vec![serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))];
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_created_through_one_replica_is_followed_through_another() {
    let a = Mock::start(tasks_server("tâche-a")).await;
    let b = Mock::start(tasks_server("task-b")).await;
    let config = pool_and_route(&[a.addr, b.addr], "");
    let one = start_edge(&config);
    let two = start_replica(&one, &config);
    let replicas = [one.url(), two.url()];

    // Four tasks, created round-robin on both members, through the first replica.
    let mut created = Vec::new();
    for n in 0..4 {
        let r = modern_request(&client(), &one.url(), &call(n, true))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let answer = messages(r).await.remove(0);
        assert_eq!(answer["result"]["resultType"], "task", "{answer}");
        let task = answer["result"]["taskId"].as_str().unwrap().to_string();
        assert!(task.starts_with("mcp-edge-task."), "{task}");
        assert!(
            !task.contains("task-b") && !task.contains("tâche"),
            "{task}"
        );
        created.push(task);
    }
    assert_eq!(a.tasks().len(), 2, "round-robin created tasks on both");
    assert_eq!(b.tasks().len(), 2);

    // Poll, update, poll and cancel each one through alternating replicas.
    for (n, task) in created.iter().enumerate() {
        for (k, method) in [
            "tasks/get",
            "tasks/update",
            "tasks/get",
            "tasks/cancel",
            "tasks/get",
        ]
        .iter()
        .enumerate()
        {
            let url = &replicas[(n + k) % 2];
            let r = follow(url, method, 100 + k as u64, task).await;
            assert_eq!(r.status(), 200, "{method} via {url}");
            let msgs = messages(r).await;
            let answer = msgs.last().unwrap();
            assert!(answer.get("error").is_none(), "{method} {task}: {answer}");
            assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
            if *method == "tasks/get" {
                // The task, and the status notification before it, name the id the client holds.
                assert_eq!(answer["result"]["taskId"], task.as_str(), "{answer}");
                let note = &msgs[0];
                assert_eq!(note["method"], "notifications/tasks/status", "{note}");
                assert_eq!(note["params"]["taskId"], task.as_str(), "{note}");
            }
        }
    }
    assert_eq!(
        a.task_misses() + b.task_misses(),
        0,
        "every request reached its task"
    );
    for (_, status) in a.tasks().iter().chain(b.tasks().iter()) {
        assert_eq!(status, "cancelled");
    }
    assert!(
        metric(&one, "mcp_edge_task_ids_total{op=\"sealed\"}").await >= 4.0,
        "sealed ids are counted"
    );

    // The mock does tell a misrouted request: a server's own id, sent round-robin, misses.
    let raw = b.tasks()[0].0.clone();
    for k in 0..4 {
        let _ = follow(&one.url(), "tasks/get", 200 + k, &raw).await;
    }
    assert!(
        a.task_misses() > 0,
        "round-robin sends a raw id to the wrong member"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_task_answers_change_and_only_their_ids() {
    let a = Mock::start(tasks_server("t")).await;
    let edge = start_edge(&pool_and_route(&[a.addr], ""));
    // Without the extension declared, the answer is no task and passes untouched.
    let r = modern_request(&client(), &edge.url(), &call(1, false))
        .send()
        .await
        .unwrap();
    let length = r.headers().get("content-length").cloned();
    let plain = r.text().await.unwrap();
    assert_eq!(
        plain,
        json!({"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"done at once"}]}})
            .to_string()
    );
    assert_eq!(
        length.as_ref().map(|v| v.as_bytes()),
        Some(plain.len().to_string().as_bytes()),
        "the server's framing is kept"
    );
    // With it, every byte but the id's is the server's.
    let r = modern_request(&client(), &edge.url(), &call(2, true))
        .send()
        .await
        .unwrap();
    let text = r.text().await.unwrap();
    let answer: Value = serde_json::from_str(&text).unwrap();
    let sealed = answer["result"]["taskId"].as_str().unwrap();
    // What the server sent (the mock's bytes: serde_json with sorted keys).
    let now = "2026-12-01T00:00:00Z";
    let sent = json!({"jsonrpc": "2.0", "id": 2, "result": {"taskId": "t-1", "status": "working",
        "createdAt": now, "lastUpdatedAt": now, "ttlSeconds": 60, "pollIntervalMilliseconds": 100,
        "resultType": "task"}})
    .to_string();
    assert_eq!(text.replace(sealed, "t-1"), sent, "only the id changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_id_that_leads_nowhere_is_answered_as_an_unknown_task() {
    let a = Mock::start(tasks_server("a")).await;
    let b = Mock::start(tasks_server("b")).await;
    let edge = start_edge(&pool_and_route(&[a.addr, b.addr], ""));
    let r = modern_request(&client(), &edge.url(), &call(1, true))
        .send()
        .await
        .unwrap();
    let answer = messages(r).await.remove(0);
    let task = answer["result"]["taskId"].as_str().unwrap().to_string();
    let holder = if a.tasks().is_empty() { &b } else { &a };
    let heads = a.heads() + b.heads();

    // Altered in the middle (the sealed part, not a padding bit), and an edge whose pool no
    // longer holds the member (another replica's view).
    let middle = task.len() / 2 + "mcp-edge-task.".len() / 2;
    let mut forged: Vec<char> = task.chars().collect();
    forged[middle] = if forged[middle] == 'A' { 'B' } else { 'A' };
    let forged: String = forged.into_iter().collect();
    let other = start_replica(
        &edge,
        &pool_and_route(
            &[if std::ptr::eq(holder, &a) {
                b.addr
            } else {
                a.addr
            }],
            "",
        ),
    );
    for (url, id) in [(edge.url(), &forged), (other.url(), &task)] {
        for method in ["tasks/get", "tasks/cancel"] {
            let r = follow(&url, method, 9, id).await;
            assert_eq!(r.status(), 200);
            assert_eq!(
                r.headers().get("x-mcp-edge-error").map(|v| v.as_bytes()),
                Some(&b"task_unknown"[..])
            );
            let answer = messages(r).await.remove(0);
            assert_eq!(answer["id"], 9);
            assert_eq!(answer["error"]["code"], -32602, "{answer}");
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("Failed to retrieve task: Task not found"),
                "{answer}"
            );
        }
    }
    assert_eq!(a.heads() + b.heads(), heads, "nothing reached a member");
    assert!(metric(&edge, "mcp_edge_task_ids_total{op=\"refused\"}").await >= 4.0);
    // The real id still works.
    let r = follow(&edge.url(), "tasks/get", 10, &task).await;
    let answer = messages(r).await.pop().unwrap();
    assert_eq!(answer["result"]["taskId"], task.as_str(), "{answer}");
    assert_eq!(a.task_misses() + b.task_misses(), 0);
}
