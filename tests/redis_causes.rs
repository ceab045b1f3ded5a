//! A Redis episode names its latest cause: a real Redis (Debian's `redis-server`) whose
//! password changes under the edge (`CONFIG SET requirepass`, the edge's connection killed)
//! refuses it for authentication, and the edge says so while the episode lasts (once per
//! change of cause) and counts it by cause; the password back, Redis decides again.

mod common;

use common::edge_process::{spawn, temp_config, Proc};
use common::mock::{Behavior, Mock};
use common::redis::Redis;
use common::*;
use serde_json::json;

const FALLBACK: &str = "mcp_edge_rate_limit_fallback";
const AUTH_FAILURES: &str = "mcp_edge_rate_limit_redis_failures_total{cause=\"authentication\"}";

/// One edge in front of `member`, its rate limits in `redis` (with `password`).
fn edge(member: std::net::SocketAddr, redis: &Redis, password: &str) -> (Proc, u16) {
    let (port, admin) = (free_port(), free_port());
    let password_file = temp_config();
    std::fs::write(&password_file, format!("{password}\n")).unwrap();
    let text = format!(
        "[[listeners]]\naddress = \"127.0.0.1:{port}\"\n\n\
         [metrics]\naddress = \"127.0.0.1:{admin}\"\n\n\
         [rate_limits]\nredis = \"{}\"\nredis_password_file = \"{}\"\ndecision_timeout_ms = 50\n\n\
         [[pools]]\nname = \"main\"\nmembers = [\"{member}\"]\n\n\
         [[routes]]\npath = \"/mcp\"\npool = \"main\"\nversions = [\"{MODERN}\"]\n\
         [routes.rate_limit]\nrequests_per_second = 1000\nburst = 1000\n",
        redis.url(),
        password_file.display()
    );
    let path = temp_config();
    std::fs::write(&path, text).unwrap();
    let proc = spawn(&path, port);
    wait_listening(([127, 0, 0, 1], admin).into());
    (proc, admin)
}

/// One call through the edge; every one is answered, whoever decides.
async fn call(url: &str) {
    let body = modern_body(json!(1), "tools/call", json!({"name": "echo"}));
    let r = modern_request(&client(), url, &body).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_changed_under_the_edge_is_named_authentication_while_it_lasts() {
    let member = Mock::start(Behavior::Json).await;
    let redis = Redis::start_with_password("pw-one");
    let (proc, admin) = edge(member.addr, &redis, "pw-one");
    let url = format!("http://127.0.0.1:{}/mcp", proc.port);
    let shared = "mcp_edge_rate_limit_decisions_total{route=\"/mcp\",store=\"shared\"}";
    wait_until(PATIENCE, "Redis decides", async || {
        call(&url).await;
        metric_at(admin, shared).await > 0.0
    })
    .await;

    // The password changes and the edge's connection goes: every new one is refused.
    assert_eq!(
        redis.cli("pw-one", &["CONFIG", "SET", "requirepass", "pw-two"]),
        "OK"
    );
    redis.cli("pw-two", &["CLIENT", "KILL", "TYPE", "normal"]);
    wait_until(PATIENCE, "the episode names authentication", async || {
        call(&url).await;
        metric_at(admin, AUTH_FAILURES).await > 0.0
            && proc.log_text().contains("cause: authentication")
    })
    .await;
    assert_eq!(metric_at(admin, FALLBACK).await, 1.0);
    let log = proc.log_text();
    let changed =
        |l: &&str| l.contains("still does not decide") && l.contains("cause: authentication");
    let line = log.lines().find(changed).unwrap_or_default().to_string();
    assert!(
        !line.contains("broken pipe") && line.to_lowercase().contains("authentication failed"),
        "the line gives Redis's answer, not the first cause's:\n{log}"
    );

    // The password back: Redis decides again; one line per change of cause all along.
    assert_eq!(
        redis.cli("pw-two", &["CONFIG", "SET", "requirepass", "pw-one"]),
        "OK"
    );
    wait_until(PATIENCE, "Redis decides again", async || {
        call(&url).await;
        metric_at(admin, FALLBACK).await == 0.0
    })
    .await;
    let log = proc.log_text();
    assert_eq!(
        log.lines().filter(changed).count(),
        1,
        "named once while it lasted:\n{log}"
    );
    assert!(
        log.contains("decides again (it had not: ") && log.contains("cause: authentication); "),
        "the episode's end names its last cause:\n{log}"
    );
}
