//! Every shipped config validates with `mcp-edge --check`; a broken one fails naming the key.

mod common;

use std::process::Command;

use common::tls::Pki;

fn check(path: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mcp-edge"))
        .arg("--check")
        .arg(path)
        .env(
            "MCP_EDGE_SESSION_KEYS",
            "1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
        )
        .output()
        .unwrap()
}

/// Where the examples expect TLS files (a mounted Secret).
const TLS_DIR: &str = "/etc/mcp-edge/tls/";

/// Certificates at the examples' file names, in a directory of the test's own.
fn tls_files(pki: &Pki) -> std::path::PathBuf {
    let dir = pki.dir.join("mounted");
    std::fs::create_dir_all(&dir).unwrap();
    let server = pki.issue(&["mcp.example.com"]);
    let client = pki.issue_client("mcp-edge");
    for (from, to) in [
        (&server.cert, "tls.crt"),
        (&server.key, "tls.key"),
        (&client.cert, "client.crt"),
        (&client.key, "client.key"),
        (&pki.ca_pem, "ca.crt"),
        (&pki.ca_pem, "upstream-ca.crt"),
    ] {
        std::fs::copy(from, dir.join(to)).unwrap();
    }
    dir
}

#[test]
fn every_example_under_conf_is_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("conf");
    let pki = Pki::new();
    let mounted = tls_files(&pki);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            // The same file with its TLS paths pointing at real certificates.
            let text = std::fs::read_to_string(&path).unwrap();
            let copy = pki.dir.join(path.file_name().unwrap());
            std::fs::write(
                &copy,
                text.replace(TLS_DIR, &format!("{}/", mounted.display())),
            )
            .unwrap();
            let out = check(&copy);
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            n += 1;
        }
    }
    assert!(n >= 4, "expected the shipped examples, found {n}");
}

#[test]
fn a_broken_config_fails_and_names_each_offending_key() {
    let dir = std::env::temp_dir().join(format!("mcp-edge-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("[[listeners]]\naddress = \"0.0.0.0:8080\"\nbogus = 1\n", "bogus"),
        ("[[listeners]]\naddress = \"nowhere\"\n[[pools]]\nname=\"p\"\nmembers=[\"127.0.0.1:1\"]\n[[routes]]\npath=\"/mcp\"\npool=\"p\"\n", "listeners[0].address"),
        ("[[listeners]]\naddress = \"0.0.0.0:8080\"\n[[pools]]\nname=\"p\"\nmembers=[\"127.0.0.1:1\"]\n[[routes]]\npath=\"/mcp\"\npool=\"q\"\n", "routes[0].pool"),
        ("[[listeners]]\naddress = \"0.0.0.0:8080\"\n[[pools]]\nname=\"p\"\nmembers=[\"127.0.0.1:1\"]\n[[routes]]\npath=\"/mcp\"\npool=\"p\"\n", "sessions.keys_file"),
        ("[sessions]\nkeys_file = \"/nonexistent/keys\"\n[[listeners]]\naddress = \"0.0.0.0:8080\"\n[[pools]]\nname=\"p\"\nmembers=[\"127.0.0.1:1\"]\n[[routes]]\npath=\"/mcp\"\npool=\"p\"\n", "sessions.keys_file"),
        ("[[listeners]]\naddress = \"0.0.0.0:8080\"\n[limits]\nmax_body_bytes = 0\n[[pools]]\nname=\"p\"\nmembers=[\"127.0.0.1:1\"]\n[[routes]]\npath=\"/mcp\"\npool=\"p\"\n", "limits.max_body_bytes"),
    ];
    for (i, (text, key)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = check(&path);
        assert!(!out.status.success(), "case {i} passed --check");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(key),
            "case {i}: stderr does not name {key}: {stderr}"
        );
    }
}

#[test]
fn check_flags_rules_and_patterns_that_can_never_match() {
    let dir = std::env::temp_dir().join(format!("mcp-edge-never-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = "[[listeners]]\naddress = \"0.0.0.0:8080\"\n[identity]\n[identity.jwt]\nissuer = \"https://i\"\naudience = [\"a\"]\njwks_url = \"https://i/jwks\"\n[[pools]]\nname=\"p\"\nmembers=[\"127.0.0.1:1\"]\n[[routes]]\npath=\"/mcp\"\npool=\"p\"\nversions = [\"2026-07-28\"]\nauth = \"required\"\n";
    let cases = [
        (
            "[[routes.policy]]\ntenants = [\"a\"]\ntools = [\"x\"]\n",
            "tenants: can never match",
        ),
        (
            "[[routes.policy]]\ngroups = [\"g\"]\n",
            "groups: can never match",
        ),
        (
            "[[routes.policy]]\ntools = [\"*\"]\n[[routes.policy]]\nsubjects = [\"bob\"]\n",
            "rule 'rule-0' before it matches every caller",
        ),
        (
            "[[routes.policy]]\ntools = [\"my tool\"]\n",
            "pattern 'my tool' can never match",
        ),
        (
            "[[routes.policy]]\nresources = [\"/srv/files\"]\n",
            "not a URI prefix",
        ),
    ];
    for (i, (policy, flagged)) in cases.iter().enumerate() {
        let path = dir.join(format!("never{i}.toml"));
        std::fs::write(&path, format!("{base}{policy}")).unwrap();
        let out = check(&path);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "case {i} passed --check: {stderr}");
        assert!(stderr.contains(flagged), "case {i}: {stderr}");
    }
    // The same rules where they can match pass.
    let path = dir.join("fine.toml");
    std::fs::write(
        &path,
        format!("{}[[routes.policy]]\nsubjects = [\"bob\"]\ntools = [\"a_*\"]\nresources = [\"file:///a/\"]\n", base),
    )
    .unwrap();
    let out = check(&path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
