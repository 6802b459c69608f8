//! Blocking calls in code Spindle did not write — std, other crates, C
//! libraries — park only their fiber.
//!
//! This crate defines libc's blocking entry points (`recv`, `poll`,
//! `nanosleep`, `getaddrinfo`, …) in the executable. The dynamic linker
//! binds every call to them — from std, from other crates, from shared
//! libraries such as libpq through their PLT — to these definitions
//! instead of libc's, the way `malloc` replacements work. Each definition
//! hands the call to libc unchanged unless it was made by a fiber after
//! [`install`]; then a wait in it parks the fiber on Spindle's netpoller or
//! timers, and its worker runs other fibers meanwhile.
//!
//! ```no_run
//! use std::io::{Read, Write};
//!
//! fn main() {
//!     spindle_hook::install().expect("the hook is linked in");
//!     spindle::run(|| {
//!         let fetches: Vec<_> = (0..1000)
//!             .map(|_| {
//!                 spindle::spawn(|| {
//!                     // Plain std: with the hook, this connect and read park
//!                     // the fiber, not the worker.
//!                     let mut s = std::net::TcpStream::connect("127.0.0.1:8080").unwrap();
//!                     s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
//!                     let mut answer = String::new();
//!                     s.read_to_string(&mut answer).unwrap();
//!                     answer.len()
//!                 })
//!             })
//!             .collect();
//!         for f in fetches {
//!             f.join().unwrap();
//!         }
//!     });
//! }
//! ```
//!
//! # What changes when it is on
//!
//! A call is changed only when all of these hold: [`install`] has
//! returned `Ok`; the process is not a child after `fork`; the caller is a
//! fiber that may suspend (`spindle::can_suspend()`: not a plain thread,
//! not the runtime's own loops or blocking pool, not inside a `block_on`
//! poll, not a fiber being unwound by a runtime stop). Everything else
//! gets libc's call, unchanged.
//!
//! | calls | on a fiber |
//! |---|---|
//! | `read`, `write`, `readv`, `writev`, `recv`, `recvfrom`, `recvmsg`, `send`, `sendto`, `sendmsg` on a socket its owner left blocking | tried with `MSG_DONTWAIT`; on `EAGAIN` the fiber waits for readiness |
//! | `connect`, `accept`, `accept4` on a blocking socket | the fiber waits for the connection |
//! | `poll`, `ppoll`, `select`, `pselect`, `epoll_wait`, `epoll_pwait` | the fiber waits for readiness of the fds, or of the epoll instance |
//! | `nanosleep`, `clock_nanosleep`, `usleep`, `sleep` | the fiber sleeps on its worker's timers |
//! | `getaddrinfo` | runs on the blocking pool |
//! | `close`, `dup2`, `dup3` (any thread) | the fd leaves the netpoller before it closes |
//! | `sigaction`, `signal` (any thread) | the handler is wrapped, so that calls inside it are libc's |
//!
//! Kept exactly as libc's: the fd's blocking mode (`fcntl(F_GETFL)` shows
//! what its owner set; a plain thread sharing the fd still blocks); a
//! non-blocking fd's `EAGAIN`; `SO_RCVTIMEO`/`SO_SNDTIMEO` (`EAGAIN` when
//! they pass, `EINPROGRESS` for `connect`); `errno`; `SIGPIPE` on a write to
//! a reset peer. Regular files, pipes and ttys are read and written
//! unchanged (the kernel has no per-call non-blocking flag for them).
//!
//! A changed call is a Spindle wait: a fiber dump names it (`in hooked recv:
//! waiting for fd 7 to be readable`), and it honours paused time. Ended
//! otherwise than by readiness, it fails:
//!
//! | ended by | the call fails with |
//! |---|---|
//! | an enclosing `spindle::time::timeout` | `ETIMEDOUT` |
//! | cancellation, runtime shutdown | `ECANCELED` |
//! | the fd closed meanwhile by other code | `EBADF` |
//!
//! A sleep cut short either way returns early instead (as if it had slept:
//! callers answer `EINTR` by sleeping again). The fiber unwinds at its next
//! Spindle wait. A fiber still inside a changed call when its runtime stops
//! is leaked, not unwound: C frames cannot be unwound through.
//!
//! Not changed: calls made inside a signal handler (every handler
//! installed through `sigaction` or `signal` is wrapped to say so; the
//! program still reads back its own handler), std's locks, condvars and
//! channels (futexes: the stall watchdog names them), the calls with a
//! signal mask, files, pipes, and whatever a library does through raw
//! `syscall`s.
//!
//! The design is in `docs/DESIGN.md`, "Code Spindle did not write".

#![deny(unsafe_op_in_unsafe_fn)]

mod dns;
mod fds;
mod fdtable;
mod polls;
mod real;
mod report;
mod signals;
mod sleeps;
mod sockets;
mod wait;

use std::ffi::CStr;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

/// Every interposed symbol and this crate's definition of it.
fn definitions() -> [(&'static CStr, usize); 39] {
    [
        (c"read", sockets::read as *const () as usize),
        (c"write", sockets::write as *const () as usize),
        (c"readv", sockets::readv as *const () as usize),
        (c"writev", sockets::writev as *const () as usize),
        (c"recv", sockets::recv as *const () as usize),
        (c"recvfrom", sockets::recvfrom as *const () as usize),
        (c"recvmsg", sockets::recvmsg as *const () as usize),
        (c"send", sockets::send as *const () as usize),
        (c"sendto", sockets::sendto as *const () as usize),
        (c"sendmsg", sockets::sendmsg as *const () as usize),
        (c"connect", sockets::connect as *const () as usize),
        (c"accept", sockets::accept as *const () as usize),
        (c"accept4", sockets::accept4 as *const () as usize),
        (c"__read_chk", sockets::__read_chk as *const () as usize),
        (c"__recv_chk", sockets::__recv_chk as *const () as usize),
        (
            c"__recvfrom_chk",
            sockets::__recvfrom_chk as *const () as usize,
        ),
        (c"poll", polls::poll as *const () as usize),
        (c"__poll_chk", polls::__poll_chk as *const () as usize),
        (c"ppoll", polls::ppoll as *const () as usize),
        (c"select", polls::select as *const () as usize),
        (c"pselect", polls::pselect as *const () as usize),
        (c"epoll_wait", polls::epoll_wait as *const () as usize),
        (c"epoll_pwait", polls::epoll_pwait as *const () as usize),
        (c"nanosleep", sleeps::nanosleep as *const () as usize),
        (
            c"clock_nanosleep",
            sleeps::clock_nanosleep as *const () as usize,
        ),
        (c"usleep", sleeps::usleep as *const () as usize),
        (c"sleep", sleeps::sleep as *const () as usize),
        (c"getaddrinfo", dns::getaddrinfo as *const () as usize),
        (c"close", fds::close as *const () as usize),
        (c"dup", fds::dup as *const () as usize),
        (c"dup2", fds::dup2 as *const () as usize),
        (c"dup3", fds::dup3 as *const () as usize),
        (c"fcntl", fds::fcntl as *const () as usize),
        (c"ioctl", fds::ioctl as *const () as usize),
        (c"socket", fds::socket as *const () as usize),
        (c"socketpair", fds::socketpair as *const () as usize),
        (c"setsockopt", sockets::setsockopt as *const () as usize),
        (c"sigaction", signals::sigaction as *const () as usize),
        (c"signal", signals::signal as *const () as usize),
    ]
}

/// Why [`install`] refused: some interposed functions still resolve to
/// libc's, so calls through them would block their worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallError {
    missing: Vec<&'static str>,
}

impl InstallError {
    /// The libc functions that did not resolve to the hook.
    pub fn missing(&self) -> &[&'static str] {
        &self.missing
    }
}

impl fmt::Display for InstallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "spindle-hook: these libc functions do not resolve to the hook in this \
             process, so calls to them would still block the worker: {}. The hook must \
             be linked into the executable (not a shared library loaded later), and the \
             executable must export its symbols (no version script hiding them)",
            self.missing.join(", ")
        )
    }
}

impl std::error::Error for InstallError {}

/// Switches the hook on for the whole process: from now on, blocking libc
/// calls made by fibers park only the fiber (see the crate docs for what
/// changes). Call it once at the start of `main`; later calls do nothing
/// and return the same answer.
///
/// Returns an error — and leaves every call unchanged — if the process's
/// dynamic linker does not bind libc's names to this crate's definitions
/// (the crate was linked into a shared library instead of the executable,
/// say).
///
/// ```
/// spindle_hook::install().unwrap();
/// spindle::run(|| {
///     let start = std::time::Instant::now();
///     let sleepers: Vec<_> = (0..100)
///         .map(|_| spindle::spawn(|| std::thread::sleep(std::time::Duration::from_millis(50))))
///         .collect();
///     sleepers.into_iter().for_each(|s| s.join().unwrap());
///     // 100 std sleeps overlapped on a few workers.
///     assert!(start.elapsed() < std::time::Duration::from_secs(2));
/// });
/// ```
pub fn install() -> Result<(), InstallError> {
    static RESULT: OnceLock<Result<(), InstallError>> = OnceLock::new();
    RESULT
        .get_or_init(|| {
            let r = check();
            if r.is_ok() {
                at_fork();
                wait::INSTALLED.store(true, Ordering::Release);
            }
            r
        })
        .clone()
}

/// Whether [`install`] has switched the hook on in this process.
///
/// ```
/// let _ = spindle_hook::install();
/// assert!(spindle_hook::is_installed());
/// ```
pub fn is_installed() -> bool {
    wait::INSTALLED.load(Ordering::Acquire)
}

/// Checks that the dynamic linker binds every interposed name to us.
fn check() -> Result<(), InstallError> {
    let missing: Vec<&'static str> = definitions()
        .iter()
        .filter(|(name, ours)| {
            // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the
            // process's global scope in load order, executable first.
            let found = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as usize;
            found != *ours
        })
        .map(|(name, _)| name.to_str().unwrap_or("?"))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(InstallError { missing })
    }
}

/// A child after `fork` has no runtime: its calls go to libc unchanged.
fn at_fork() {
    extern "C" fn in_child() {
        wait::INSTALLED.store(false, Ordering::Relaxed);
    }
    // SAFETY: registers a handler that only stores to an atomic.
    unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
}
