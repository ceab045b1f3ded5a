//! `mcp-edge doctor`: each defect of a fault-injecting server reported once, by the right
//! check; the official SDK servers as they are; what the edge adds in front of a server; and
//! `--config` finding what a configuration assumes and its servers contradict.

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use common::edge_process::temp_config;
use common::peers::{faulty_server, py_server, ts_server, Peer};
use common::*;
use serde_json::Value;

/// The doctor's JSON for `args`, and its exit status.
fn doctor(args: &[&str]) -> (Value, i32) {
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-edge"))
        .arg("doctor")
        .args(["--json", "--listen-ms", "1500", "--timeout-ms", "5000"])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let doc = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "doctor printed no JSON ({e}): {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (doc, out.status.code().unwrap_or(-1))
}

/// The ids of the findings that are not PASS or SKIP, across the reports.
fn flagged(doc: &Value) -> BTreeSet<String> {
    doc["reports"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["findings"].as_array().unwrap().iter())
        .filter(|f| f["status"] == "FAIL" || f["status"] == "WARN")
        .map(|f| f["id"].as_str().unwrap().to_owned())
        .collect()
}

/// A report's finding with `id`.
fn finding(report: &Value, id: &str) -> Option<Value> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .cloned()
}

/// The status of a report's finding with `id`.
fn status_of(report: &Value, id: &str) -> Option<String> {
    finding(report, id).map(|f| f["status"].as_str().unwrap().to_owned())
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| (*s).to_owned()).collect()
}

fn url(peer: &Peer) -> String {
    format!("http://{}/mcp", peer.addr)
}

#[test]
fn each_defect_is_reported_once_by_its_check() {
    let cases = [
        ("none", ""),
        ("no-discover", "discover"),
        ("generic-version-error", "unsupported-version"),
        ("no-result-type", "result-fields"),
        ("empty-session", "no-session"),
        ("no-header-check", "header-mirroring"),
        ("no-origin-check", "origin"),
        ("shuffled-list", "list-order"),
        ("session-left", "no-session"),
        ("bad-resource-metadata", "auth-challenge"),
    ];
    for (defect, check) in cases {
        let server = faulty_server(defect);
        let (doc, code) = doctor(&[&url(&server), "-H", "Authorization: Bearer t"]);
        let expected = if check.is_empty() {
            set(&[])
        } else {
            set(&[check])
        };
        assert_eq!(flagged(&doc), expected, "{defect}: {doc:#}");
        let fails = !check.is_empty() && check != "list-order";
        assert_eq!(code, i32::from(fails), "{defect}: exit status");
    }
}

#[test]
fn the_sdk_servers_as_they_are_and_nothing_runs() {
    let modern = ts_server("modern", "dm");
    let dual = ts_server("dual", "dd");
    let v1 = ts_server("legacy-session", "dv1");
    let py = py_server(&["--transport", "streamable-http", "--stateless"], "dps");
    let py_stateful = py_server(&["--transport", "streamable-http"], "dpf");
    // No Origin check in the test servers (they must take any Host an edge presents), and
    // the SDKs' listen streams keep alive every 15 s (longer than the doctor waits here).
    for (peer, expected) in [
        (&modern, set(&["origin", "listen"])),
        (&dual, set(&["origin", "listen"])),
        // Python takes a 2025 MCP-Protocol-Version header over the body's 2026-07-28 claim
        // (it serves the request on its legacy path, where the spec says -32020).
        (&py, set(&["origin", "listen", "header-mirroring"])),
        (&py_stateful, set(&["origin", "listen", "header-mirroring"])),
    ] {
        let (doc, _) = doctor(&[&url(peer)]);
        assert_eq!(flagged(&doc), expected, "{}: {doc:#}", peer.addr);
    }
    // A sessionful server of the 2025 revisions only: a 2026-07-28 client gets nowhere.
    {
        let peer = &v1;
        let (doc, code) = doctor(&[&url(peer)]);
        let found = flagged(&doc);
        assert!(
            found.contains("stateless-list") && found.contains("discover"),
            "{}: {doc:#}",
            peer.addr
        );
        assert_eq!(code, 1);
        let init = finding(&doc["reports"][0], "legacy-initialize").unwrap();
        assert_eq!(init["status"], "PASS", "{init}");
    }
    for peer in [&modern, &dual, &v1, &py, &py_stateful] {
        assert_eq!(
            peer.stderr_lines("TOOL "),
            0,
            "the doctor ran no tool on {}",
            peer.addr
        );
    }
}

#[test]
fn the_edge_adds_what_a_server_lacks() {
    let server = faulty_server("no-origin-check");
    let headerless = faulty_server("no-header-check");
    let (direct, _) = doctor(&[&url(&server)]);
    assert_eq!(flagged(&direct), set(&["origin"]));
    let (direct, _) = doctor(&[&url(&headerless)]);
    assert_eq!(flagged(&direct), set(&["header-mirroring"]));
    for peer in [&server, &headerless] {
        let edge = start_edge(&pool_and_route(&[peer.addr], "versions = [\"2026-07-28\"]"));
        let (through, code) = doctor(&[&edge.url()]);
        assert_eq!(flagged(&through), set(&[]), "through the edge: {through:#}");
        assert_eq!(code, 0);
    }
}

#[test]
fn config_contradictions_are_named_with_their_fix() {
    let modern = ts_server("modern", "cm");
    let (path, port) = (temp_config(), free_port());
    let text = format!(
        "[[listeners]]\naddress = \"127.0.0.1:{port}\"\n\n{}\n\
         [[pools]]\nname = \"tools\"\nmembers = [\"{}\"]\n\n\
         [[routes]]\npath = \"/mcp\"\npool = \"tools\"\nsse_path = \"/sse\"\nmessages_path = \"/messages\"\n",
        sessions_section(&format!("1:{KEY_A}")),
        modern.addr
    );
    std::fs::write(&path, &text).unwrap();
    let (doc, code) = doctor(&["--config", &path.display().to_string()]);
    let reports = doc["reports"].as_array().unwrap();
    assert!(
        reports[0]["subject"]
            .as_str()
            .unwrap()
            .contains(&modern.addr.to_string()),
        "{doc:#}"
    );
    let assumed = reports.last().unwrap();
    let status = |id: &str| status_of(assumed, id);
    assert_eq!(
        status("config-legacy").as_deref(),
        Some("WARN"),
        "{assumed:#}"
    );
    assert_eq!(
        status("config-sse-path").as_deref(),
        Some("FAIL"),
        "{assumed:#}"
    );
    assert_eq!(
        status("config-versions").as_deref(),
        Some("PASS"),
        "{assumed:#}"
    );
    assert_eq!(code, 1, "the sse_path no member serves fails");
}

#[test]
fn http_sse_posts_are_answered_on_their_stream_direct_and_through_the_edge() {
    let server = ts_server("legacy-sse", "dsse");
    let route = "sse_path = \"/sse\"\nmessages_path = \"/messages\"";
    let edge = start_edge(&pool_and_route(&[server.addr], route));
    for (who, target) in [("direct", url(&server)), ("through the edge", edge.url())] {
        let (doc, _) = doctor(&[&target]);
        let sse = finding(&doc["reports"][0], "http-sse").unwrap();
        assert_eq!(sse["status"], "WARN", "{who}: {sse}");
        assert!(
            sse["detail"]
                .as_str()
                .unwrap()
                .contains("every POST answered on its stream"),
            "{who}: {sse}"
        );
    }
    assert_eq!(server.stderr_lines("TOOL "), 0, "no tool ran");
}

#[test]
fn stdio_pools_are_checked_as_the_edge_runs_them() {
    let server = common::peers::dir()
        .join("ts-server.mjs")
        .display()
        .to_string();
    let pool = |name: &str, extra: &str| {
        format!(
            "[[pools]]\nname = \"{name}\"\ncommand = [\"node\", \"{server}\", \"--mode\", \"stdio\", \"--instance\", \"{name}\"{extra}]\nstop_grace_ms = 3000\n\n\
             [[routes]]\npath = \"/{name}\"\npool = \"{name}\"\n\n"
        )
    };
    let path = temp_config();
    let text = format!(
        "[[listeners]]\naddress = \"127.0.0.1:{}\"\n\n{}\n{}{}",
        free_port(),
        sessions_section(&format!("1:{KEY_A}")),
        pool("polite", ""),
        pool("lingering", ", \"--linger\"")
    );
    std::fs::write(&path, &text).unwrap();
    let (doc, code) = doctor(&["--config", &path.display().to_string()]);
    let report = |name: &str| {
        doc["reports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| {
                r["subject"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("pool {name} (stdio)"))
            })
            .unwrap_or_else(|| panic!("no report for {name}: {doc:#}"))
            .clone()
    };
    let status = status_of;
    let polite = report("polite");
    for id in [
        "stdio-initialize",
        "stdio-tools-list",
        "stdio-absent-tool",
        "stdio-stdout",
        "stdio-stop",
    ] {
        assert_eq!(
            status(&polite, id).as_deref(),
            Some("PASS"),
            "{id}: {polite:#}"
        );
    }
    let lingering = report("lingering");
    assert_eq!(
        status(&lingering, "stdio-stop").as_deref(),
        Some("WARN"),
        "outlives its stdin, stops on SIGTERM: {lingering:#}"
    );
    assert_eq!(code, 0, "nothing failed");
}
