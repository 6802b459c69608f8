//! libc's own entry points, the ones this crate's definitions hide.
//!
//! Every symbol this crate defines (`recv`, `poll`, …) shadows libc's for
//! the whole process, so calling `libc::recv` from here would call
//! ourselves. The real functions are found with `dlsym(RTLD_NEXT, …)` — the
//! next definition after the executable's, which is libc's — once, by a
//! load-time constructor, before `main` and before any thread exists. A
//! call made earlier still (another library's constructor) resolves its
//! function on the spot. At call time this is one atomic load: no lock, no
//! allocation, no `dlsym`, so it is safe in a signal handler.

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_int, c_void};

/// One resolved entry point: its name and, once found, its address.
pub(crate) struct Real {
    name: &'static CStr,
    addr: AtomicUsize,
}

impl Real {
    const fn new(name: &'static CStr) -> Real {
        Real {
            name,
            addr: AtomicUsize::new(0),
        }
    }

    /// The function's address (resolved now if the constructor has not
    /// run yet).
    #[inline]
    pub(crate) fn get(&self) -> usize {
        let a = self.addr.load(Ordering::Acquire);
        if a != 0 {
            return a;
        }
        self.resolve()
    }

    #[cold]
    fn resolve(&self) -> usize {
        // SAFETY: `name` is a NUL-terminated C string; RTLD_NEXT asks for the
        // definition after this object's, which is libc's own.
        let a = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) } as usize;
        if a == 0 {
            // libc always defines these; without one nothing can go on.
            // Said with the bare system call: `write` itself may be the
            // one missing.
            let msg = b"spindle-hook: libc does not define a hooked function\n";
            // SAFETY: a valid buffer of `msg.len()` bytes; fd 2 or nothing.
            unsafe { libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len()) };
            std::process::abort();
        }
        self.addr.store(a, Ordering::Release);
        a
    }
}

/// Declares each real function as a typed, `unsafe` Rust function of the
/// same name (called as `real::recv(...)`).
macro_rules! real_functions {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty; )*) => {
        mod addr {
            $( #[allow(non_upper_case_globals)]
               pub(crate) static $name: super::Real = super::Real::new(
                   match std::ffi::CStr::from_bytes_with_nul(
                       concat!(stringify!($name), "\0").as_bytes(),
                   ) {
                       Ok(c) => c,
                       Err(_) => panic!("a function name has no NUL inside"),
                   }); )*
        }

        /// Resolves every real function (the load-time constructor).
        fn resolve_all() {
            $( addr::$name.get(); )*
        }

        $(
            /// libc's own function of this name.
            ///
            /// # Safety
            ///
            /// As libc's: the caller upholds its contract for the pointers.
            #[inline]
            pub(crate) unsafe fn $name($($arg: $ty),*) -> $ret {
                let f = addr::$name.get();
                // SAFETY: `f` is libc's definition of this very symbol, whose
                // C signature the declaration above repeats.
                unsafe {
                    let f: unsafe extern "C" fn($($ty),*) -> $ret =
                        std::mem::transmute::<usize, _>(f);
                    f($($arg),*)
                }
            }
        )*
    };
}

real_functions! {
    read(fd: c_int, buf: *mut c_void, n: usize) -> isize;
    write(fd: c_int, buf: *const c_void, n: usize) -> isize;
    readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize;
    writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize;
    recv(fd: c_int, buf: *mut c_void, n: usize, flags: c_int) -> isize;
    recvfrom(fd: c_int, buf: *mut c_void, n: usize, flags: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> isize;
    recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> isize;
    send(fd: c_int, buf: *const c_void, n: usize, flags: c_int) -> isize;
    sendto(fd: c_int, buf: *const c_void, n: usize, flags: c_int, addr: *const libc::sockaddr, len: libc::socklen_t) -> isize;
    sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> isize;
    connect(fd: c_int, addr: *const libc::sockaddr, len: libc::socklen_t) -> c_int;
    accept4(fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t, flags: c_int) -> c_int;
    socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int;
    sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int;
    setsockopt(fd: c_int, level: c_int, name: c_int, value: *const c_void, len: libc::socklen_t) -> c_int;
    socketpair(domain: c_int, ty: c_int, protocol: c_int, sv: *mut c_int) -> c_int;
    poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int;
    ppoll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: *const libc::timespec, mask: *const libc::sigset_t) -> c_int;
    select(n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, timeout: *mut libc::timeval) -> c_int;
    pselect(n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, timeout: *const libc::timespec, mask: *const libc::sigset_t) -> c_int;
    epoll_wait(epfd: c_int, events: *mut libc::epoll_event, max: c_int, timeout: c_int) -> c_int;
    epoll_pwait(epfd: c_int, events: *mut libc::epoll_event, max: c_int, timeout: c_int, mask: *const libc::sigset_t) -> c_int;
    nanosleep(req: *const libc::timespec, rem: *mut libc::timespec) -> c_int;
    clock_nanosleep(clock: libc::clockid_t, flags: c_int, req: *const libc::timespec, rem: *mut libc::timespec) -> c_int;
    usleep(us: libc::useconds_t) -> c_int;
    sleep(secs: libc::c_uint) -> libc::c_uint;
    getaddrinfo(node: *const libc::c_char, service: *const libc::c_char, hints: *const libc::addrinfo, res: *mut *mut libc::addrinfo) -> c_int;
    close(fd: c_int) -> c_int;
    dup(fd: c_int) -> c_int;
    dup2(old: c_int, new: c_int) -> c_int;
    dup3(old: c_int, new: c_int, flags: c_int) -> c_int;
    __poll_chk(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int, fdslen: usize) -> c_int;
    __read_chk(fd: c_int, buf: *mut c_void, n: usize, buflen: usize) -> isize;
    __recv_chk(fd: c_int, buf: *mut c_void, n: usize, buflen: usize, flags: c_int) -> isize;
    __recvfrom_chk(fd: c_int, buf: *mut c_void, n: usize, buflen: usize, flags: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> isize;
}

static FCNTL: Real = Real::new(c"fcntl");
static IOCTL: Real = Real::new(c"ioctl");

/// libc's `fcntl`, its third argument passed as a word (every command's
/// argument is an `int` or a pointer).
///
/// # Safety
///
/// As libc's: `arg` must be what `cmd` expects.
pub(crate) unsafe fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: libc's variadic `fcntl`, called as C calls it.
    unsafe {
        let f: unsafe extern "C" fn(c_int, c_int, ...) -> c_int =
            std::mem::transmute::<usize, _>(FCNTL.get());
        f(fd, cmd, arg)
    }
}

/// libc's `ioctl`, its third argument passed as a word.
///
/// # Safety
///
/// As libc's: `arg` must be what `req` expects.
pub(crate) unsafe fn ioctl(fd: c_int, req: libc::c_ulong, arg: usize) -> c_int {
    // SAFETY: libc's variadic `ioctl`, called as C calls it.
    unsafe {
        let f: unsafe extern "C" fn(c_int, libc::c_ulong, ...) -> c_int =
            std::mem::transmute::<usize, _>(IOCTL.get());
        f(fd, req, arg)
    }
}

/// Resolves every real function before `main` (and before any thread):
/// afterwards a call never needs `dlsym`.
#[used]
#[link_section = ".init_array"]
static RESOLVE_AT_LOAD: extern "C" fn() = {
    extern "C" fn resolve_at_load() {
        resolve_all();
        FCNTL.get();
        IOCTL.get();
    }
    resolve_at_load
};
