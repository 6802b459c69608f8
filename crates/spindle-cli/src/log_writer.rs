//! Where log lines go: stderr, in batches. An access line per request must
//! cost neither a system call nor a thread wake-up per request, so each
//! line is appended to a shared buffer (one uncontended lock) and a
//! background thread writes the buffer out every 50 ms; a buffer past
//! 1 MiB is written at once by the caller that filled it, so memory stays
//! bounded under a burst. The guard writes what is left when dropped (at
//! the end of `main`). A crash loses at most the last 50 ms of lines; a
//! closed stderr loses them all without failing anyone.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How often the background thread writes.
const INTERVAL: Duration = Duration::from_millis(50);
/// Past this, the caller writes the buffer itself.
const MAX_BUFFERED: usize = 1 << 20;

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Signalled by the guard: write what is left and stop.
    stop: Condvar,
}

#[derive(Default)]
struct State {
    buf: Vec<u8>,
    stopping: bool,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Writes `text` to stderr (a closed stderr is ignored).
fn write_out(text: &[u8]) {
    if !text.is_empty() {
        let _ = std::io::stderr().lock().write_all(text);
    }
}

/// The `MakeWriter` handed to `tracing-subscriber`.
#[derive(Clone)]
pub struct BatchedStderr {
    shared: Arc<Shared>,
}

/// Writes the buffer out when dropped.
pub struct FlushGuard {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The writer and its guard; starts the background thread.
pub fn batched_stderr() -> (BatchedStderr, FlushGuard) {
    let shared = Arc::new(Shared::default());
    let s = shared.clone();
    let thread = std::thread::Builder::new()
        .name("spindle-log".into())
        .spawn(move || {
            // Two buffers swapped back and forth keep their capacity: no
            // regrowing (and copying) a fresh buffer every interval.
            let mut spare = Vec::new();
            loop {
                let mut state = s.lock();
                if !state.stopping {
                    state = s
                        .stop
                        .wait_timeout(state, INTERVAL)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                std::mem::swap(&mut state.buf, &mut spare);
                let stopping = state.stopping;
                drop(state);
                write_out(&spare);
                spare.clear();
                if spare.capacity() > MAX_BUFFERED {
                    spare = Vec::new(); // after a burst, give the memory back
                }
                if stopping {
                    return;
                }
            }
        })
        .ok();
    (
        BatchedStderr {
            shared: shared.clone(),
        },
        FlushGuard { shared, thread },
    )
}

impl Drop for FlushGuard {
    fn drop(&mut self) {
        self.shared.lock().stopping = true;
        self.shared.stop.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Whatever came after the thread's last write (or all of it, if
        // the thread could not start).
        let text = std::mem::take(&mut self.shared.lock().buf);
        write_out(&text);
    }
}

/// One event's writer: appends to the shared buffer.
pub struct Line<'a>(&'a Shared);

impl Write for Line<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut state = self.0.lock();
        state.buf.extend_from_slice(bytes);
        if state.buf.len() >= MAX_BUFFERED {
            let text = std::mem::take(&mut state.buf);
            drop(state);
            write_out(&text);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for BatchedStderr {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        Line(&self.shared)
    }
}
