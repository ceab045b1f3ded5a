//! Giving bytes back to a stream before Pingora reads it.
//!
//! The edge reads each connection's first request head itself (`connections.rs`), then hands
//! the bytes back. Pingora's plain TCP stream has `rewind` for that; a TLS stream has none, so
//! [`Rewound`] wraps any stream: its reads return the given-back bytes first, and everything
//! else (writes, TLS facts such as the ALPN result, digests) is the inner stream's.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use pingora::protocols::l4::stream::Stream as TcpStream;
use pingora::protocols::raw_connect::ProxyDigest;
use pingora::protocols::tls::{SslDigest, TlsRef};
use pingora::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl, Stream,
    TimingDigest, UniqueID, UniqueIDType, ALPN,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A stream the first head can be given back to.
pub trait Rewind: AsyncRead + AsyncWrite + Unpin {
    fn rewind(&mut self, bytes: &[u8]);
}

impl Rewind for TcpStream {
    fn rewind(&mut self, bytes: &[u8]) {
        TcpStream::rewind(self, bytes)
    }
}

/// A stream whose next reads return `prefix` first.
#[derive(Debug)]
pub struct Rewound {
    inner: Stream,
    prefix: Vec<u8>,
    at: usize,
}

impl Rewound {
    pub fn new(inner: Stream) -> Rewound {
        Rewound {
            inner,
            prefix: Vec::new(),
            at: 0,
        }
    }
}

impl Rewind for Rewound {
    fn rewind(&mut self, bytes: &[u8]) {
        let mut prefix = bytes.to_vec();
        prefix.extend_from_slice(&self.prefix[self.at..]);
        self.prefix = prefix;
        self.at = 0;
    }
}

impl AsyncRead for Rewound {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.at < this.prefix.len() {
            let n = buf.remaining().min(this.prefix.len() - this.at);
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            if this.at == this.prefix.len() {
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewound {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[async_trait]
impl Shutdown for Rewound {
    async fn shutdown(&mut self) {
        self.inner.shutdown().await
    }
}

impl UniqueID for Rewound {
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for Rewound {
    fn get_ssl(&self) -> Option<&TlsRef> {
        self.inner.get_ssl()
    }
    fn get_ssl_digest(&self) -> Option<Arc<SslDigest>> {
        self.inner.get_ssl_digest()
    }
    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for Rewound {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.inner.get_timing_digest()
    }
    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_read_pending_time()
    }
    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_write_pending_time()
    }
}

impl GetProxyDigest for Rewound {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.inner.get_proxy_digest()
    }
    fn set_proxy_digest(&mut self, digest: ProxyDigest) {
        self.inner.set_proxy_digest(digest)
    }
}

impl GetSocketDigest for Rewound {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.inner.get_socket_digest()
    }
    fn set_socket_digest(&mut self, digest: SocketDigest) {
        self.inner.set_socket_digest(digest)
    }
}

/// Peeking is not offered (Pingora then reads instead); the prefix would have to be merged.
impl Peek for Rewound {}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn given_back_bytes_come_first() {
        let l4: TcpStream = {
            // A real stream type is needed only for the IO bound; a socket pair gives one.
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let _c = std::net::TcpStream::connect(addr).unwrap();
            let (s, _) = listener.accept().unwrap();
            s.set_nonblocking(true).unwrap();
            tokio::net::TcpStream::from_std(s).unwrap().into()
        };
        let mut r = Rewound::new(Box::new(l4));
        r.rewind(b"world");
        r.rewind(b"hello ");
        let mut buf = [0u8; 11];
        r.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hello world");
    }
}
