//! Reading a POST body whole, before the upstream is chosen: `Content-Type` must be JSON,
//! `Expect: 100-continue` is answered here, and at most `limits.max_body_bytes` are read,
//! with `timeouts.request_body_ms` as the longest gap between reads.

use bytes::{Bytes, BytesMut};
use pingora::http::RequestHeader;
use pingora::proxy::Session;
use pingora::ErrorType;

use super::ctx::Ctx;
use crate::error::EdgeError;

pub async fn read(session: &mut Session, ctx: &mut Ctx) -> Result<Bytes, EdgeError> {
    check_content_type(session.req_header())?;
    if expects_continue(session.req_header()) {
        ctx.answered_continue = true;
        session
            .downstream_session
            .write_continue_response()
            .await
            .map_err(|e| EdgeError::ClientError {
                detail: e.to_string(),
            })?;
    }
    let timeouts = ctx.snapshot.timeouts;
    session
        .downstream_session
        .set_read_timeout(Some(timeouts.request_body));
    read_all(session, ctx.snapshot.limits.max_body_bytes).await
}

/// A GET, DELETE or OPTIONS that came with a body: read it (within the same limits) and
/// drop it. It is never forwarded (`upstream_request_filter` drops its framing headers), and
/// reading it keeps the client connection in step for its next request.
pub async fn discard(session: &mut Session, ctx: &mut Ctx) -> Result<(), EdgeError> {
    if session.downstream_session.is_body_empty() {
        return Ok(());
    }
    let timeouts = ctx.snapshot.timeouts;
    session
        .downstream_session
        .set_read_timeout(Some(timeouts.request_body));
    read_all(session, ctx.snapshot.limits.max_body_bytes).await?;
    Ok(())
}

/// Read the whole request body, refusing more than `limit` bytes.
async fn read_all(session: &mut Session, limit: usize) -> Result<Bytes, EdgeError> {
    let declared = session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(EdgeError::BodyTooLarge { limit });
    }
    let mut buf = BytesMut::with_capacity(declared.unwrap_or(0).min(limit));
    loop {
        match session.downstream_session.read_request_body().await {
            Ok(Some(chunk)) => {
                if buf.len() + chunk.len() > limit {
                    return Err(EdgeError::BodyTooLarge { limit });
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(buf.freeze()),
            Err(e) if e.etype() == &ErrorType::ReadTimedout => return Err(EdgeError::BodyTimeout),
            Err(e) => {
                return Err(EdgeError::ClientError {
                    detail: e.to_string(),
                })
            }
        }
    }
}

fn check_content_type(req: &RequestHeader) -> Result<(), EdgeError> {
    let ct = req
        .headers
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.as_bytes())
        .unwrap_or(b"");
    let essence = ct.split(|&c| c == b';').next().unwrap_or(b"");
    if essence
        .trim_ascii()
        .eq_ignore_ascii_case(b"application/json")
    {
        Ok(())
    } else {
        Err(EdgeError::UnsupportedMediaType {
            content_type: String::from_utf8_lossy(ct).chars().take(100).collect(),
        })
    }
}

fn expects_continue(req: &RequestHeader) -> bool {
    req.headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}
