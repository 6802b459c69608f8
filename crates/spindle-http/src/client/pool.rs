//! The client's keep-alive connections, per origin: where an exchange
//! takes an idle connection from and gives a finished one back.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

use http::Uri;

use crate::stream::Stream;

/// Where a pooled connection goes: scheme is `https`, host, port.
pub(super) type Origin = (bool, String, u16);

/// Idle connections by origin, at most `max_idle` each.
#[derive(Clone)]
pub(super) struct Pool {
    idle: Arc<Mutex<HashMap<Origin, Vec<Stream>>>>,
    pub(super) max_idle: usize,
}

impl Pool {
    pub(super) fn new(max_idle: usize) -> Pool {
        Pool {
            idle: Arc::default(),
            max_idle,
        }
    }

    /// An idle pooled connection that is still clean: one that received
    /// bytes while idle (unsolicited, or the peer's close) is dropped, as
    /// Go and hyper do, instead of handing those bytes back as the next
    /// response. (A TLS connection is not checked: records such as session
    /// tickets may arrive unasked.)
    pub(super) fn take_idle(&self, origin: &Origin) -> Option<Stream> {
        let mut pool = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let idle = pool.get_mut(origin)?;
        while let Some(conn) = idle.pop() {
            let clean = match &conn {
                Stream::Plain(tcp) => matches!(
                    tcp.try_peek(&mut [0u8; 1]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock
                ),
                Stream::Tls(_) => true,
            };
            if clean {
                return Some(conn);
            }
        }
        None
    }

    /// Where a connection whose response was read to its end goes back.
    pub(super) fn give_back(&self, origin: &Origin) -> GiveBack {
        GiveBack {
            idle: self.idle.clone(),
            origin: origin.clone(),
            max_idle: self.max_idle,
        }
    }
}

/// Returns a connection to the pool (when its response was read to its
/// end and nothing followed it).
pub(super) struct GiveBack {
    idle: Arc<Mutex<HashMap<Origin, Vec<Stream>>>>,
    origin: Origin,
    max_idle: usize,
}

impl GiveBack {
    pub(super) fn put(self, conn: Stream) {
        let mut pool = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let idle = pool.entry(self.origin).or_default();
        if idle.len() < self.max_idle {
            idle.push(conn);
        }
    }
}

/// The origin an absolute `uri` names; `InvalidInput` for any other.
pub(super) fn origin_of(uri: &Uri) -> io::Result<Origin> {
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the URI must be absolute: http:// or https://",
            ))
        }
    };
    let host = uri
        .host()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the URI has no host"))?;
    Ok((
        https,
        host.trim_matches(|c| c == '[' || c == ']').to_string(),
        uri.port_u16().unwrap_or(if https { 443 } else { 80 }),
    ))
}
