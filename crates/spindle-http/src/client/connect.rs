//! New connections: name resolution and connect under the connect
//! timeout, then for `https` the TLS handshake in what is left of it.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use spindle::net::TcpStream;

use super::h2::Dialed;
use super::invalid_request;
use super::pool::Origin;
use crate::error::{Error, ErrorKind};
use crate::stream::{Handshaken, Stream};

/// A new connection to `origin`, TLS handshake done for `https` (with
/// `tls`, or the default roots), in the protocol it will speak: HTTP/2
/// when ALPN chose `h2`, or for `http` when `prior_knowledge` says the
/// server speaks it; HTTP/1.1 otherwise.
pub(super) fn dial(
    origin: &Origin,
    connect_timeout: Duration,
    tls: Option<&Arc<rustls::ClientConfig>>,
    prior_knowledge: bool,
) -> Result<Dialed, Error> {
    let (https, host, port) = origin;
    let started = std::time::Instant::now();
    let addrs = spindle::net::lookup_host((host.as_str(), *port))
        .map_err(|e| Error::new(ErrorKind::Dns, e))?;
    let left = |started: std::time::Instant| {
        connect_timeout
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(1))
    };
    let tcp = TcpStream::connect_timeout(&addrs[..], left(started)).map_err(|e| {
        let kind = if e.kind() == io::ErrorKind::TimedOut {
            ErrorKind::ConnectTimeout
        } else {
            ErrorKind::Connect
        };
        Error::new(kind, e)
    })?;
    let _ = tcp.set_nodelay(true);
    if !https {
        if prior_knowledge {
            return Ok(Dialed::Http2(crate::h2::io::Io::plain(
                tcp,
                bytes::Bytes::new(),
            )));
        }
        return Ok(Dialed::Http1(Stream::Plain(tcp)));
    }
    let done = handshake(tcp, host, left(started), tls)?;
    if done.is_h2() {
        let (tcp, session, early) = done.into_parts();
        let _ = tcp.set_read_timeout(None);
        return Ok(Dialed::Http2(crate::h2::io::Io::tls(tcp, session, early)));
    }
    Ok(Dialed::Http1(Stream::Tls(Box::new(done.into_stream()))))
}

/// A new HTTP/1.1 connection to `origin` (ALPN offers only `http/1.1`
/// when the configuration given does).
pub(super) fn connect(
    origin: &Origin,
    connect_timeout: Duration,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<Stream, Error> {
    match dial(origin, connect_timeout, tls, false)? {
        Dialed::Http1(stream) => Ok(stream),
        // The configuration offered h2 and the server took it, on a path
        // that cannot speak it: refuse rather than misspeak.
        Dialed::Http2(_) => Err(Error::new(
            ErrorKind::Tls,
            io::Error::new(
                io::ErrorKind::InvalidData,
                "the server chose h2 on an HTTP/1.1-only connection",
            ),
        )),
    }
}

/// The TLS half of [`dial`], out of line: its frames
/// are large, and every stack page a fiber touches stays resident while
/// it waits, so a plain connection must not pay for them.
#[inline(never)]
fn handshake(
    tcp: TcpStream,
    host: &str,
    left: Duration,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<Handshaken, Error> {
    let io = |e| Error::new(ErrorKind::Io, e);
    tcp.set_read_timeout(Some(left)).map_err(io)?;
    tcp.set_write_timeout(Some(left)).map_err(io)?;
    let name =
        rustls::pki_types::ServerName::try_from(host.to_string()).map_err(invalid_request)?;
    let config = tls
        .cloned()
        .unwrap_or_else(crate::tls::default_client_config);
    let session = rustls::ClientConnection::new(config, name).map_err(|e| {
        Error::new(
            ErrorKind::Tls,
            io::Error::new(io::ErrorKind::InvalidData, e),
        )
    })?;
    Handshaken::new(tcp, session).map_err(Error::from_handshake)
}
