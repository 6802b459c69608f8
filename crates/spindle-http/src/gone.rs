//! [`ClientGone`]: whether the client of a request being handled has gone
//! away — closed its side of the connection or reset it — so a handler
//! that waits long (a proxy, a guest) can stop working for nobody.
//!
//! The server puts one in the request's extensions when
//! [`ServerConfig::watch_client_gone`](crate::ServerConfig) is on and the
//! request has no body left on the connection (a body being read is the
//! handler's to watch). It holds the connection weakly, and looks without
//! reading: a peek of one byte that does not wait. End of stream or an
//! error means gone. A byte means the client sent more (a pipelined
//! request, a TLS alert) that is the connection's to read, so the watch
//! ends there and never fires: only a close with nothing unread is seen.

use std::future::Future;
use std::io;
use std::os::fd::AsRawFd;
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
    conn: Weak<Stream>,
}

impl ClientGone {
    pub(crate) fn new(conn: &Arc<Stream>) -> ClientGone {
        ClientGone {
            conn: Arc::downgrade(conn),
        }
    }

    /// A future ready once the client is gone; pending for good if it
    /// stays, or sends more.
    pub fn wait(&self) -> Gone {
        Gone {
            conn: self.conn.clone(),
            readable: None,
            watching: true,
        }
    }

    /// Whether the client is gone now (without waiting).
    pub fn is_gone(&self) -> bool {
        matches!(look(&self.conn), Look::Gone)
    }
}

/// The future of [`ClientGone::wait`].
#[derive(Debug)]
pub struct Gone {
    conn: Weak<Stream>,
    readable: Option<spindle::io::Readiness>,
    watching: bool,
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
        while self.watching {
            match look(&self.conn) {
                Look::Gone => return Poll::Ready(()),
                Look::MoreBytes => {
                    self.watching = false;
                    self.readable = None;
                }
                Look::Quiet => {
                    let Some(conn) = self.conn.upgrade() else {
                        return Poll::Ready(());
                    };
                    // Only after the peek found nothing (an EAGAIN), as
                    // the netpoller's readiness wants.
                    let fd = conn.tcp().as_raw_fd();
                    let readable = self
                        .readable
                        .get_or_insert_with(|| spindle::io::readable(fd));
                    match Pin::new(readable).poll(cx) {
                        Poll::Ready(_) => self.readable = None, // look again
                        Poll::Pending => return Poll::Pending,
                    }
                }
            }
        }
        Poll::Pending
    }
}
