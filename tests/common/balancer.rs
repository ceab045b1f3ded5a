//! A TCP balancer that sends each new connection to the next backend in turn: two edge
//! replicas behind it look like one URL to an SDK client, and the client's parallel
//! connections (a held SSE stream and its POSTs) land on different replicas.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};

pub struct Balancer {
    pub addr: SocketAddr,
    /// Connections sent to each backend.
    pub counts: Arc<Vec<AtomicUsize>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Balancer {
    pub async fn start(backends: Vec<SocketAddr>) -> Balancer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let counts: Arc<Vec<AtomicUsize>> =
            Arc::new(backends.iter().map(|_| AtomicUsize::new(0)).collect());
        let c = counts.clone();
        let task = tokio::spawn(async move {
            let mut next = 0usize;
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let i = next % backends.len();
                next += 1;
                c[i].fetch_add(1, Ordering::Relaxed);
                let backend = backends[i];
                tokio::spawn(async move {
                    if let Ok(mut upstream) = TcpStream::connect(backend).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
            }
        });
        Balancer { addr, counts, task }
    }

    pub fn count(&self, i: usize) -> usize {
        self.counts[i].load(Ordering::Relaxed)
    }
}
