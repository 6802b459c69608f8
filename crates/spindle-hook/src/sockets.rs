//! Socket calls: `read`, `write`, `readv`, `writev`, `recv*`, `send*`,
//! `connect`, `accept`, `accept4`.
//!
//! # Without touching the owner's `O_NONBLOCK`
//!
//! On a fiber, a call on a socket its owner left in blocking mode is tried
//! with `MSG_DONTWAIT` — a per-call flag the kernel honours for this call
//! alone — and, on `EAGAIN`, the fiber waits for readiness on the netpoller
//! and tries again. The fd's flags never change, so `fcntl(F_GETFL)` shows
//! what the owner set, and a plain thread using the same fd at the same
//! moment still blocks in the kernel. A socket its owner made non-blocking
//! gets the call unchanged (`EAGAIN` is its owner's to handle).
//!
//! What a blocking call promises is kept: a `send`/`write` returns once all
//! of its bytes are queued (or fewer when the socket's send timeout
//! passes), `MSG_WAITALL` receives wait for the whole buffer, a `write` to a
//! reset peer raises `SIGPIPE` unless the caller said `MSG_NOSIGNAL`.
//!
//! Two calls have no per-call flag. `connect` on a blocking socket sets
//! `O_NONBLOCK` for the one `connect` syscall and restores the owner's flags
//! before the fiber waits (a socket being connected is in nobody else's
//! hands); a Unix socket whose listener's backlog is full is retried after
//! short sleeps, as the kernel's blocking connect would wait for room. `accept` on a blocking listener waits for readability first and
//! then accepts; a plain thread that takes the connection in between leaves
//! that accept blocking its worker until the next one arrives.
//!
//! `read`/`write`/`readv`/`writev` on anything but a socket (a file, a pipe,
//! a tty) pass through unchanged.

use std::time::Instant;

use libc::{c_int, c_void, msghdr, sockaddr, socklen_t};

use crate::fdtable;
use crate::real;
use crate::wait::{self, changed, errno, set_errno, Dir};

/// The socket's own timeout for `dir` (`SO_RCVTIMEO`/`SO_SNDTIMEO`), as a
/// deadline on the runtime's clock.
fn socket_deadline(fd: c_int, dir: Dir) -> Option<Instant> {
    if fdtable::has_timeout(fd, dir == Dir::Read) == Some(false) {
        return None;
    }
    let opt = match dir {
        Dir::Read => libc::SO_RCVTIMEO,
        Dir::Write => libc::SO_SNDTIMEO,
    };
    let mut tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    let mut len = std::mem::size_of::<libc::timeval>() as socklen_t;
    // SAFETY: valid out-pointers of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&mut tv as *mut libc::timeval).cast(),
            &mut len,
        )
    };
    if rc != 0 || (tv.tv_sec == 0 && tv.tv_usec == 0) {
        return None;
    }
    let d = std::time::Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000);
    wait::deadline_in(d)
}

/// Whether an `EAGAIN` is the caller's answer: it asked for non-blocking
/// I/O, per call or on the fd.
fn caller_wants_eagain(fd: c_int, flags: c_int) -> bool {
    flags & libc::MSG_DONTWAIT != 0 || fdtable::is_nonblocking(fd)
}

/// Runs `op` (one socket call, given the extra flags to add) for a fiber:
/// tries it without blocking and waits for readiness between tries. Returns
/// `op`'s result, or -1 with `errno` set.
fn on_fiber(
    call: &'static str,
    fd: c_int,
    dir: Dir,
    flags: c_int,
    mut op: impl FnMut(c_int) -> isize,
) -> isize {
    let mut deadline = None;
    let mut first_wait = true;
    loop {
        let n = op(libc::MSG_DONTWAIT);
        if n >= 0 {
            return n;
        }
        let e = errno();
        if e != libc::EAGAIN {
            if e == libc::ENOTSOCK {
                fdtable::not_a_socket(fd);
            }
            return -1;
        }
        if caller_wants_eagain(fd, flags) {
            set_errno(libc::EAGAIN);
            return -1;
        }
        if first_wait {
            deadline = socket_deadline(fd, dir);
            first_wait = false;
        }
        if let Err(e) = wait::fd(call, fd, dir, deadline) {
            set_errno(e);
            return -1;
        }
    }
}

/// A blocking send queues every byte, and a `MSG_WAITALL` receive fills
/// its buffer: repeat `op(offset, extra_flags)` until `len` bytes are done.
/// A failure after some bytes returns their count, as the kernel's blocking
/// call does on a timeout; 0 ends it (the peer closed, or a datagram went
/// whole); a non-blocking caller gets what one call did.
fn whole(
    call: &'static str,
    fd: c_int,
    dir: Dir,
    len: usize,
    flags: c_int,
    mut op: impl FnMut(usize, c_int) -> isize,
) -> isize {
    let mut done = 0usize;
    loop {
        let n = on_fiber(call, fd, dir, flags, |extra| op(done, extra));
        if n < 0 {
            return if done > 0 { done as isize } else { -1 };
        }
        done += n as usize;
        if done >= len || n == 0 || caller_wants_eagain(fd, flags) {
            return done as isize;
        }
    }
}

/// Hooked `recv`.
///
/// # Safety
///
/// libc's contract: `buf` is valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: usize, flags: c_int) -> isize {
    // SAFETY: the caller's arguments, passed on.
    unsafe {
        recvfrom(
            fd,
            buf,
            n,
            flags,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    }
}

/// Hooked `recvfrom`.
///
/// # Safety
///
/// libc's contract: `buf` valid for `n` bytes, `addr`/`len` null or valid.
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> isize {
    if !changed() {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::recvfrom(fd, buf, n, flags, addr, len) };
    }
    // SAFETY: the caller's arguments, at an offset inside its buffer.
    let op = |off: usize, extra: c_int| unsafe {
        real::recvfrom(
            fd,
            buf.cast::<u8>().add(off).cast(),
            n - off,
            (flags & !libc::MSG_WAITALL) | extra,
            addr,
            len,
        )
    };
    if flags & libc::MSG_WAITALL != 0 && n > 0 {
        whole("hooked recv", fd, Dir::Read, n, flags, op)
    } else {
        on_fiber("hooked recv", fd, Dir::Read, flags, |extra| op(0, extra))
    }
}

/// Hooked `recvmsg`.
///
/// # Safety
///
/// libc's contract: `msg` describes valid buffers.
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> isize {
    if !changed() {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::recvmsg(fd, msg, flags) };
    }
    on_fiber("hooked recvmsg", fd, Dir::Read, flags, |extra| {
        // SAFETY: the caller's arguments, passed on.
        unsafe { real::recvmsg(fd, msg, flags | extra) }
    })
}

/// Hooked `send`.
///
/// # Safety
///
/// libc's contract: `buf` is valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: usize, flags: c_int) -> isize {
    // SAFETY: the caller's arguments, passed on.
    unsafe { sendto(fd, buf, n, flags, std::ptr::null(), 0) }
}

/// Hooked `sendto`.
///
/// # Safety
///
/// libc's contract: `buf` valid for `n` bytes, `addr` null or valid for `len`.
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: usize,
    flags: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> isize {
    if !changed() {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::sendto(fd, buf, n, flags, addr, len) };
    }
    whole("hooked send", fd, Dir::Write, n, flags, |off, extra| {
        // SAFETY: the caller's buffer, at an offset inside it.
        unsafe {
            real::sendto(
                fd,
                buf.cast::<u8>().add(off).cast(),
                n - off,
                flags | extra,
                addr,
                len,
            )
        }
    })
}

/// `sendmsg` of the bytes past `skip` of `msg`'s buffers, with `flags`.
/// Ancillary data goes with the first bytes only.
///
/// # Safety
///
/// `msg` describes valid buffers.
unsafe fn sendmsg_from(fd: c_int, msg: *const msghdr, skip: usize, flags: c_int) -> isize {
    if skip == 0 {
        // SAFETY: the caller's message, whole.
        return unsafe { real::sendmsg(fd, msg, flags) };
    }
    // SAFETY: the caller's message and its iovec array are valid.
    let (m, iov) = unsafe {
        let m = &*msg;
        (m, std::slice::from_raw_parts(m.msg_iov, m.msg_iovlen))
    };
    let mut rest: Vec<libc::iovec> = Vec::with_capacity(iov.len());
    let mut left = skip;
    for v in iov {
        if left >= v.iov_len {
            left -= v.iov_len;
            continue;
        }
        rest.push(libc::iovec {
            // SAFETY: `left` is inside this buffer.
            iov_base: unsafe { v.iov_base.cast::<u8>().add(left).cast() },
            iov_len: v.iov_len - left,
        });
        left = 0;
    }
    // SAFETY: an all-zero msghdr is valid; the fields set point at live data.
    let mut tail: msghdr = unsafe { std::mem::zeroed() };
    tail.msg_name = m.msg_name;
    tail.msg_namelen = m.msg_namelen;
    tail.msg_iov = rest.as_mut_ptr();
    tail.msg_iovlen = rest.len();
    // SAFETY: `tail` describes the rest of the caller's buffers.
    unsafe { real::sendmsg(fd, &tail, flags) }
}

/// The total length of `msg`'s buffers.
///
/// # Safety
///
/// `iov` points at `n` valid iovecs.
unsafe fn iov_len(iov: *const libc::iovec, n: usize) -> usize {
    if iov.is_null() || n == 0 {
        return 0;
    }
    // SAFETY: the caller's iovec array.
    unsafe { std::slice::from_raw_parts(iov, n) }
        .iter()
        .map(|v| v.iov_len)
        .sum()
}

/// Hooked `sendmsg`.
///
/// # Safety
///
/// libc's contract: `msg` describes valid buffers.
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> isize {
    if !changed() {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::sendmsg(fd, msg, flags) };
    }
    // SAFETY: the caller's message.
    let total = unsafe { iov_len((*msg).msg_iov, (*msg).msg_iovlen) };
    whole(
        "hooked sendmsg",
        fd,
        Dir::Write,
        total,
        flags,
        |off, extra| {
            // SAFETY: the caller's message.
            unsafe { sendmsg_from(fd, msg, off, flags | extra) }
        },
    )
}

/// `op`, a socket call standing for a plain one; if the fd turns out not
/// to be a socket (the table was stale, and is corrected), `plain` — libc's
/// own call — instead.
fn as_socket(op: impl FnOnce() -> isize, plain: impl FnOnce() -> isize) -> isize {
    let r = op();
    if r < 0 && errno() == libc::ENOTSOCK {
        plain()
    } else {
        r
    }
}

/// A message over the caller's `n` buffers, for `recvmsg`/`sendmsg`.
fn message_of(iov: *const libc::iovec, n: c_int) -> msghdr {
    // SAFETY: an all-zero msghdr is valid.
    let mut msg: msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.cast_mut();
    msg.msg_iovlen = n as usize;
    msg
}

/// Hooked `read`: sockets are read as `recv` with no flags.
///
/// # Safety
///
/// libc's contract: `buf` is valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize {
    // SAFETY: the caller's arguments, passed on.
    let plain = || unsafe { real::read(fd, buf, n) };
    if !changed() || !fdtable::is_socket(fd) {
        return plain();
    }
    // SAFETY: the caller's buffer.
    let recv = |extra| unsafe { real::recv(fd, buf, n, extra) };
    as_socket(|| on_fiber("hooked read", fd, Dir::Read, 0, recv), plain)
}

/// Hooked `__read_chk` (`read` under `_FORTIFY_SOURCE`).
///
/// # Safety
///
/// libc's contract.
#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, n: usize, buflen: usize) -> isize {
    if n > buflen || !changed() {
        // SAFETY: libc's own check (it aborts on an overflow).
        return unsafe { real::__read_chk(fd, buf, n, buflen) };
    }
    // SAFETY: checked above: `n` fits the buffer.
    unsafe { read(fd, buf, n) }
}

/// Hooked `__recv_chk`.
///
/// # Safety
///
/// libc's contract.
#[no_mangle]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    buflen: usize,
    flags: c_int,
) -> isize {
    if n > buflen || !changed() {
        // SAFETY: libc's own check.
        return unsafe { real::__recv_chk(fd, buf, n, buflen, flags) };
    }
    // SAFETY: checked above.
    unsafe { recv(fd, buf, n, flags) }
}

/// Hooked `__recvfrom_chk`.
///
/// # Safety
///
/// libc's contract.
#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    buflen: usize,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> isize {
    if n > buflen || !changed() {
        // SAFETY: libc's own check.
        return unsafe { real::__recvfrom_chk(fd, buf, n, buflen, flags, addr, len) };
    }
    // SAFETY: checked above.
    unsafe { recvfrom(fd, buf, n, flags, addr, len) }
}

/// Hooked `write`: sockets are written as `send` with no flags (so a reset
/// peer still raises `SIGPIPE`).
///
/// # Safety
///
/// libc's contract: `buf` is valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: usize) -> isize {
    // SAFETY: the caller's arguments, passed on.
    let plain = || unsafe { real::write(fd, buf, n) };
    if !changed() || !fdtable::is_socket(fd) {
        return plain();
    }
    // SAFETY: the caller's buffer, at an offset inside it.
    let send = |off: usize, extra| unsafe {
        real::send(fd, buf.cast::<u8>().add(off).cast(), n - off, extra)
    };
    as_socket(|| whole("hooked write", fd, Dir::Write, n, 0, send), plain)
}

/// Hooked `readv`: sockets are read as `recvmsg`.
///
/// # Safety
///
/// libc's contract: `iov` points at `n` valid buffers.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    // SAFETY: the caller's arguments, passed on.
    let plain = || unsafe { real::readv(fd, iov, n) };
    if !changed() || n < 0 || !fdtable::is_socket(fd) {
        return plain();
    }
    let mut msg = message_of(iov, n);
    // SAFETY: `msg` describes the caller's buffers.
    let recv = |extra| unsafe { real::recvmsg(fd, &mut msg, extra) };
    as_socket(|| on_fiber("hooked readv", fd, Dir::Read, 0, recv), plain)
}

/// Hooked `writev`: sockets are written as `sendmsg`, every byte.
///
/// # Safety
///
/// libc's contract: `iov` points at `n` valid buffers.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    // SAFETY: the caller's arguments, passed on.
    let plain = || unsafe { real::writev(fd, iov, n) };
    if !changed() || n < 0 || !fdtable::is_socket(fd) {
        return plain();
    }
    let msg = message_of(iov, n);
    // SAFETY: the caller's iovec array.
    let total = unsafe { iov_len(iov, n as usize) };
    // SAFETY: `msg` describes the caller's buffers.
    let send = |off, extra| unsafe { sendmsg_from(fd, &msg, off, extra) };
    as_socket(
        || whole("hooked writev", fd, Dir::Write, total, 0, send),
        plain,
    )
}

/// Hooked `connect`.
///
/// # Safety
///
/// libc's contract: `addr` is valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    if !changed() || fdtable::is_nonblocking(fd) {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::connect(fd, addr, len) };
    }
    // SAFETY: F_GETFL/F_SETFL with int arguments on the caller's fd.
    let flags = unsafe { real::fcntl(fd, libc::F_GETFL, 0) };
    if flags < 0 {
        return -1;
    }
    let deadline = socket_deadline(fd, Dir::Write);
    let mut backoff = std::time::Duration::from_millis(1);
    loop {
        // SAFETY: as above.
        unsafe { real::fcntl(fd, libc::F_SETFL, (flags | libc::O_NONBLOCK) as usize) };
        // SAFETY: the caller's arguments, passed on.
        let rc = unsafe { real::connect(fd, addr, len) };
        let e = errno();
        // SAFETY: as above: the owner's flags, back before anything waits.
        unsafe { real::fcntl(fd, libc::F_SETFL, flags as usize) };
        if rc == 0 || e == libc::EINPROGRESS {
            if rc == 0 {
                return 0;
            }
            break;
        }
        if e != libc::EAGAIN {
            set_errno(e);
            return rc;
        }
        // A Unix socket whose listener's backlog is full: a blocking
        // connect waits for room, with no readiness to wait on. Retry.
        if deadline.is_some_and(|d| d <= spindle::time::now()) {
            return wait::fail(libc::EAGAIN);
        }
        if let Err(e) = wait::sleep("hooked connect", backoff) {
            return wait::fail(e);
        }
        backoff = (backoff * 2).min(std::time::Duration::from_millis(50));
    }
    // Connecting: wait until it is writable for real, then read its fate.
    loop {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        if unsafe { real::poll(&mut p, 1, 0) } > 0 {
            break;
        }
        match wait::fd("hooked connect", fd, Dir::Write, deadline) {
            Ok(()) => {}
            // The kernel's blocking connect ends its send timeout this way.
            Err(libc::EAGAIN) => return wait::fail(libc::EINPROGRESS),
            Err(e) => return wait::fail(e),
        }
    }
    let mut err: c_int = 0;
    let mut l = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: valid out-pointers of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut c_int).cast(),
            &mut l,
        )
    };
    if rc < 0 {
        return -1;
    }
    if err != 0 {
        return wait::fail(err);
    }
    0
}

/// Hooked `accept`.
///
/// # Safety
///
/// libc's contract: `addr`/`len` null or valid.
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    unsafe { accept4(fd, addr, len, 0) }
}

/// Hooked `accept4`.
///
/// # Safety
///
/// libc's contract: `addr`/`len` null or valid.
#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    if changed() && !fdtable::is_nonblocking(fd) {
        let deadline = socket_deadline(fd, Dir::Read);
        loop {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, no wait.
            if unsafe { real::poll(&mut p, 1, 0) } > 0 {
                break;
            }
            if let Err(e) = wait::fd("hooked accept", fd, Dir::Read, deadline) {
                return wait::fail(e);
            }
        }
    }
    // SAFETY: the caller's arguments, passed on.
    let new = unsafe { real::accept4(fd, addr, len, flags) };
    if new >= 0 {
        crate::fds::made(new);
        fdtable::created_socket(new, flags & libc::SOCK_NONBLOCK != 0);
    }
    new
}

/// Hooked `setsockopt`: libc's, and the fd table learns of socket timeouts.
///
/// # Safety
///
/// libc's contract: `value` is valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *const c_void,
    len: socklen_t,
) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real::setsockopt(fd, level, name, value, len) };
    // The 64-bit-time names (SO_RCVTIMEO_NEW, SO_SNDTIMEO_NEW) take the
    // same two 64-bit words on the 64-bit targets.
    const RCV_NEW: c_int = 66;
    const SND_NEW: c_int = 67;
    let receive = name == libc::SO_RCVTIMEO || name == RCV_NEW;
    let send = name == libc::SO_SNDTIMEO || name == SND_NEW;
    if r == 0 && level == libc::SOL_SOCKET && (receive || send) {
        let on = len as usize >= std::mem::size_of::<libc::timeval>() && !value.is_null() && {
            // SAFETY: the kernel just read a timeval from here.
            let tv = unsafe { &*value.cast::<libc::timeval>() };
            tv.tv_sec != 0 || tv.tv_usec != 0
        };
        fdtable::timeout_set(fd, receive, on);
    }
    r
}
