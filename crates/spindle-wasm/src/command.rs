//! [`run_command`]: runs a `wasi:cli/run` component to its end, like
//! `wasmtime run`, with the same host as the proxy guests: its stdio is
//! the process's, and outgoing HTTP goes through spindle-http's client and
//! the allow-list. A WASI 0.3 command (`wasi:cli/run@0.3`) runs on the
//! WASI 0.3 engine, its `run` called inside the store's event loop, with
//! `wasi:http/client@0.3` for its requests.

use std::future::Future;
use std::sync::Arc;

use wasmtime::component::Component;
use wasmtime::Store;
use wasmtime_wasi::p2::bindings::CommandPre;
use wasmtime_wasi::WasiCtx;

use crate::config::HostConfig;
use crate::engine::{engine, linker};
use crate::guest::GuestState;
use crate::world::{is_p3_command, misfit, Want};

/// A command's run, whichever world: its `run`'s result, or a failure
/// (a trap, an exit).
type Running = std::pin::Pin<Box<dyn Future<Output = wasmtime::Result<Result<(), ()>>> + Send>>;

/// Runs the command component `wasm` with `args` (`args[0]` is its name)
/// and returns its exit status. Must be called on a Spindle fiber or
/// thread; the guest's waits park it like any other wait.
///
/// ```no_run
/// let wasm = std::fs::read("guests/wasm/fetch-cmd.wasm").unwrap();
/// let config = spindle_wasm::HostConfig::default().allow_outbound("127.0.0.1").unwrap();
/// let status = spindle::run(move || {
///     spindle_wasm::run_command(&wasm, &["fetch-cmd".into(), "http://127.0.0.1:8080/".into()], config)
/// });
/// assert_eq!(status.unwrap(), 0);
/// ```
pub fn run_command(wasm: &[u8], args: &[String], config: HostConfig) -> wasmtime::Result<i32> {
    if let Some(why) = misfit(wasm, Want::Command) {
        return Err(wasmtime::Error::msg(why));
    }
    let config = config.max_concurrent(1);
    let world = if is_p3_command(wasm) {
        crate::World::Service
    } else {
        crate::World::Proxy
    };
    let engine = engine(&config, world)?;
    // Compiling takes a while with a cold cache and never waits: on the
    // blocking pool, so the fiber's worker goes on with others meanwhile
    // (and the stall watchdog does not take the compile for a deadlock).
    let component = {
        let (engine, wasm) = (engine.clone(), wasm.to_vec());
        spindle::blocking::run(move || Component::new(&engine, &wasm))?
    };
    let linker = linker(&engine, world)?;
    let tag = crate::log::Tag::new(Arc::from(
        args.first().map(String::as_str).unwrap_or("command"),
    ));
    let mut wasi = WasiCtx::builder();
    wasi.inherit_stdio().envs(&config.env).args(args);
    let state = GuestState::new(&config, wasi.build(), crate::outbound::Clients::new(), tag);
    let mut store = Store::new(&engine, state);
    store.limiter(|s| &mut s.limits);
    store.set_fuel(u64::MAX)?;
    store.fuel_async_yield_interval(Some(config.fuel_yield_interval))?;
    let run: Running = match world {
        crate::World::Proxy => {
            let pre = CommandPre::new(linker.instantiate_pre(&component)?)?;
            Box::pin(async move {
                let command = pre.instantiate_async(&mut store).await?;
                command.wasi_cli_run().call_run(&mut store).await
            })
        }
        crate::World::Service => Box::pin(async move {
            let command = wasmtime_wasi::p3::bindings::Command::instantiate_async(
                &mut store, &component, &linker,
            )
            .await?;
            store
                .run_concurrent(async move |store| command.wasi_cli_run().call_run(store).await)
                .await?
        }),
    };
    let result = spindle::block_on(async move {
        let mut run = run;
        std::future::poll_fn(|cx| {
            wasmtime_wasi::runtime::with_ambient_tokio_runtime(|| run.as_mut().poll(cx))
        })
        .await
    });
    match result {
        Ok(Ok(())) => Ok(0),
        Ok(Err(())) => Ok(1),
        Err(e) => match e.downcast_ref::<wasmtime_wasi::I32Exit>() {
            Some(exit) => Ok(exit.0),
            None => Err(e),
        },
    }
}
