//! Why Redis does not decide: the cause of an episode of local decisions, named when the
//! episode begins and again each time it changes, counted by cause
//! (`mcp_edge_rate_limit_redis_failures_total{cause}`).
//!
//! A decision that failed says why (what Redis or the connection answered). One that missed
//! its deadline does not: the connection may be reconnecting behind it (a password that
//! changed fails every reconnect, and redis-rs retries with backoff, well past a deadline of
//! milliseconds), or Redis may be slow. So a missed deadline is looked into: a new connection
//! and a `PING`, off the request path, one look at a time, whose failure names the cause
//! (refused, authentication …); a `PING` answered names nothing new.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{ErrorKind, RedisError};

use crate::metrics::{self, RedisCause as Cause};

/// How long a look may take (connecting, then the `PING`).
const LOOK_TIMEOUT: Duration = Duration::from_secs(1);

/// What Redis's error says of its cause.
pub fn classify(e: &RedisError) -> Cause {
    let code = e.code().unwrap_or_default();
    let text = e.to_string();
    let said = |word: &str| code == word || text.contains(word);
    if e.kind() == ErrorKind::AuthenticationFailed
        || said("NOAUTH")
        || said("WRONGPASS")
        || said("NOPERM")
    {
        Cause::Authentication
    } else if said("OOM") {
        Cause::Oom
    } else if e.is_timeout() {
        Cause::Timeout
    } else if e.is_connection_refusal() {
        Cause::Refused
    } else if e.is_connection_dropped() || e.is_io_error() {
        Cause::Reset
    } else {
        Cause::Other
    }
}

/// The causes of the episode on now.
pub struct Causes {
    /// The store's URL, without its password.
    url: String,
    /// The cause named last, and Redis's words for it; `None` outside an episode.
    named: Mutex<Option<(Cause, String)>>,
    /// A look is under way.
    looking: AtomicBool,
}

impl Causes {
    pub fn new(url: String) -> Arc<Causes> {
        Arc::new(Causes {
            url,
            named: Mutex::new(None),
            looking: AtomicBool::new(false),
        })
    }

    /// An episode begins with `cause` (its line is the caller's).
    pub fn began(&self, cause: Cause, why: &str) {
        metrics::rate_redis_failure(cause);
        *self.lock() = Some((cause, why.to_string()));
    }

    /// `cause` seen while an episode lasts: named when it is not the cause named last.
    pub fn seen(&self, cause: Cause, why: &str) {
        let mut named = self.lock();
        let Some((last, words)) = named.as_mut() else {
            // The episode is over.
            return;
        };
        metrics::rate_redis_failure(cause);
        if *last == cause {
            return;
        }
        log::warn!(
            "rate limits: Redis at {} still does not decide, now {why} (cause: {})",
            self.url,
            metrics::label(cause)
        );
        *last = cause;
        *words = why.to_string();
    }

    /// The episode is over: its last cause, in words (`cause: words`).
    pub fn ended(&self) -> String {
        match self.lock().take() {
            Some((cause, words)) => format!("{words}; cause: {}", metrics::label(cause)),
            None => String::new(),
        }
    }

    /// A decision missed its deadline: look into why, with a new connection of `client`'s
    /// on `rt` (one look at a time; what it finds is [`Causes::seen`]).
    pub fn look(self: &Arc<Self>, client: &redis::Client, rt: &tokio::runtime::Runtime) {
        if self.looking.swap(true, Ordering::Relaxed) {
            return;
        }
        let (causes, client) = (self.clone(), client.clone());
        rt.spawn(async move {
            let found = look(&client).await;
            if let Some((cause, why)) = found {
                causes.seen(cause, &why);
            }
            causes.looking.store(false, Ordering::Relaxed);
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Cause, String)>> {
        self.named.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A new connection and a `PING`: what failed, if anything did.
async fn look(client: &redis::Client) -> Option<(Cause, String)> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(LOOK_TIMEOUT))
        .set_response_timeout(Some(LOOK_TIMEOUT));
    let tried = client
        .get_multiplexed_async_connection_with_config(&config)
        .await;
    let pong: redis::RedisResult<String> = match tried {
        Ok(mut c) => redis::cmd("PING").query_async(&mut c).await,
        Err(e) => Err(e),
    };
    let e = pong.err()?;
    Some((classify(&e), e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_errors_are_named_by_cause() {
        let server = |text: &str| {
            let (code, detail) = text.split_once(' ').unwrap_or((text, ""));
            RedisError::from((ErrorKind::Extension, "server", format!("{code} {detail}")))
        };
        let io = |kind| RedisError::from(std::io::Error::from(kind));
        assert_eq!(
            classify(&server("NOAUTH Authentication required.")),
            Cause::Authentication
        );
        assert_eq!(
            classify(&server("WRONGPASS invalid username-password pair")),
            Cause::Authentication
        );
        assert_eq!(
            classify(&RedisError::from((
                ErrorKind::AuthenticationFailed,
                "Password authentication failed"
            ))),
            Cause::Authentication
        );
        assert_eq!(
            classify(&server(
                "OOM command not allowed when used memory > 'maxmemory'."
            )),
            Cause::Oom
        );
        assert_eq!(classify(&io(std::io::ErrorKind::TimedOut)), Cause::Timeout);
        assert_eq!(
            classify(&io(std::io::ErrorKind::ConnectionRefused)),
            Cause::Refused
        );
        assert_eq!(classify(&io(std::io::ErrorKind::BrokenPipe)), Cause::Reset);
        assert_eq!(
            classify(&io(std::io::ErrorKind::ConnectionReset)),
            Cause::Reset
        );
        assert_eq!(
            classify(&RedisError::from((ErrorKind::Client, "odd"))),
            Cause::Other
        );
    }

    #[test]
    fn a_cause_is_named_once_per_change_and_only_during_an_episode() {
        let causes = Causes::new("redis://…@h:6379".into());
        causes.seen(Cause::Reset, "before");
        assert_eq!(causes.ended(), "", "no episode, nothing named");
        causes.began(Cause::Reset, "broken pipe");
        causes.seen(Cause::Authentication, "WRONGPASS");
        causes.seen(Cause::Authentication, "WRONGPASS again");
        assert_eq!(causes.ended(), "WRONGPASS; cause: authentication");
        assert_eq!(causes.ended(), "");
    }
}
