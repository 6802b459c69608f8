//! A `wasi:cli/run` command that prints a line and then traps (a Rust
//! panic aborts the instance): for the host's exit status on a trap.

fn main() {
    println!("about to trap");
    let v: Vec<u32> = std::env::args().skip(100).map(|a| a.len() as u32).collect();
    // Out of bounds on purpose: a panic, which is a trap in wasm.
    std::process::exit(v[7] as i32);
}
