//! Spawning: allocating a fiber and queueing it on a scheduler.
//!
//! A spawn claims the fiber's stack up front (a [`Reservation`]: address
//! space and a slot, no memory yet) so that a spawn that cannot get a stack
//! fails at the call, with the limit named, rather than at the fiber's first
//! run. On one of the scheduler's own workers the claim and the fiber id come
//! from the worker's caches and the fiber goes to its local queue
//! (`worker::push_new_here`); from anywhere else to the global queue.
//!
//! [`Reservation`]: crate::fiber::stack::Reservation

use std::io;
use std::sync::Arc;

use super::{worker, Scheduler};
use crate::fiber::stack::{round_stack_size, size_class};
use crate::fiber::{self, JoinHandle, NO_OWNER};

/// What a spawn may choose for its fiber (`spindle::Builder`'s settings).
#[derive(Debug, Default, Clone)]
pub(crate) struct SpawnOptions {
    /// Shown by `Fiber::name`, dumps and overflow reports.
    pub(crate) name: Option<String>,
    /// Usable stack size instead of the runtime's.
    pub(crate) stack_size: Option<usize>,
}

/// Spawns `f` on `sched`, from any thread.
pub(crate) fn spawn_on<F, T>(
    sched: &Arc<Scheduler>,
    options: SpawnOptions,
    f: F,
) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (fiber, handle) = allocate(sched, options, NO_OWNER, f)?;
    sched.submit_new(fiber);
    Ok(handle)
}

/// Spawns a fiber pinned to the calling worker (`spawn_local`).
///
/// # Panics
///
/// Off a worker.
pub(crate) fn spawn_pinned<F, T>(options: SpawnOptions, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + 'static,
    T: 'static,
{
    worker::with_current(|here| {
        let here = here.unwrap_or_else(|| {
            panic!(
                "spindle::spawn_local called outside a spindle fiber; \
                 call it from a fiber (inside spindle::run or Runtime::run)"
            )
        });
        let (fiber, handle) = allocate(here.sched, options, here.index, f)?;
        here.sched.submit_new(fiber);
        Ok(handle)
    })
}

/// Spawns a fiber pinned to worker `index` of the calling fiber's runtime
/// (it starts there and never leaves; thieves pass it over).
///
/// # Panics
///
/// Off a runtime's fiber.
pub(crate) fn spawn_on_worker<F, T>(
    index: usize,
    options: SpawnOptions,
    f: F,
) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let sched = worker::with_current(|here| here.map(|h| h.sched.clone())).unwrap_or_else(|| {
        panic!(
            "spindle::Builder::spawn_on_worker called outside a spindle fiber; \
             call it from a fiber (inside spindle::run or Runtime::run)"
        )
    });
    if index >= sched.workers.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "spindle: no worker {index} (the runtime has {})",
                sched.workers.len()
            ),
        ));
    }
    let (fiber, handle) = allocate(&sched, options, index, f)?;
    sched.submit_pinned(fiber, index);
    Ok(handle)
}

/// Spawns on the calling fiber's runtime, or panics naming the fix (`what`
/// is the public function the user called).
pub(crate) fn spawn_here<F, T>(what: &str, options: SpawnOptions, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match worker::with_current(|w| w.map(|w| spawn_on(w.sched, options, f))) {
        Some(spawned) => spawned,
        None => panic!(
            "{what} called outside a spindle runtime; call it from a fiber \
             (inside spindle::run or Runtime::run), or use Runtime::spawn"
        ),
    }
}

/// The handle of a spawn that must succeed (`spindle::spawn`), or a panic
/// saying why it could not.
pub(crate) fn spawn_or_panic<T>(spawned: io::Result<JoinHandle<T>>) -> JoinHandle<T> {
    spawned.unwrap_or_else(|e| panic!("spindle: cannot create a fiber: {e}"))
}

fn allocate<F, T>(
    sched: &Arc<Scheduler>,
    options: SpawnOptions,
    owner: usize,
    f: F,
) -> io::Result<(fiber::FiberRef, JoinHandle<T>)>
where
    F: FnOnce() -> T + 'static,
    T: 'static,
{
    if sched.is_shutdown() {
        return Err(io::Error::other("spindle: the runtime is shut down"));
    }
    let class = match options.stack_size {
        Some(n) => size_class(round_stack_size(n)?),
        None => sched.config.stack_class,
    };
    let claimed = match worker::reserve_here(sched, class) {
        Some(claimed) => claimed,
        None => {
            let claimed = class.reserve().map(|r| (r, fiber::take_ids(1)));
            if claimed.is_ok() {
                sched.count_spawned_elsewhere();
            }
            claimed
        }
    };
    let (reservation, id) = claimed.map_err(|e| {
        let live = sched.live_fibers();
        io::Error::new(e.kind(), format!("{e} ({live} fibers live)"))
    })?;
    let hook: Arc<dyn fiber::Schedule> = sched.clone();
    let (fiber, handle) = fiber::new_fiber(id, f, options.name, hook, owner, reservation);
    if sched.is_cancelling() {
        // Spawned during shutdown: born cancelled, it will never run.
        fiber.header.cancelled.raise_unfenced(); // not started: nobody waits
    }
    Ok((fiber, handle))
}
