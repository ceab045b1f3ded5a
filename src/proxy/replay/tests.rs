use super::*;

fn replay() -> (Replay, oneshot::Receiver<Box<ServerSession>>) {
    let (tx, rx) = oneshot::channel();
    let (_switch, cutoff) = watch::channel(false);
    let second = Duration::from_secs(1);
    let replay = Replay {
        inner: Some(detached()),
        orphan: None,
        body: Stored::new(None),
        handback: Some(tx),
        cutoff,
        streaming: false,
        silence: Silence {
            head: second,
            gap: second,
            stream_idle: second,
        },
        head_seen: false,
        last_activity: None,
        timer: None,
        answered: false,
    };
    (replay, rx)
}

#[tokio::test]
async fn the_session_is_handed_back_once_and_the_replay_then_refuses_work() {
    let (mut replay, mut rx) = replay();
    replay.finish_custom().await.ok();
    assert!(rx.try_recv().is_ok(), "the real session came back");
    // A second hand-back has nothing to send, and nothing panics or reaches a session.
    replay.finish_custom().await.ok();
    assert!(replay.inner.is_none());
    assert_eq!(replay.req_header().uri.path(), "/");
    replay
        .req_header_mut()
        .set_uri(http::Uri::from_static("/changed"));
    assert_eq!(replay.req_header_mut().uri.path(), "/changed");
    assert!(replay
        .write_body(Bytes::from_static(b"x"), true)
        .await
        .is_err());
    assert!(replay.read_body_or_idle(false).await.is_err());
    assert!(replay.finish().await.is_err());
    assert_eq!(replay.body_bytes_sent(), 0);
    assert!(replay.client_addr().is_none());
}
