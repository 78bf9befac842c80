//! A listener's socket whose writes may wait only so long: a client that
//! stops reading (a stalled export, a tiny receive window) would otherwise
//! hold its response, and the memory behind it, for as long as it keeps
//! the connection open. Once a write has made no progress for the limit,
//! it fails, and the server drops the connection with everything it held.
//! A reader that is slow but keeps reading is never cut.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// A socket whose writes fail after `limit` without progress.
pub(crate) struct WriteIdle<S> {
    inner: S,
    limit: Duration,
    peer: SocketAddr,
    /// Armed while a write waits for the client.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteIdle<S> {
    pub(crate) fn new(inner: S, limit: Duration, peer: SocketAddr) -> Self {
        WriteIdle {
            inner,
            limit,
            peer,
            stalled: None,
        }
    }

    /// A write made progress (or failed): the wait is over.
    fn progressed<T>(&mut self, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.stalled = None;
        }
        r
    }

    /// A write waits: pending until the limit, then an error.
    fn waits<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        tracing::info!(client = %self.peer, limit = ?limit, "closing a connection: its client read nothing of the answer within the write-idle timeout");
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client stopped reading",
        )))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteIdle<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteIdle<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Pending => this.waits(cx),
            r => this.progressed(r),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.waits(cx),
            r => this.progressed(r),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Pending => this.waits(cx),
            r => this.progressed(r),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn a_stalled_write_fails() {
        // A pipe of 64 bytes that nobody reads: the second write waits.
        let (client, server) = tokio::io::duplex(64);
        let peer = "127.0.0.1:9".parse().unwrap();
        let mut w = WriteIdle::new(server, Duration::from_millis(100), peer);
        w.write_all(&[0; 64]).await.unwrap();
        let e = w.write_all(&[0; 1]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        drop(client);
    }
}
