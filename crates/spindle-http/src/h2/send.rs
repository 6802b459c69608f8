//! Sending a [`Body`] on an HTTP/2 stream, both roles: data frames only
//! as the peer's flow-control window allows (a peer that never opens its
//! window holds at most one window's bytes here, then times the sender
//! out), and the heads' connection-specific headers dropped.

use std::io::{self, Read};
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap};

use crate::body::Body;
use crate::h2::recv::{io_error, wait};

/// Largest read of a streamed body, sent as one piece.
const STREAM_CHUNK: usize = 16 * 1024;

/// Removes what HTTP/2 forbids in a head (RFC 9113 §8.2.2): the
/// connection-specific headers an HTTP/1.1 handler may have set.
pub(crate) fn strip_connection_headers(headers: &mut HeaderMap) {
    for name in [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::HeaderName::from_static("keep-alive"),
        header::HeaderName::from_static("proxy-connection"),
    ] {
        headers.remove(&name);
    }
    // `te` is allowed only as "trailers".
    if headers
        .get(header::TE)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"trailers"))
    {
        headers.remove(header::TE);
    }
}

/// Sends `body` on `send`, then ends the stream (with the trailers it
/// carries, if any). Each wait for window lasts at most `timeout`.
pub(crate) fn send_body(
    send: &mut h2::SendStream<Bytes>,
    mut body: Body,
    timeout: Duration,
) -> io::Result<()> {
    let trailers = body.take_trailers_fn();
    let ends_with_trailers = trailers.is_some();
    match body.into_kind() {
        Ok(full) => send_data(send, full, !ends_with_trailers, timeout)?,
        Err(mut reader) => {
            let mut buf = BytesMut::new();
            loop {
                buf.resize(STREAM_CHUNK, 0);
                let n = loop {
                    match reader.read(&mut buf) {
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        r => break r?,
                    }
                };
                if n == 0 {
                    if !ends_with_trailers {
                        send.send_data(Bytes::new(), true).map_err(io_error)?;
                    }
                    break;
                }
                buf.truncate(n);
                send_data(send, buf.split().freeze(), false, timeout)?;
            }
        }
    }
    if let Some(make) = trailers {
        match make() {
            Some(fields) if !fields.is_empty() => {
                send.send_trailers(fields).map_err(io_error)?;
            }
            _ => send.send_data(Bytes::new(), true).map_err(io_error)?,
        }
    }
    Ok(())
}

/// Sends `data` as the peer's window allows, ending the stream after it
/// if `end`.
pub(crate) fn send_data(
    send: &mut h2::SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
    timeout: Duration,
) -> io::Result<()> {
    if data.is_empty() {
        if end {
            send.send_data(data, true).map_err(io_error)?;
        }
        return Ok(());
    }
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        // Usually the window is open: no wait, no waker.
        let open = send.capacity();
        let granted = if open > 0 {
            Ok(open)
        } else {
            wait_for_window(send, timeout)
        };
        let granted = match granted {
            Ok(n) => n,
            Err(e) => {
                // Nobody will read the rest: say so to the peer.
                send.send_reset(h2::Reason::CANCEL);
                return Err(e);
            }
        };
        let piece = data.split_to(granted.min(data.len()));
        send.send_data(piece, end && data.is_empty())
            .map_err(io_error)?;
    }
    Ok(())
}

/// Waits up to `timeout` for the peer to open `send`'s window.
fn wait_for_window(send: &mut h2::SendStream<Bytes>, timeout: Duration) -> io::Result<usize> {
    wait(Some(timeout), |cx| loop {
        let capacity = send.capacity();
        if capacity > 0 {
            return Poll::Ready(Ok(capacity));
        }
        match send.poll_capacity(cx) {
            Poll::Ready(Some(Ok(_))) => {}
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(io_error(e))),
            Poll::Ready(None) => {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "the HTTP/2 stream was reset",
                )))
            }
            Poll::Pending => return Poll::Pending,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::strip_connection_headers;
    use http::HeaderMap;

    #[test]
    fn connection_specific_headers_are_dropped_and_others_kept() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "close"),
            ("keep-alive", "5"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-connection", "x"),
            ("te", "gzip"),
            ("content-type", "text/plain"),
        ] {
            h.insert(k, v.parse().unwrap());
        }
        strip_connection_headers(&mut h);
        assert_eq!(h.len(), 1);
        assert_eq!(h["content-type"], "text/plain");
        let mut h = HeaderMap::new();
        h.insert("te", "trailers".parse().unwrap());
        strip_connection_headers(&mut h);
        assert_eq!(h["te"], "trailers");
    }
}
