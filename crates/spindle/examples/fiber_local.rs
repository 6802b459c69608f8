//! The README's fiber-local example: each fiber's request id survives its
//! waits. `cargo run --release -p spindle --example fiber_local`
use std::cell::Cell;

spindle::fiber_local! {
    static REQUEST_ID: Cell<u64> = Cell::new(0);
}

fn log(msg: &str) {
    println!("[request {}] {msg}", REQUEST_ID.with(Cell::get));
}

fn main() {
    spindle::run(|| {
        let handles: Vec<_> = (1..=3)
            .map(|id| {
                spindle::spawn(move || {
                    REQUEST_ID.with(|r| r.set(id));
                    spindle::time::sleep(std::time::Duration::from_millis(10));
                    log("done"); // still this fiber's id after the sleep
                })
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
    });
}
