//! A small HTTP/1.1 reader for the raw-TCP servers and clients of tests and examples: the mock
//! upstream (tests/common/mock.rs), the soak's members and the benchmark upstream include this
//! file with `#[path]`. Bounded: a head over `MAX_HEAD_BYTES` or a body over the caller's limit
//! is an error, never an allocation. Every reader is a plain future, so a caller puts a
//! deadline on it with `tokio::time::timeout`.
#![allow(dead_code)]

use std::io::{Error, ErrorKind, Result};

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

/// Request or status line plus headers; larger heads are refused.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// A chunk-size line or a trailer line longer than this is malformed.
const MAX_LINE_BYTES: usize = 1024;

/// A request or response head: the start line and header lines, each ending in CRLF, without
/// the blank line that ends the head.
#[derive(Clone, Debug)]
pub struct Head {
    pub text: String,
}

impl Head {
    /// Parse a head from its text (as [`read_head`] returns it, or cut from a whole message).
    pub fn parse(text: &str) -> Head {
        Head {
            text: text.to_string(),
        }
    }

    pub fn start_line(&self) -> &str {
        self.text.lines().next().unwrap_or("")
    }

    /// The request method (first word of the start line).
    pub fn method(&self) -> &str {
        self.start_line().split(' ').next().unwrap_or("")
    }

    /// The request target (second word of the start line).
    pub fn target(&self) -> &str {
        self.start_line().split(' ').nth(1).unwrap_or("")
    }

    /// The status of a response head.
    pub fn status(&self) -> Option<u16> {
        let line = self.start_line();
        line.starts_with("HTTP/")
            .then(|| line.split(' ').nth(1)?.parse().ok())
            .flatten()
    }

    /// Every value of header `name` (case-insensitive), in order, trimmed.
    pub fn headers<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.text
            .lines()
            .skip(1)
            .filter_map(move |line| field(line, name))
    }

    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.text.lines().skip(1).find_map(|line| field(line, name))
    }

    pub fn is_chunked(&self) -> bool {
        self.header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    }

    pub fn content_length(&self) -> Option<usize> {
        self.header("content-length").and_then(|v| v.parse().ok())
    }
}

/// The value of a header line if it is header `name`.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let (k, v) = line.split_once(':')?;
    k.trim().eq_ignore_ascii_case(name).then_some(v.trim())
}

/// Read one CRLF- (or LF-) terminated line of at most `max` bytes into `out`; 0 at EOF.
async fn read_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    out: &mut Vec<u8>,
    max: usize,
) -> Result<usize> {
    let n = (&mut *r).take(max as u64).read_until(b'\n', out).await?;
    if n > 0 && !out.ends_with(b"\n") {
        return Err(if n == max {
            Error::new(ErrorKind::InvalidData, format!("line over {max} bytes"))
        } else {
            Error::new(ErrorKind::UnexpectedEof, "connection closed mid-line")
        });
    }
    Ok(n)
}

/// Read a head up to its blank line. `None` when the peer closed before sending a byte.
pub async fn read_head<R: AsyncBufRead + Unpin>(r: &mut R) -> Result<Option<Head>> {
    let mut bytes = Vec::new();
    loop {
        let start = bytes.len();
        let left = MAX_HEAD_BYTES.saturating_sub(start);
        if left == 0 {
            return Err(Error::new(ErrorKind::InvalidData, "head too large"));
        }
        if read_line(r, &mut bytes, left).await? == 0 {
            return if start == 0 {
                Ok(None)
            } else {
                Err(Error::new(
                    ErrorKind::UnexpectedEof,
                    "connection closed mid-head",
                ))
            };
        }
        if matches!(&bytes[start..], b"\r\n" | b"\n") {
            bytes.truncate(start);
            return Ok(Some(Head {
                text: String::from_utf8_lossy(&bytes).into_owned(),
            }));
        }
    }
}

/// Read the body a request head announces (Content-Length or chunked; neither means none),
/// refusing more than `max` bytes.
pub async fn read_body<R: AsyncBufRead + Unpin>(
    r: &mut R,
    head: &Head,
    max: usize,
) -> Result<Vec<u8>> {
    let too_big = || Error::new(ErrorKind::InvalidData, format!("body over {max} bytes"));
    let mut body = Vec::new();
    if head.is_chunked() {
        loop {
            let mut line = Vec::new();
            read_line(r, &mut line, MAX_LINE_BYTES).await?;
            let text = String::from_utf8_lossy(&line);
            let size = text.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size, 16).map_err(|_| {
                Error::new(ErrorKind::InvalidData, format!("bad chunk size {text:?}"))
            })?;
            if size == 0 {
                break;
            }
            if body.len() + size > max {
                return Err(too_big());
            }
            let at = body.len();
            body.resize(at + size, 0);
            r.read_exact(&mut body[at..]).await?;
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf).await?;
            if &crlf != b"\r\n" {
                return Err(Error::new(
                    ErrorKind::InvalidData,
                    "chunk not followed by CRLF",
                ));
            }
        }
        // Trailers, up to the blank line.
        loop {
            let mut line = Vec::new();
            if read_line(r, &mut line, MAX_LINE_BYTES).await? == 0 || line.trim_ascii().is_empty() {
                break;
            }
        }
    } else if let Some(len) = head.content_length() {
        if len > max {
            return Err(too_big());
        }
        body.resize(len, 0);
        r.read_exact(&mut body).await?;
    }
    Ok(body)
}

/// Split a whole message (read to EOF) into its head and the bytes after the blank line.
pub fn split_message(bytes: &[u8]) -> Option<(Head, &[u8])> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&bytes[..end + 2]).into_owned();
    Some((Head { text: head }, &bytes[end + 4..]))
}
