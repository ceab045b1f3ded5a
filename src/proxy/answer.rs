//! An answer the edge gives itself in a server's place (a bridged legacy message, a hidden
//! entry, the edge's metadata document), written by [`super::respond::answer`].

use bytes::Bytes;

#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    /// The body (empty: none).
    pub body: Bytes,
    /// `application/json` or `text/event-stream`.
    pub content_type: &'static str,
    /// `Mcp-Session-Id` to echo.
    pub session: Option<http::HeaderValue>,
    /// Readable by any origin's page (a public metadata document).
    pub public: bool,
}

impl Answer {
    pub fn json(status: u16, body: impl Into<Bytes>) -> Answer {
        Answer {
            status,
            body: body.into(),
            content_type: crate::mcp::media::JSON,
            session: None,
            public: false,
        }
    }

    /// An empty answer: `202 Accepted` for a notification, `200` for a `DELETE`.
    pub fn empty(status: u16) -> Answer {
        Answer::json(status, Bytes::new())
    }
}
