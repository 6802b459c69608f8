//! The system calls under fiber stacks: mapping a region, installing a
//! guard page (by `MADV_GUARD_INSTALL` where it really guards, else
//! `mprotect`), advising many slots in one `process_madvise`, giving pages
//! back, and turning an `ENOMEM` into an error that names the limit hit.
//! Everything here works on plain address ranges; what a range is for is
//! `class.rs`'s business.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// `madvise` advice that installs guard markers (Linux 6.13, uapi value).
pub(super) const MADV_GUARD_INSTALL: libc::c_int = 102;

/// Whether `MADV_GUARD_INSTALL` works here; cleared at the first `EINVAL`.
static GUARD_BY_MADVISE: AtomicBool = AtomicBool::new(true);

/// Whether guards installed with `MADV_GUARD_INSTALL` really guard: the
/// advice is accepted *and* a guarded page faults. An emulator (QEMU user
/// mode) accepts advice it does not know and does nothing, which would
/// leave stacks without guards; there the `mprotect` fallback is used.
/// Probed once; later calls read the answer.
fn guard_by_madvise() -> bool {
    static PROBED: OnceLock<()> = OnceLock::new();
    PROBED.get_or_init(|| {
        if !probe_guard_install() {
            GUARD_BY_MADVISE.store(false, Ordering::Relaxed);
        }
    });
    GUARD_BY_MADVISE.load(Ordering::Relaxed)
}

/// Installs a guard on a scratch page and checks that the kernel refuses
/// to read it (a `write` from it to a pipe fails with `EFAULT`).
fn probe_guard_install() -> bool {
    let page = page_size();
    // SAFETY: a fresh private anonymous page, ours alone, unmapped below.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return false;
    }
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `addr` is the page just mapped; `fds` has room for two fds.
    let guarded = unsafe {
        libc::madvise(addr, page, MADV_GUARD_INSTALL) == 0
            && libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) == 0
            && {
                let n = libc::write(fds[1], addr, 1);
                let faulted =
                    n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EFAULT);
                libc::close(fds[0]);
                libc::close(fds[1]);
                faulted
            }
    };
    // SAFETY: unmaps only the scratch page.
    unsafe { libc::munmap(addr, page) };
    guarded
}

/// The system's page size, read once.
pub(crate) fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize })
}

/// Whether `process_madvise` takes `MADV_GUARD_INSTALL` for this process
/// (Linux ≥ 6.13); cleared at its first failure.
static GUARD_BATCH: AtomicBool = AtomicBool::new(true);

/// `MADV_POPULATE_WRITE` (Linux 5.14): fault pages in, writable.
pub(super) const MADV_POPULATE_WRITE: libc::c_int = 23;

/// Applies `advice` to `[slot_start + offset, +len)` of each of `slots`
/// slots of `slot` bytes from `base`, with `process_madvise` on this
/// process (Linux ≥ 6.13 takes any advice for the caller itself), up to
/// 1024 ranges a call. False (nothing to rely on) if the kernel cannot.
pub(super) fn advise_slots_batch(
    base: usize,
    slots: usize,
    slot: usize,
    offset: usize,
    len: usize,
    advice: libc::c_int,
) -> bool {
    if !GUARD_BATCH.load(Ordering::Relaxed) || !guard_by_madvise() {
        return false;
    }
    static PIDFD: OnceLock<libc::c_int> = OnceLock::new();
    let pidfd = *PIDFD.get_or_init(|| {
        // SAFETY: pidfd_open takes plain integers; -1 on failure.
        unsafe {
            libc::syscall(
                SYS_PIDFD_OPEN,
                libc::getpid() as libc::c_long,
                0 as libc::c_long,
            ) as libc::c_int
        }
    });
    if pidfd < 0 {
        GUARD_BATCH.store(false, Ordering::Relaxed);
        return false;
    }
    let iov: Vec<libc::iovec> = (0..slots)
        .map(|i| libc::iovec {
            iov_base: (base + i * slot + offset) as *mut libc::c_void,
            iov_len: len,
        })
        .collect();
    for chunk in iov.chunks(1024) {
        // SAFETY: every iovec names a range inside a slot of the region just
        // mapped, which no code uses yet; the kernel only reads the array.
        let rc = unsafe {
            libc::syscall(
                SYS_PROCESS_MADVISE,
                pidfd as libc::c_long,
                chunk.as_ptr(),
                chunk.len() as libc::c_long,
                advice as libc::c_long,
                0 as libc::c_long,
            )
        };
        if rc != (chunk.len() * len) as libc::c_long {
            // Unsupported (or partial): for guards, the per-slot path
            // installs the rest (installing a guard twice is harmless); a
            // page not populated is simply faulted in later.
            if advice == MADV_GUARD_INSTALL {
                GUARD_BATCH.store(false, Ordering::Relaxed);
            }
            return false;
        }
    }
    true
}

// Syscall numbers shared by x86-64 and aarch64 (the unified table).
const SYS_PIDFD_OPEN: libc::c_long = 434;
const SYS_PROCESS_MADVISE: libc::c_long = 440;

pub(super) fn install_guard(addr: usize, len: usize) -> io::Result<()> {
    if guard_by_madvise() {
        // SAFETY: [addr, addr+len) is the first page of a slot we own and no
        // code uses yet.
        let rc = unsafe { libc::madvise(addr as *mut _, len, MADV_GUARD_INSTALL) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINVAL) {
            return Err(err);
        }
        GUARD_BY_MADVISE.store(false, Ordering::Relaxed);
    }
    // SAFETY: as above; PROT_NONE on our own page only changes its access.
    let rc = unsafe { libc::mprotect(addr as *mut _, len, libc::PROT_NONE) };
    if rc == 0 {
        Ok(())
    } else {
        Err(explain_alloc_failure(io::Error::last_os_error(), 0))
    }
}

/// Turns an `ENOMEM` from mmap/mprotect into a message that names the limit.
pub(super) fn explain_alloc_failure(err: io::Error, stack_size: usize) -> io::Error {
    if err.raw_os_error() != Some(libc::ENOMEM) {
        return err;
    }
    let what = if stack_size > 0 {
        format!("cannot allocate a {} fiber stack", human_size(stack_size))
    } else {
        "cannot install a fiber stack guard page".to_string()
    };
    let max_maps = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok());
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map(|s| s.lines().count())
        .ok();
    let mut as_limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    let have_as = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut as_limit) } == 0
        && as_limit.rlim_cur != libc::RLIM_INFINITY;
    let why = match (max_maps, maps) {
        (Some(max), Some(n)) if n + 8 >= max => {
            format!("vm.max_map_count ({max}) reached with {n} mappings")
        }
        _ if have_as => format!(
            "address-space limit RLIMIT_AS ({}) reached",
            human_size(as_limit.rlim_cur as usize)
        ),
        _ => "out of memory".to_string(),
    };
    io::Error::new(io::ErrorKind::OutOfMemory, format!("{what}: {why}"))
}

/// `bytes` for a message: in GiB, MiB or KiB when it is a whole number of
/// them.
pub(crate) fn human_size(bytes: usize) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

/// Maps `len` bytes of private anonymous `MAP_NORESERVE` memory, readable
/// and writable; the start address, or the system's error.
pub(super) fn map_noreserve(len: usize) -> io::Result<usize> {
    // SAFETY: an anonymous private mapping at an address the kernel picks
    // aliases nothing; the result is checked before use.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(base as usize)
    }
}

/// Gives back the pages of `[start, start + len)` (`MADV_DONTNEED`): they
/// read as zeros when next touched, and guard markers survive.
///
/// # Safety
///
/// The range must be whole pages of a stack mapping that no fiber runs on
/// and no one else reads or writes meanwhile (a free slot taken off every
/// list, or a pooled stack).
pub(super) unsafe fn discard(start: usize, len: usize) {
    // SAFETY: by the contract above, no code uses [start, start + len);
    // MADV_DONTNEED on private anonymous memory only zero-fills it.
    unsafe { libc::madvise(start as *mut _, len, libc::MADV_DONTNEED) };
}
