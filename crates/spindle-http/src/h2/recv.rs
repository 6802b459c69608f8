//! [`RecvBody`]: an HTTP/2 stream's incoming body as `Read`, and
//! [`wait`], the one way this module's fibers wait on a stream.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};

/// Waits for `poll` on this fiber (parking it), for at most `timeout`
/// (`TimedOut` past it). Every wait on a stream — its data, its window —
/// is one of these.
pub(crate) fn wait<T>(
    timeout: Option<Duration>,
    mut poll: impl FnMut(&mut Context<'_>) -> Poll<io::Result<T>>,
) -> io::Result<T> {
    let Some(timeout) = timeout else {
        return spindle::block_on(std::future::poll_fn(poll));
    };
    let mut sleep = pin!(spindle::time::sleep_future(timeout));
    spindle::block_on(std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = poll(cx) {
            return Poll::Ready(r);
        }
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the HTTP/2 peer did not answer in time",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }))
}

/// An `h2` error as I/O: a reset stream or a lost connection.
pub(crate) fn io_error(e: h2::Error) -> io::Error {
    if e.is_io() {
        return e
            .into_io()
            .unwrap_or_else(|| io::Error::other("HTTP/2 I/O error"));
    }
    let kind = if e.is_reset() || e.is_go_away() {
        io::ErrorKind::ConnectionReset
    } else {
        io::ErrorKind::InvalidData
    };
    io::Error::new(kind, e)
}

/// The first error a body's reader met, for the server to answer with
/// (413, 408, 400) whatever the handler returned.
pub(crate) type Failed = Arc<Mutex<Option<io::ErrorKind>>>;

/// A stream's incoming body: data frames as they arrive, each one's flow
/// control window handed back to the peer as soon as it is taken off the
/// stream (so at most one frame's bytes wait here), under a size limit
/// and the same per-read and whole-body timeouts as HTTP/1.1's.
pub(crate) struct RecvBody {
    stream: h2::RecvStream,
    chunk: Bytes,
    limit: u64,
    taken: u64,
    per_read: Duration,
    deadline: Instant,
    failed: Option<Failed>,
    /// The data ended (trailers, if any, may follow).
    data_done: bool,
}

impl RecvBody {
    /// A body read from `stream`, at most `limit` bytes, each read waiting
    /// at most `per_read` and all of it done by `deadline`. Its first error
    /// is kept in `failed` (a server's reader), if given.
    pub(crate) fn new(
        stream: h2::RecvStream,
        limit: u64,
        per_read: Duration,
        deadline: Instant,
        failed: Option<Failed>,
    ) -> RecvBody {
        RecvBody {
            stream,
            chunk: Bytes::new(),
            limit,
            taken: 0,
            per_read,
            deadline,
            failed,
            data_done: false,
        }
    }

    /// Whether the body has ended (and all of it was read).
    pub(crate) fn is_end(&self) -> bool {
        self.chunk.is_empty() && (self.data_done || self.stream.is_end_stream())
    }

    /// Waits for the trailers, once the data has been read: `None` when
    /// the peer sent none.
    pub(crate) fn trailers(&mut self) -> io::Result<Option<http::HeaderMap>> {
        let stream = &mut self.stream;
        wait(Some(self.per_read), |cx| {
            stream.poll_trailers(cx).map_err(io_error)
        })
    }

    fn next_chunk(&mut self) -> io::Result<bool> {
        let left = self
            .deadline
            .saturating_duration_since(Instant::now())
            .min(self.per_read);
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the request body's deadline passed",
            ));
        }
        let stream = &mut self.stream;
        let data = wait(Some(left), |cx| match stream.poll_data(cx) {
            Poll::Ready(Some(Ok(b))) => Poll::Ready(Ok(Some(b))),
            Poll::Ready(Some(Err(e))) => Poll::Ready(Err(io_error(e))),
            Poll::Ready(None) => Poll::Ready(Ok(None)),
            Poll::Pending => Poll::Pending,
        })?;
        let Some(data) = data else {
            self.data_done = true;
            return Ok(false);
        };
        // Taken off the stream: the peer may send that much more.
        let _ = self.stream.flow_control().release_capacity(data.len());
        self.taken += data.len() as u64;
        if self.taken > self.limit {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                "body larger than the limit",
            ));
        }
        self.chunk = data;
        Ok(true)
    }
}

impl io::Read for RecvBody {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while self.chunk.is_empty() {
            match self.next_chunk() {
                Ok(true) => {}
                Ok(false) => return Ok(0),
                Err(e) => {
                    if let Some(failed) = &self.failed {
                        failed
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get_or_insert(e.kind());
                    }
                    return Err(e);
                }
            }
        }
        let n = self.chunk.len().min(buf.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        self.chunk.advance(n);
        Ok(n)
    }
}
