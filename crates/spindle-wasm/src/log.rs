//! Guest stdout and stderr: into the host's log, one line at a time, as
//! `tracing` events (target `guest`, level INFO) carrying the request they
//! came from and the stream.
//!
//! The stream writes synchronously into a line buffer and never waits: it
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
/// WASI 0.2 instance is renamed for each request), or its instance.
#[derive(Clone)]
pub(crate) struct Tag(Arc<std::sync::RwLock<Arc<str>>>);

impl Tag {
    pub(crate) fn new(name: Arc<str>) -> Tag {
        Tag(Arc::new(std::sync::RwLock::new(name)))
    }

    pub(crate) fn set(&self, name: Arc<str>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = name;
    }

    fn get(&self) -> Arc<str> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl std::fmt::Display for Tag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.get())
    }
}

/// A guest output (`stdout` or `stderr`) that goes to the host's log.
#[derive(Clone)]
pub(crate) struct GuestLog {
    tag: Tag,
    stream: &'static str,
}

impl GuestLog {
    pub(crate) fn new(tag: Tag, stream: &'static str) -> GuestLog {
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
        Box::new(LineWriter {
            log: self.clone(),
            line: Vec::new(),
        })
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(LineWriter {
            log: self.clone(),
            line: Vec::new(),
        })
    }
}

struct LineWriter {
    log: GuestLog,
    line: Vec<u8>,
}

impl LineWriter {
    fn push(&mut self, mut bytes: &[u8]) {
        while let Some(i) = bytes.iter().position(|&b| b == b'\n') {
            self.line.extend_from_slice(&bytes[..i]);
            self.emit();
            bytes = &bytes[i + 1..];
        }
        self.line.extend_from_slice(bytes);
        if self.line.len() >= MAX_LINE {
            self.emit();
        }
    }

    fn emit(&mut self) {
        let text = String::from_utf8_lossy(&self.line);
        tracing::info!(
            target: "guest",
            request = %self.log.tag,
            stream = self.log.stream,
            "{}",
            text.trim_end_matches('\r')
        );
        self.line.clear();
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        if !self.line.is_empty() {
            self.emit();
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
