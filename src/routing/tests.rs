use super::balance::{Acquired, Kind, Policy, Scope, Slot, Want};
use super::outliers::Failure;
use super::*;

fn policy() -> HealthPolicy {
    HealthPolicy {
        check: CheckKind::None,
        interval: Duration::from_secs(5),
        timeout: Duration::from_secs(1),
        unhealthy_after: 2,
        healthy_after: 1,
        eject: Duration::from_secs(60),
        consecutive_failures: 3,
        max_eject: Duration::from_secs(300),
        max_ejection_percent: 50,
    }
}

fn pool(n: u16) -> Pool {
    let addrs = (0..n)
        .map(|i| SocketAddr::from(([127, 0, 0, 1], 9000 + i)))
        .collect();
    Pool::new("p".into(), Source::Static(addrs), policy())
}

fn limited(n: u16, policy: Policy, max_in_flight: u32, queue_depth: usize) -> Pool {
    let mut p = pool(n);
    p.balance = balance::Settings {
        policy,
        max_in_flight: Some(max_in_flight),
        queue_depth,
        queue_wait: Duration::from_secs(1),
        ..Default::default()
    };
    p
}

fn slot(a: Acquired) -> Slot {
    match a {
        Acquired::Slot(s) => s,
        _ => panic!("expected a slot"),
    }
}

fn take(p: &Pool, tried: &[Arc<Member>]) -> Slot {
    slot(p.acquire(Want::Any(tried), Kind::Request, 1))
}

fn port(a: Acquired) -> u16 {
    slot(a).member().addr.port()
}

fn any(p: &Pool) -> Acquired {
    p.acquire(Want::Any(&[]), Kind::Request, 1)
}

#[test]
fn round_robin_visits_every_member() {
    let p = pool(3);
    let picks: Vec<_> = (0..6).map(|_| port(any(&p))).collect();
    assert_eq!(picks, vec![9000, 9001, 9002, 9000, 9001, 9002]);
}

#[test]
fn skips_tried_and_unhealthy_members() {
    let p = pool(3);
    let m = p.members();
    assert_eq!(
        port(p.acquire(Want::Any(&[m[0].clone()]), Kind::Request, 1)),
        9001
    );
    assert!(matches!(
        p.acquire(Want::Any(&m), Kind::Request, 1),
        Acquired::AllTried
    ));
    m[1].record_connect_failure(Duration::from_secs(60));
    for _ in 0..4 {
        assert_ne!(port(any(&p)), 9001, "ejected member picked");
    }
    m[0].record_check(false, &policy());
    assert!(m[0].is_healthy(), "one failed check is not enough");
    m[0].record_check(false, &policy());
    m[2].record_check(false, &policy());
    m[2].record_check(false, &policy());
    assert!(matches!(any(&p), Acquired::NoneHealthy));
    m[2].record_check(true, &policy());
    assert_eq!(port(any(&p)), 9002, "recovered");
    assert!(matches!(any(&pool(0)), Acquired::NoneHealthy));
}

#[test]
fn discovery_keeps_health_of_members_that_stay() {
    let p = pool(2);
    let m0 = p.members()[0].clone();
    m0.record_connect_failure(Duration::from_secs(60));
    let a = |port| SocketAddr::from(([127, 0, 0, 1], port));
    assert!(p.set_members(&[a(9000), a(9005)]));
    assert!(!p.set_members(&[a(9005), a(9000)]), "same set, other order");
    assert!(Arc::ptr_eq(&p.find("127.0.0.1:9000").unwrap(), &m0));
    assert!(p.find("127.0.0.1:9001").is_none(), "left the pool");
    assert!(!p.find("127.0.0.1:9000").unwrap().is_healthy());
}

#[test]
fn least_request_takes_the_least_loaded_and_slots_give_back() {
    let mut p = pool(3);
    p.balance.policy = Policy::LeastRequest;
    // Load 9000 with two, 9001 with one: the next goes to 9002, then 9001 or 9002.
    let m = p.members();
    let held: Vec<Slot> = [0, 0, 1]
        .iter()
        .map(|&i| slot(p.acquire(Want::Pinned(&m[i]), Kind::Request, 1)))
        .collect();
    assert_eq!(m[0].load.held(Kind::Request), 2);
    assert_eq!(port(any(&p)), 9002);
    let s = take(&p, &[]);
    assert_eq!(s.member().addr.port(), 9002, "still the least loaded");
    drop(held);
    assert_eq!(m[0].load.held(Kind::Request), 0, "slots gave back");
    assert_eq!(m[2].load.held(Kind::Request), 1);
    // Streams are counted apart.
    let _stream = slot(p.acquire(Want::Pinned(&m[1]), Kind::Stream, 1));
    assert_eq!(m[1].load.held(Kind::Request), 0);
    assert_eq!(m[1].load.held(Kind::Stream), 1);
}

#[test]
fn weights_share_the_turns() {
    let mut p = pool(2);
    p.set_weights(vec![(SocketAddr::from(([127, 0, 0, 1], 9000)), 3)]);
    let mut first = 0;
    for _ in 0..4000 {
        if port(any(&p)) == 9000 {
            first += 1;
        }
    }
    // 3:1 by weight, spread out (smooth weighted round-robin).
    assert_eq!(first, 3000);
}

#[tokio::test]
async fn a_full_pool_queues_in_order_and_passes_room_on() {
    let p = limited(2, Policy::LeastRequest, 1, 2);
    let a = take(&p, &[]);
    let b = take(&p, &[]);
    let Acquired::Queued(mut first) = any(&p) else {
        panic!("expected a place in the queue");
    };
    let Acquired::Queued(mut second) = any(&p) else {
        panic!("expected a place in the queue");
    };
    assert!(matches!(any(&p), Acquired::QueueFull), "depth 2");
    assert_eq!(p.queued(), 2);
    let freed = a.member().addr;
    drop(a);
    let got = first
        .granted()
        .await
        .expect("the first waiter gets the room");
    assert_eq!(got.member().addr, freed);
    assert_eq!(
        got.member().load.held(Kind::Request),
        1,
        "never more than one"
    );
    // A waiter that leaves is out of the queue; its room goes on when it had some.
    drop(b);
    drop(second.granted().await);
    assert_eq!(p.queued(), 0);
    let members = p.members();
    let total: u32 = members.iter().map(|m| m.load.held(Kind::Request)).sum();
    assert_eq!(total, 1, "only `got` holds room");
}

#[tokio::test]
async fn a_ticket_dropped_leaves_the_queue_and_room_goes_to_the_next() {
    let p = limited(1, Policy::RoundRobin, 1, 4);
    let held = take(&p, &[]);
    let Acquired::Queued(gone) = any(&p) else {
        panic!("queued");
    };
    let Acquired::Queued(mut next) = any(&p) else {
        panic!("queued");
    };
    drop(gone);
    assert_eq!(p.queued(), 1);
    drop(held);
    let got = next
        .granted()
        .await
        .expect("room passed to the next waiter");
    assert_eq!(got.member().load.held(Kind::Request), 1);
    drop(got);
    assert_eq!(p.members()[0].load.held(Kind::Request), 0);
}

#[tokio::test]
async fn a_pinned_request_waits_for_its_member() {
    let p = limited(2, Policy::RoundRobin, 1, 4);
    let m = p.members();
    let on_first = slot(p.acquire(Want::Pinned(&m[0]), Kind::Request, 1));
    let Acquired::Queued(mut pinned) = p.acquire(Want::Pinned(&m[0]), Kind::Request, 1) else {
        panic!("the member is full");
    };
    // Room on the other member is not for it.
    let other = take(&p, &[]);
    assert_eq!(other.member().addr, m[1].addr);
    drop(other);
    assert_eq!(p.queued(), 1);
    drop(on_first);
    let got = pinned.granted().await.expect("its member had room again");
    assert!(Arc::ptr_eq(got.member(), &m[0]));
}

#[test]
fn a_fleet_wide_limit_is_shared_by_the_live_replicas() {
    let mut p = limited(1, Policy::RoundRobin, 6, 0);
    p.balance.scope = Scope::Fleet;
    assert_eq!(p.balance.cap(Kind::Request, 3), Some(2));
    assert_eq!(p.balance.cap(Kind::Request, 10), Some(1), "never zero");
    let _a = slot(p.acquire(Want::Any(&[]), Kind::Request, 3));
    let _b = slot(p.acquire(Want::Any(&[]), Kind::Request, 3));
    assert!(matches!(
        p.acquire(Want::Any(&[]), Kind::Request, 3),
        Acquired::QueueFull
    ));
}

#[test]
fn consecutive_failures_eject_for_longer_each_time_within_the_percent() {
    let p = pool(4);
    let m = p.members();
    assert!(p.record_failure(&m[0], Failure::ServerError).is_none());
    p.record_success(&m[0]);
    assert!(p.record_failure(&m[0], Failure::ServerError).is_none());
    assert!(p.record_failure(&m[0], Failure::Timeout).is_none());
    let first = p.record_failure(&m[0], Failure::ServerError);
    assert_eq!(first, Some(Duration::from_secs(60)), "three in a row");
    assert!(!m[0].is_healthy());
    // The second ejection of the same member is twice as long.
    m[0].ejected_until_ms.store(0, Ordering::Relaxed);
    for _ in 0..2 {
        assert!(p.record_failure(&m[0], Failure::ServerError).is_none());
    }
    assert_eq!(
        p.record_failure(&m[0], Failure::ServerError),
        Some(Duration::from_secs(120))
    );
    // 50 % of four: a second member may go, a third may not.
    for _ in 0..3 {
        p.record_failure(&m[1], Failure::Connect);
    }
    assert!(!m[1].is_healthy());
    for _ in 0..5 {
        assert!(p.record_failure(&m[2], Failure::Connect).is_none());
    }
    assert!(m[2].is_healthy(), "kept: half the pool is out");
}

#[test]
fn only_a_strict_check_ends_an_outlier_ejection_early() {
    let p = pool(2);
    let m = p.members();
    for _ in 0..3 {
        p.record_failure(&m[0], Failure::ServerError);
    }
    assert!(!m[0].is_healthy());
    m[0].record_check(true, &policy());
    assert!(
        !m[0].is_healthy(),
        "the default check takes a 500 as an answer"
    );
    let mut strict = policy();
    strict.check = CheckKind::Mcp {
        path: "/mcp".into(),
        strict: true,
    };
    m[0].record_check(true, &strict);
    assert!(m[0].is_healthy());
    // A refused connection's ejection ends on any good check.
    m[1].record_connect_failure(Duration::from_secs(60));
    m[1].record_check(true, &policy());
    assert!(m[1].is_healthy());
}

#[test]
fn slow_start_gives_a_returning_member_a_small_share() {
    let mut p = pool(2);
    p.balance.slow_start = Duration::from_secs(100);
    let m = p.members();
    // 9000 has ramped fully, 9001 just came back.
    m[0].load.ramp_from_ms.store(0, Ordering::Relaxed);
    m[1].load.ramp_from_ms.store(now_ms(), Ordering::Relaxed);
    let new = (0..2000).filter(|_| port(any(&p)) == 9001).count();
    assert!(new < 300, "{new} of 2000 to a member at 10 % of its share");
}

#[test]
fn an_ejected_members_turns_go_to_all_the_others() {
    let p = pool(3);
    p.members()[0].record_connect_failure(Duration::from_secs(60));
    let mut counts = [0; 3];
    for _ in 0..300 {
        counts[usize::from(port(any(&p)) - 9000)] += 1;
    }
    assert_eq!(counts, [0, 150, 150], "not all to the member after it");
}

#[test]
fn a_reload_with_another_member_list_keeps_the_members_that_stay() {
    let old = pool(2);
    let stays = old.members()[1].clone();
    let _held = slot(old.acquire(Want::Pinned(&stays), Kind::Request, 1));
    stays.record_connect_failure(Duration::from_secs(60));
    let addrs = [9001, 9002].map(|p| SocketAddr::from(([127, 0, 0, 1], p)));
    let mut new = Pool::new("p".into(), Source::Static(addrs.to_vec()), policy());
    new.set_weights(vec![(addrs[0], 4)]);
    new.inherit(&old);
    let members = new.members();
    assert!(
        Arc::ptr_eq(&members[0], &stays),
        "the same member, its state with it"
    );
    assert_eq!(members[0].load.held(Kind::Request), 1);
    assert!(!members[0].is_healthy(), "still ejected");
    assert_eq!(
        members[0].load.weight.load(Ordering::Relaxed),
        4,
        "the new weight"
    );
    assert_eq!(members[1].addr.port(), 9002);
}

#[test]
fn least_request_among_equals_goes_in_turn_by_share() {
    let mut p = pool(3);
    p.balance.policy = Policy::LeastRequest;
    p.members()[0].record_connect_failure(Duration::from_secs(60));
    let mut counts = [0; 3];
    for _ in 0..300 {
        counts[usize::from(port(any(&p)) - 9000)] += 1;
    }
    assert_eq!(
        counts,
        [0, 150, 150],
        "a skipped member's turns go to all the others"
    );
    // Weights 2:1, one request at a time: 2:1, not all to the heavier.
    let mut w = pool(2);
    w.balance.policy = Policy::LeastRequest;
    w.set_weights(vec![(SocketAddr::from(([127, 0, 0, 1], 9000)), 2)]);
    let heavier = (0..3000).filter(|_| port(any(&w)) == 9000).count();
    assert_eq!(heavier, 2000);
}

#[test]
fn outlier_ejection_never_takes_the_last_healthy_member() {
    let p = pool(2);
    let m = p.members();
    m[1].record_check(false, &policy());
    m[1].record_check(false, &policy());
    assert!(!m[1].is_healthy(), "down by its checks");
    for _ in 0..6 {
        assert!(p.record_failure(&m[0], Failure::ServerError).is_none());
    }
    assert!(m[0].is_healthy(), "the last healthy member stays");
}

#[test]
fn a_refused_connection_does_not_shorten_an_outlier_ejection() {
    let p = pool(3);
    let m = p.members();
    for _ in 0..3 {
        p.record_failure(&m[0], Failure::ServerError);
    }
    m[0].record_connect_failure(Duration::from_millis(1));
    m[0].record_check(true, &policy());
    assert!(!m[0].is_healthy(), "still out: the outlier ejection stands");
}
