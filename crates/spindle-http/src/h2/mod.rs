//! HTTP/2, both roles, on the `h2` crate (hyperium's codec and state
//! machine): this module only connects it to fibers.
//!
//! # How a future-based codec runs on fibers
//!
//! `h2` is written as futures over tokio's `AsyncRead`/`AsyncWrite`. Here:
//!
//! - [`io::Io`] gives a connection's socket (plain or TLS) those traits:
//!   each poll tries the socket without waiting and, on `WouldBlock`,
//!   leaves the task's waker with Spindle's netpoller for the next edge.
//! - The connection's own fiber drives the `h2` connection inside one
//!   `spindle::block_on` for its whole life: while the connection has
//!   nothing to do, that fiber is parked, and any waker — the netpoller's,
//!   a stream fiber queueing a frame, the drain — makes it runnable.
//! - Each stream runs on a fiber of its own ([`server`]): the handler is
//!   the same blocking-style `Fn(Request<Body>) -> Response<Body>` as over
//!   HTTP/1.1, and its reads and writes of the stream are short
//!   `block_on`s of the stream's `poll_*` calls ([`recv`], [`send`]), so a
//!   handler that waits parks only its own stream.
//!
//! The client's side (`client/h2.rs`) uses the same [`io`], [`recv`] and
//! [`send`]: a fiber drives each connection, and every caller's fiber
//! parks on its own stream.
//!
//! # Limits
//!
//! `h2`'s own (concurrent streams, header list size, windows, the send
//! buffer, resets of streams never accepted, the CONTINUATION count), and
//! ours on top: a connection stops accepting streams while as many
//! handlers run as streams may be open, so a peer that opens and resets
//! streams faster than handlers finish (the "rapid reset" attack) fills
//! `h2`'s budget of pending resets and is sent `GOAWAY`; a handshake and an
//! idle connection have the HTTP/1.1 timeouts.

pub(crate) mod io;
pub(crate) mod recv;
pub(crate) mod send;
pub(crate) mod server;

/// The client connection preface (RFC 9113 §3.4): what a prior-knowledge
/// (h2c) client sends first.
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether `buf`, the first bytes of a plain connection, is the HTTP/2
/// preface (`Some(true)`), cannot be (`Some(false)`), or may still become
/// it with more bytes (`None`).
pub(crate) fn starts_with_preface(buf: &[u8]) -> Option<bool> {
    let n = buf.len().min(PREFACE.len());
    if buf[..n] != PREFACE[..n] {
        Some(false)
    } else if n == PREFACE.len() {
        Some(true)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::starts_with_preface;

    #[test]
    fn the_preface_is_recognised_in_pieces_and_nothing_else_is() {
        assert_eq!(
            starts_with_preface(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
            Some(true)
        );
        assert_eq!(
            starts_with_preface(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0"),
            Some(true)
        );
        assert_eq!(starts_with_preface(b"PRI * HT"), None);
        assert_eq!(starts_with_preface(b"P"), None);
        assert_eq!(starts_with_preface(b"GET / HTTP/1.1\r\n"), Some(false));
        assert_eq!(starts_with_preface(b"PRI * HTTP/1.1\r\n"), Some(false));
        assert_eq!(starts_with_preface(b"POST"), Some(false));
    }
}
