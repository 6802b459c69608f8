//! The futures bridge, readiness futures, the blocking pool and files.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use spindle::Runtime;

#[test]
fn block_on_a_future_woken_from_another_os_thread() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.run(|| {
        let other_ran = Arc::new(AtomicBool::new(false));
        let o = other_ran.clone();
        // While this fiber waits in block_on, the worker runs others.
        let other = spindle::spawn(move || o.store(true, Ordering::SeqCst));
        let (tx, rx) = std::sync::mpsc::channel::<std::task::Waker>();
        let thread = std::thread::spawn(move || {
            let w = rx.recv().unwrap();
            std::thread::sleep(Duration::from_millis(20));
            w.wake();
        });
        let mut polls = 0;
        let value = spindle::block_on(std::future::poll_fn(|cx| {
            polls += 1;
            if polls == 1 {
                tx.send(cx.waker().clone()).unwrap();
                return Poll::Pending;
            }
            Poll::Ready(polls)
        }));
        assert_eq!(value, 2, "polled once more, after the wake");
        assert!(other_ran.load(Ordering::SeqCst));
        assert!(spindle::can_suspend());
        other.join().unwrap();
        thread.join().unwrap();
    });
}

#[test]
fn a_future_that_wakes_itself_yields_the_worker() {
    // wasmtime's fuel yield and tokio's yield_now wake their own waker and
    // return Pending: on one worker, another fiber must get to run between
    // those polls rather than after the future is done.
    let rt = Runtime::builder().workers(1).build().unwrap();
    let ticks = rt.run(|| {
        let ticks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let (t, d) = (ticks.clone(), done.clone());
        let ticker = spindle::spawn(move || {
            while !d.load(Ordering::SeqCst) {
                t.fetch_add(1, Ordering::SeqCst);
                spindle::yield_now();
            }
        });
        let mut polls = 0;
        spindle::block_on(std::future::poll_fn(|cx| {
            polls += 1;
            if polls == 100 {
                return Poll::Ready(());
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }));
        done.store(true, Ordering::SeqCst);
        ticker.join().unwrap();
        ticks.load(Ordering::SeqCst)
    });
    assert!(
        ticks >= 90,
        "the other fiber ran {ticks} times during 100 yields"
    );
}

#[test]
fn a_nested_block_on_polls_in_place() {
    spindle::run(|| {
        let inner_could_suspend = spindle::block_on(async {
            // Inside a block_on poll: must not switch fibers.
            let could = spindle::can_suspend();
            spindle::block_on(spindle::time::sleep_future(Duration::from_millis(5)));
            could
        });
        assert!(!inner_could_suspend);
    });
}

#[test]
fn readable_future_is_woken_by_the_netpoller() {
    spindle::run(|| {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let fd = b.as_raw_fd();
        let writer = spindle::spawn(move || {
            spindle::time::sleep(Duration::from_millis(20));
            (&a).write_all(b"x").unwrap();
            a
        });
        let mut buf = [0u8; 1];
        assert!((&b).read(&mut buf).is_err(), "nothing to read yet");
        spindle::block_on(spindle::io::readable(fd)).unwrap();
        assert_eq!((&b).read(&mut buf).unwrap(), 1);
        drop(writer.join().unwrap());
    });
}

#[test]
fn wait_readable_times_out() {
    spindle::run(|| {
        let (_a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let start = Instant::now();
        let err = spindle::io::wait_readable(b.as_raw_fd(), Some(Duration::from_millis(30)))
            .expect_err("no data");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(start.elapsed() >= Duration::from_millis(30));
    });
}

#[test]
fn spawn_blocking_runs_off_the_worker() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.run(|| {
        let start = Instant::now();
        // 50 fibers each block 100 ms in a std call: on the pool they overlap.
        let jobs: Vec<_> = (0..50)
            .map(|i| {
                spindle::spawn(move || {
                    spindle::blocking::run(move || {
                        std::thread::sleep(Duration::from_millis(100));
                        i
                    })
                })
            })
            .collect();
        let sum: i32 = jobs.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(sum, 49 * 50 / 2);
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        // A panic on the pool reaches the caller.
        let h = spindle::spawn(|| spindle::blocking::run(|| panic!("pool boom")));
        assert!(h.join().unwrap_err().is_panic());
    });
}

#[test]
fn files_from_fibers() {
    spindle::run(|| {
        let dir = std::env::temp_dir().join(format!("spindle-fs-test-{}", std::process::id()));
        spindle::fs::create_dir_all(dir.join("sub")).unwrap();
        let writers: Vec<_> = (0..20)
            .map(|i| {
                let path = dir.join("sub").join(format!("f{i}"));
                spindle::spawn(move || spindle::fs::write(path, format!("file {i}")).unwrap())
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(spindle::fs::read_dir(dir.join("sub")).unwrap().len(), 20);
        assert_eq!(
            spindle::fs::read_to_string(dir.join("sub/f7")).unwrap(),
            "file 7"
        );
        let mut f = spindle::fs::File::create(dir.join("big")).unwrap();
        f.write_all(&vec![1u8; 1 << 20]).unwrap();
        let mut back = Vec::new();
        spindle::fs::File::open(dir.join("big"))
            .unwrap()
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back.len(), 1 << 20);
        assert_eq!(
            spindle::fs::metadata(dir.join("big")).unwrap().len(),
            1 << 20
        );
        spindle::fs::remove_dir_all(&dir).unwrap();
        assert!(spindle::fs::metadata(&dir).is_err());
    });
}
