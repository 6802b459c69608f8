//! A stream socket's data calls — `recv`, `send` and their vectored forms —
//! made as plain system calls rather than through libc's functions.
//!
//! Two reasons. glibc makes each of these functions a thread-cancellation
//! point: every call is bracketed by two atomic updates of the thread's
//! cancellation state, which a socket that never blocks has no use for —
//! at two calls per served HTTP request that bracket was more than 1 % of
//! the request's instructions. And a process that links `spindle-hook`
//! defines those symbols itself, so through libc Spindle's own sockets,
//! non-blocking already, would pass through the hook on every call.
//!
//! The calls and flags are std's (`send` with `MSG_NOSIGNAL`, so a closed
//! peer is `EPIPE`, never a `SIGPIPE`), and so are the errors: the
//! kernel's, as `io::Error::last_os_error()`.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::RawFd;
use std::ptr;

/// The most bytes one call is asked to move (as std caps them).
const MAX_LEN: usize = isize::MAX as usize;

/// The most buffers one vectored call passes (Linux's `UIO_MAXIOV`; std
/// caps them the same way).
const MAX_IOV: usize = 1024;

fn cvt(rc: libc::c_long) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// `recv(fd, buf, flags)`: `flags` 0 to read, `MSG_PEEK` to look.
pub(super) fn recv(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    let len = buf.len().min(MAX_LEN);
    // SAFETY: the kernel writes at most `len` bytes into `buf`, which is
    // valid for writes of that many and borrowed exclusively for the call;
    // no address is asked for (both address pointers null). Every integer
    // goes through the variadic call as a full `long`.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            fd as libc::c_long,
            buf.as_mut_ptr(),
            len,
            flags as libc::c_long,
            ptr::null_mut::<libc::sockaddr>(),
            ptr::null_mut::<libc::socklen_t>(),
        )
    })
}

/// `send(fd, buf, MSG_NOSIGNAL)`.
pub(super) fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    let len = buf.len().min(MAX_LEN);
    // SAFETY: the kernel reads at most `len` bytes of `buf`, valid for the
    // call; no destination address (null, length 0).
    cvt(unsafe {
        libc::syscall(
            libc::SYS_sendto,
            fd as libc::c_long,
            buf.as_ptr(),
            len,
            libc::MSG_NOSIGNAL as libc::c_long,
            ptr::null::<libc::sockaddr>(),
            0 as libc::c_long,
        )
    })
}

/// `readv(fd, bufs)`.
pub(super) fn recv_vectored(fd: RawFd, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
    let count = bufs.len().min(MAX_IOV);
    // SAFETY: `IoSliceMut` is ABI-compatible with `iovec` (std guarantees
    // it on Unix); the kernel writes only into those buffers, each valid
    // and exclusively borrowed for the call, and reads `count` entries.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_readv,
            fd as libc::c_long,
            bufs.as_mut_ptr().cast::<libc::iovec>(),
            count as libc::c_long,
        )
    })
}

/// `sendmsg(fd, bufs, MSG_NOSIGNAL)`: a `writev` that cannot raise
/// `SIGPIPE`.
pub(super) fn send_vectored(fd: RawFd, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: an all-zero `msghdr` is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = bufs.as_ptr().cast::<libc::iovec>().cast_mut();
    msg.msg_iovlen = bufs.len().min(MAX_IOV) as _;
    // SAFETY: `IoSlice` is ABI-compatible with `iovec`; the kernel only
    // reads the `msg_iovlen` entries and their buffers, valid for the call
    // (the `cast_mut` is for the C type: nothing is written through it).
    cvt(unsafe {
        libc::syscall(
            libc::SYS_sendmsg,
            fd as libc::c_long,
            &msg as *const libc::msghdr,
            libc::MSG_NOSIGNAL as libc::c_long,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn bytes_go_across_whole_and_vectored_and_a_peek_leaves_them() {
        let (a, b) = UnixStream::pair().unwrap();
        assert_eq!(send(a.as_raw_fd(), b"hello").unwrap(), 5);
        let mut buf = [0u8; 8];
        assert_eq!(recv(b.as_raw_fd(), &mut buf, libc::MSG_PEEK).unwrap(), 5);
        assert_eq!(recv(b.as_raw_fd(), &mut buf, 0).unwrap(), 5);
        assert_eq!(&buf[..5], b"hello");
        let n = send_vectored(a.as_raw_fd(), &[IoSlice::new(b"ab"), IoSlice::new(b"cde")]);
        assert_eq!(n.unwrap(), 5);
        let (mut x, mut y) = ([0u8; 2], [0u8; 8]);
        let n = recv_vectored(
            b.as_raw_fd(),
            &mut [IoSliceMut::new(&mut x), IoSliceMut::new(&mut y)],
        );
        assert_eq!(n.unwrap(), 5);
        assert_eq!((&x, &y[..3]), (b"ab", &b"cde"[..]));
    }

    #[test]
    fn errors_are_the_kernels() {
        let (a, b) = UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let err = recv(b.as_raw_fd(), &mut [0u8; 4], 0).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        drop(b);
        // The peer is gone: EPIPE (that no SIGPIPE comes with it is checked
        // where the signal would kill: `tests/net_tcp.rs`).
        let err = send(a.as_raw_fd(), b"x").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPIPE));
        let err = send_vectored(a.as_raw_fd(), &[IoSlice::new(b"x")]).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPIPE));
        assert_eq!(
            recv(-1, &mut [0u8; 1], 0).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
    }
}
