//! tokio futures from fibers (the `tokio` feature): they find a runtime,
//! their waits park only their fiber, cancellation drops them.
//!
//! `cargo test -p spindle --release --features tokio --test compat_tokio`
#![cfg(feature = "tokio")]

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::within;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn a_hundred_tokio_sleeps_on_one_worker_overlap() {
    within(Duration::from_secs(60), || {
        let rt = spindle::Runtime::builder().workers(1).build().unwrap();
        let started = Instant::now();
        rt.run(|| {
            let handles: Vec<_> = (0..100)
                .map(|_| {
                    spindle::spawn(|| {
                        // Created on the fiber: it finds the runtime's
                        // context there.
                        spindle::block_on(tokio::time::sleep(Duration::from_millis(300)))
                    })
                })
                .collect();
            handles.into_iter().for_each(|h| h.join().unwrap());
        });
        // A bound for what this catches (one worker blocked per sleep
        // would take 30 s), not a measurement.
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    });
}

#[test]
fn tokio_sockets_talk_to_a_real_server_from_fibers() {
    within(Duration::from_secs(60), || {
        // A plain echo server on std threads.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(mut s) = s else { return };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let rt = spindle::Runtime::builder().workers(2).build().unwrap();
        let echoed = rt.run(move || {
            let handles: Vec<_> = (0..20u8)
                .map(|i| {
                    spindle::spawn(move || {
                        spindle::block_on(async move {
                            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                            s.write_all(&[i; 8]).await.unwrap();
                            let mut back = [0u8; 8];
                            s.read_exact(&mut back).await.unwrap();
                            back
                        })
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        for (i, back) in echoed.iter().enumerate() {
            assert_eq!(back, &[i as u8; 8]);
        }
    });
}

#[test]
fn cancelling_a_fiber_in_a_tokio_wait_ends_it_and_drops_the_future() {
    within(Duration::from_secs(60), || {
        struct Dropped(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = dropped.clone();
        let rt = spindle::Runtime::builder().workers(1).build().unwrap();
        rt.run(move || {
            let waiter = spindle::spawn(move || {
                let guard = Dropped(d);
                spindle::block_on(async move {
                    let _guard = guard;
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                })
            });
            spindle::time::sleep(Duration::from_millis(20));
            waiter.cancel();
            assert!(waiter.join().unwrap_err().is_cancelled());
        });
        assert!(
            dropped.load(std::sync::atomic::Ordering::SeqCst),
            "the future was dropped"
        );
    });
}

#[test]
fn a_runtime_given_with_tokio_handle_is_the_one_used() {
    within(Duration::from_secs(60), || {
        let own = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("my-tokio")
            .enable_all()
            .build()
            .unwrap();
        let rt = spindle::Runtime::builder()
            .workers(1)
            .tokio_handle(own.handle().clone())
            .build()
            .unwrap();
        let ran_on = rt.run(|| {
            // A task spawned from a fiber runs on the given runtime.
            let task = tokio::spawn(async { std::thread::current().name().map(str::to_owned) });
            spindle::block_on(task).unwrap()
        });
        assert_eq!(ran_on.as_deref(), Some("my-tokio"));
        // Off the workers, block_on enters the shared runtime for the call:
        // a future made inside it (an `async` block) finds its context.
        spindle::block_on(async { tokio::time::sleep(Duration::from_millis(1)).await });
        assert!(spindle::compat::tokio::handle().block_on(async { true }));
    });
}
