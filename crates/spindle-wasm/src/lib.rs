//! spindle-wasm: a WebAssembly application host on Spindle fibers.
//!
//! It serves components of the standard `wasi:http` worlds — what
//! `wasmtime serve` and Spin run — on [`spindle_http`]'s server: WASI 0.2
//! `wasi:http/proxy` with an instance per request on the request's fiber,
//! and WASI 0.3 `wasi:http/service` with one instance serving many
//! requests at once on an instance fiber ([`World`] tells them apart). It
//! also runs `wasi:cli/run` commands. A guest that waits (a clock, a
//! stream, an outgoing request) suspends only its own fiber or task: the
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
//! | `world` | [`World`]: WASI 0.2 or 0.3, from the component's exports |
//! | `host` | [`Host`]: the face — a compiled component and its world's machinery |
//! | `engine` | the engine per world (pooling allocator, fuel, code cache) and the linker |
//! | `share` | [`EngineShare`]: one engine and pool per world for many hosts |
//! | `guest` | what every guest path shares: store state, the pre-linked component, admission, making a store |
//! | `answer` | plain answers, failures told, the request body pumped in, the response body taken whole or streamed |
//! | `proxy` | one WASI 0.2 request through a guest: the exchange polled by `block_on`, reuse of idle instances, deadlines |
//! | `service/` | WASI 0.3: the pool and instance policy (`pool`), instance fibers running `run_concurrent` (`instance`), the request side (`request`) |
//! | `clocks` | `wasi:clocks/monotonic-clock@0.3.0` waits on spindle's timers |
//! | `outbound` | [`AllowList`] and the `send_request` hook onto spindle-http's client |
//! | `command` | [`run_command`]: a `wasi:cli/run` component, like `wasmtime run` |
//! | `keyvalue/` | [`KeyValue`]: `wasi:keyvalue` stores in memory, in a file (redb), on Redis, and the imports on their grants |
//! | `log` | guest stdout/stderr into the host's log, prefixed by request |
//! | `config` | [`HostConfig`]: caps, fuel, memory, deadline, grants, `wasi:config` variables |

#![forbid(unsafe_code)]

mod answer;
mod clocks;
mod command;
mod config;
mod engine;
mod guest;
mod host;
mod keyvalue;
mod log;
mod outbound;
mod proxy;
mod report;
mod service;
mod share;
mod world;

pub use command::run_command;
pub use config::HostConfig;
pub use host::Host;
pub use keyvalue::KeyValue;
pub use outbound::AllowList;
pub use report::{Observer, Outcome, RequestReport};
pub use share::EngineShare;
/// A guest's trap, as in a [`run_command`] error (`error.downcast_ref::<Trap>()`).
pub use wasmtime::Trap;
pub use world::{imports_keyvalue, World};

/// The built-in `Hello, World!` component (`guests/hello`), served by
/// `spindle serve` when no application is given.
pub const HELLO_WASM: &[u8] = include_bytes!("../../../guests/wasm/hello.wasm");
