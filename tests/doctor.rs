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

/// Each defect of `faulty-server.py` (one a flag) and the checks that must report it: exactly
/// these, and no other.
const CORPUS: &[(&str, &str)] = &[
    ("none", ""),
    ("no-discover", "discover"),
    ("discover-no-capabilities", "discover"),
    ("generic-version-error", "unsupported-version"),
    ("no-result-type", "result-fields"),
    ("uncached-prompts-list", "result-fields"),
    ("empty-session", "no-session"),
    ("session-left", "no-session"),
    ("no-header-check", "header-mirroring"),
    ("missing-header-accepted", "header-mirroring"),
    ("name-unchecked-on-read", "header-mirroring"),
    ("no-base64-names", "header-encoding"),
    ("meta-unchecked", "meta-envelope"),
    ("no-origin-check", "origin"),
    ("origin-null-allowed", "origin"),
    ("origin-prefix-match", "origin"),
    ("origin-suffix-match", "origin"),
    ("task-name-unchecked", "header-mirroring"),
    ("shuffled-list", "list-order"),
    ("bad-resource-metadata", "auth-challenge"),
    ("absent-tool-bare-404", "absent-name"),
    ("unknown-method-result", "unknown-method"),
    ("batch-served", "batch"),
    ("session-guard", "stateless-call"),
    ("legacy-session-lost", "legacy-session"),
    ("json-wrong-id", "answer-framing"),
    ("sse-wrong-id", "answer-framing"),
    ("no-jsonrpc-version", "answer-framing"),
    ("result-and-error", "answer-framing"),
    ("wrong-media-type", "answer-framing"),
    ("flood-prompts-list", "result-fields"),
    ("stall-resources-list", "result-fields"),
    ("truncated-templates-list", "result-fields"),
];

/// Checks that only warn (SHOULD): a defect they report exits 0.
const WARN_ONLY: &[&str] = &["list-order"];

#[test]
fn each_defect_is_reported_once_by_its_check() {
    // Four servers at a time: a stalled answer costs the doctor one timeout.
    for chunk in CORPUS.chunks(4) {
        std::thread::scope(|s| {
            for (defect, check) in chunk {
                s.spawn(move || one_defect(defect, check));
            }
        });
    }
}

fn one_defect(defect: &str, check: &str) {
    let server = faulty_server(defect);
    let started = std::time::Instant::now();
    let (doc, code) = doctor(&[&url(&server), "-H", "Authorization: Bearer t"]);
    let expected = if check.is_empty() {
        set(&[])
    } else {
        set(&[check])
    };
    assert_eq!(flagged(&doc), expected, "{defect}: {doc:#}");
    let fails = !check.is_empty() && !WARN_ONLY.contains(&check);
    assert_eq!(code, i32::from(fails), "{defect}: exit status");
    // Bounded against servers that stall, flood or close mid-body.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "{defect}: the doctor took {:?}",
        started.elapsed()
    );
    assert_eq!(server.stderr_lines("TOOL "), 0, "{defect}: no tool ran");
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
        // (it serves the request on its legacy path, where the spec says -32020), and answers
        // an absent tool with an isError result and an absent prompt with -32603 (WARN: the
        // spec says -32602, SHOULD).
        (
            &py,
            set(&["origin", "listen", "header-mirroring", "absent-name"]),
        ),
        (
            &py_stateful,
            set(&["origin", "listen", "header-mirroring", "absent-name"]),
        ),
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

/// The doctor's table output and exit status for `args` (no `--json`: a server it cannot
/// reach is said on the terminal).
fn doctor_text(args: &[&str]) -> (String, i32) {
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-edge"))
        .arg("doctor")
        .args(["--timeout-ms", "1500"])
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (text, out.status.code().unwrap_or(-1))
}

#[test]
fn a_server_out_of_reach_exits_3_with_the_cause() {
    use std::net::TcpListener;
    // Refused: a port nobody listens on.
    let refused = format!("http://127.0.0.1:{}/mcp", free_port());
    // Timeout: accepted, never answered. Reset: accepted, closed with RST.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let resetting = TcpListener::bind("127.0.0.1:0").unwrap();
    let reset_addr = resetting.local_addr().unwrap();
    resetting.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(resetting).unwrap();
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = tokio::io::AsyncReadExt::read(&mut conn, &mut buf).await;
                let _ = conn.set_zero_linger();
            }
        });
    });
    // TLS: an https:// URL at a plain HTTP server.
    let plain = faulty_server("none");
    let cases = [
        (refused, "refused"),
        (
            format!("http://{}/mcp", silent.local_addr().unwrap()),
            "timed out",
        ),
        (format!("http://{reset_addr}/mcp"), "reset"),
        ("http://mcp-edge-doctor.invalid/mcp".to_owned(), "DNS"),
        (format!("https://{}/mcp", plain.addr), "TLS"),
    ];
    for (target, cause) in cases {
        let started = std::time::Instant::now();
        let (text, code) = doctor_text(&[&target]);
        assert_eq!(code, 3, "{target}: {text}");
        assert!(text.contains(cause), "{target}: expected {cause}: {text}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{target}: {:?}",
            started.elapsed()
        );
    }
    drop(silent);
}

#[test]
fn every_check_is_documented_with_its_rule() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/doctor.md")).unwrap();
    let server = faulty_server("none");
    let (report, code) = doctor(&[&url(&server), "-H", "Authorization: Bearer t"]);
    assert_eq!(code, 0, "{report:#}");
    let findings = report["reports"][0]["findings"].as_array().unwrap();
    assert!(findings.len() >= 20, "{report:#}");
    for f in findings {
        let id = f["id"].as_str().unwrap();
        assert!(
            doc.contains(&format!("| `{id}` |")),
            "{id} is not in docs/doctor.md"
        );
        assert!(
            !f["rule"].as_str().unwrap().is_empty(),
            "{id} names no rule"
        );
    }
    assert!(
        doc.contains("| `reach` |"),
        "reach is not in docs/doctor.md"
    );
}
