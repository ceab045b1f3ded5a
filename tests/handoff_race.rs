//! A request racing its owner's death: three edge processes (`[fleet]` with `handoff_listen`,
//! on 127.0.0.2–127.0.0.4) with a stdio pool of the official TypeScript SDK server, one
//! session held by the third. The others reach its hand-off listener through a relay
//! (127.0.0.5) that can die the way a host does: new connections refused, the connections
//! it had kept open with no FIN, reset by the first bytes sent on them. A replica whose
//! pooled connection to the owner died that way hands the request on again, on a new
//! connection, with the same signature: the client gets the 404 of a session gone, never a
//! 502 for a connection that was dead before the request was written.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::edge_process::{spawn_at, Proc};
use common::peers::dir;
use common::*;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const IPS: [[u8; 4]; 3] = [[127, 0, 0, 2], [127, 0, 0, 3], [127, 0, 0, 4]];
const RELAY_IP: [u8; 4] = [127, 0, 0, 5];

/// A TCP relay to `to` that can die: from then on nothing more is accepted, the upstream's
/// close is not passed on, and the first bytes a client sends get a reset.
struct Relay {
    addr: SocketAddr,
    dead: Arc<AtomicBool>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(to: SocketAddr) -> Relay {
        let listener = TcpListener::bind((IpAddr::from(RELAY_IP), 0))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let dead = Arc::new(AtomicBool::new(false));
        let flag = dead.clone();
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, to, flag.clone()));
            }
        });
        Relay {
            addr,
            dead,
            accepting,
        }
    }

    /// Dead as a host that vanished: call before its upstream goes.
    async fn die(self) {
        self.dead.store(true, Ordering::SeqCst);
        self.accepting.abort();
        // The listener is dropped with the task: connections are refused from now on.
        let _ = self.accepting.await;
    }
}

async fn relay(mut client: TcpStream, to: SocketAddr, dead: Arc<AtomicBool>) {
    let Ok(mut upstream) = TcpStream::connect(to).await else {
        return;
    };
    let (mut a, mut b) = ([0u8; 16384], [0u8; 16384]);
    let mut upstream_open = true;
    loop {
        tokio::select! {
            n = client.read(&mut a) => match n {
                Ok(n) if n > 0 && dead.load(Ordering::SeqCst) => {
                    // A zero linger resets at once on drop (it never blocks).
                    #[allow(deprecated)]
                    let _ = client.set_linger(Some(std::time::Duration::ZERO));
                    return;
                }
                Ok(n) if n > 0 && upstream_open => {
                    if upstream.write_all(&a[..n]).await.is_err() {
                        return;
                    }
                }
                _ => return,
            },
            n = upstream.read(&mut b), if upstream_open => match n {
                Ok(n) if n > 0 => {
                    if client.write_all(&b[..n]).await.is_err() {
                        return;
                    }
                }
                // The owner went: a dead host sends no FIN; otherwise close as it did.
                _ if dead.load(Ordering::SeqCst) => upstream_open = false,
                _ => return,
            },
        }
    }
}

/// The `i`th replica's configuration: its hand-off listener, and the addresses the fleet
/// reaches each replica's at (`advertised`).
fn config(i: usize, ports: &[(u16, u16, u16)], advertised: &[SocketAddr], ring: &str) -> String {
    let ip = IpAddr::from(IPS[i]);
    let (port, handoff, metrics) = ports[i];
    let peers: Vec<String> = advertised.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "[server]\nthreads = 2\n\n[[listeners]]\naddress = \"{ip}:{port}\"\n\n\
         [metrics]\naddress = \"{ip}:{metrics}\"\n\n[sessions]\nkeys_file = \"{ring}\"\n\n\
         [fleet]\npeers = [{}]\nhandoff_listen = \"{ip}:{handoff}\"\nadvertise = \"{}\"\n\
         interval_ms = 60000\ntimeout_ms = 500\n\n\
         [[pools]]\nname = \"sess\"\ncommand = [\"node\", \"{}\", \"--mode\", \"stdio\", \"--instance\", \"sess\"]\n\
         isolation = \"per_session\"\n\n[[routes]]\npath = \"/sess\"\npool = \"sess\"\n",
        peers.join(", "),
        advertised[i],
        dir().join("ts-server.mjs").display()
    )
}

struct Replica {
    proc: Proc,
    ip: IpAddr,
    port: u16,
    metrics: u16,
}

impl Replica {
    fn url(&self) -> String {
        format!("http://{}:{}/sess", self.ip, self.port)
    }
}

/// Three replicas, the third reached through a relay; each ready and seeing three live.
async fn start() -> (Vec<Replica>, Relay) {
    let ring = key_file(&format!("1:{KEY_A}"));
    let ports: Vec<(u16, u16, u16)> = IPS
        .iter()
        .map(|_| (free_port(), free_port(), free_port()))
        .collect();
    let direct = |i: usize| SocketAddr::new(IpAddr::from(IPS[i]), ports[i].1);
    let relay = Relay::start(direct(2)).await;
    let advertised = [direct(0), direct(1), relay.addr];
    let mut replicas = Vec::new();
    for (i, ip) in IPS.iter().enumerate() {
        let path = std::env::temp_dir().join(format!(
            "mcp-edge-handoff-race-{}-{}.toml",
            std::process::id(),
            ports[i].0
        ));
        std::fs::write(&path, config(i, &ports, &advertised, &ring)).unwrap();
        let ip = IpAddr::from(*ip);
        let proc = spawn_at(&path, SocketAddr::new(ip, ports[i].0), &[]);
        let (port, _, metrics) = ports[i];
        replicas.push(Replica {
            proc,
            ip,
            port,
            metrics,
        });
    }
    for r in &replicas {
        let url = format!("http://{}:{}/metrics", r.ip, r.metrics);
        wait_until(PATIENCE, "every replica sees three live", async || {
            let Ok(r) = client().get(&url).send().await else {
                return false;
            };
            let text = r.text().await.unwrap_or_default();
            text.contains("mcp_edge_fleet_replicas{state=\"live\"} 3")
        })
        .await;
    }
    (replicas, relay)
}

/// A legacy request's answer: its status, session header and first message.
async fn send(url: &str, token: Option<&str>, body: &Value) -> (u16, Option<String>, Value) {
    let r = legacy_request(&client(), url, token, body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let session = r
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let text = r.text().await.unwrap();
    let message = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .map_or_else(|| serde_json::from_str(&text), serde_json::from_str)
        .unwrap_or_else(|_| json!({ "raw": text }));
    (status, session, message)
}

fn note(id: u64, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "note", "arguments": {"text": text}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_racing_its_owners_death_gets_404_never_502() {
    let (mut replicas, relay) = start().await;
    // A session held by the third replica; a call through the first goes to it, and leaves
    // an idle pooled connection behind.
    let owner = &replicas[2];
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "race", "version": "1"}}});
    let (status, token, v) = send(&owner.url(), None, &init).await;
    assert_eq!(status, 200, "{v}");
    let token = token.expect("a session token");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, _) = send(&owner.url(), Some(&token), &initialized).await;
    assert_eq!(status, 202);
    let (status, _, v) = send(&replicas[0].url(), Some(&token), &note(1, "a")).await;
    assert_eq!(status, 200, "{v}");

    // The owner dies as a host does, before the fleet looks again (once a minute).
    relay.die().await;
    let mut gone = replicas.remove(2);
    gone.proc.child.kill().unwrap();
    gone.proc.child.wait().unwrap();
    let (status, _, v) = send(&replicas[0].url(), Some(&token), &note(2, "b")).await;
    assert_eq!(
        status,
        404,
        "the session is gone, not a 502 for a dead connection: {v}\n{}",
        replicas[0].proc.log_text()
    );
    assert_eq!(v["error"]["code"], -32001, "{v}");
    // Sent once more on a new connection, which the dead owner's address refused.
    let metrics = format!("http://{}:{}/metrics", replicas[0].ip, replicas[0].metrics);
    let text = client()
        .get(&metrics)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("mcp_edge_handoffs_total{outcome=\"unreachable\"} 1"),
        "{text}"
    );
}
