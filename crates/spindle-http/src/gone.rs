//! [`ClientGone`]: whether the client of a request being handled has gone
//! away — closed its side of the connection or reset it — so a handler
//! that waits long (a proxy, a guest) can stop working for nobody.
//!
//! The server puts one in the request's extensions when
//! [`ServerConfig::watch_client_gone`](crate::ServerConfig) is on and the
//! request has no body left on the connection (a body being read is the
//! handler's to watch). It holds the connection weakly, and looks without
//! reading: a peek of one byte (`TcpStream::poll_peek`), on the
//! connection's own netpoller registration. A request read to its end
//! left the receive queue empty, so until the next edge a look costs no
//! syscall — a handler's wait pays nothing for the watch. End of stream or an
//! error means gone. A byte means the client sent more (a pipelined
//! request, a TLS alert) that is the connection's to read, so the watch
//! ends there and never fires: only a close with nothing unread is seen.
//!
//! Over HTTP/2 the watch is on the request's own stream: the client gone
//! means the stream reset (`RST_STREAM`) or its connection lost, whatever
//! the other streams do; it is there whether or not the request has a
//! body.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use crate::stream::Stream;

/// The watch on a request's client (see the module docs).
///
/// ```
/// use spindle_http::{Body, ClientGone, Request, Response};
/// fn handler(req: Request<Body>) -> Response<Body> {
///     let gone = req.extensions().get::<ClientGone>().cloned();
///     for step in 0..10 {
///         if gone.as_ref().is_some_and(ClientGone::is_gone) {
///             break; // nobody would read the answer
///         }
///         spindle::time::sleep(std::time::Duration::from_millis(step));
///     }
///     Response::new(Body::from("done"))
/// }
/// # let _ = handler;
/// ```
///
/// [`ClientGone::wait`] is the same as a future, for code that waits in
/// `spindle::block_on` (a guest's host).
#[derive(Clone, Debug)]
pub struct ClientGone {
    watch: Watch,
}

/// What is watched: an HTTP/1.1 connection, or an HTTP/2 stream's reset.
#[derive(Clone)]
enum Watch {
    Http1(Weak<Stream>),
    Http2(Weak<StreamReset>),
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Watch::Http1(_) => "Http1",
            Watch::Http2(_) => "Http2",
        })
    }
}

/// An HTTP/2 stream's response handle, shared with the watches of its
/// handler while it runs (the stream's fiber takes it back to answer).
pub(crate) type StreamReset = std::sync::Mutex<Option<h2::server::SendResponse<bytes::Bytes>>>;

impl ClientGone {
    pub(crate) fn new(conn: &Arc<Stream>) -> ClientGone {
        ClientGone {
            watch: Watch::Http1(Arc::downgrade(conn)),
        }
    }

    pub(crate) fn h2(stream: &Arc<StreamReset>) -> ClientGone {
        ClientGone {
            watch: Watch::Http2(Arc::downgrade(stream)),
        }
    }

    /// A future ready once the client is gone; pending for good if it
    /// stays, or sends more.
    pub fn wait(&self) -> Gone {
        Gone {
            watch: self.watch.clone(),
            watching: true,
            registered: None,
        }
    }

    /// Whether the client is gone now (without waiting).
    pub fn is_gone(&self) -> bool {
        match &self.watch {
            Watch::Http1(conn) => matches!(look(conn), Look::Gone),
            Watch::Http2(stream) => {
                reset(stream, &mut Context::from_waker(std::task::Waker::noop())).is_ready()
            }
        }
    }
}

/// Whether an HTTP/2 stream was reset (or its stream is over), keeping
/// `cx`'s waker for the reset if not.
fn reset(stream: &Weak<StreamReset>, cx: &mut Context<'_>) -> Poll<()> {
    let Some(stream) = stream.upgrade() else {
        return Poll::Ready(());
    };
    let mut respond = stream.lock().unwrap_or_else(|e| e.into_inner());
    match respond.as_mut() {
        // Answered already: the watch is over, nothing more to see.
        None => Poll::Pending,
        Some(r) => r.poll_reset(cx).map(|_| ()),
    }
}

/// The future of [`ClientGone::wait`].
#[derive(Debug)]
pub struct Gone {
    watch: Watch,
    watching: bool,
    /// The waker a pending peek left with the connection, withdrawn when
    /// the watch is dropped.
    registered: Option<std::task::Waker>,
}

enum Look {
    Gone,
    Quiet,
    MoreBytes,
}

/// One look at the connection, without reading or waiting.
fn look(conn: &Weak<Stream>) -> Look {
    let Some(conn) = conn.upgrade() else {
        return Look::Gone; // the connection itself is closed
    };
    loop {
        return match conn.tcp().try_peek(&mut [0u8; 1]) {
            Ok(0) => Look::Gone,
            Ok(_) => Look::MoreBytes,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Look::Quiet,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => Look::Gone, // reset, or another fatal error
        };
    }
}

impl Future for Gone {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let conn = match &self.watch {
            Watch::Http1(conn) => conn.clone(),
            Watch::Http2(stream) => return reset(stream, cx),
        };
        if !self.watching {
            return Poll::Pending;
        }
        let Some(conn) = conn.upgrade() else {
            return Poll::Ready(()); // the connection itself is closed
        };
        // The peek waits on the connection's own registration: while its
        // receive queue is known empty (the request was read to its end),
        // a look costs no syscall.
        match conn.tcp().poll_peek(cx, &mut [0u8; 1]) {
            Poll::Pending => {
                match &mut self.registered {
                    Some(w) => w.clone_from(cx.waker()),
                    none => *none = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => Poll::Ready(()),
            Poll::Ready(Ok(_)) => {
                self.watching = false;
                Poll::Pending
            }
        }
    }
}

impl Drop for Gone {
    fn drop(&mut self) {
        // Left with the connection, the waker would have the next edge
        // kept for it, and the connection's next read pay a `recv` for it.
        if let (Some(waker), Watch::Http1(conn)) = (self.registered.take(), &self.watch) {
            if let Some(conn) = conn.upgrade() {
                conn.tcp().forget_read_waker(&waker);
            }
        }
    }
}
