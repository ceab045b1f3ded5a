//! Choosing an upstream member: round-robin over a pool, skipping members that already
//! failed to connect for this request.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One upstream MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub addr: SocketAddr,
    /// Stable label for metrics and logs (`ip:port`).
    pub label: String,
}

impl Member {
    pub fn new(addr: SocketAddr) -> Self {
        Member {
            addr,
            label: addr.to_string(),
        }
    }
}

/// A named set of members with a shared round-robin cursor.
#[derive(Debug)]
pub struct Pool {
    pub name: String,
    pub members: Vec<Member>,
    next: AtomicUsize,
}

impl Pool {
    pub fn new(name: String, members: Vec<Member>) -> Self {
        Pool {
            name,
            members,
            next: AtomicUsize::new(0),
        }
    }

    /// The next member in round-robin order that is not in `skip` (indices of members this
    /// request already tried), or `None` when every member was tried.
    pub fn pick(&self, skip: &[usize]) -> Option<usize> {
        let n = self.members.len();
        if n == 0 {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n).map(|k| (start + k) % n).find(|i| !skip.contains(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: u16) -> Pool {
        let members = (0..n)
            .map(|i| Member::new(SocketAddr::from(([127, 0, 0, 1], 9000 + i))))
            .collect();
        Pool::new("p".into(), members)
    }

    #[test]
    fn round_robin_visits_every_member() {
        let p = pool(3);
        let picks: Vec<_> = (0..6).map(|_| p.pick(&[]).unwrap()).collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn skips_tried_members_and_ends() {
        let p = pool(3);
        assert_eq!(p.pick(&[0]), Some(1));
        assert_eq!(p.pick(&[0, 1, 2]), None);
        assert_eq!(pool(0).pick(&[]), None);
    }
}
