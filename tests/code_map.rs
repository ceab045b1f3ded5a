//! `src/README.md`, the map of the code, stays true to the tree:
//! - every file it names exists (`proxy/stages/rate.rs`, a folder `identity/rate/`);
//! - no module imports from a layer above its own, but for the exceptions the map lists with
//!   their reasons, and every listed exception is still needed;
//! - a stage's own state (`ctx.stages.X`) is written only by the stage's own files
//!   (`proxy/stages/X.rs`, `proxy/stages/X/`); others may read it;
//! - the facts trace, log and metrics read of a request (its era, its verdict, what the rate
//!   limit and the policy decided) each have one writer, their owner;
//! - stage files import neither the hooks nor the pipeline (the pipeline calls them).
//!
//! The stage tables are checked against the pipeline by `tests/docs.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn map() -> String {
    std::fs::read_to_string(root().join("src/README.md")).unwrap()
}

/// Every `.rs` file under `src/`, as a path relative to `src/`.
fn sources() -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, base, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(base).unwrap().to_string_lossy();
                out.push(rel.replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    let src = root().join("src");
    walk(&src, &src, &mut out);
    out.sort();
    out
}

/// A file's code: before its tests, without comment lines.
fn code(rel: &str) -> String {
    let text = std::fs::read_to_string(root().join("src").join(rel)).unwrap();
    let body = text.split("#[cfg(test)]").next().unwrap_or_default();
    body.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The words between backticks in `text`.
fn ticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

#[test]
fn every_file_the_map_names_exists() {
    let mut missing = Vec::new();
    for word in ticked(&map()) {
        let is_file = word.ends_with(".rs") || word.ends_with(".lua") || word.ends_with(".md");
        let is_folder = word.ends_with('/') && !word.contains(' ') && word.len() > 1;
        if !(is_file || is_folder) || word.contains([' ', '<']) {
            continue;
        }
        // `tests/…` and `docs/…` are the repository's; the rest `src/`'s.
        let base = if word.starts_with("tests/") || word.starts_with("docs/") {
            root()
        } else {
            root().join("src")
        };
        if !base.join(word).exists() {
            missing.push(word.to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "src/README.md names files that do not exist: {missing:?}"
    );
}

/// The layers of the map, top first: each folder or file's top module and its rank.
fn layers(map: &str) -> BTreeMap<String, usize> {
    let table = map
        .split("## The layers")
        .nth(1)
        .expect("a section `## The layers`");
    let mut ranks = BTreeMap::new();
    let rows = table
        .lines()
        .skip_while(|l| !l.starts_with("| layer |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'));
    for (rank, row) in rows.enumerate() {
        let folders = row.split('|').nth(2).unwrap_or_default();
        for word in ticked(folders) {
            let top = word
                .trim_end_matches('/')
                .split('/')
                .next()
                .unwrap_or_default()
                .trim_end_matches(".rs");
            ranks.entry(top.to_string()).or_insert(rank);
        }
    }
    ranks
}

/// The upward imports the map allows: (from, to).
fn exceptions(map: &str) -> BTreeSet<(String, String)> {
    map.lines()
        .skip_while(|l| !l.starts_with("| from | to | why |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|row| {
            let cells: Vec<&str> = row.split('|').collect();
            let from = ticked(cells.get(1)?).first()?.to_string();
            let to = ticked(cells.get(2)?).first()?.to_string();
            Some((from, to))
        })
        .collect()
}

#[test]
fn no_module_imports_from_above_but_the_listed_exceptions() {
    let map = map();
    let ranks = layers(&map);
    assert!(ranks.len() >= 10, "the layer table: {ranks:?}");
    let allowed = exceptions(&map);
    let mut found: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for rel in sources() {
        let top = rel.split('/').next().unwrap().trim_end_matches(".rs");
        let Some(&own) = ranks.get(top) else {
            assert!(
                matches!(top, "lib" | "main"),
                "{rel}: its folder is in no layer of src/README.md"
            );
            continue;
        };
        let code = code(&rel);
        for (i, _) in code.match_indices("crate::") {
            let name: String = code[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            match ranks.get(&name) {
                Some(&theirs) if theirs < own => found
                    .entry((top.to_string(), name))
                    .or_default()
                    .push(rel.clone()),
                _ => {}
            }
        }
    }
    let unlisted: Vec<_> = found
        .iter()
        .filter(|(pair, _)| !allowed.contains(*pair))
        .collect();
    assert!(
        unlisted.is_empty(),
        "imports up the layers of src/README.md, not listed as exceptions: {unlisted:?}"
    );
    let stale: Vec<_> = allowed.iter().filter(|p| !found.contains_key(*p)).collect();
    assert!(
        stale.is_empty(),
        "exceptions listed in src/README.md that no import needs: {stale:?}"
    );
}

/// Would this text, right after `stages.NAME`, write the stage's state?
fn writes(rest: &str) -> bool {
    let rest = rest.trim_start();
    let assigns = |r: &str| r.starts_with('=') && !r.starts_with("==");
    if assigns(rest) {
        return true;
    }
    for method in [
        ".as_deref_mut()",
        ".as_mut()",
        ".take()",
        ".get_or_insert",
        ".insert(",
    ] {
        if rest.starts_with(method) {
            return true;
        }
    }
    // `stages.NAME.field = …` (and `+=`, …).
    if let Some(field) = rest.strip_prefix('.') {
        let after: String = field
            .chars()
            .skip_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let after = after.trim_start();
        let compound = after.len() > 1
            && after.starts_with(['+', '-', '*', '/', '%', '|', '&', '^'])
            && after[1..].starts_with('=');
        return assigns(after) || compound;
    }
    false
}

#[test]
fn a_stages_state_is_written_only_by_its_own_files() {
    let mut writers = Vec::new();
    for rel in sources() {
        let code = code(&rel);
        for (i, _) in code.match_indices("stages.") {
            let name: String = code[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() {
                continue;
            }
            let own = rel == format!("proxy/stages/{name}.rs")
                || rel.starts_with(&format!("proxy/stages/{name}/"))
                // The context makes every stage's state, empty.
                || rel == "proxy/ctx.rs";
            let before = &code[..i];
            let mutable_borrow = before.trim_end().ends_with("&mut ctx.")
                || before.trim_end().ends_with("&mut a.ctx.")
                || before.trim_end().ends_with("&mut o.ctx.");
            if !own && (writes(&code[i + 7 + name.len()..]) || mutable_borrow) {
                let line = code[..i].lines().count();
                writers.push(format!("{rel}:{line}: ctx.stages.{name}"));
            }
        }
    }
    assert!(
        writers.is_empty(),
        "a stage's state written outside its own files: {writers:?}"
    );
}

#[test]
fn the_write_check_sees_writes() {
    for write in [
        " = Some(x);",
        ".as_deref_mut()",
        ".slot = None;",
        ".count += 1;",
        ".take()",
    ] {
        assert!(writes(write), "{write}");
    }
    for read in [
        ".as_deref()",
        ".is_some()",
        ".long_lived()",
        ".count == 1",
        ".count <= 1",
        " == x",
    ] {
        assert!(!writes(read), "{read}");
    }
}

/// The facts trace, log and metrics read of a request, and the one file that writes each
/// (`proxy/ctx.rs` makes them empty).
const FACT_OWNERS: &[(&str, &str)] = &[
    ("request.era", "proxy/stages/rules.rs"),
    ("request.message", "proxy/stages/rules.rs"),
    ("labels.era", "proxy/stages/rules.rs"),
    ("decided.rate", "proxy/stages/rate.rs"),
    ("decided.policy", "proxy/stages/policy.rs"),
    ("ctx.plan", "proxy/stages/route.rs"),
];

#[test]
fn each_fact_of_a_request_has_one_writer() {
    let mut writers = Vec::new();
    let mut seen = BTreeSet::new();
    for rel in sources() {
        let code = code(&rel);
        for (fact, owner) in FACT_OWNERS {
            let needle = format!(".{fact}");
            for (i, _) in code.match_indices(&needle) {
                let rest = &code[i + needle.len()..];
                // `.request.era` but not `.request.era_x`.
                if rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
                    continue;
                }
                if rel == *owner {
                    seen.insert(*fact);
                }
                if rel != *owner && rel != "proxy/ctx.rs" && writes(rest) {
                    let line = code[..i].lines().count();
                    writers.push(format!("{rel}:{line}: {fact} (its owner: {owner})"));
                }
            }
        }
    }
    assert!(
        writers.is_empty(),
        "a fact written beside its owner: {writers:?}"
    );
    let unseen: Vec<_> = FACT_OWNERS
        .iter()
        .filter(|(fact, _)| !seen.contains(fact))
        .collect();
    assert!(
        unseen.is_empty(),
        "owners that no longer name their fact: {unseen:?}"
    );
}

#[test]
fn stage_files_import_neither_the_hooks_nor_the_pipeline() {
    let mut found = Vec::new();
    for rel in sources() {
        if !rel.starts_with("proxy/stages/") {
            continue;
        }
        let code = code(&rel);
        for (n, line) in code.lines().enumerate() {
            let line = line.trim();
            if !line.starts_with("use ") && !line.contains("crate::proxy::") {
                continue;
            }
            let names_pipeline = line.contains("pipeline");
            // The hooks are `proxy/mod.rs`: `use crate::proxy;` or `crate::proxy::Something`
            // other than the modules and re-exports a stage may read.
            let hooks = line == "use crate::proxy;" || line.contains("proxy::respond");
            if names_pipeline || hooks {
                found.push(format!("{rel}:{}: {line}", n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "stage files reaching up to the hooks or the pipeline: {found:?}"
    );
}
