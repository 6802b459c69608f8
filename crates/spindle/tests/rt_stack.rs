//! Stacks: many parked fibers, guard pages, overflow reports, and loud
//! allocation failures. The failure cases run in a child process (this same
//! test binary, re-executed with `SPINDLE_STACK_CHILD` set).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use spindle::{Builder, Runtime};

const CHILD_ENV: &str = "SPINDLE_STACK_CHILD";

/// Re-runs this test binary on one test with `role` in the environment.
fn run_child(test: &str, role: &str) -> std::process::Output {
    common::this_test_binary()
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, role)
        .output()
        .expect("child runs")
}

fn child_role() -> Option<String> {
    std::env::var(CHILD_ENV).ok()
}

#[test]
fn two_hundred_thousand_parked_fibers_fit_under_the_mapping_limit() {
    if child_role().is_some() {
        return;
    }
    if !common::runs_natively() {
        // QEMU user mode ignores MADV_GUARD_INSTALL; the runtime notices and
        // guards stacks with mprotect, two mappings each, so the mapping
        // limit applies (the overflow tests still check the guards).
        eprintln!("skipped under an emulator: guards fall back to mprotect");
        return;
    }
    const N: usize = 200_000;
    let rt = Runtime::builder().workers(2).build().unwrap();
    let parked = Arc::new(AtomicUsize::new(0));
    let p = parked.clone();
    let (live, maps) = rt.run(move || {
        let handles: Vec<_> = (0..N)
            .map(|i| {
                let p = p.clone();
                spindle::spawn(move || {
                    p.fetch_add(1, Ordering::SeqCst);
                    spindle::park();
                    i
                })
            })
            .collect();
        while p.load(Ordering::SeqCst) < N {
            spindle::yield_now();
        }
        let live = spindle::stats().unwrap().live_fibers;
        let maps = std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .count();
        for h in &handles {
            h.fiber().unpark();
        }
        let sum: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(sum, N * (N - 1) / 2);
        (live, maps)
    });
    assert_eq!(live, N + 1, "every fiber parked at once, plus the main one");
    // With a separate guard mapping per stack this would be 400 000 lines,
    // past vm.max_map_count (65 530).
    assert!(maps < 10_000, "/proc/self/maps has {maps} lines");
}

/// Recurses until `limit` (never reached on a 64 KiB stack: 1 KiB frames).
fn recurse(depth: u64, limit: u64) -> u64 {
    let frame = [depth as u8; 1024];
    std::hint::black_box(&frame);
    if depth == limit {
        return 0;
    }
    recurse(depth + 1, limit) + frame[7] as u64
}

#[test]
fn child_overflow() {
    if child_role().as_deref() != Some("overflow") {
        return;
    }
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.run(|| {
        Builder::new()
            .name("conn-handler")
            .stack_size(64 << 10)
            .spawn(|| recurse(0, u64::MAX))
            .unwrap()
            .join()
            .ok();
    });
    unreachable!("the overflow aborts the process");
}

#[test]
fn an_overflow_names_the_fiber_and_its_stack_size_then_aborts() {
    if child_role().is_some() {
        return;
    }
    let out = run_child("child_overflow", "overflow");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the child must die: {stderr}");
    assert!(
        stderr.contains("\"conn-handler\" overflowed its 64 KiB stack"),
        "stderr: {stderr}"
    );
    assert!(stderr.contains("spindle: fiber "), "stderr: {stderr}");
}

#[test]
fn child_plain_segfault() {
    if child_role().as_deref() != Some("segv") {
        return;
    }
    let _rt = Runtime::builder().workers(1).build().unwrap();
    // A fault that is not a fiber's guard page goes to the previous handler
    // (here: the default action), not to ours.
    // SAFETY: deliberately faults; this runs only in a child process.
    unsafe { std::ptr::write_volatile(16 as *mut u64, 1) };
    unreachable!();
}

#[test]
fn a_fault_that_is_not_an_overflow_is_passed_on() {
    if child_role().is_some() {
        return;
    }
    use std::os::unix::process::ExitStatusExt;
    let out = run_child("child_plain_segfault", "segv");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "stderr: {stderr}");
    assert!(!stderr.contains("overflowed"), "stderr: {stderr}");
}

#[test]
fn child_rlimit() {
    if child_role().as_deref() != Some("rlimit") {
        return;
    }
    let rt = Runtime::builder().workers(1).build().unwrap();
    let vm_kib: u64 = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("VmSize"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap();
    let limit = (vm_kib + 256 * 1024) * 1024; // 256 MiB of headroom
    let rl = libc::rlimit {
        rlim_cur: limit,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: plain syscall on this (child) process.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &rl) }, 0);
    let err = Builder::new()
        .stack_size(1 << 30)
        .spawn_on(&rt, || ())
        .expect_err("1 GiB stacks cannot fit in 256 MiB");
    println!("BUILDER-ERROR: {err}");
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.run(|| {
            Builder::new()
                .stack_size(1 << 30)
                .spawn(|| ())
                .unwrap_or_else(|e| panic!("{e}"));
        })
    }))
    .expect_err("spawn fails");
    let _ = panic;
    // spindle::spawn panics with the same explanation.
    let rt2 = Runtime::builder()
        .workers(1)
        .stack_size(1 << 30)
        .build()
        .unwrap();
    let msg = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt2.run(|| ());
    }))
    .expect_err("spawn panics");
    let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    println!("SPAWN-PANIC: {msg}");
}

#[test]
fn a_stack_that_cannot_be_allocated_gives_an_error_naming_the_limit() {
    if child_role().is_some() {
        return;
    }
    if !common::runs_natively() {
        // QEMU user mode manages the guest's address space itself and does
        // not apply RLIMIT_AS to the guest's mappings.
        eprintln!("skipped under an emulator: RLIMIT_AS does not bound the guest's mappings");
        return;
    }
    let out = run_child("child_rlimit", "rlimit");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {stdout}\n{stderr}");
    let line_with = |marker: &str| {
        stdout
            .lines()
            .find_map(|l| l.split_once(marker).map(|(_, rest)| rest.to_owned()))
            .unwrap_or_else(|| panic!("no {marker} in {stdout}"))
    };
    let builder = line_with("BUILDER-ERROR: ");
    assert!(
        builder.contains("cannot allocate a 1 GiB fiber stack"),
        "{builder}"
    );
    assert!(builder.contains("RLIMIT_AS"), "{builder}");
    assert!(builder.contains("fibers live"), "{builder}");
    let spawn = line_with("SPAWN-PANIC: ");
    assert!(spawn.contains("cannot create a fiber"), "{spawn}");
    assert!(spawn.contains("RLIMIT_AS"), "{spawn}");
}
