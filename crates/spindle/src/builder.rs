//! [`Builder`]: spawn a fiber with a name or its own stack size.

use std::io;

use crate::fiber::JoinHandle;
use crate::runtime::Runtime;
use crate::sched::spawn::{spawn_here, spawn_on, spawn_on_worker, spawn_pinned, SpawnOptions};

/// Configures a fiber before spawning it, like `std::thread::Builder`.
///
/// ```
/// spindle::run(|| {
///     let h = spindle::Builder::new()
///         .name("worker")
///         .stack_size(64 << 10)
///         .spawn(|| spindle::current().unwrap().name().map(str::to_owned))
///         .expect("stack available");
///     assert_eq!(h.join().unwrap().as_deref(), Some("worker"));
/// });
/// ```
#[derive(Debug, Default, Clone)]
pub struct Builder {
    options: SpawnOptions,
}

impl Builder {
    /// A builder with the runtime's defaults.
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Names the fiber; the name shows in [`Fiber::name`](crate::Fiber::name)
    /// and in stack-overflow reports.
    pub fn name(mut self, name: impl Into<String>) -> Builder {
        self.options.name = Some(name.into());
        self
    }

    /// Usable stack size for this fiber (rounded up to whole pages, at least
    /// 16 KiB), instead of the runtime's.
    pub fn stack_size(mut self, bytes: usize) -> Builder {
        self.options.stack_size = Some(bytes);
        self
    }

    /// Spawns on the current fiber's runtime.
    ///
    /// Returns the error if the fiber's stack cannot be had; the message
    /// names the limit (`vm.max_map_count`, `RLIMIT_AS`, memory) and how
    /// many fibers are live.
    ///
    /// # Panics
    ///
    /// Outside a spindle fiber (use [`spawn_on`](Self::spawn_on) there).
    pub fn spawn<F, T>(self, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        spawn_here("spindle::Builder::spawn", self.options, f)
    }

    /// Spawns on `rt`, from any thread.
    pub fn spawn_on<F, T>(self, rt: &Runtime, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        spawn_on(rt.scheduler(), self.options, f)
    }

    /// Spawns on the calling fiber's runtime, pinned to worker `index`
    /// (`0..`[`worker_count`](crate::worker_count)): the fiber starts there
    /// and stays, as if spawned with [`spawn_local`](Self::spawn_local) on
    /// that worker. `InvalidInput` if the runtime has no such worker.
    ///
    /// # Panics
    ///
    /// Outside a spindle fiber.
    ///
    /// ```
    /// let rt = spindle::Runtime::builder().workers(2).build().unwrap();
    /// rt.run(|| {
    ///     let h = spindle::Builder::new().spawn_on_worker(1, spindle::worker_id).unwrap();
    ///     assert_eq!(h.join().unwrap(), Some(1));
    ///     assert!(spindle::Builder::new().spawn_on_worker(2, || ()).is_err());
    /// });
    /// ```
    pub fn spawn_on_worker<F, T>(self, index: usize, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        spawn_on_worker(index, self.options, f)
    }

    /// Spawns a `!Send` closure pinned to the calling fiber's worker.
    ///
    /// # Panics
    ///
    /// Outside a spindle fiber.
    pub fn spawn_local<F, T>(self, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + 'static,
        T: 'static,
    {
        spawn_pinned(self.options, f)
    }
}
