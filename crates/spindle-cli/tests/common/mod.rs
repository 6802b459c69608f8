//! What the `spindle` binary's tests share: the binary, the example
//! guests, a clean command, Python.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

pub const SPINDLE: &str = env!("CARGO_BIN_EXE_spindle");

/// The path of an example guest's committed `.wasm`.
pub fn guest(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../guests/wasm")
        .join(format!("{name}.wasm"))
        .to_string_lossy()
        .into_owned()
}

/// `spindle` with a test cache directory and no `SPINDLE_*` variable
/// from the test runner's environment.
pub fn spindle() -> Command {
    let mut c = Command::new(SPINDLE);
    c.env(
        "XDG_CACHE_HOME",
        std::env::temp_dir().join("spindle-cli-test-cache"),
    );
    for (k, _) in std::env::vars() {
        if k.starts_with("SPINDLE_") {
            c.env_remove(k);
        }
    }
    c
}

/// Runs a Python script; its stdout (a failure fails the test).
pub fn python(script: &str) -> String {
    let out = Command::new("python3")
        .args(["-c", script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
