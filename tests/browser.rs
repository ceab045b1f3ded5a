//! A real browser as the client: headless Chromium loads a page from one origin that talks
//! MCP over `fetch` to the edge on another origin, in front of an official TS SDK server.
//! An allowed origin works end to end and reads `Mcp-Session-Id`, the edge's error bodies
//! and its error marker; another origin is blocked by the browser.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::peers::{browser_origin, chromium, ts_server};
use common::*;
use serde_json::Value;

/// Run the page against `edge_url`; its report.
fn run_page(origin_port: u16, report: &PathBuf, edge_url: &str) -> Value {
    let _ = std::fs::remove_file(report);
    let encode = |s: &str| {
        percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
    };
    let page = format!(
        "http://127.0.0.1:{origin_port}/page.html?edge={}&report={}",
        encode(edge_url),
        encode(&format!("http://127.0.0.1:{origin_port}/report"))
    );
    chromium(&page, Duration::from_secs(60));
    wait_until_blocking(PATIENCE, "the page's report", || report.exists());
    let text = std::fs::read_to_string(report).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("report is not JSON ({e}): {text}"))
}

#[test]
fn a_page_on_an_allowed_origin_talks_mcp_and_reads_the_edges_answers() {
    let modern = ts_server("dual", "browser-modern");
    let legacy = ts_server("legacy-session", "browser-legacy");
    let report = std::env::temp_dir().join(format!("mcp-edge-browser-{}.json", std::process::id()));
    let origin = browser_origin(&report);
    let page_origin = format!("http://127.0.0.1:{}", origin.addr.port());
    let allow = format!("allowed_origins = [\"{page_origin}\"]");
    let body = format!(
        "{}\n[[pools]]\nname = \"legacy\"\nmembers = [\"{}\"]\n\n[[routes]]\nprefix = \"/legacy\"\npath = \"/mcp\"\npool = \"legacy\"\n{allow}\n",
        pool_and_route(&[modern.addr], &allow),
        legacy.addr
    );
    let edge = start_edge(&body);

    // A legacy session server: the page reads the (sealed) session id and uses it.
    let legacy_url = format!("http://127.0.0.1:{}/legacy/mcp", edge.port);
    let r = run_page(origin.addr.port(), &report, &legacy_url);
    assert_eq!(r["origin"], page_origin.as_str(), "{r}");
    assert_eq!(r["init"]["status"], 200, "{r}");
    let session = r["init"]["sessionId"].as_str().unwrap_or_default();
    assert!(!session.is_empty(), "Mcp-Session-Id readable: {r}");
    assert_eq!(r["session"]["initializedStatus"], 202, "{r}");
    assert_eq!(
        r["session"]["status"], 200,
        "the session works from the page: {r}"
    );
    assert!(
        r["session"]["body"]
            .as_str()
            .unwrap_or_default()
            .contains("echo"),
        "{r}"
    );
    // The edge's own errors are readable: -32022 with the supported list, and 404.
    assert_eq!(r["badVersion"]["status"], 400, "{r}");
    assert_eq!(r["badVersion"]["edgeError"], "unsupported_version", "{r}");
    let error: Value =
        serde_json::from_str(r["badVersion"]["body"].as_str().unwrap_or("null")).unwrap();
    assert_eq!(error["error"]["code"], -32022, "{r}");
    assert!(error["error"]["data"]["supported"].is_array(), "{r}");
    assert_eq!(r["unknownSession"]["status"], 404, "{r}");
    assert_eq!(r["unknownSession"]["edgeError"], "session_unknown", "{r}");

    // A 2026-07-28 server: the modern request (custom headers, so preflighted) works.
    let r = run_page(origin.addr.port(), &report, &edge.url());
    assert_eq!(r["modern"]["status"], 200, "{r}");
    assert!(
        r["modern"]["body"]
            .as_str()
            .unwrap_or_default()
            .contains("echo"),
        "{r}"
    );

    // The same page against an edge that does not list its origin: every fetch is blocked.
    let other = start_edge(&pool_and_route(
        &[modern.addr],
        "allowed_origins = [\"https://somewhere.else\"]",
    ));
    let requests_before = modern.requests();
    let r = run_page(origin.addr.port(), &report, &other.url());
    for step in ["init", "modern", "badVersion", "unknownSession"] {
        assert_eq!(r[step]["ok"], false, "{step}: {r}");
        assert!(
            r[step]["status"].is_null(),
            "{step} blocked by the browser: {r}"
        );
        assert!(
            r[step]["error"]
                .as_str()
                .unwrap_or_default()
                .contains("Failed to fetch"),
            "{step}: {r}"
        );
    }
    assert_eq!(
        modern.requests(),
        requests_before,
        "nothing reached the server"
    );
}
