//! [`ServerConfig`]: every limit and timeout, all on by default.

use std::time::Duration;

/// Limits and timeouts of a [`Server`](crate::Server).
///
/// ```
/// let cfg = spindle_http::ServerConfig::default()
///     .max_body_bytes(1 << 20)
///     .header_read_timeout(std::time::Duration::from_secs(5));
/// assert_eq!(cfg.max_head_bytes, 64 << 10);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Request line plus headers (431 past it). Default 64 KiB.
    pub max_head_bytes: usize,
    /// Header count (431 past it). Default 100.
    pub max_headers: usize,
    /// Request body (413 past it). Default 16 MiB.
    pub max_body_bytes: u64,
    /// From a request's first byte to its last header byte; a slower peer
    /// (slowloris) is closed. Default 10 s.
    pub header_read_timeout: Duration,
    /// How long an idle keep-alive connection waits for its next request.
    /// Default 60 s.
    pub keep_alive_timeout: Duration,
    /// Per read while receiving a body. Default 30 s.
    pub body_read_timeout: Duration,
    /// For a whole request body, from the end of its head: a client that
    /// drips its body (each read just within `body_read_timeout`) cannot
    /// hold a connection longer. Past it the body's read fails and the
    /// request gets 408. Default 5 min.
    pub body_deadline: Duration,
    /// Per write while sending a response. Default 30 s.
    pub write_timeout: Duration,
    /// Open connections; past it a new connection gets 503 and is closed.
    /// Default 10 000.
    pub max_connections: usize,
    /// Put a [`ClientGone`](crate::ClientGone) in the extensions of each
    /// request that has no body, for a handler that waits long to see its
    /// client leave. Default off (it costs an allocation per request).
    pub watch_client_gone: bool,
    /// Speak HTTP/2 over TLS when the client offers it (ALPN `h2`).
    /// Default on.
    pub http2: bool,
    /// Speak HTTP/2 on plain connections that open with its preface
    /// (h2c with prior knowledge, as `curl --http2-prior-knowledge` and
    /// gRPC clients do); HTTP/1.1 is served on the same port either way.
    /// Default on.
    pub h2c: bool,
    /// HTTP/2 streams a client may have open at once on one connection
    /// (and handlers that run at once for it). Default 100.
    pub h2_max_concurrent_streams: u32,
    /// Bytes a client may send on one HTTP/2 stream before the handler
    /// reads them (the stream's flow-control window). Default 1 MiB.
    pub h2_stream_window: u32,
    /// The same for all of a connection's streams together. Default 1 MiB.
    pub h2_connection_window: u32,
    /// Response bytes buffered per HTTP/2 stream before its handler waits
    /// for the client to take them. Default 400 KiB.
    pub h2_max_send_buffer: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_head_bytes: 64 << 10,
            max_headers: 100,
            max_body_bytes: 16 << 20,
            header_read_timeout: Duration::from_secs(10),
            keep_alive_timeout: Duration::from_secs(60),
            body_read_timeout: Duration::from_secs(30),
            body_deadline: Duration::from_secs(300),
            write_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            watch_client_gone: false,
            http2: true,
            h2c: true,
            h2_max_concurrent_streams: 100,
            h2_stream_window: 1 << 20,
            h2_connection_window: 1 << 20,
            h2_max_send_buffer: 400 << 10,
        }
    }
}

macro_rules! setter {
    ($($name:ident: $t:ty),*) => {$(
        #[doc = concat!("Sets `", stringify!($name), "`.")]
        pub fn $name(mut self, v: $t) -> Self {
            self.$name = v;
            self
        }
    )*};
}

impl ServerConfig {
    setter!(
        max_head_bytes: usize,
        max_headers: usize,
        max_body_bytes: u64,
        header_read_timeout: Duration,
        keep_alive_timeout: Duration,
        body_read_timeout: Duration,
        body_deadline: Duration,
        write_timeout: Duration,
        max_connections: usize,
        watch_client_gone: bool,
        http2: bool,
        h2c: bool,
        h2_max_concurrent_streams: u32,
        h2_stream_window: u32,
        h2_connection_window: u32,
        h2_max_send_buffer: usize
    );
}
