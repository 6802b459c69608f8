//! [`Error`]: what went wrong with a client request, by kind.

use std::fmt;
use std::io;

/// What kind of failure an [`Error`] is.
///
/// ```
/// use spindle_http::{Client, ErrorKind};
/// spindle::run(|| {
///     // Nothing listens on port 1.
///     let err = Client::new().get("http://127.0.0.1:1/").unwrap_err();
///     assert_eq!(err.kind(), ErrorKind::Connect);
///     assert!(err.is_connect());
/// });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request cannot be sent as given (not an absolute `http(s)` URI,
    /// a header that cannot be written, its own body failed to read).
    InvalidRequest,
    /// The host name did not resolve.
    Dns,
    /// No connection could be made (refused, unreachable).
    Connect,
    /// No connection within the connect timeout.
    ConnectTimeout,
    /// The TLS handshake or a TLS record failed.
    Tls,
    /// The server's certificate was not accepted.
    TlsCertificate,
    /// A read or write took longer than the I/O timeout, or the request's
    /// deadline passed.
    Timeout,
    /// The server closed the connection before the response was complete.
    Closed,
    /// The response is not valid HTTP/1.1 (a head, a length, a chunk).
    Parse,
    /// The response body is larger than the client's limit.
    BodyTooLarge,
    /// Another I/O error.
    Io,
}

impl ErrorKind {
    fn describe(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "invalid request",
            ErrorKind::Dns => "name resolution failed",
            ErrorKind::Connect => "connection failed",
            ErrorKind::ConnectTimeout => "connection timed out",
            ErrorKind::Tls => "TLS failed",
            ErrorKind::TlsCertificate => "server certificate rejected",
            ErrorKind::Timeout => "timed out",
            ErrorKind::Closed => "connection closed early",
            ErrorKind::Parse => "malformed response",
            ErrorKind::BodyTooLarge => "response body too large",
            ErrorKind::Io => "I/O error",
        }
    }

    /// The `std::io::ErrorKind` an [`Error`] of this kind converts to.
    fn io_kind(self, source: io::ErrorKind) -> io::ErrorKind {
        match self {
            ErrorKind::InvalidRequest => io::ErrorKind::InvalidInput,
            ErrorKind::Dns => io::ErrorKind::NotFound,
            ErrorKind::Connect => match source {
                io::ErrorKind::Other => io::ErrorKind::ConnectionRefused,
                k => k,
            },
            ErrorKind::ConnectTimeout | ErrorKind::Timeout => io::ErrorKind::TimedOut,
            ErrorKind::Tls | ErrorKind::TlsCertificate | ErrorKind::Parse => {
                io::ErrorKind::InvalidData
            }
            ErrorKind::Closed => io::ErrorKind::UnexpectedEof,
            ErrorKind::BodyTooLarge => io::ErrorKind::FileTooLarge,
            ErrorKind::Io => source,
        }
    }
}

/// A failed client request: its [`ErrorKind`] and the error underneath.
///
/// Converts into `std::io::Error` (with the matching `io::ErrorKind`, and
/// this error inside), so `?` works in functions returning `io::Result`.
pub struct Error {
    kind: ErrorKind,
    source: io::Error,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, source: impl Into<io::Error>) -> Error {
        Error {
            kind,
            source: source.into(),
        }
    }

    /// An error from the exchange on an open connection, by the I/O error
    /// underneath: a TLS alert, a timeout, a close, a malformed response.
    pub(crate) fn from_exchange(e: io::Error) -> Error {
        if let Some(kind) = tls_kind(&e) {
            return Error::new(kind, e);
        }
        let kind = match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => ErrorKind::Timeout,
            io::ErrorKind::InvalidData => ErrorKind::Parse,
            io::ErrorKind::FileTooLarge => ErrorKind::BodyTooLarge,
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe => ErrorKind::Closed,
            _ => ErrorKind::Io,
        };
        Error::new(kind, e)
    }

    /// An error of the TLS handshake.
    pub(crate) fn from_handshake(e: io::Error) -> Error {
        match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
                Error::new(ErrorKind::ConnectTimeout, e)
            }
            _ => Error::new(tls_kind(&e).unwrap_or(ErrorKind::Tls), e),
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// A connect, or a read, write or deadline, timed out.
    pub fn is_timeout(&self) -> bool {
        matches!(self.kind, ErrorKind::ConnectTimeout | ErrorKind::Timeout)
    }

    /// No connection could be made (resolution, refusal, connect timeout).
    pub fn is_connect(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Dns | ErrorKind::Connect | ErrorKind::ConnectTimeout
        )
    }

    /// TLS failed (the handshake, a record, or the certificate).
    pub fn is_tls(&self) -> bool {
        matches!(self.kind, ErrorKind::Tls | ErrorKind::TlsCertificate)
    }

    /// The response was not valid HTTP/1.1.
    pub fn is_parse(&self) -> bool {
        self.kind == ErrorKind::Parse
    }

    /// The response body exceeded the client's limit.
    pub fn is_body_too_large(&self) -> bool {
        self.kind == ErrorKind::BodyTooLarge
    }

    /// The server closed the connection before the response was complete.
    pub fn is_closed(&self) -> bool {
        self.kind == ErrorKind::Closed
    }
}

/// Whether `e` carries a rustls error, and which kind that is.
fn tls_kind(e: &io::Error) -> Option<ErrorKind> {
    let tls = e.get_ref()?.downcast_ref::<rustls::Error>()?;
    Some(match tls {
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => {
            ErrorKind::TlsCertificate
        }
        _ => ErrorKind::Tls,
    })
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("source", &self.source)
            .finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.describe(), self.source)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::new(e.kind.io_kind(e.source.kind()), e)
    }
}
