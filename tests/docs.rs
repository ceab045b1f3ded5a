//! The documentation stays true to the code:
//! - every key the configuration file accepts is in `docs/configuration.md`, and every key
//!   documented there is accepted (the accepted keys are asked of the parser itself: a file
//!   with an unknown key in a table is refused with the list of the keys it takes);
//! - the stage tables of `src/README.md` are the pipeline's lists, in order;
//! - the error table of `docs/design.md` is the error vocabulary (`src/error.rs`): each row's
//!   status and JSON-RPC code are those of an `EdgeError` of the kinds it names, and every
//!   kind has a row.

use std::collections::BTreeMap;

use mcp_edge::config::Config;
use mcp_edge::error::{EdgeError, ErrorKind, RoutingHeader};
use mcp_edge::proxy::pipeline;
use strum::IntoEnumIterator;

const PROBE: &str = "zz_not_a_key";

/// A documented table: its path (`pools.health`) and whether each part of the path is an
/// array of tables, and the keys its rows name.
#[derive(Debug)]
struct Table {
    path: Vec<String>,
    keys: Vec<String>,
}

fn read(path: &str) -> String {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// `### \`[a.b]\`` and `### \`[[a.b]]\`` headings, each with the first-column keys of the
/// table that follows it; and which paths are arrays.
fn documented(doc: &str) -> (Vec<Table>, Vec<String>) {
    let mut tables: Vec<Table> = Vec::new();
    let mut arrays = Vec::new();
    for line in doc.lines() {
        if let Some(heading) = line.strip_prefix("### `").and_then(|l| l.strip_suffix('`')) {
            let (name, array) = match heading.strip_prefix("[[") {
                Some(rest) => (rest.trim_end_matches("]]"), true),
                None => (heading.trim_start_matches('[').trim_end_matches(']'), false),
            };
            if array {
                arrays.push(name.to_string());
            }
            tables.push(Table {
                path: name.split('.').map(str::to_string).collect(),
                keys: Vec::new(),
            });
            continue;
        }
        if line.starts_with("## ") || line.starts_with("### ") {
            continue;
        }
        let Some(table) = tables.last_mut() else {
            continue;
        };
        let first = line.strip_prefix("| `").and_then(|l| l.split_once('`'));
        if let Some((key, _)) = first {
            table.keys.push(key.to_string());
        }
    }
    (tables, arrays)
}

/// A configuration with `PROBE = 1` in the table at `path`.
fn probe_file(path: &[String], arrays: &[String]) -> String {
    let mut text = String::new();
    for n in 1..=path.len() {
        let prefix = path[..n].join(".");
        if arrays.contains(&prefix) {
            text.push_str(&format!("[[{prefix}]]\n"));
        } else {
            text.push_str(&format!("[{prefix}]\n"));
        }
    }
    text.push_str(&format!("{PROBE} = 1\n"));
    text
}

/// The keys the parser takes in the table at `path`, from its refusal of an unknown one.
fn accepted(path: &[String], arrays: &[String]) -> Vec<String> {
    let file = probe_file(path, arrays);
    let errors = match Config::parse(&file) {
        Ok(_) => panic!("a file with an unknown key was accepted:\n{file}"),
        Err(errors) => errors.join("\n"),
    };
    assert!(
        errors.contains(&format!("unknown field `{PROBE}`")),
        "the table [{}] was not reached by\n{file}\n{errors}",
        path.join(".")
    );
    if errors.contains("there are no fields") {
        return Vec::new();
    }
    let expected = errors
        .split_once("expected")
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn every_configuration_key_is_documented_and_every_documented_key_exists() {
    let doc = read("docs/configuration.md");
    let (tables, arrays) = documented(&doc);
    assert!(tables.len() > 10, "few tables found: {tables:?}");
    let mut problems = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for table in &tables {
        let name = table.path.join(".");
        *seen.entry(name.clone()).or_default() += 1;
        let mut code = accepted(&table.path, &arrays);
        let mut docs = table.keys.clone();
        code.sort();
        docs.sort();
        docs.dedup();
        for key in code.iter().filter(|k| !docs.contains(k)) {
            problems.push(format!("[{name}] {key}: accepted but not documented"));
        }
        for key in docs.iter().filter(|k| !code.contains(k)) {
            problems.push(format!("[{name}] {key}: documented but not accepted"));
        }
    }
    // The top level too: every table the file takes has its section.
    let top = accepted(&[], &arrays);
    for key in top {
        if !seen.contains_key(&key) {
            problems.push(format!("[{key}]: a top-level table without its section"));
        }
    }
    // Every table a documented table names as a key (one that takes keys of its own) has its
    // section too.
    for table in &tables {
        for key in &table.keys {
            let mut path = table.path.clone();
            path.push(key.clone());
            let child = path.join(".");
            let is_table = Config::parse(&probe_file(&path, &arrays))
                .err()
                .is_some_and(|e| e.join("\n").contains(&format!("unknown field `{PROBE}`")));
            if is_table && !seen.contains_key(&child) {
                problems.push(format!("[{child}]: a table without its section"));
            }
        }
    }
    for (name, n) in seen.iter().filter(|(_, n)| **n > 1) {
        problems.push(format!("[{name}]: {n} sections"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The stage names of the table under `### <phase>` in `src/README.md`, in order.
fn readme_stages(readme: &str, phase: &str) -> Vec<String> {
    let heading = format!("### {phase}");
    let mut lines = readme
        .lines()
        .skip_while(|l| !l.starts_with(&heading))
        .skip(1);
    let mut stages = Vec::new();
    for line in lines.by_ref() {
        if line.starts_with("### ") || line.starts_with("## ") {
            break;
        }
        if let Some((stage, _)) = line.strip_prefix("| `").and_then(|l| l.split_once('`')) {
            stages.push(stage.to_string());
        }
    }
    stages
}

#[test]
fn the_map_lists_the_pipeline_stages_in_order() {
    let readme = read("src/README.md");
    for (phase, list) in [
        ("request", pipeline::REQUEST),
        ("admitted", pipeline::ADMITTED),
        ("attempt (", pipeline::ATTEMPT),
        ("attempt failed", pipeline::ATTEMPT_FAILED),
        ("upstream request", pipeline::UPSTREAM_REQUEST),
        ("relay", pipeline::RELAY),
        ("response (", pipeline::RESPONSE),
        ("relay response", pipeline::RELAY_RESPONSE),
        ("response body", pipeline::RESPONSE_BODY),
        ("answer", pipeline::ANSWER),
        ("logging", pipeline::LOGGING),
    ] {
        assert_eq!(
            readme_stages(&readme, phase),
            list.to_vec(),
            "src/README.md, {phase}"
        );
    }
}

/// A row of the error table: what the edge answers (status, JSON-RPC code) and the kinds.
#[derive(Debug)]
struct ErrorRow {
    line: String,
    status: u16,
    code: i64,
    kinds: Vec<String>,
}

/// The rows of the table under `## How each rule maps to the spec` in `docs/design.md`:
/// `| request | status, code, … | \`kind\`, … | spec |`.
fn error_table(doc: &str) -> Vec<ErrorRow> {
    let rows = doc
        .lines()
        .skip_while(|l| !l.starts_with("## How each rule maps to the spec"))
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter(|l| l.starts_with("| ") && !l.starts_with("| request |"));
    rows.map(|line| {
        let cells: Vec<&str> = line.split(" | ").collect();
        assert!(cells.len() >= 4, "not a row of four cells: {line}");
        let mut answer = cells[1].split(',').map(str::trim);
        let status = answer.next().and_then(|s| s.parse().ok());
        let code = answer
            .next()
            .and_then(|c| c.split_whitespace().next())
            .and_then(|c| c.parse().ok());
        let (Some(status), Some(code)) = (status, code) else {
            panic!("the answer is not `status, code`: {line}");
        };
        let kinds = cells[2]
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect();
        ErrorRow {
            line: line.to_string(),
            status,
            code,
            kinds,
        }
    })
    .collect()
}

/// Every error the edge can raise: each variant, each routing header's mismatch.
fn every_error() -> Vec<EdgeError> {
    let mut all: Vec<EdgeError> = EdgeError::iter().collect();
    all.extend(
        RoutingHeader::iter().map(|header| EdgeError::HeaderMismatch {
            header,
            detail: String::new(),
        }),
    );
    all
}

#[test]
fn the_error_table_is_the_error_vocabulary() {
    let rows = error_table(&read("docs/design.md"));
    assert!(!rows.is_empty(), "docs/design.md: no error table");
    let errors = every_error();
    let mut problems = Vec::new();
    for row in &rows {
        for kind in &row.kinds {
            let of_kind: Vec<&EdgeError> = errors
                .iter()
                .filter(|e| e.kind().as_str() == kind)
                .collect();
            if of_kind.is_empty() {
                problems.push(format!("`{kind}` is no error kind: {}", row.line));
                continue;
            }
            let answers: Vec<(u16, i64)> = of_kind.iter().map(|e| (e.status(), e.code())).collect();
            if !answers.contains(&(row.status, row.code)) {
                problems.push(format!(
                    "`{kind}`: the table says {}, {}; the code answers {answers:?}: {}",
                    row.status, row.code, row.line
                ));
            }
        }
    }
    for kind in ErrorKind::iter().map(ErrorKind::as_str) {
        if !rows.iter().any(|r| r.kinds.iter().any(|k| k == kind)) {
            problems.push(format!("`{kind}` has no row in the error table"));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/design.md:\n{}",
        problems.join("\n")
    );
}
