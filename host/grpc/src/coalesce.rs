//! Served connections whose small responses share one write.
//!
//! h2 (under tonic) writes a DATA payload of more than 256 bytes straight
//! from the caller's buffer with `writev`, when the connection says it has
//! vectored writes, and flushes each time it queues such a frame. A
//! response carrying a 256-byte value then took two writes (its HEADERS and
//! DATA, then its trailers), and responses to different streams of one
//! connection never shared a write: each costs a loopback send on this
//! side and a wake-up and a read on the client's.
//!
//! Over a connection that says it has no vectored writes, h2 copies
//! payloads of up to 1 KiB into its own write buffer, so everything it
//! queues goes out in one `write`. A larger payload it hands over in a
//! write of its own, after the frames before it: [`CoalescedWrites`] holds
//! writes until a flush (up to [`HELD_BYTES`]), so those go out together
//! too, and what does not fit goes out in one `writev` with what is held.
//! No response takes more sends than over the plain connection.
//!
//! A flush also waits until the tasks ready to run have run, so that
//! answers that become ready together (a commit that answers many puts, a
//! ReadIndex round that answers many reads, each from its own task) go out
//! in one write instead of one each.

use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker, ready};

use parking_lot::Mutex;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// Bytes a connection holds before it writes (one h2 write buffer).
const HELD_BYTES: usize = 16 << 10;

/// A served connection that tells h2 it has no vectored writes and holds
/// what h2 writes until h2 flushes (see the module docs). Reads pass
/// through.
pub(crate) struct CoalescedWrites<T> {
    io: T,
    /// Bytes taken from h2 and not yet written.
    held: Vec<u8>,
    /// A flush waits for the tasks ready to run (see `poll_flush`).
    flush_after: Option<Arc<TasksRan>>,
}

/// Woken by the runtime once the tasks that were ready to run when a flush
/// was asked for have run: a waker handed to `yield_now`, which the
/// scheduler wakes after them.
struct TasksRan {
    ran: AtomicBool,
    flusher: Mutex<Waker>,
}

impl TasksRan {
    fn ran(&self) -> bool {
        self.ran.load(Ordering::Acquire)
    }
}

impl Wake for TasksRan {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.ran.store(true, Ordering::Release);
        self.flusher.lock().wake_by_ref();
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for CoalescedWrites<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoalescedWrites").field("io", &self.io).field("held", &self.held.len()).finish()
    }
}

impl<T> CoalescedWrites<T> {
    pub(crate) fn new(io: T) -> Self {
        CoalescedWrites { io, held: Vec::new(), flush_after: None }
    }

    fn unsent(&self) -> &[u8] {
        &self.held
    }

    /// Drops the first `n` held bytes, written: a reader that takes a little
    /// at a time must not leave them all here.
    fn mark_sent(&mut self, n: usize) {
        self.held.drain(..n);
    }
}

fn write_zero() -> std::io::Error {
    std::io::ErrorKind::WriteZero.into()
}

impl<T: AsyncRead + Unpin> AsyncRead for CoalescedWrites<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for CoalescedWrites<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let me = &mut *self;
        if me.unsent().len() + buf.len() <= HELD_BYTES {
            me.held.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        // Too much to hold: what is held and `buf` go out together.
        while !me.unsent().is_empty() {
            let unsent = me.unsent().len();
            let both = [IoSlice::new(&me.held), IoSlice::new(buf)];
            let n = ready!(Pin::new(&mut me.io).poll_write_vectored(cx, &both))?;
            if n == 0 {
                return Poll::Ready(Err(write_zero()));
            }
            me.mark_sent(n.min(unsent));
            if n > unsent {
                return Poll::Ready(Ok(n - unsent));
            }
        }
        Pin::new(&mut me.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let me = &mut *self;
        // Answers that become ready together (one commit answers many
        // puts, each from its own task) share a write: the flush waits
        // until the tasks ready to run now have run. Without the wait the
        // woken connection task runs right after the first of them
        // (tokio's LIFO slot) and writes each answer on its own.
        if !me.unsent().is_empty() {
            let after = me.flush_after.get_or_insert_with(|| {
                let after = Arc::new(TasksRan { ran: AtomicBool::new(false), flusher: Mutex::new(cx.waker().clone()) });
                // Its first poll hands the waker to the scheduler, which
                // wakes it after the tasks ready to run.
                let mut yielded = std::pin::pin!(tokio::task::yield_now());
                let _ = yielded.as_mut().poll(&mut Context::from_waker(&Waker::from(after.clone())));
                after
            });
            if !after.ran() {
                after.flusher.lock().clone_from(cx.waker());
                // Woken meanwhile, the old waker may have missed it.
                if !after.ran() {
                    return Poll::Pending;
                }
            }
            me.flush_after = None;
        }
        while !me.unsent().is_empty() {
            let n = ready!(Pin::new(&mut me.io).poll_write(cx, &me.held))?;
            if n == 0 {
                return Poll::Ready(Err(write_zero()));
            }
            me.mark_sent(n);
        }
        Pin::new(&mut me.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }
}

impl<T: Connected> Connected for CoalescedWrites<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
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
        let coalesced = one_response(CoalescedWrites::new, 300).await;
        assert_eq!(plain, (2, 300), "h2 no longer splits such a response: this wrapper may be unneeded");
        assert_eq!(coalesced, (1, 300));
    }

    #[tokio::test]
    async fn a_response_too_large_to_hold_takes_no_more_writes_than_over_a_plain_connection() {
        // A range of ten 256-byte values, then sizes past what is held.
        for payload in [2_700, HELD_BYTES, 64 << 10, 1 << 20] {
            let (plain, _) = one_response(|c| c, payload).await;
            let (coalesced, received) = one_response(CoalescedWrites::new, payload).await;
            assert_eq!(received, payload);
            assert!(coalesced <= plain, "{payload} bytes: {coalesced} writes, {plain} over a plain connection");
        }
    }

    /// How many writes the server side of an h2 connection makes to answer
    /// `streams` requests whose answers are ready together (as when one
    /// commit answers many puts), each from its own task as tonic does.
    async fn answers_ready_together<T>(wrap: impl FnOnce(Counted) -> T, streams: usize) -> usize
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (client_io, server_io) = tokio::io::duplex(1 << 20);
        let writes = Arc::new(AtomicUsize::new(0));
        let before = Arc::new(AtomicUsize::new(usize::MAX));
        let server_io = wrap(Counted { io: server_io, writes: writes.clone() });
        let (server_writes, server_before) = (writes.clone(), before.clone());
        tokio::spawn(async move {
            let mut conn = h2::server::handshake(server_io).await.unwrap();
            let mut waiting = Vec::new();
            while waiting.len() < streams {
                let (_request, respond) = conn.accept().await.unwrap().unwrap();
                waiting.push(respond);
            }
            server_before.store(server_writes.load(Ordering::SeqCst), Ordering::SeqCst);
            for mut respond in waiting {
                tokio::spawn(async move {
                    let mut send = respond.send_response(http::Response::new(()), false).unwrap();
                    send.send_data(bytes::Bytes::from(vec![7u8; 300]), false).unwrap();
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                    send.send_trailers(trailers).unwrap();
                });
            }
            while conn.accept().await.is_some() {}
        });
        let (client, conn) = h2::client::handshake(client_io).await.unwrap();
        tokio::spawn(conn);
        let mut client = client.ready().await.unwrap();
        let mut responses = Vec::new();
        for _ in 0..streams {
            let request = http::Request::post("http://test/svc/Call").body(()).unwrap();
            responses.push(client.send_request(request, true).unwrap().0);
        }
        for response in responses {
            let mut body = response.await.unwrap().into_body();
            while let Some(chunk) = body.data().await {
                let _ = body.flow_control().release_capacity(chunk.unwrap().len());
            }
            body.trailers().await.unwrap().unwrap();
        }
        writes.load(Ordering::SeqCst) - before.load(Ordering::SeqCst)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn answers_ready_together_share_writes() {
        // A woken connection task runs right after the task that woke it
        // (tokio's LIFO slot): over a plain connection each answer is
        // written as soon as it is queued.
        let plain = answers_ready_together(|c| c, 20).await;
        let coalesced = answers_ready_together(CoalescedWrites::new, 20).await;
        assert!(plain >= 10, "{plain} writes for 20 answers: h2 shares them without help now");
        assert!(coalesced <= 4, "{coalesced} writes for 20 answers ({plain} over a plain connection)");
    }

    /// Takes at most `max` bytes per write, into `out`.
    struct Trickle {
        out: Vec<u8>,
        max: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
            let n = buf.len().min(self.max);
            self.out.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Takes `budget` more bytes each time the test allows, then is not ready.
    struct Stalling {
        out: Vec<u8>,
        budget: usize,
    }

    impl AsyncWrite for Stalling {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
            let n = buf.len().min(self.budget);
            if n == 0 {
                return Poll::Pending;
            }
            self.budget -= n;
            self.out.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[test]
    fn a_reader_that_takes_a_little_at_a_time_leaves_no_more_than_the_limit_held() {
        let mut conn = CoalescedWrites::new(Stalling { out: Vec::new(), budget: 0 });
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut written = 0;
        for _ in 0..1_000 {
            conn.io.budget += 100;
            if let Poll::Ready(n) = Pin::new(&mut conn).poll_write(&mut cx, &[1u8; 1024]) {
                written += n.unwrap();
            }
            let _ = Pin::new(&mut conn).poll_flush(&mut cx);
            assert!(conn.held.len() <= HELD_BYTES, "{} bytes held", conn.held.len());
        }
        assert_eq!(conn.io.out.len() + conn.unsent().len(), written);
    }

    #[tokio::test]
    async fn partial_writes_keep_every_byte_in_order() {
        use tokio::io::AsyncWriteExt;
        for max in [1, 7, 1000, HELD_BYTES + 3] {
            let mut conn = CoalescedWrites::new(Trickle { out: Vec::new(), max });
            let mut expected = Vec::new();
            for (i, len) in [10, HELD_BYTES - 5, 20, 3 * HELD_BYTES, 1, 0, 500].into_iter().enumerate() {
                let chunk: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8).collect();
                conn.write_all(&chunk).await.unwrap();
                expected.extend_from_slice(&chunk);
                if i % 3 == 2 {
                    conn.flush().await.unwrap();
                }
            }
            conn.shutdown().await.unwrap();
            assert!(conn.io.out == expected, "max {max}: the bytes differ");
        }
    }
}
