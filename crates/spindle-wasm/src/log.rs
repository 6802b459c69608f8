//! Guest stdout and stderr: into the host's log, one line at a time, as
//! `tracing` events (target `guest`, level INFO) carrying the request they
//! came from and the stream.
//!
//! A store has one unfinished line per stream, whatever handle writes it
//! (see [`Tag`]), so a line written in pieces is one line in the log.
//!
//! The stream writes synchronously into that line and never waits: it
//! is always ready, so a chatty guest cannot park inside a host call, and no
//! helper task is spawned per instance (wasmtime-wasi's default adapter
//! spawns one on its tokio runtime).

use std::sync::Arc;

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Lines longer than this are cut into pieces.
const MAX_LINE: usize = 8 * 1024;

/// What a store's log lines name: the request it serves now (a reused
/// WASI 0.2 instance is renamed for each request), or its instance. It
/// also holds the store's unfinished output lines, one per stream: a guest
/// may write a line in pieces through separate `get-stdout()` /
/// `get-stderr()` handles (each a fresh stream), and the pieces are one
/// line. A line still unfinished is logged when the store goes, or when it
/// is renamed for its next request.
#[derive(Clone)]
pub(crate) struct Tag(Arc<Named>);

struct Named {
    name: std::sync::RwLock<Arc<str>>,
    /// The unfinished lines of stdout and stderr.
    lines: [std::sync::Mutex<Vec<u8>>; 2],
}

impl Tag {
    pub(crate) fn new(name: Arc<str>) -> Tag {
        Tag(Arc::new(Named {
            name: std::sync::RwLock::new(name),
            lines: Default::default(),
        }))
    }

    /// Names the store's next request; what the last one left unfinished
    /// is logged under its own name first.
    pub(crate) fn set(&self, name: Arc<str>) {
        self.0.flush();
        *self.0.name.write().unwrap_or_else(|e| e.into_inner()) = name;
    }

    fn get(&self) -> Arc<str> {
        self.0
            .name
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Named {
    fn flush(&self) {
        for stream in [Stream::Stdout, Stream::Stderr] {
            let mut line = self.lines[stream as usize]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if !line.is_empty() {
                let name = self.name.read().unwrap_or_else(|e| e.into_inner()).clone();
                emit(&name, stream, &mut line);
            }
        }
    }
}

impl Drop for Named {
    fn drop(&mut self) {
        self.flush();
    }
}

impl std::fmt::Display for Tag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.get())
    }
}

/// Which output.
#[derive(Clone, Copy)]
pub(crate) enum Stream {
    Stdout = 0,
    Stderr = 1,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Logs `line` (and empties it).
fn emit(request: &str, stream: Stream, line: &mut Vec<u8>) {
    let text = String::from_utf8_lossy(line);
    tracing::info!(
        target: "guest",
        request = %request,
        stream = stream.name(),
        "{}",
        text.trim_end_matches('\r')
    );
    line.clear();
}

/// A guest output (`stdout` or `stderr`) that goes to the host's log.
#[derive(Clone)]
pub(crate) struct GuestLog {
    tag: Tag,
    stream: Stream,
}

impl GuestLog {
    pub(crate) fn new(tag: Tag, stream: Stream) -> GuestLog {
        GuestLog { tag, stream }
    }
}

impl IsTerminal for GuestLog {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestLog {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(LineWriter { log: self.clone() })
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(LineWriter { log: self.clone() })
    }
}

/// One handle on a guest output: writes into the store's line for it.
struct LineWriter {
    log: GuestLog,
}

impl LineWriter {
    fn push(&mut self, mut bytes: &[u8]) {
        let tag = &self.log.tag;
        let stream = self.log.stream;
        let mut line = tag.0.lines[stream as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        while let Some(i) = bytes.iter().position(|&b| b == b'\n') {
            line.extend_from_slice(&bytes[..i]);
            emit(&tag.get(), stream, &mut line);
            bytes = &bytes[i + 1..];
        }
        line.extend_from_slice(bytes);
        if line.len() >= MAX_LINE {
            emit(&tag.get(), stream, &mut line);
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LineWriter {
    async fn ready(&mut self) {}
}

impl OutputStream for LineWriter {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for LineWriter {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.push(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}
