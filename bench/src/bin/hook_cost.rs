//! The hook's cost on a call that does not wait, for `bench/hook.py`:
//! `recv` of 1 byte with data ready, through the hook (installed) and
//! through libc's own `recv` (found past the hook with `dlsym(RTLD_NEXT)`),
//! on a fiber and on a plain thread. Rounds interleave the four; prints the
//! median ns per call of each.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::Instant;

type Recv = unsafe extern "C" fn(i32, *mut libc::c_void, usize, i32) -> isize;

const CALLS: usize = 100_000;

fn libc_recv() -> Recv {
    // SAFETY: libc's `recv`, found past the executable's definition.
    unsafe { std::mem::transmute(libc::dlsym(libc::RTLD_NEXT, c"recv".as_ptr())) }
}

/// ns per `recv` of one ready byte through `f`.
fn measure(f: Recv) -> f64 {
    let (a, b) = UnixStream::pair().unwrap();
    // SAFETY: setsockopt of an int.
    unsafe {
        let big: i32 = 4 << 20;
        libc::setsockopt(
            b.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&big as *const i32).cast(),
            4,
        );
        libc::setsockopt(
            a.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&big as *const i32).cast(),
            4,
        );
    }
    let chunk = vec![7u8; 64 << 10];
    let mut buf = [0u8; 1];
    let mut total = std::time::Duration::ZERO;
    let mut done = 0;
    while done < CALLS {
        let mut queued = 0;
        while queued < 64 << 10 {
            // SAFETY: a valid buffer.
            let n = unsafe {
                libc::send(
                    b.as_raw_fd(),
                    chunk.as_ptr().cast(),
                    chunk.len() - queued,
                    libc::MSG_DONTWAIT,
                )
            };
            if n <= 0 {
                break;
            }
            queued += n as usize;
        }
        let batch = queued.min(CALLS - done);
        let start = Instant::now();
        for _ in 0..batch {
            // SAFETY: a valid one-byte buffer; data is queued.
            unsafe { f(a.as_raw_fd(), buf.as_mut_ptr().cast(), 1, 0) };
        }
        total += start.elapsed();
        done += batch;
        // Drain what is left so the next batch starts empty.
        // SAFETY: as above, non-blocking.
        while unsafe {
            f(
                a.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                1,
                libc::MSG_DONTWAIT,
            )
        } > 0
        {}
    }
    total.as_nanos() as f64 / CALLS as f64
}

fn main() {
    spindle_hook::install().expect("hook");
    let rounds: usize = std::env::args().nth(1).map_or(7, |r| r.parse().unwrap());
    let hooked: Recv = libc::recv;
    let real = libc_recv();
    let rt = spindle::Runtime::builder().workers(1).build().unwrap();
    let mut rows: Vec<(&str, Vec<f64>)> = vec![
        ("fiber, hooked", vec![]),
        ("fiber, libc's", vec![]),
        ("thread, hooked", vec![]),
        ("thread, libc's", vec![]),
    ];
    for r in 0..rounds {
        let mut order = [0, 1, 2, 3];
        order.rotate_left(r % 4);
        for i in order {
            let v = match i {
                0 => rt.run(move || measure(hooked)),
                1 => rt.run(move || measure(real)),
                2 => measure(hooked),
                _ => measure(real),
            };
            rows[i].1.push(v);
        }
    }
    for (name, mut v) in rows {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("{name}: {:.1} ns", v[v.len() / 2]);
    }
}
