//! TLS on both sides of the edge, with a CA and certificates made here: official SDK clients
//! over https (HTTP/1.1 and HTTP/2) through a TLS listener to SDK servers, SNI, a
//! certificate swap under load, plain HTTP on the TLS port, handshake floods, and HTTPS
//! pools (verified, wrong name, expired, mutual TLS).

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::peers::{py_client, ts_client_env, ts_server, ts_server_with};
use common::tls::{mtls_front, presented, replace_file, Issued, Pki};
use common::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `[listeners.tls]` serving `certs` (the first is the default), checked every `watch_ms`.
fn tls_listener(certs: &[&Issued], watch_ms: u64) -> String {
    let list: Vec<String> = certs
        .iter()
        .map(|c| {
            format!(
                "{{ cert = \"{}\", key = \"{}\" }}",
                c.cert.display(),
                c.key.display()
            )
        })
        .collect();
    format!(
        "[listeners.tls]\ncertificates = [{}]\nwatch_ms = {watch_ms}\n",
        list.join(", ")
    )
}

fn tls_edge(certs: &[&Issued], watch_ms: u64, body: &str) -> Edge {
    start_edge_listening(
        free_port(),
        &tls_listener(certs, watch_ms),
        body,
        Pools::fresh(),
    )
}

fn https_url(edge: &Edge, host: &str) -> String {
    format!("https://{host}:{}/mcp", edge.port)
}

fn addr(edge: &Edge) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], edge.port))
}

fn tools_list(id: i64) -> serde_json::Value {
    modern_body(json!(id), "tools/list", json!({}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_clients_over_https_h1_and_h2() {
    let pki = Pki::new();
    let cert = pki.issue(&["localhost", "127.0.0.1"]);
    let server = ts_server("dual", "tls-a");
    let edge = tls_edge(&[&cert], 0, &pool_and_route(&[server.addr], ""));
    let ca = pki.ca_pem.display().to_string();

    let url = https_url(&edge, "localhost");
    let (u, c) = (url.clone(), ca.clone());
    let ts = tokio::task::spawn_blocking(move || {
        ts_client_env(&u, &[], &[("NODE_EXTRA_CA_CERTS", c.as_str())])
    })
    .await
    .unwrap();
    assert_eq!(ts["ok"], true, "TS SDK client over https: {ts}");
    assert_eq!(ts["era"], "modern", "{ts}");

    let (u, c) = (url.clone(), ca.clone());
    let legacy = tokio::task::spawn_blocking(move || {
        ts_client_env(&u, &["--sdk", "v1"], &[("NODE_EXTRA_CA_CERTS", c.as_str())])
    })
    .await
    .unwrap();
    assert_eq!(
        legacy["ok"], true,
        "TS SDK v1 (legacy) over https: {legacy}"
    );

    let (u, c) = (url.clone(), ca.clone());
    let py_h2 = tokio::task::spawn_blocking(move || py_client(&u, &["--ca", &c, "--http2"]))
        .await
        .unwrap();
    assert_eq!(py_h2["ok"], true, "Python SDK client over h2: {py_h2}");
    assert!(
        py_h2["httpVersion"].to_string().contains("HTTP/2"),
        "the Python client negotiated HTTP/2 by ALPN: {py_h2}"
    );
    let (u, c) = (url.clone(), ca.clone());
    let py_h1 = tokio::task::spawn_blocking(move || py_client(&u, &["--ca", &c]))
        .await
        .unwrap();
    assert_eq!(py_h1["ok"], true, "Python SDK client over h1: {py_h1}");
    assert!(
        py_h1["httpVersion"].to_string().contains("HTTP/1.1"),
        "{py_h1}"
    );

    // reqwest negotiates h2 by ALPN too; the answer is the SDK server's.
    let c = pki.client(true);
    let resp = modern_request(&c, &url, &tools_list(1))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    let (_, alpn) = presented(pki.roots(), addr(&edge), "localhost").await;
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_chooses_the_certificate() {
    let pki = Pki::new();
    let a = pki.issue(&["a.test"]);
    let b = pki.issue(&["b.test"]);
    let wild = pki.issue(&["*.wild.test"]);
    let mock = mock::Mock::start(mock::Behavior::Json).await;
    let edge = tls_edge(
        &[&a, &b, &wild],
        0,
        &unchecked_pool_and_route(&[mock.addr], ""),
    );
    assert_eq!(presented(pki.roots(), addr(&edge), "b.test").await.0, b.der);
    assert_eq!(presented(pki.roots(), addr(&edge), "a.test").await.0, a.der);
    assert_eq!(
        presented(pki.roots(), addr(&edge), "x.wild.test").await.0,
        wild.der
    );
    // An unknown name gets the default (first) certificate, which the client then refuses.
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(pki.roots())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr(&edge)).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("other.test").unwrap();
    let err = connector.connect(name, tcp).await.unwrap_err();
    assert!(
        err.to_string().contains("NotValidForName") || err.to_string().contains("not valid"),
        "{err}"
    );
    let expiry = format!(
        "mcp_edge_tls_certificate_expiry_timestamp_seconds{{listener=\"127.0.0.1:{}\",name=\"b.test\"}}",
        edge.port
    );
    assert!(metric(&edge, &expiry).await > 1.7e9, "expiry exported");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_swap_under_load_fails_no_request() {
    let pki = Pki::new();
    let old = pki.issue(&["localhost"]);
    let new = pki.issue(&["localhost"]);
    // The edge serves whatever sits at these paths (a mounted Secret).
    let live = Issued {
        cert: pki.dir.join("live.crt"),
        key: pki.dir.join("live.key"),
        der: old.der.clone(),
    };
    std::fs::copy(&old.cert, &live.cert).unwrap();
    std::fs::copy(&old.key, &live.key).unwrap();
    let mock = mock::Mock::start(mock::Behavior::Json).await;
    let edge = tls_edge(&[&live], 100, &unchecked_pool_and_route(&[mock.addr], ""));
    let url = https_url(&edge, "localhost");
    assert_eq!(
        presented(pki.roots(), addr(&edge), "localhost").await.0,
        old.der
    );

    // Load: four clients, each request on a new connection (a handshake each).
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut load = Vec::new();
    for w in 0..4 {
        let (c, url, stop, ok, failed) = (
            pki.client(false),
            url.clone(),
            stop.clone(),
            ok.clone(),
            failed.clone(),
        );
        load.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let r = modern_request(&c, &url, &tools_list(w * 100_000 + i))
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status() == 200 => ok.fetch_add(1, Ordering::Relaxed),
                    other => {
                        eprintln!("failed during the swap: {other:?}");
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }));
    }
    wait_until(PATIENCE, "load under way", async || {
        ok.load(Ordering::Relaxed) >= 20
    })
    .await;
    // A broken file (a half-written Secret) keeps the old certificate.
    let reloads_failed = r#"mcp_edge_tls_certificate_reloads_total{result="failure"}"#;
    let before = metric(&edge, reloads_failed).await;
    replace_file(&live.cert, b"-----BEGIN CERTIFICATE-----\nnot base64\n");
    wait_metric(&edge, reloads_failed, before + 1.0).await;
    assert_eq!(
        presented(pki.roots(), addr(&edge), "localhost").await.0,
        old.der
    );
    // cert-manager's rotation: key and certificate replaced in place.
    replace_file(&live.key, &std::fs::read(&new.key).unwrap());
    replace_file(&live.cert, &std::fs::read(&new.cert).unwrap());
    let swapped = poll_until(PATIENCE, async || {
        presented(pki.roots(), addr(&edge), "localhost").await.0 == new.der
    })
    .await;
    assert!(swapped, "the new certificate was never served");
    let at_swap = ok.load(Ordering::Relaxed);
    wait_until(PATIENCE, "requests after the swap", async || {
        ok.load(Ordering::Relaxed) >= at_swap + 20
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.unwrap();
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0, "no request failed");
    assert!(ok.load(Ordering::Relaxed) >= 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_on_the_tls_port_gets_a_readable_400() {
    let pki = Pki::new();
    let cert = pki.issue(&["localhost"]);
    let mock = mock::Mock::start(mock::Behavior::Json).await;
    let edge = tls_edge(&[&cert], 0, &unchecked_pool_and_route(&[mock.addr], ""));
    let body = tools_list(1).to_string();
    let resp = modern_request(&client(), &edge.url(), &tools_list(1))
        .send()
        .await
        .expect("a plain-HTTP client reads an answer, not a reset");
    assert_eq!(resp.status(), 400);
    assert_eq!(resp.headers()["x-mcp-edge-error"], "tls_required");
    let text = resp.text().await.unwrap();
    assert!(text.contains("https://"), "{text}");
    // The same with a raw client that sends its whole request first.
    let mut s = TcpStream::connect(addr(&edge)).await.unwrap();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert_eq!(mock.requests(), 0, "nothing reached the upstream");
}

/// A TLS edge for `localhost` whose handshake and first head must be done within 1.5 s.
async fn short_deadline_edge() -> (Pki, mock::Mock, Edge) {
    let pki = Pki::new();
    let cert = pki.issue(&["localhost"]);
    let mock = mock::Mock::start(mock::Behavior::Json).await;
    let body = format!(
        "[timeouts]\nrequest_head_ms = 1500\n\n{}",
        unchecked_pool_and_route(&[mock.addr], "")
    );
    let edge = tls_edge(&[&cert], 0, &body);
    (pki, mock, edge)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_floods_and_slow_handshakes_do_not_starve_other_clients() {
    let (pki, mock, edge) = short_deadline_edge().await;
    let timeouts = r#"mcp_edge_tls_handshake_failures_total{reason="timeout"}"#;
    let before = metric(&edge, timeouts).await;
    // 300 connections: a third send nothing, a third the first bytes of a ClientHello, a
    // third a ClientHello dribbled a byte at a time; none completes.
    let hello_start: &[u8] = &[
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    let mut stalled = Vec::new();
    for i in 0..300 {
        let mut s = TcpStream::connect(addr(&edge)).await.unwrap();
        match i % 3 {
            0 => {}
            1 => s.write_all(hello_start).await.unwrap(),
            _ => s.write_all(&hello_start[..2]).await.unwrap(),
        }
        stalled.push(s);
    }
    let dribbler = tokio::spawn(async move {
        for s in stalled.iter_mut().skip(2).step_by(3) {
            let _ = s.write_all(&[0x03]).await;
        }
        stalled
    });
    // A real client is served meanwhile, promptly.
    let started = Instant::now();
    let c = pki.client(false);
    let url = https_url(&edge, "localhost");
    for i in 0..5 {
        let r = modern_request(&c, &url, &tools_list(i))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "five requests took {:?} beside the flood",
        started.elapsed()
    );
    // The stalled handshakes are closed at the deadline, each counted.
    let mut stalled = dribbler.await.unwrap();
    for s in stalled.iter_mut() {
        let mut buf = [0u8; 64];
        let closed = tokio::time::timeout(PATIENCE, async {
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "a stalled handshake was held past the deadline"
        );
    }
    wait_metric(&edge, timeouts, before + 300.0).await;
    assert_eq!(mock.requests(), 5);
}

/// A pool of one HTTPS SDK server presenting `server_cert`, with `tls` as its
/// `[pools.tls]` keys (the CA bundle is added).
fn https_pool(pki: &Pki, member: SocketAddr, tls: &str, health: &str) -> String {
    format!(
        "[[pools]]\nname = \"main\"\nmembers = [\"{member}\"]\n[pools.health]\n{health}\n[pools.tls]\nca_file = \"{}\"\n{tls}\n\n[[routes]]\npath = \"/mcp\"\npool = \"main\"\n",
        pki.ca_pem.display()
    )
}

fn https_server(cert: &Issued, instance: &str) -> common::peers::Peer {
    ts_server_with(
        "modern",
        instance,
        &[
            "--tls-cert",
            &cert.cert.display().to_string(),
            "--tls-key",
            &cert.key.display().to_string(),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_pools_verify_their_members() {
    let pki = Pki::new();
    let good = https_server(&pki.issue(&["127.0.0.1"]), "https-good");
    let wrong = https_server(&pki.issue(&["elsewhere.test"]), "https-wrong");
    let expired = https_server(&pki.issue_expired(&["127.0.0.1"]), "https-expired");

    // Verified, with health checks that speak MCP over TLS.
    let edge = start_edge(&https_pool(
        &pki,
        good.addr,
        "",
        "check = \"mcp\"\ninterval_ms = 200",
    ));
    let healthy = format!(
        "mcp_edge_health_checks_total{{pool=\"{}\",result=\"ok\"}}",
        edge.pool
    );
    wait_metric(&edge, &healthy, 1.0).await;
    let r = modern_request(&client(), &edge.url(), &tools_list(1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("echo"));

    // A certificate for another name, and an expired one: refused, counted, never used.
    for (peer, what) in [(&wrong, "wrong name"), (&expired, "expired")] {
        let edge = start_edge(&https_pool(&pki, peer.addr, "", "check = \"none\""));
        let failures = format!(
            "mcp_edge_upstream_tls_failures_total{{member=\"{}\",pool=\"{}\"}}",
            peer.addr, edge.pool
        );
        let r = modern_request(&client(), &edge.url(), &tools_list(2))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 502, "{what}");
        assert_eq!(r.headers()["x-mcp-edge-error"], "connect_failed", "{what}");
        wait_metric(&edge, &failures, 1.0).await;
        assert_eq!(peer.requests(), 0, "{what}: no request reached the member");
    }

    // `verify = false` is the operator's explicit choice.
    let edge = start_edge(&https_pool(
        &pki,
        wrong.addr,
        "verify = false",
        "check = \"none\"",
    ));
    let r = modern_request(&client(), &edge.url(), &tools_list(3))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // A pool found by DNS verifies that name (and sends it as SNI).
    let by_name = https_server(&pki.issue(&["localhost"]), "https-dns");
    let body = format!(
        "[[pools]]\nname = \"main\"\ndns = \"localhost:{}\"\n[pools.health]\ncheck = \"mcp\"\ninterval_ms = 200\n[pools.tls]\nca_file = \"{}\"\n\n[[routes]]\npath = \"/mcp\"\npool = \"main\"\n",
        by_name.addr.port(),
        pki.ca_pem.display()
    );
    let edge = start_edge(&body);
    let c = client();
    let ok = poll_until(PATIENCE, async || {
        let r = modern_request(&c, &edge.url(), &tools_list(4)).send().await;
        r.is_ok_and(|r| r.status() == 200)
    })
    .await;
    assert!(ok, "a DNS-named HTTPS pool serves requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_pools_present_a_client_certificate() {
    let pki = Pki::new();
    let plain = ts_server("modern", "mtls-behind");
    let (front, relayed) = mtls_front(&pki, &pki.issue(&["127.0.0.1"]), plain.addr).await;
    let client_cert = pki.issue_client("mcp-edge");
    // Without a client certificate the member refuses the handshake.
    let edge = start_edge(&https_pool(&pki, front, "", "check = \"none\""));
    let r = modern_request(&client(), &edge.url(), &tools_list(1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    assert_eq!(relayed.load(Ordering::SeqCst), 0);
    // With one it accepts.
    let tls = format!(
        "client_cert = \"{}\"\nclient_key = \"{}\"",
        client_cert.cert.display(),
        client_cert.key.display()
    );
    let edge = start_edge(&https_pool(&pki, front, &tls, "check = \"none\""));
    let r = modern_request(&client(), &edge.url(), &tools_list(2))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(relayed.load(Ordering::SeqCst) >= 1);
}

#[test]
fn bad_certificate_files_are_configuration_errors() {
    let pki = Pki::new();
    let a = pki.issue(&["a.test"]);
    let b = pki.issue(&["b.test"]);
    let text = |cert: &std::path::Path, key: &std::path::Path| {
        format!(
            "[[listeners]]\naddress = \"127.0.0.1:1\"\n[listeners.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n\n[[pools]]\nname = \"p\"\nmembers = [\"127.0.0.1:2\"]\n\n[[routes]]\npath = \"/mcp\"\npool = \"p\"\nversions = [\"2026-07-28\"]\n",
            cert.display(),
            key.display()
        )
    };
    let errs = mcp_edge::config::Config::parse(&text(&a.cert, &b.key)).unwrap_err();
    assert!(errs[0].contains("does not belong"), "{errs:?}");
    let missing = pki.dir.join("missing.pem");
    let errs = mcp_edge::config::Config::parse(&text(&missing, &a.key)).unwrap_err();
    assert!(
        errs[0].starts_with("listeners[0].tls.certificates"),
        "{errs:?}"
    );
    assert!(mcp_edge::config::Config::parse(&text(&a.cert, &a.key)).is_ok());
    // An empty SNI would turn verification off in Pingora's connector: refused.
    let pool = "[[listeners]]\naddress = \"127.0.0.1:1\"\n[[pools]]\nname = \"p\"\nmembers = [\"127.0.0.1:2\"]\n[pools.tls]\nsni = \"\"\n[[routes]]\npath = \"/mcp\"\npool = \"p\"\nversions = [\"2026-07-28\"]\n";
    let errs = mcp_edge::config::Config::parse(pool).unwrap_err();
    assert!(errs[0].starts_with("pools[0].tls.sni"), "{errs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_dribbled_after_the_handshake_is_cut_at_the_deadline() {
    let (pki, mock, edge) = short_deadline_edge().await;
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(pki.roots())
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr(&edge)).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    let started = Instant::now();
    tls.write_all(b"POST /mcp HTTP/1.1\r\nhost: localhost\r\n")
        .await
        .unwrap();
    // One header byte every 200 ms: each read is quick, the head never ends.
    let cut = tokio::time::timeout(PATIENCE, async {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if tls.write_all(b"x").await.is_err() || tls.flush().await.is_err() {
                return;
            }
            let mut buf = [0u8; 16];
            if let Ok(r) = tokio::time::timeout(Duration::from_millis(1), tls.read(&mut buf)).await
            {
                if matches!(r, Ok(0) | Err(_)) {
                    return;
                }
            }
        }
    })
    .await;
    assert!(cut.is_ok(), "the dribbled head was never cut");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "cut after {:?}",
        started.elapsed()
    );
    assert_eq!(mock.requests(), 0);
}

/// A TLS client of `edge` offering `alpn`.
async fn tls_client(
    pki: &Pki,
    edge: &Edge,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(pki.roots())
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr(edge)).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    connector.connect(name, tcp).await.unwrap()
}

/// Read until the edge closes the connection (within `PATIENCE`); what it sent.
async fn read_until_closed(tls: &mut tokio_rustls::client::TlsStream<TcpStream>) -> Vec<u8> {
    let mut all = Vec::new();
    let closed = tokio::time::timeout(PATIENCE, async {
        let mut buf = [0u8; 4096];
        loop {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => all.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "the edge held the connection past the deadline"
    );
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_silent_after_the_handshake_is_closed_at_the_deadline() {
    let (pki, mock, edge) = short_deadline_edge().await;
    let mut tls = tls_client(&pki, &edge, b"h2").await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let started = Instant::now();
    // Half of the HTTP/2 preface, then nothing.
    tls.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    read_until_closed(&mut tls).await;
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(mock.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_head_over_tls_gets_431_before_pingora_buffers_it() {
    let (pki, mock, edge) = short_deadline_edge().await;
    let mut tls = tls_client(&pki, &edge, b"http/1.1").await;
    // 40 KiB of one header with no end (the default limit is 32 KiB).
    tls.write_all(b"POST /mcp HTTP/1.1\r\nhost: localhost\r\nx-big: ")
        .await
        .unwrap();
    let _ = tls.write_all(&[b'a'; 40 * 1024]).await;
    let answer = String::from_utf8_lossy(&read_until_closed(&mut tls).await).to_string();
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    assert!(answer.contains("headers_too_large"), "{answer}");
    assert_eq!(mock.requests(), 0);
}
