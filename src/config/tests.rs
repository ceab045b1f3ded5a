//! Config tests: defaults, cross-section checks, and messages that name their key.

use super::*;
use crate::runtime::EndpointKind;

const MINIMAL: &str = r#"
    [sessions]
    keys_env = "MCP_EDGE_TEST_KEYS_CONFIG"
    [[listeners]]
    address = "127.0.0.1:8080"
    [[pools]]
    name = "main"
    members = ["127.0.0.1:9001"]
    [[routes]]
    path = "/mcp"
    pool = "main"
"#;

fn set_keys() {
    // Same value from every test, so parallel tests cannot disagree.
    std::env::set_var(
        "MCP_EDGE_TEST_KEYS_CONFIG",
        "1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
    );
}

#[test]
fn minimal_config_gets_defaults() {
    set_keys();
    let c = Config::parse(MINIMAL).unwrap();
    assert_eq!(c.runtime.limits.max_body_bytes, 4 * 1024 * 1024);
    assert_eq!(c.runtime.timeouts.connect, Duration::from_secs(2));
    let route = &c.runtime.endpoint("/mcp").unwrap().route;
    assert!(route.versions.accepts_modern("2026-07-28"));
    assert_eq!(c.runtime.sessions.as_ref().unwrap().max_age_secs, 86400);
    assert!(route.versions.accepts_legacy());
    assert!(c.startup.listeners[0].h2c);
}

#[test]
fn legacy_routes_need_a_key_ring() {
    let text = MINIMAL.replace("keys_env = \"MCP_EDGE_TEST_KEYS_CONFIG\"", "");
    let all = Config::parse(&text).unwrap_err().join("\n");
    assert!(all.contains("sessions.keys_file"), "{all}");
    let modern_only = format!("{text}versions = [\"2026-07-28\"]\n");
    assert!(Config::parse(&modern_only).is_ok());
    let missing_env = MINIMAL.replace("MCP_EDGE_TEST_KEYS_CONFIG", "MCP_EDGE_TEST_KEYS_UNSET");
    let all = Config::parse(&missing_env).unwrap_err().join("\n");
    assert!(
        all.contains("sessions.keys_env") && all.contains("not set"),
        "{all}"
    );
}

#[test]
fn sse_endpoints_are_registered_with_the_prefix() {
    set_keys();
    let text = format!(
        "{MINIMAL}prefix = \"/team\"\nsse_path = \"/sse\"\nmessages_path = \"/messages\"\n"
    );
    let c = Config::parse(&text).unwrap();
    for (path, kind) in [
        ("/team/mcp", EndpointKind::Streamable),
        ("/team/sse", EndpointKind::SseStream),
        ("/team/messages", EndpointKind::Messages),
        ("/team/messages/", EndpointKind::Messages),
    ] {
        assert_eq!(
            c.runtime.endpoint(path).map(|e| e.kind),
            Some(kind),
            "{path}"
        );
    }
    assert!(c.runtime.endpoint("/mcp").is_none());
}

#[test]
fn unknown_keys_are_errors_naming_the_key() {
    let text = format!("{MINIMAL}\n[limits]\nmax_body = 5\n");
    let errs = Config::parse(&text).unwrap_err();
    assert!(errs[0].contains("max_body"), "{errs:?}");
}

#[test]
fn bad_values_name_their_key() {
    set_keys();
    let text = MINIMAL
        .replace("pool = \"main\"", "pool = \"nope\"")
        .replace("127.0.0.1:9001", "not-an-addr");
    let errs = Config::parse(&text).unwrap_err();
    let all = errs.join("\n");
    assert!(all.contains("routes[0].pool"), "{all}");
    assert!(all.contains("pools[0].members[0]"), "{all}");
}

#[test]
fn versions_and_origins_are_checked() {
    set_keys();
    let text = MINIMAL.replace(
        "pool = \"main\"",
        "pool = \"main\"\nversions = [\"latest\"]\nallowed_origins = [\"example.com\"]",
    );
    let all = Config::parse(&text).unwrap_err().join("\n");
    assert!(all.contains("routes[0].versions[0]"), "{all}");
    assert!(all.contains("routes[0].allowed_origins[0]"), "{all}");
}

#[test]
fn versions_may_be_auto() {
    set_keys();
    let auto = MINIMAL.replace("pool = \"main\"", "pool = \"main\"\nversions = \"auto\"");
    let config = Config::parse(&auto).unwrap();
    let route = &config.runtime.endpoints["/mcp"].route;
    assert_eq!(route.versions.accepted.len(), 5);
    assert!(route.versions.accepts_legacy());
    let other = MINIMAL.replace("pool = \"main\"", "pool = \"main\"\nversions = \"latest\"");
    let all = Config::parse(&other).unwrap_err().join("\n");
    assert!(
        all.contains("routes[0].versions: 'latest' is neither \"auto\""),
        "{all}"
    );
}

#[test]
fn a_bridge_needs_legacy_versions_and_may_serve_http_sse() {
    set_keys();
    let text = MINIMAL.replace(
        "pool = \"main\"",
        "pool = \"main\"\nversions = [\"2026-07-28\"]\nbridge_legacy = true",
    );
    let all = Config::parse(&text).unwrap_err().join("\n");
    assert!(
        all.contains("routes[0].bridge_legacy: the route's versions list no legacy"),
        "{all}"
    );
    let sse = MINIMAL.replace(
        "pool = \"main\"",
        "pool = \"main\"\nsse_path = \"/sse\"\nmessages_path = \"/messages\"\nbridge_legacy = true",
    );
    // HTTP+SSE clients are bridged too: the edge holds their streams.
    let parsed = Config::parse(&sse);
    assert!(parsed.is_ok(), "{:?}", parsed.err());
}

#[test]
fn type_errors_name_their_dotted_key() {
    set_keys();
    let cases = [
        ("[limits]\nmax_body_bytes = 0\n", "limits.max_body_bytes"),
        ("[timeouts]\nconnect_ms = -1\n", "timeouts.connect_ms"),
        ("[server]\nthreads = 0\n", "server.threads"),
        (
            "[[pools]]\nname = \"b\"\nmembers = [\"127.0.0.1:1\"]\n[pools.health]\ncheck = \"icmp\"\n",
            "pools[1].health.check",
        ),
        (
            "[[pools]]\nname = \"b\"\nmembers = [\"127.0.0.1:1\"]\n[pools.health]\nunhealthy_after = 0\n",
            "pools[1].health.unhealthy_after",
        ),
    ];
    for (extra, key) in cases {
        let errs = Config::parse(&format!("{MINIMAL}{extra}")).unwrap_err();
        assert!(errs[0].starts_with(&format!("{key}: ")), "{key}: {errs:?}");
    }
    let bad_listener = MINIMAL.replace("127.0.0.1:8080", "nowhere");
    let errs = Config::parse(&bad_listener).unwrap_err();
    assert!(errs[0].starts_with("listeners[0].address: "), "{errs:?}");
}

#[test]
fn stdio_pools_are_checked() {
    set_keys();
    let stdio = MINIMAL.replace(
        "members = [\"127.0.0.1:9001\"]",
        "command = [\"node\", \"server.js\"]\nisolation = \"per_session\"\nenv = { A = \"1\" }",
    );
    let c = Config::parse(&stdio).unwrap();
    let pool = &c.runtime.pools["main"];
    let crate::routing::Source::Stdio(spec) = &pool.source else {
        panic!("not a stdio pool: {:?}", pool.source);
    };
    assert_eq!(spec.command, ["node", "server.js"]);
    assert_eq!(spec.isolation, crate::stdio::Isolation::PerSession);
    assert_eq!((spec.processes, spec.max_processes), (1, 32));
    assert_eq!(spec.env.get("A").map(String::as_str), Some("1"));
    assert_eq!(pool.health.check, crate::routing::CheckKind::None);
    let both = stdio.replace("[[routes]]", "members = [\"127.0.0.1:9\"]\n[[routes]]");
    let all = Config::parse(&both).unwrap_err().join("\n");
    assert!(
        all.contains("pools[0].command") && all.contains("no members"),
        "{all}"
    );
    let empty = MINIMAL.replace("members = [\"127.0.0.1:9001\"]", "command = []");
    let all = Config::parse(&empty).unwrap_err().join("\n");
    assert!(all.contains("pools[0].command: needs the program"), "{all}");
    let sse = format!("{stdio}sse_path = \"/sse\"\nmessages_path = \"/messages\"\n");
    let all = Config::parse(&sse).unwrap_err().join("\n");
    assert!(
        all.contains("routes[0].sse_path") && all.contains("stdio"),
        "{all}"
    );
    let principal = stdio.replace("per_session", "per_principal");
    let all = Config::parse(&principal).unwrap_err().join("\n");
    assert!(
        all.contains("routes[0].auth") && all.contains("required"),
        "{all}"
    );
    let bad = MINIMAL.replace(
        "members = [\"127.0.0.1:9001\"]",
        "command = [\"x\"]\nisolation = \"per_tenant\"",
    );
    assert!(Config::parse(&bad).is_err());
}

#[test]
fn an_mcp_pool_is_checked_as_one_unless_told_otherwise() {
    set_keys();
    use crate::routing::CheckKind;
    let extra = "[[pools]]\nname = \"web\"\nmembers = [\"127.0.0.1:9002\"]\n\
                 [[passthrough]]\npath_prefix = \"/web/\"\npool = \"web\"\n";
    let c = Config::parse(&format!("{MINIMAL}{extra}")).unwrap();
    assert_eq!(
        c.runtime.pools["main"].health.check,
        CheckKind::Mcp {
            path: "/mcp".into(),
            strict: false
        },
        "a pool behind [[routes]]: the MCP check, on the route's path"
    );
    assert_eq!(
        c.runtime.pools["web"].health.check,
        CheckKind::Tcp,
        "a pool only behind [[passthrough]] is not an MCP server"
    );
    let told = MINIMAL.replace(
        "members = [\"127.0.0.1:9001\"]",
        "members = [\"127.0.0.1:9001\"]\n[pools.health]\ncheck = \"tcp\"",
    );
    let c = Config::parse(&told).unwrap();
    assert_eq!(c.runtime.pools["main"].health.check, CheckKind::Tcp);
    let c = Config::parse(&told.replace("\"tcp\"", "\"mcp\"")).unwrap();
    assert_eq!(
        c.runtime.pools["main"].health.check,
        CheckKind::Mcp {
            path: "/mcp".into(),
            strict: true
        },
        "set: a 5xx answer is unhealthy"
    );
}

#[test]
fn balancing_keys_are_read_and_checked() {
    set_keys();
    let text = MINIMAL.replace(
        r#"members = ["127.0.0.1:9001"]"#,
        "members = [{ address = \"127.0.0.1:9001\", weight = 3 }, \"127.0.0.1:9002\"]\nbalance = \"least_request\"\nmax_in_flight = 4\nqueue_ms = 250\nslow_start_ms = 1000\n[pools.health]\nconsecutive_failures = 2\nmax_ejection_percent = 30",
    );
    let config = Config::parse(&text).unwrap();
    let pool = &config.runtime.pools["main"];
    assert_eq!(
        pool.balance.policy,
        crate::routing::balance::Policy::LeastRequest
    );
    assert_eq!(pool.balance.max_in_flight, Some(4));
    assert_eq!(
        pool.balance.queue_wait,
        std::time::Duration::from_millis(250)
    );
    assert_eq!(pool.weights.len(), 1);
    assert_eq!(pool.health.consecutive_failures, 2);
    let fleet = MINIMAL.replace(
        r#"members = ["127.0.0.1:9001"]"#,
        "members = [\"127.0.0.1:9001\"]\nlimits_scope = \"fleet\"",
    );
    let errs = Config::parse(&fleet).unwrap_err().join("\n");
    assert!(errs.contains("pools[0].limits_scope"), "{errs}");
    let bad = MINIMAL.replace(
        r#"members = ["127.0.0.1:9001"]"#,
        "members = [\"127.0.0.1:9001\"]\nbalance = \"fastest\"",
    );
    assert!(Config::parse(&bad).is_err());
}
