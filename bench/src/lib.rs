//! Shared helpers of the benchmark binaries.

/// Resident set size of this process, in KiB.
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .expect("VmRSS line")
}

/// `bench-name n` from the command line.
pub fn args() -> (String, u64) {
    let mut a = std::env::args().skip(1);
    let bench = a.next().expect("usage: BIN BENCH N");
    let n = a
        .next()
        .expect("usage: BIN BENCH N")
        .parse()
        .expect("N is a number");
    (bench, n)
}

/// Prints one result line the driver parses: `RESULT <value> <unit>`.
pub fn report(value: f64, unit: &str) {
    println!("RESULT {value:.3} {unit}");
}
