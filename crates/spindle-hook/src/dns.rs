//! Name resolution: `getaddrinfo` (std's `ToSocketAddrs`) runs on
//! Spindle's blocking pool while the fiber waits — unless it is asked for
//! an address literal and a numeric port, which libc answers without I/O,
//! in place.
//!
//! glibc's resolver reads files, talks to nscd or DNS and may load NSS
//! modules; none of it can park a fiber, so the whole call moves to a pool
//! thread. The job owns copies of its arguments and hands back the list it
//! got; the caller's pointers are written only by the fiber, after the job
//! is done. A wait ended early (timeout, cancellation) leaves the job to
//! finish on its thread; its list is freed there.

use std::ffi::{CStr, CString};

use libc::{addrinfo, c_char, c_int};

use crate::real;
use crate::wait::{changed, set_errno};

/// A list from libc's `getaddrinfo`, owned until handed to the caller.
struct AddrList(*mut addrinfo);

// SAFETY: the list is plain heap memory from libc, owned by this value
// alone; libc's `freeaddrinfo` may free it on any thread.
unsafe impl Send for AddrList {}

impl AddrList {
    fn into_raw(self) -> *mut addrinfo {
        let p = self.0;
        std::mem::forget(self);
        p
    }
}

impl Drop for AddrList {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: a list libc's getaddrinfo returned, freed once.
            unsafe { libc::freeaddrinfo(self.0) };
        }
    }
}

/// The hints `getaddrinfo` reads (flags, family, type, protocol).
#[derive(Clone, Copy)]
struct Hints {
    flags: c_int,
    family: c_int,
    socktype: c_int,
    protocol: c_int,
}

fn copy_str(p: *const c_char) -> Option<CString> {
    // SAFETY: a non-null NUL-terminated string from the caller.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_owned())
}

/// Whether the call needs no lookup: an address literal (or none) and a
/// numeric port (or none). libc answers it without I/O, so it runs in
/// place instead of on the pool (`ureq` resolves `127.0.0.1:8080` too).
fn is_numeric(node: *const c_char, service: *const c_char) -> bool {
    // SAFETY: null or NUL-terminated strings from the caller.
    let text = |p: *const c_char| (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) });
    let node_ok = text(node).is_none_or(|n| {
        n.to_str()
            .is_ok_and(|n| n.parse::<std::net::IpAddr>().is_ok())
    });
    let service_ok = text(service).is_none_or(|s| {
        let b = s.to_bytes();
        !b.is_empty() && b.iter().all(u8::is_ascii_digit)
    });
    node_ok && service_ok
}

/// Hooked `getaddrinfo`.
///
/// # Safety
///
/// libc's contract: `node`/`service` null or NUL-terminated, `hints` null
/// or valid, `res` valid.
#[no_mangle]
pub unsafe extern "C" fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const addrinfo,
    res: *mut *mut addrinfo,
) -> c_int {
    if !changed() || res.is_null() || is_numeric(node, service) {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::getaddrinfo(node, service, hints, res) };
    }
    let (node, service) = (copy_str(node), copy_str(service));
    // SAFETY: a non-null addrinfo from the caller.
    let hints = (!hints.is_null()).then(|| unsafe {
        let h = &*hints;
        Hints {
            flags: h.ai_flags,
            family: h.ai_family,
            socktype: h.ai_socktype,
            protocol: h.ai_protocol,
        }
    });
    let job = move || {
        // SAFETY: an all-zero addrinfo is the documented empty hints value.
        let mut h: addrinfo = unsafe { std::mem::zeroed() };
        let hp = hints.map_or(std::ptr::null(), |x| {
            h.ai_flags = x.flags;
            h.ai_family = x.family;
            h.ai_socktype = x.socktype;
            h.ai_protocol = x.protocol;
            &h as *const addrinfo
        });
        let mut out: *mut addrinfo = std::ptr::null_mut();
        // SAFETY: our own copies of the caller's arguments, live for the call.
        let rc = unsafe {
            real::getaddrinfo(
                node.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
                service.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
                hp,
                &mut out,
            )
        };
        (rc, crate::wait::errno(), AddrList(out))
    };
    let r = spindle::io::foreign_call("hooked getaddrinfo", || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| spindle::blocking::run(job)))
    });
    match r {
        Ok((rc, errno, list)) => {
            // SAFETY: `res` is the caller's valid out-pointer.
            unsafe { *res = list.into_raw() };
            if rc == libc::EAI_SYSTEM {
                set_errno(errno);
            }
            rc
        }
        Err(p) => {
            let e = if p.is::<spindle::time::Elapsed>() {
                libc::ETIMEDOUT
            } else if p.is::<spindle::Cancelled>() {
                libc::ECANCELED
            } else {
                crate::report::caught_panic("hooked getaddrinfo", p)
            };
            set_errno(e);
            libc::EAI_SYSTEM
        }
    }
}
