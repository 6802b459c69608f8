//! spindle-wasm: a WebAssembly application host on Spindle fibers.
//!
//! It serves components of the standard `wasi:http/proxy` world — what
//! `wasmtime serve` and Spin run — on [`spindle_http`]'s server, one fiber
//! per request, and runs `wasi:cli/run` commands. A guest that waits (a
//! clock, a stream, an outgoing request) suspends only its own fiber: the
//! worker goes on with the other requests.
//!
//! ```no_run
//! let wasm = std::fs::read("guests/wasm/hello.wasm").unwrap();
//! let host = spindle_wasm::Host::new(&wasm, spindle_wasm::HostConfig::default()).unwrap();
//! spindle::run(move || {
//!     spindle_http::Server::bind("127.0.0.1:8080")
//!         .unwrap()
//!         .serve(move |req| host.handle(req))
//!         .unwrap();
//! });
//! ```
//!
//! | module | what |
//! |---|---|
//! | `host` | [`Host`]: the engine (pooling allocator, fuel, code cache), the linker, admission |
//! | `proxy` | one request through a guest: the exchange polled by `block_on`, body pumping and streaming, deadlines |
//! | `outbound` | [`AllowList`] and the `send_request` hook onto spindle-http's client |
//! | `command` | [`run_command`]: a `wasi:cli/run` component, like `wasmtime run` |
//! | `log` | guest stdout/stderr into the host's log, prefixed by request |
//! | `config` | [`HostConfig`]: caps, fuel, memory, deadline, grants |

mod clocks;
mod command;
mod config;
mod host;
mod log;
mod outbound;
mod proxy;
mod report;
mod service;
mod world;

pub use command::run_command;
pub use config::HostConfig;
pub use host::Host;
pub use outbound::AllowList;
pub use report::{Observer, Outcome, RequestReport};
/// A guest's trap, as in a [`run_command`] error (`error.downcast_ref::<Trap>()`).
pub use wasmtime::Trap;
pub use world::World;

/// The built-in `Hello, World!` component (`guests/hello`), served by
/// `spindle serve` when no application is given.
pub const HELLO_WASM: &[u8] = include_bytes!("../../../guests/wasm/hello.wasm");
