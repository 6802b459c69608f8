//! What the hook knows of each fd: whether it is a socket, and whether its
//! owner made it non-blocking — so that a call on a fiber learns both
//! without a syscall.
//!
//! # Why a table
//!
//! A hooked `read` must know whether its fd is a socket (only sockets take a
//! per-call `MSG_DONTWAIT`); a hooked call that met `EAGAIN` must know
//! whether the *caller* asked for non-blocking I/O (then `EAGAIN` is the
//! answer) or not (then the fiber waits). Asking the kernel (`fstat`,
//! `fcntl(F_GETFL)`) costs a syscall each time, and a connection's reader
//! meets `EAGAIN` on every idle read. So the answers are cached here, one
//! word per fd, in a table indexed by fd number that is never freed
//! (chunks of `mmap`ed memory: no allocator, safe in a signal handler).
//!
//! # Keeping it true
//!
//! * `close`, `dup2` and `dup3` forget the number they close; `socket`,
//!   `accept4` and `socketpair` record what they created; `dup` and
//!   `F_DUPFD` forget the new number (it is learned again on first use).
//! * The blocking mode is a property of the open file, shared by every fd
//!   that `dup` made of it. A mode change made through our `fcntl(F_SETFL)`
//!   or `ioctl(FIONBIO)` updates that fd's word and, if the file may be
//!   shared (it was `dup`ed, or came from somewhere we did not see), moves a
//!   process-wide *generation*: every cached mode older than it is asked
//!   again on its next use.
//! * A word that says "socket" for what is not one any more (the fd was
//!   closed by libc's own internals, which do not pass through the hook) is
//!   corrected by the `ENOTSOCK` the next socket call gets.
//!
//! What the table cannot see: a mode changed by a raw syscall, or by
//! another process sharing the open file.

use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use libc::c_int;

/// The kind is known.
const KNOWN: u32 = 1;
/// It is a socket (with `KNOWN`).
const SOCKET: u32 = 2;
/// The owner set `O_NONBLOCK` (valid while the mode generation matches).
const NONBLOCK: u32 = 4;
/// The open file may be shared with another fd.
const SHARED: u32 = 8;
/// The socket's timeouts are known (it was made by the hook and is shared
/// with no other fd): `RCVTIMEO`/`SNDTIMEO` say which are set.
const TIMEO_KNOWN: u32 = 16;
/// `SO_RCVTIMEO` is set (with `TIMEO_KNOWN`).
const RCVTIMEO: u32 = 32;
/// `SO_SNDTIMEO` is set (with `TIMEO_KNOWN`).
const SNDTIMEO: u32 = 64;
/// The fd was made by the hook's own `socket`/`accept4`/`socketpair`: every
/// close of it passes through the hook (see `wait`).
const MADE_HERE: u32 = 128;
/// The mode generation is kept above these bits (0: mode unknown).
const GEN_SHIFT: u32 = 8;

const CHUNK: usize = 4096;
const CHUNKS: usize = 256;

static TABLE: [AtomicPtr<AtomicU32>; CHUNKS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS];

/// Moves when a possibly shared file's mode changes: starts at 1, so a
/// word's generation 0 means "mode unknown".
static GENERATION: AtomicU32 = AtomicU32::new(1);

fn generation() -> u32 {
    GENERATION.load(Ordering::Acquire) & (u32::MAX >> GEN_SHIFT)
}

/// The word of `fd` (None past the table's reach: such fds are asked every
/// time).
fn word(fd: c_int) -> Option<&'static AtomicU32> {
    let fd = usize::try_from(fd).ok()?;
    let (hi, lo) = (fd / CHUNK, fd % CHUNK);
    let chunk_slot = TABLE.get(hi)?;
    let mut chunk = chunk_slot.load(Ordering::Acquire);
    if chunk.is_null() {
        chunk = new_chunk(chunk_slot)?;
    }
    // SAFETY: a published chunk holds CHUNK words and is never unmapped.
    Some(unsafe { &*chunk.add(lo) })
}

#[cold]
fn new_chunk(slot: &AtomicPtr<AtomicU32>) -> Option<*mut AtomicU32> {
    let bytes = CHUNK * std::mem::size_of::<AtomicU32>();
    // SAFETY: a fresh anonymous mapping; zeroed memory is a valid array of
    // AtomicU32 (all "unknown").
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let fresh = p.cast::<AtomicU32>();
    match slot.compare_exchange(
        std::ptr::null_mut(),
        fresh,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => Some(fresh),
        Err(theirs) => {
            // SAFETY: our mapping, never published.
            unsafe { libc::munmap(p, bytes) };
            Some(theirs)
        }
    }
}

/// Whether `fd` is a socket; learned with `fstat` the first time.
pub(crate) fn is_socket(fd: c_int) -> bool {
    let Some(w) = word(fd) else {
        return probe_socket(fd);
    };
    let v = w.load(Ordering::Acquire);
    if v & KNOWN != 0 {
        return v & SOCKET != 0;
    }
    let socket = probe_socket(fd);
    // Learned from outside: it may share its open file with anything.
    let _ = w.compare_exchange(
        v,
        KNOWN | SHARED | if socket { SOCKET } else { 0 },
        Ordering::AcqRel,
        Ordering::Acquire,
    );
    socket
}

fn probe_socket(fd: c_int) -> bool {
    // SAFETY: `st` is written by fstat on success only.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    let rc = unsafe { libc::fstat(fd, &mut st) };
    rc == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK
}

/// Whether the owner of `fd` made it non-blocking; learned with
/// `fcntl(F_GETFL)` when the cached answer is older than the generation.
pub(crate) fn is_nonblocking(fd: c_int) -> bool {
    let gen = generation();
    let Some(w) = word(fd) else {
        return probe_nonblocking(fd);
    };
    let v = w.load(Ordering::Acquire);
    if v >> GEN_SHIFT == gen {
        return v & NONBLOCK != 0;
    }
    let nonblocking = probe_nonblocking(fd);
    let keep = v & (KNOWN | SOCKET | SHARED | TIMEO_KNOWN | RCVTIMEO | SNDTIMEO | MADE_HERE);
    let _ = w.compare_exchange(
        v,
        keep | (gen << GEN_SHIFT) | if nonblocking { NONBLOCK } else { 0 },
        Ordering::AcqRel,
        Ordering::Acquire,
    );
    nonblocking
}

fn probe_nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL takes no argument.
    let flags = unsafe { crate::real::fcntl(fd, libc::F_GETFL, 0) };
    flags >= 0 && flags & libc::O_NONBLOCK != 0
}

/// The word of `fd` if its chunk exists (never maps memory).
fn word_if_mapped(fd: c_int) -> Option<&'static AtomicU32> {
    let fd = usize::try_from(fd).ok()?;
    let chunk = TABLE.get(fd / CHUNK)?.load(Ordering::Acquire);
    // SAFETY: a published chunk holds CHUNK words and is never unmapped.
    (!chunk.is_null()).then(|| unsafe { &*chunk.add(fd % CHUNK) })
}

/// `fd` was closed, or its number is about to be reused: forget it.
pub(crate) fn forget(fd: c_int) {
    if let Some(w) = word_if_mapped(fd) {
        w.store(0, Ordering::Release);
    }
}

/// `fd` is a new socket, made by the hook's own `socket`/`accept4`/
/// `socketpair`, in the given mode, shared with no other fd.
pub(crate) fn created_socket(fd: c_int, nonblocking: bool) {
    if let Some(w) = word(fd) {
        let mode = if nonblocking { NONBLOCK } else { 0 };
        w.store(
            KNOWN | SOCKET | TIMEO_KNOWN | MADE_HERE | mode | (generation() << GEN_SHIFT),
            Ordering::Release,
        );
    }
}

/// `new` was made by `dup` of `old`: both now share one open file.
pub(crate) fn duplicated(old: c_int, new: c_int) {
    if let Some(w) = word(new) {
        w.store(SHARED, Ordering::Release);
    }
    if let Some(w) = word(old) {
        // Shared now: its timeouts may be set through the other fd.
        w.fetch_and(!TIMEO_KNOWN, Ordering::AcqRel);
        w.fetch_or(SHARED, Ordering::AcqRel);
    }
}

/// The owner of `fd` set its mode (`F_SETFL`, `FIONBIO`) through the hook.
pub(crate) fn mode_set(fd: c_int, nonblocking: bool) {
    let Some(w) = word(fd) else {
        GENERATION.fetch_add(1, Ordering::AcqRel);
        return;
    };
    let v = w.load(Ordering::Acquire);
    if v & SHARED != 0 || v & KNOWN == 0 {
        // Other fds may see the change: every cached mode is asked again.
        GENERATION.fetch_add(1, Ordering::AcqRel);
    }
    let mode = if nonblocking { NONBLOCK } else { 0 };
    let keep = v & (KNOWN | SOCKET | SHARED | TIMEO_KNOWN | RCVTIMEO | SNDTIMEO | MADE_HERE);
    w.store(keep | mode | (generation() << GEN_SHIFT), Ordering::Release);
}

/// Whether the socket `fd` has a timeout for receiving (`receive`) or
/// sending, if the table knows (`None`: ask the kernel).
pub(crate) fn has_timeout(fd: c_int, receive: bool) -> Option<bool> {
    let v = word_if_mapped(fd)?.load(Ordering::Acquire);
    (v & TIMEO_KNOWN != 0).then_some(v & if receive { RCVTIMEO } else { SNDTIMEO } != 0)
}

/// Whether `fd` was made by the hook, so that its closes are reported to
/// the netpoller (the cheaper registration is safe).
pub(crate) fn made_here(fd: c_int) -> bool {
    word_if_mapped(fd).is_some_and(|w| w.load(Ordering::Acquire) & MADE_HERE != 0)
}

/// A timeout was set (or cleared) on `fd` through the hook's `setsockopt`.
pub(crate) fn timeout_set(fd: c_int, receive: bool, on: bool) {
    if let Some(w) = word_if_mapped(fd) {
        let bit = if receive { RCVTIMEO } else { SNDTIMEO };
        if on {
            w.fetch_or(bit, Ordering::AcqRel);
        } else {
            w.fetch_and(!bit, Ordering::AcqRel);
        }
    }
}

/// A call meant for a socket got `ENOTSOCK`: the cached kind was stale.
pub(crate) fn not_a_socket(fd: c_int) {
    if let Some(w) = word(fd) {
        w.store(KNOWN | SHARED, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_socket_and_a_file_are_told_apart_and_forgotten_on_close() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        assert!(is_socket(a.as_raw_fd()));
        assert!(!is_socket(f.as_raw_fd()));
        forget(a.as_raw_fd());
        let w = word(a.as_raw_fd()).unwrap().load(Ordering::Acquire);
        assert_eq!(w, 0, "a forgotten fd is unknown again");
    }

    #[test]
    fn a_mode_change_on_a_shared_file_is_seen_through_its_duplicate() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let c = a.try_clone().unwrap();
        let (fa, fc) = (a.as_raw_fd(), c.as_raw_fd());
        created_socket(fa, false);
        duplicated(fa, fc);
        assert!(!is_nonblocking(fa));
        assert!(!is_nonblocking(fc));
        // The kernel's flag moves for both; the hook hears of it through `a`.
        // SAFETY: F_SETFL with an int argument.
        unsafe { crate::real::fcntl(fa, libc::F_SETFL, libc::O_NONBLOCK as usize) };
        mode_set(fa, true);
        assert!(
            is_nonblocking(fc),
            "the duplicate's cached mode was renewed"
        );
    }

    #[test]
    fn a_forgotten_socket_is_asked_again() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let fa = a.as_raw_fd();
        created_socket(fa, true);
        // Behind the hook's back (libc's own fcntl): once the number is
        // forgotten (as `close` does), the kernel is asked again.
        // SAFETY: F_SETFL with an int argument.
        unsafe { crate::real::fcntl(fa, libc::F_SETFL, 0) };
        forget(fa);
        assert!(!is_nonblocking(fa));
        assert!(is_socket(fa));
    }
}
