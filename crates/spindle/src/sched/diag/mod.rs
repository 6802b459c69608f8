//! Diagnostics: what the runtime can say about itself when something is
//! wrong — a dump of every fiber (`dump.rs`), the same on SIGQUIT
//! (`sigquit.rs`), and the watchdog that names a fiber holding its worker
//! and what the worker's thread is blocked in (`watchdog.rs`). The worker's
//! own part of each is in `worker/diag.rs`.

pub(crate) mod dump;
pub(crate) mod sigquit;
pub(crate) mod watchdog;
