//! New connections: name resolution and connect under the connect
//! timeout, then for `https` the TLS handshake in what is left of it.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use spindle::net::TcpStream;

use super::invalid_request;
use super::pool::Origin;
use crate::error::{Error, ErrorKind};
use crate::stream::{Stream, TlsStream};

/// A new connection to `origin`, TLS handshake done for `https` (with
/// `tls`, or the default roots).
pub(super) fn connect(
    origin: &Origin,
    connect_timeout: Duration,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<Stream, Error> {
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
        return Ok(Stream::Plain(tcp));
    }
    handshake(tcp, host, left(started), tls)
}

/// The TLS half of [`connect`], out of line: its frames
/// are large, and every stack page a fiber touches stays resident while
/// it waits, so a plain connection must not pay for them.
#[inline(never)]
fn handshake(
    tcp: TcpStream,
    host: &str,
    left: Duration,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<Stream, Error> {
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
    let tls = TlsStream::handshake(tcp, session).map_err(Error::from_handshake)?;
    Ok(Stream::Tls(Box::new(tls)))
}
