//! Served connections whose small responses share one write.
//!
//! h2 (under tonic) writes a DATA payload of more than 256 bytes straight
//! from the caller's buffer with `writev`, when the connection says it has
//! vectored writes, and flushes each time it queues such a frame. A
//! response carrying a 256-byte value then took two writes (its HEADERS and
//! DATA, then its trailers), and responses to different streams of one
//! connection never shared a write: each costs a loopback send on this
//! side and a wake-up and a read on the client's. Over a connection that
//! says it has no vectored writes, h2 copies payloads of up to 1 KiB into
//! its 16 KiB write buffer instead, so everything queued on a connection
//! goes out in one `write`. Larger payloads still go out uncopied, in a
//! second `write` after the buffered frames.

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// A served connection that tells h2 it has no vectored writes (see the
/// module docs); everything else passes through.
#[derive(Debug)]
pub(crate) struct CoalescedWrites<T>(pub(crate) T);

impl<T: AsyncRead + Unpin> AsyncRead for CoalescedWrites<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for CoalescedWrites<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<T: Connected> Connected for CoalescedWrites<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.0.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::DuplexStream;

    /// One end of an in-memory connection that counts the writes made to
    /// it and, like a TCP socket, takes a vectored write whole.
    struct Counted {
        io: DuplexStream,
        writes: Arc<AtomicUsize>,
    }

    impl AsyncRead for Counted {
        fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.io).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Counted {
        fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
            let n = std::task::ready!(Pin::new(&mut self.io).poll_write(cx, buf))?;
            self.writes.fetch_add(1, Ordering::Relaxed);
            Poll::Ready(Ok(n))
        }

        fn poll_write_vectored(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<std::io::Result<usize>> {
            // The pipe is large enough for every frame here: one call, one write.
            let whole: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            self.poll_write(cx, &whole)
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.io).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.io).poll_shutdown(cx)
        }
    }

    /// How many writes the server side of an h2 connection makes to answer
    /// one request the way a gRPC unary call is answered (HEADERS, one DATA
    /// frame of `payload` bytes, trailers), counted from the request's
    /// arrival to the trailers' arrival at the client; and how many body
    /// bytes the client got.
    async fn one_response<T>(wrap: impl FnOnce(Counted) -> T, payload: usize) -> (usize, usize)
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (client_io, server_io) = tokio::io::duplex(1 << 20);
        let writes = Arc::new(AtomicUsize::new(0));
        let before = Arc::new(AtomicUsize::new(usize::MAX));
        let server_io = wrap(Counted {
            io: server_io,
            writes: writes.clone(),
        });
        let (server_writes, server_before) = (writes.clone(), before.clone());
        tokio::spawn(async move {
            let mut conn = h2::server::handshake(server_io).await.unwrap();
            let (_request, mut respond) = conn.accept().await.unwrap().unwrap();
            server_before.store(server_writes.load(Ordering::SeqCst), Ordering::SeqCst);
            let mut send = respond.send_response(http::Response::new(()), false).unwrap();
            send.send_data(bytes::Bytes::from(vec![7u8; payload]), false).unwrap();
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            send.send_trailers(trailers).unwrap();
            // Drive the connection until the client goes.
            while conn.accept().await.is_some() {}
        });
        let (mut client, conn) = h2::client::handshake(client_io).await.unwrap();
        tokio::spawn(conn);
        let request = http::Request::post("http://test/svc/Call").body(()).unwrap();
        let (response, _) = client.send_request(request, true).unwrap();
        let mut body = response.await.unwrap().into_body();
        let mut received = 0;
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            received += chunk.len();
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        body.trailers().await.unwrap().unwrap();
        (writes.load(Ordering::SeqCst) - before.load(Ordering::SeqCst), received)
    }

    #[tokio::test]
    async fn a_response_larger_than_h2s_chaining_threshold_goes_out_in_one_write() {
        // The payload of a point read of a 256-byte value.
        let plain = one_response(|c| c, 300).await;
        let coalesced = one_response(CoalescedWrites, 300).await;
        assert_eq!(plain, (2, 300), "h2 no longer splits such a response: this wrapper may be unneeded");
        assert_eq!(coalesced, (1, 300));
    }

    #[tokio::test]
    async fn a_payload_above_what_h2_copies_arrives_whole() {
        let (_, received) = one_response(CoalescedWrites, 64 << 10).await;
        assert_eq!(received, 64 << 10);
    }
}
