//! The same code with the hook linked in but never installed: libc's calls,
//! unchanged — a fiber's blocking call blocks its whole worker. (A binary
//! of its own: `install` is process-wide.)

mod common;

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::other_fiber_ran_during;

#[test]
fn without_install_a_std_sleep_blocks_the_worker() {
    assert!(!spindle_hook::is_installed());
    let (ran, ()) =
        other_fiber_ran_during(|| std::thread::sleep(Duration::from_millis(200)), || {});
    assert!(
        !ran,
        "the other fiber could not run: the sleep held the worker"
    );
}

#[test]
fn without_install_a_blocking_read_blocks_the_worker_until_its_own_timeout() {
    let (a, _b) = UnixStream::pair().unwrap();
    a.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let (ran, err) = other_fiber_ran_during(
        move || {
            let mut a = a;
            a.read(&mut [0u8; 1]).unwrap_err()
        },
        || {},
    );
    assert!(!ran);
    assert_eq!(err.raw_os_error(), Some(libc::EAGAIN));
}
