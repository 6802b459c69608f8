//! Stack-overflow reports: a `SIGSEGV`/`SIGBUS` handler on an alternate
//! signal stack that names the fiber whose guard page was hit.
//!
//! A fiber that overflows its stack touches the guard page below it (Rust
//! emits stack probes, so a large frame cannot jump over it). The fault is
//! delivered on the worker's alternate signal stack, since the fiber's own
//! stack is exhausted. The handler compares the fault address with the guard
//! of the fiber running on this thread; on a match it writes one line —
//! `spindle: fiber 17 "conn-handler" overflowed its 256 KiB stack` — and
//! aborts. Anything else is passed to the handler installed before ours
//! (Rust's own main-thread overflow handler, wasmtime's trap handler, …) so
//! that neither breaks the other; with no previous handler the default
//! action is restored and the fault retried, which kills the process as it
//! would have without us.
//!
//! The handler allocates nothing and takes no lock: it formats into a buffer
//! on the signal stack and calls `write(2)` and `abort(3)`.

use std::fmt::Write as _;
use std::mem::MaybeUninit;
use std::sync::Once;

use super::FiberHeader;

static INSTALL: Once = Once::new();
static mut PREVIOUS_SEGV: MaybeUninit<libc::sigaction> = MaybeUninit::uninit();
static mut PREVIOUS_BUS: MaybeUninit<libc::sigaction> = MaybeUninit::uninit();

/// Installs the overflow handler for the whole process (idempotent).
///
/// Runtimes install it when they are built. A program that also embeds a
/// library with its own `SIGSEGV` handler (wasmtime, say) should call this
/// before that library installs its handler, so the library's handler is
/// the one that chains to ours for faults that are not fiber overflows —
/// or after, in which case ours chains to it; either order works.
///
/// ```
/// spindle::install_overflow_handler();
/// ```
pub fn install_overflow_handler() {
    INSTALL.call_once(|| {
        // SAFETY: the sigaction structs are fully initialised before use;
        // PREVIOUS_* are written exactly once, here, before the handler that
        // reads them can run (it is installed by this same sigaction call,
        // which stores the previous action first).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fault as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(
                libc::SIGSEGV,
                &action,
                (&raw mut PREVIOUS_SEGV).cast::<libc::sigaction>(),
            );
            libc::sigaction(
                libc::SIGBUS,
                &action,
                (&raw mut PREVIOUS_BUS).cast::<libc::sigaction>(),
            );
        }
    });
}

/// An alternate signal stack for the current thread, if it has none yet.
/// Kept for the thread's life (workers live as long as their runtime).
pub(crate) struct AltStack {
    mapping: Option<(usize, usize)>,
}

impl AltStack {
    pub(crate) fn ensure() -> AltStack {
        const SIZE: usize = 64 << 10;
        // SAFETY: sigaltstack with a null new stack only reads the current one.
        unsafe {
            let mut old: libc::stack_t = std::mem::zeroed();
            if libc::sigaltstack(std::ptr::null(), &mut old) == 0
                && old.ss_flags & libc::SS_DISABLE == 0
            {
                return AltStack { mapping: None };
            }
        }
        let page = super::stack::page_size();
        // SAFETY: a fresh anonymous mapping; the page at its bottom becomes a
        // guard, the rest is handed to the kernel as this thread's signal
        // stack and stays mapped until `drop` disables it again.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                SIZE + page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return AltStack { mapping: None };
            }
            libc::mprotect(base, page, libc::PROT_NONE);
            let stack = libc::stack_t {
                ss_sp: base.cast::<u8>().add(page).cast(),
                ss_flags: 0,
                ss_size: SIZE,
            };
            libc::sigaltstack(&stack, std::ptr::null_mut());
            AltStack {
                mapping: Some((base as usize, SIZE + page)),
            }
        }
    }
}

impl Drop for AltStack {
    fn drop(&mut self) {
        if let Some((base, len)) = self.mapping {
            // SAFETY: disables the stack we installed on this thread, then
            // unmaps it; no signal handler can be running on it now since we
            // are on the thread's normal stack.
            unsafe {
                let disable = libc::stack_t {
                    ss_sp: std::ptr::null_mut(),
                    ss_flags: libc::SS_DISABLE,
                    ss_size: 0,
                };
                libc::sigaltstack(&disable, std::ptr::null_mut());
                libc::munmap(base as *mut _, len);
            }
        }
    }
}

/// A fixed buffer that `fmt::Write` fills without allocating.
struct LineBuf {
    buf: [u8; 512],
    len: usize,
}

impl std::fmt::Write for LineBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    let running: *const FiberHeader = super::running_header();
    if !running.is_null() {
        // SAFETY: the running fiber's header is kept alive by its worker for
        // as long as it is the running fiber on this thread.
        let fiber = unsafe { &*running };
        let (guard, guard_len, size) = fiber.guard();
        // A probe may land a little below the guard page on a big frame.
        if guard != 0 && addr >= guard.saturating_sub(64 << 10) && addr < guard + guard_len {
            let mut line = LineBuf {
                buf: [0; 512],
                len: 0,
            };
            let _ = write!(line, "\nspindle: fiber {}", fiber.id);
            if let Some(name) = fiber.name() {
                let _ = write!(line, " \"{name}\"");
            }
            let _ = writeln!(
                line,
                " overflowed its {} KiB stack (raise it with Builder::stack_size \
                 or RuntimeBuilder::stack_size)",
                size >> 10
            );
            // SAFETY: write(2) and abort(3) are async-signal-safe.
            unsafe {
                libc::write(2, line.buf.as_ptr().cast(), line.len);
                libc::abort();
            }
        }
    }
    // Not ours: hand the fault to whoever was there before.
    // SAFETY: PREVIOUS_* were written before this handler was installed and
    // are never written again.
    let previous: libc::sigaction = unsafe {
        if sig == libc::SIGBUS {
            std::ptr::read(&raw const PREVIOUS_BUS).assume_init()
        } else {
            std::ptr::read(&raw const PREVIOUS_SEGV).assume_init()
        }
    };
    match previous.sa_sigaction {
        libc::SIG_DFL | libc::SIG_IGN => {
            // SAFETY: restoring the default action and returning re-executes
            // the faulting instruction, which now terminates the process with
            // the original signal.
            unsafe {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        handler if previous.sa_flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: the previous handler was registered as a three-argument
            // SA_SIGINFO handler, so this is its real signature.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(handler) };
            f(sig, info, ctx);
        }
        handler => {
            // SAFETY: without SA_SIGINFO the previous handler takes one int.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
            f(sig);
        }
    }
}
