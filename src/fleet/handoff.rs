//! Which replica holds a request's state, when replicas hand requests to each other.
//!
//! - State a token names (a stdio pool's legacy session) is its token's: the token names the
//!   replica that sealed it ([`Owner`]: its hand-off address and boot id, so a replica
//!   restarted at the same address is not taken for the one that held the state).
//! - State keyed by who calls (a `per_principal` stdio pool's process) is one replica's,
//!   chosen by rendezvous hashing over the live replicas ([`rendezvous`]): the choice moves
//!   only for the callers of a replica that leaves (or joins).

use std::net::SocketAddr;
use std::sync::LazyLock;

use ring::digest::{digest, SHA256};
use ring::rand::{SecureRandom, SystemRandom};

use super::Fleet;
use crate::session::Owner;

/// `[fleet] handoff_listen` and `advertise`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handoff {
    /// Where this replica takes requests other replicas hand it.
    pub listen: SocketAddr,
    /// Where the other replicas reach that listener (`POD_IP:port`).
    pub advertise: SocketAddr,
}

impl Handoff {
    /// This replica, as its tokens name it.
    pub fn owner(&self) -> Owner {
        started();
        Owner {
            addr: self.advertise.to_string(),
            boot: boot(),
        }
    }
}

/// When this process began to take hand-offs (seconds since the epoch): a forward signed
/// before it is refused (one captured before a restart at the same address, replayed).
pub fn started() -> u64 {
    static STARTED: LazyLock<u64> = LazyLock::new(crate::session::token::now_secs);
    *STARTED
}

/// This process's boot id: random, drawn once, so a replica started again at the same
/// address is another owner (its predecessor's state is gone with it).
pub fn boot() -> u64 {
    static BOOT: LazyLock<u64> = LazyLock::new(|| {
        let mut b = [0u8; 8];
        // Without system randomness the clock still tells two boots apart.
        if SystemRandom::new().fill(&mut b).is_err() {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            b = (nanos as u64).to_be_bytes();
        }
        u64::from_be_bytes(b)
    });
    *BOOT
}

/// Where a request for the state a token names goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose {
    /// This replica holds it.
    Here,
    /// Another live replica of the fleet does.
    There(SocketAddr),
    /// The replica that held it is gone (restarted, or no longer in the fleet).
    Gone,
    /// A replica this one has never known: too new to be resolved yet, perhaps (only with
    /// `dns`: a static list names every replica there is).
    Unknown(SocketAddr),
}

impl Fleet {
    /// Who holds the state of a token naming `owner`.
    pub fn whose(&self, owner: &Owner) -> Whose {
        let Some(this) = self.this() else {
            return Whose::Here;
        };
        if *owner == *this {
            return Whose::Here;
        }
        match owner.addr.parse::<SocketAddr>() {
            // Same address, another boot: this replica restarted; the state went with it.
            Ok(addr) if addr.to_string() == this.addr => Whose::Gone,
            // Only to a replica of this fleet: a token never names an address to connect to
            // that the fleet does not list.
            Ok(addr) if self.knows(addr) => Whose::There(addr),
            Ok(addr) if self.knew(addr) => Whose::Gone,
            Ok(addr) if matches!(self.settings.peers, super::Peers::Dns(_)) => Whose::Unknown(addr),
            _ => Whose::Gone,
        }
    }

    /// The replicas that keep what is keyed by `key` (a caller's binding), first choice
    /// first, when the first is not this one (`None`: this one keeps it). The others are
    /// where the request goes if the first refuses the connection (it is leaving, and the
    /// fleet has not seen it yet): what the fleet will choose once it has.
    pub fn keepers(&self, key: &[u8]) -> Option<Vec<SocketAddr>> {
        let this = self.settings.handoff.as_ref()?.advertise;
        let ranked = ranking(key, &self.live_replicas());
        (ranked.first() != Some(&this)).then_some(ranked)
    }
}

/// Highest random weight: the replica whose hash with `key` is highest. Every replica that
/// sees the same live set picks the same one; a replica leaving moves only its own keys.
pub fn rendezvous(key: &[u8], replicas: &[SocketAddr]) -> Option<SocketAddr> {
    ranking(key, replicas).first().copied()
}

/// `replicas` in the order rendezvous hashing prefers them for `key`.
pub fn ranking(key: &[u8], replicas: &[SocketAddr]) -> Vec<SocketAddr> {
    let mut weighed: Vec<(u64, SocketAddr)> =
        replicas.iter().map(|r| (weight(key, r), *r)).collect();
    weighed.sort_unstable_by(|a, b| b.cmp(a));
    weighed.into_iter().map(|(_, r)| r).collect()
}

fn weight(key: &[u8], replica: &SocketAddr) -> u64 {
    let mut input = Vec::with_capacity(key.len() + 48);
    input.extend_from_slice(key);
    input.push(0);
    input.extend_from_slice(replica.to_string().as_bytes());
    let d = digest(&SHA256, &input);
    let mut w = [0u8; 8];
    w.copy_from_slice(&d.as_ref()[..8]);
    u64::from_be_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{Peers, Settings};
    use std::time::Duration;

    #[test]
    fn a_token_leads_to_a_listed_replica_and_never_to_a_restarted_one() {
        let [a, b] = [replicas(2)[0], replicas(2)[1]];
        let fleet = Fleet::new(Settings {
            peers: Peers::Static(vec![a, b]),
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(100),
            handoff: Some(Handoff {
                listen: a,
                advertise: a,
            }),
        });
        let this = fleet.this().unwrap().clone();
        assert_eq!(fleet.whose(&this), Whose::Here);
        let owner = |addr: &str, boot| Owner {
            addr: addr.into(),
            boot,
        };
        assert_eq!(fleet.whose(&owner(&b.to_string(), 1)), Whose::There(b));
        assert_eq!(
            fleet.whose(&owner(&a.to_string(), this.boot ^ 1)),
            Whose::Gone
        );
        let new: SocketAddr = "127.0.0.9:7444".parse().unwrap();
        assert_eq!(
            fleet.whose(&owner(&new.to_string(), 1)),
            Whose::Gone,
            "a static list names every replica there is"
        );
        assert_eq!(fleet.whose(&owner("not an address", 1)), Whose::Gone);
        // Found by name: one never resolved here may be too new.
        let by_name = Fleet::new(Settings {
            peers: Peers::Dns("edge-peers.invalid:7444".into()),
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(100),
            handoff: Some(Handoff {
                listen: a,
                advertise: a,
            }),
        });
        assert_eq!(
            by_name.whose(&owner(&new.to_string(), 1)),
            Whose::Unknown(new)
        );
    }

    fn replicas(n: u8) -> Vec<SocketAddr> {
        (2..2 + n)
            .map(|i| SocketAddr::from(([127, 0, 0, i], 7444)))
            .collect()
    }

    #[test]
    fn rendezvous_moves_only_the_keys_of_a_replica_that_leaves() {
        let all = replicas(4);
        let keys: Vec<[u8; 16]> = (0..400u16)
            .map(|i| {
                let mut k = [0u8; 16];
                k[..2].copy_from_slice(&i.to_be_bytes());
                k
            })
            .collect();
        let before: Vec<SocketAddr> = keys.iter().map(|k| rendezvous(k, &all).unwrap()).collect();
        for r in &all {
            let owned = before.iter().filter(|o| *o == r).count();
            assert!((50..=150).contains(&owned), "{r}: {owned} of 400");
        }
        let gone = all[1];
        let rest: Vec<SocketAddr> = all.iter().copied().filter(|r| *r != gone).collect();
        for (k, was) in keys.iter().zip(&before) {
            let now = rendezvous(k, &rest).unwrap();
            if *was != gone {
                assert_eq!(now, *was, "a key of a replica that stayed moved");
            }
        }
        assert_eq!(rendezvous(&keys[0], &[]), None);
    }
}
