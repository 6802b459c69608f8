//! `RuntimeBuilder::dump_on_sigquit`: `kill -QUIT <pid>` prints the dump of
//! every runtime that asked for it to stderr, as a Go program prints its
//! goroutines. The signal handler only writes a byte to a pipe; a thread
//! reads the pipe and makes the dumps.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::dump::dump;
use crate::sched::Scheduler;

/// Runtimes that asked for a dump on SIGQUIT.
static SIGQUIT_RUNTIMES: Mutex<Vec<Weak<Scheduler>>> = Mutex::new(Vec::new());
static SIGQUIT_PIPE: OnceLock<i32> = OnceLock::new();

extern "C" fn on_sigquit(_: libc::c_int) {
    if let Some(&fd) = SIGQUIT_PIPE.get() {
        let b = 1u8;
        // SAFETY: write(2) is async-signal-safe; a full pipe just drops it.
        unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    }
}

/// Prints `sched`'s dump to stderr on SIGQUIT (installs the handler once).
pub(crate) fn dump_on_sigquit(sched: &Arc<Scheduler>) {
    SIGQUIT_RUNTIMES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Arc::downgrade(sched));
    SIGQUIT_PIPE.get_or_init(|| {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 fills the two-element array.
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
        let read_fd = fds[0];
        let _ = std::thread::Builder::new()
            .name("spindle-sigquit".into())
            .spawn(move || loop {
                let mut pfd = libc::pollfd {
                    fd: read_fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd; then drain what is there.
                unsafe {
                    libc::poll(&mut pfd, 1, -1);
                    let mut buf = [0u8; 64];
                    while libc::read(read_fd, buf.as_mut_ptr().cast(), buf.len()) > 0 {}
                }
                let runtimes: Vec<Arc<Scheduler>> = SIGQUIT_RUNTIMES
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .filter_map(Weak::upgrade)
                    .collect();
                for s in runtimes {
                    // The dump is this signal's output (as Go's), not a
                    // log line: stderr, and a closed stderr is ignored.
                    use std::io::Write as _;
                    let _ = write!(std::io::stderr().lock(), "{}", dump(&s));
                }
            });
        // SAFETY: installs a handler that only writes to a pipe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigquit as *const () as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGQUIT, &action, std::ptr::null_mut());
        }
        fds[1]
    });
}
