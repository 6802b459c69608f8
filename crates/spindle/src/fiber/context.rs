//! The context switch: corosensei's coroutines on our own stacks.
//!
//! corosensei saves and restores only the callee-saved registers and the
//! stack pointer (no signal-mask syscall, unlike `swapcontext`); it supports
//! x86-64, aarch64, riscv64 and more. Measured here: a suspend+resume pair in
//! 2.55 ns (see `bench/RESULTS.md`). A panic never crosses the switch: the
//! fiber body catches it at its top frame (`Task::run`), and corosensei
//! catches anything else at the coroutine root and re-raises it in the
//! resumer.
//!
//! Each fiber's [`Yielder`] sits at the base of its own stack for the
//! fiber's whole life; its address is stored in the fiber header when the
//! fiber first runs, so `suspend_running` can find it from the running
//! fiber alone.

use corosensei::{Coroutine, CoroutineResult, Yielder};

use super::stack::FiberStack;
use super::{FiberCore, Task};

/// Why a fiber switched back to its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Switch {
    /// Runnable again: requeue behind everything runnable now.
    Yield,
    /// Waiting for its park token (see the module docs of `fiber`).
    Park,
}

/// A fiber's saved registers and its stack.
pub(crate) struct Context {
    coro: Coroutine<(), Switch, (), FiberStack>,
}

impl Context {
    /// A context that will run `fiber`'s body on `stack` when first resumed.
    ///
    /// `fiber` must stay alive until the body returns or is unwound: the
    /// owner worker keeps a `FiberRef` in its live table for exactly that
    /// span.
    pub(crate) fn new(stack: FiberStack, fiber: *const FiberCore<dyn Task>) -> Context {
        let coro = Coroutine::with_stack(stack, move |yielder: &Yielder<(), Switch>, ()| {
            // SAFETY: the owner worker holds a FiberRef to this fiber until
            // the coroutine has returned (see `new`'s contract).
            let fiber = unsafe { &*fiber };
            fiber
                .header
                .yielder
                .set(yielder as *const Yielder<(), Switch> as *const ());
            super::enter(fiber);
        });
        Context { coro }
    }

    /// Runs the fiber until it suspends (`Some`) or returns (`None`).
    pub(crate) fn resume(&mut self) -> Option<Switch> {
        match self.coro.resume(()) {
            CoroutineResult::Yield(switch) => Some(switch),
            CoroutineResult::Return(()) => None,
        }
    }

    /// Unwinds a suspended fiber's stack, running its destructors.
    pub(crate) fn unwind(&mut self) {
        self.coro.force_unwind();
    }

    pub(crate) fn into_stack(self) -> FiberStack {
        self.coro.into_stack()
    }
}

/// Suspends the fiber running on this thread.
pub(crate) fn suspend_running(switch: Switch) {
    let header = super::running_header();
    assert!(!header.is_null(), "spindle: suspend outside a fiber");
    // SAFETY: the running fiber's header is alive while it runs, and its
    // `yielder` was set at its first run to the Yielder at the base of its
    // own stack, which lives as long as the coroutine does.
    unsafe {
        let yielder = (*header).yielder.get() as *const Yielder<(), Switch>;
        (*yielder).suspend(switch);
    }
}

/// Times `pairs` suspend+resume pairs of a bare coroutine on one of our
/// pooled stacks (what every fiber switch costs, without the scheduler).
pub(crate) fn time_switch_pairs(pairs: u64) -> std::time::Duration {
    use super::stack::{round_stack_size, size_class, StackPool, DEFAULT_STACK_SIZE};
    let class =
        size_class(round_stack_size(DEFAULT_STACK_SIZE).expect("the default size is valid"));
    let mut pool = StackPool::new(1, class);
    let stack = pool.take(class.reserve().expect("stack")).expect("stack");
    let mut coro: Coroutine<(), (), (), FiberStack> =
        Coroutine::with_stack(stack, move |y: &Yielder<(), ()>, ()| loop {
            y.suspend(());
        });
    coro.resume(());
    let start = std::time::Instant::now();
    for _ in 0..pairs {
        coro.resume(());
    }
    start.elapsed()
}
