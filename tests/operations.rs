//! Operations: health checks and ejection, DNS discovery, reload under load, readiness.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use common::mock::{Behavior, Mock};
use common::*;
use serde_json::json;

async fn list(edge: &Edge) -> reqwest::Response {
    modern_request(
        &client(),
        &edge.url(),
        &modern_body(json!(1), "tools/list", json!({})),
    )
    .send()
    .await
    .unwrap()
}

async fn readyz(edge: &Edge) -> u16 {
    client()
        .get(format!("http://127.0.0.1:{}/readyz", edge.metrics_port))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// `[[pools]] main` with `members` and a `[pools.health]` section, routed on `/mcp`.
fn pool(members: &[SocketAddr], health: &str) -> String {
    pool_with_health(members, health, "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_checks_take_a_dead_member_out_and_bring_it_back() {
    let ok = Mock::start(Behavior::Json).await;
    let dead = refusing();
    let dead_addr = dead.addr;
    let edge = start_edge(&pool(
        &[ok.addr, dead_addr],
        "check = \"tcp\"\ninterval_ms = 100\nunhealthy_after = 1\neject_ms = 1",
    ));
    let pool = &edge.pool;
    let gauge = format!("mcp_edge_member_healthy{{member=\"{dead_addr}\",pool=\"{pool}\"}}");
    let failures = format!(
        "mcp_edge_upstream_connect_failures_total{{member=\"{dead_addr}\",pool=\"{pool}\"}}"
    );
    // Marked unhealthy by the checker (the gauge reads 0 and the member gets no traffic).
    wait_until(PATIENCE, "the dead member marked unhealthy", async || {
        scrape(&edge).await.contains(&format!("{gauge} 0"))
    })
    .await;
    let before = metric(&edge, &failures).await;
    for _ in 0..10 {
        assert_eq!(list(&edge).await.status(), 200);
    }
    assert_eq!(
        metric(&edge, &failures).await,
        before,
        "traffic was sent to an unhealthy member"
    );
    assert_eq!(readyz(&edge).await, 200, "one healthy member is enough");
    // It comes back on the same port.
    let revived = dead.revive(Behavior::Json);
    wait_metric(&edge, &gauge, 1.0).await;
    for _ in 0..10 {
        assert_eq!(list(&edge).await.status(), 200);
    }
    assert!(
        revived.requests() >= 4,
        "recovered member gets traffic again: {}",
        revived.requests()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_healthy_member_is_a_clear_503_and_not_ready() {
    let (dead_1, dead_2) = (refusing(), refusing());
    let edge = start_edge(&pool(
        &[dead_1.addr, dead_2.addr],
        "check = \"tcp\"\ninterval_ms = 100\nunhealthy_after = 1",
    ));
    // Until the checker has marked both down, requests fail to connect instead.
    let mut last = None;
    let became_503 = poll_until(PATIENCE, async || {
        let answer = exchange(modern_request(
            &client(),
            &edge.url(),
            &modern_body(json!(1), "tools/list", json!({})),
        ))
        .await;
        let done = answer.status == Some(503);
        last = Some(answer);
        done
    })
    .await;
    let last = last.unwrap();
    assert!(became_503, "never became 503: {}", last.text);
    assert_answer(
        &last,
        &Expect::edge(503, "no_healthy_member", -32603, json!(1)),
        "no healthy member",
    );
    assert_eq!(readyz(&edge).await, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_ejects_the_member_passively() {
    let ok = Mock::start(Behavior::Json).await;
    let dead = refusing();
    let edge = start_edge(&pool(
        &[dead.addr, ok.addr],
        "check = \"none\"\neject_ms = 60000",
    ));
    let failures = format!(
        "mcp_edge_upstream_connect_failures_total{{member=\"{}\",pool=\"{}\"}}",
        dead.addr, edge.pool
    );
    for _ in 0..20 {
        assert_eq!(list(&edge).await.status(), 200);
    }
    assert_eq!(
        metric(&edge, &failures).await,
        1.0,
        "one refusal, then the member is ejected"
    );
    assert_eq!(ok.requests(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_probe_tells_an_mcp_server_from_an_open_port() {
    let good = Mock::start(Behavior::Json).await;
    let garbage = Mock::start(Behavior::Garbage).await;
    let edge = start_edge(&pool(
        &[good.addr, garbage.addr],
        "check = \"mcp\"\ninterval_ms = 100\nunhealthy_after = 1",
    ));
    let healthy = |m: &Mock| {
        format!(
            "mcp_edge_member_healthy{{member=\"{}\",pool=\"{}\"}}",
            m.addr, edge.pool
        )
    };
    wait_until(
        PATIENCE,
        "the probe's verdicts (good up, garbage down)",
        async || {
            let text = scrape(&edge).await;
            text.contains(&format!("{} 1", healthy(&good)))
                && text.contains(&format!("{} 0", healthy(&garbage)))
        },
    )
    .await;
    // The probe itself is a server/discover POST (then, once, a legacy initialize).
    let heads = good.all_heads();
    assert!(
        heads
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .any(|h| h.starts_with("post /mcp") && h.contains("mcp-method: server/discover")),
        "{heads:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_members_are_discovered_and_departures_end_sessions() {
    let mock = Mock::start(Behavior::Json).await;
    let port = mock.addr.port();
    // Resolved once at start; no second resolution may bring the member back while the
    // test has it leave (a lookup in flight would restore it: a flake seen under load).
    let edge = start_edge(&format!(
        "[[pools]]\nname = \"main\"\ndns = \"localhost:{port}\"\ndns_interval_ms = 600000\n[pools.health]\ncheck = \"none\"\n\n[[routes]]\npath = \"/mcp\"\npool = \"main\"\n"
    ));
    wait_metric(
        &edge,
        &format!("mcp_edge_pool_members{{pool=\"{}\"}}", edge.pool),
        1.0,
    )
    .await;
    for _ in 0..5 {
        assert_eq!(list(&edge).await.status(), 200);
    }
    // A session on the discovered member, then the member leaves the pool.
    let ring = mcp_edge::session::KeyRing::parse(&format!("1:{KEY_A}")).unwrap();
    let claims = mcp_edge::session::Claims {
        pool: edge.pool.clone(),
        member: mock.addr.to_string(),
        upstream_id: "s".into(),
        issued_at: mcp_edge::session::token::now_secs(),
        credential: None,
        owner: None,
    };
    let token = mcp_edge::session::token::seal(&ring, &claims).unwrap();
    let legacy = || {
        client()
            .post(edge.url())
            .header("content-type", "application/json")
            .header("mcp-session-id", token.clone())
            .body(json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}).to_string())
    };
    assert_eq!(legacy().send().await.unwrap().status(), 200);
    let pool = edge.handle.runtime.load().pools[&edge.pool].clone();
    let elsewhere = refusing();
    assert!(pool.set_members(&[elsewhere.addr]), "simulated departure");
    assert_rejected(
        &mock,
        "a session on a member that left",
        &Expect::edge(404, "session_member_gone", -32001, json!(2)),
        exchange(legacy()),
    )
    .await;
}

fn write_config(
    path: &std::path::Path,
    port: u16,
    metrics_port: u16,
    keys: &str,
    pools: &Pools,
    member: SocketAddr,
) {
    let text = format!(
        "[server]\nthreads = 1\n\n[[listeners]]\naddress = \"127.0.0.1:{port}\"\n\n[metrics]\naddress = \"127.0.0.1:{metrics_port}\"\n\n[sessions]\nkeys_file = \"{keys}\"\n\n{}",
        pools.apply(&pool_and_route(&[member], ""))
    );
    // Write-then-rename: a reader never sees half a file.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_under_load_loses_no_request() {
    let (a, b) = (
        Mock::start(Behavior::Json).await,
        Mock::start(Behavior::Json).await,
    );
    let keys = key_file(&format!("1:{KEY_A}"));
    let path = std::env::temp_dir().join(format!("mcp-edge-reload-{}.toml", free_port()));
    let (port, metrics_port) = (free_port(), free_port());
    let pools = Pools::fresh();
    write_config(&path, port, metrics_port, &keys, &pools, a.addr);
    let edge = start_edge_from_file(&path, port, metrics_port, &pools);
    let reloader = edge.handle.reloader.clone().unwrap();
    let ok_before = metric(&edge, "mcp_edge_config_reloads_total{result=\"success\"}").await;
    let bad_before = metric(&edge, "mcp_edge_config_reloads_total{result=\"failure\"}").await;

    let url = Arc::new(edge.url());
    let load: Vec<_> = (0..4)
        .map(|w| {
            let url = url.clone();
            tokio::spawn(async move {
                let c = client();
                let mut statuses = Vec::new();
                for i in 0..150 {
                    let body = modern_body(json!(w * 1000 + i), "tools/list", json!({}));
                    statuses.push(
                        modern_request(&c, &url, &body)
                            .send()
                            .await
                            .map(|r| r.status().as_u16())
                            .unwrap_or(0),
                    );
                }
                statuses
            })
        })
        .collect();
    for i in 0..10 {
        write_config(
            &path,
            port,
            metrics_port,
            &keys,
            &pools,
            if i % 2 == 0 { b.addr } else { a.addr },
        );
        reloader.reload().unwrap();
        // Pace the reloads by the load, not the clock: some requests between each two (or
        // none left to send).
        let served = a.requests() + b.requests();
        wait_until(PATIENCE, "requests served after a reload", async || {
            let now = a.requests() + b.requests();
            now >= served + 5 || now >= 600
        })
        .await;
    }
    // An invalid file is refused; the running configuration stays.
    std::fs::write(&path, "this is not toml [").unwrap();
    assert!(reloader.reload().is_err());
    let mut total = 0;
    for task in load {
        let statuses = task.await.unwrap();
        total += statuses.len();
        assert!(
            statuses.iter().all(|s| *s == 200),
            "a request failed during reloads: {statuses:?}"
        );
    }
    assert_eq!(total, 600);
    assert_eq!(
        a.requests() + b.requests(),
        600,
        "every request reached exactly one upstream"
    );
    assert!(a.requests() > 0 && b.requests() > 0);
    // The last good config (member a) is what serves now.
    let before = a.requests();
    assert_eq!(list(&edge).await.status(), 200);
    assert_eq!(a.requests(), before + 1);
    assert_eq!(
        metric(&edge, "mcp_edge_config_reloads_total{result=\"success\"}").await,
        ok_before + 10.0
    );
    assert_eq!(
        metric(&edge, "mcp_edge_config_reloads_total{result=\"failure\"}").await,
        bad_before + 1.0
    );
}
