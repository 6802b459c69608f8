//! `timers <spindle|tokio> N`: N timers armed and fired — 1 000 fibers/tasks
//! that each sleep 1 ms, N/1000 times over (so the row measures timers, not
//! spawning). Prints the CPU time (user+sys) per timer and the mean lateness
//! of a 1 ms sleep in µs.

use std::time::{Duration, Instant};

fn cpu_us() -> f64 {
    let mut ru: libc_rusage::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc_rusage::getrusage(0, &mut ru) };
    let tv = |t: libc_rusage::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

mod libc_rusage {
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct timeval {
        pub tv_sec: i64,
        pub tv_usec: i64,
    }
    #[repr(C)]
    pub struct rusage {
        pub ru_utime: timeval,
        pub ru_stime: timeval,
        pub rest: [i64; 14],
    }
    extern "C" {
        pub fn getrusage(who: i32, usage: *mut rusage) -> i32;
    }
}

fn main() {
    let mut a = std::env::args().skip(1);
    let which = a.next().unwrap();
    let n: u64 = a.next().unwrap().parse().unwrap();
    const FIBERS: u64 = 1000;
    let rounds = n / FIBERS;
    let dur = Duration::from_millis(1);
    let cpu0 = cpu_us();
    let start = Instant::now();
    match which.as_str() {
        "spindle" => {
            let rt = spindle::Runtime::builder().workers(1).build().unwrap();
            rt.run(move || {
                let hs: Vec<_> = (0..FIBERS)
                    .map(|_| {
                        spindle::spawn(move || {
                            for _ in 0..rounds {
                                spindle::time::sleep(dur)
                            }
                        })
                    })
                    .collect();
                for h in hs {
                    h.join().unwrap();
                }
            });
        }
        "tokio" => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let hs: Vec<_> = (0..FIBERS)
                    .map(|_| {
                        tokio::spawn(async move {
                            for _ in 0..rounds {
                                tokio::time::sleep(dur).await
                            }
                        })
                    })
                    .collect();
                for h in hs {
                    h.await.unwrap();
                }
            });
        }
        _ => panic!(),
    }
    let wall = start.elapsed();
    let cpu = cpu_us() - cpu0;
    println!("RESULT {:.3} us", cpu / n as f64);
    let late_us = (wall.as_secs_f64() / rounds as f64 - dur.as_secs_f64()) * 1e6;
    println!("WALL_OVER {late_us:.1}");
}
