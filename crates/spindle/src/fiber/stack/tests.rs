//! Unit tests of the stack allocator: reservations, batch preparation,
//! trimming, and a give-back racing a first run.

use std::io;
use std::time::{Duration, Instant};

use super::class::{FiberStack, SizeClass, PREPARE_BATCH};
use super::*;

/// A class of its own, so other tests' stacks do not share its state.
fn class(kib: usize) -> &'static SizeClass {
    size_class(round_stack_size(kib << 10).unwrap())
}

fn resident_slots(class: &SizeClass) -> usize {
    let carve = class.carve.lock().unwrap();
    carve
        .untouched
        .iter()
        .map(|s| (s.prepared - s.cursor) / class.slot_size())
        .sum()
}

#[test]
fn reservations_touch_no_stack_memory() {
    let class = class(88);
    let reservations: Vec<_> = (0..2_000).map(|_| class.reserve().unwrap()).collect();
    let carve = class.carve.lock().unwrap();
    assert!(
        carve.regions >= 2,
        "2 000 reservations need several regions"
    );
    assert!(
        carve.untouched.iter().all(|s| s.prepared == s.cursor),
        "a reservation prepared slots"
    );
    drop(carve);
    drop(reservations);
}

#[test]
fn first_use_prepares_one_bounded_batch() {
    let class = class(92);
    let mut pool = StackPool::new(0, class);
    let reservations: Vec<_> = (0..1_000).map(|_| class.reserve().unwrap()).collect();
    let mut stacks = Vec::new();
    for r in reservations.into_iter().take(3) {
        stacks.push(pool.take(r).unwrap());
    }
    let ahead = resident_slots(class);
    assert!(
        ahead < PREPARE_BATCH,
        "{ahead} slots prepared ahead of three stacks"
    );
    // The stacks are usable: their top page is writable.
    for s in &stacks {
        // SAFETY: the byte below `top` is the usable stack's last byte,
        // owned by this test until the stack is dropped.
        unsafe { ((s.top - 1) as *mut u8).write_volatile(1) };
    }
}

/// The lowest usable page of `stack`: far below the hot top.
fn deep_page(stack: &FiberStack) -> usize {
    stack.limit + stack.class.guard
}

fn touch(page: usize) {
    // SAFETY: `page` is a usable page of a stack this test owns (taken
    // or pooled by it, never running a fiber).
    unsafe { (page as *mut u8).write_volatile(1) };
}

fn resident(page: usize) -> bool {
    let mut v = 0u8;
    // SAFETY: one page-aligned page of a mapping this test owns; `v`
    // receives one byte per page.
    let rc = unsafe { libc::mincore(page as *mut _, page_size(), &mut v) };
    assert_eq!(rc, 0, "mincore: {}", io::Error::last_os_error());
    v & 1 == 1
}

#[test]
fn trim_gives_back_the_deep_pages_of_every_stack_pooled_since_the_last() {
    let a = class(96);
    let b = class(100);
    let mut pool = StackPool::new(8, a);
    let take = |class: &'static SizeClass, pool: &mut StackPool| {
        let stack = pool.take(class.reserve().unwrap()).unwrap();
        touch(deep_page(&stack));
        stack
    };
    let (a1, b1, a2) = (take(a, &mut pool), take(b, &mut pool), take(a, &mut pool));
    let pages = [deep_page(&a1), deep_page(&b1), deep_page(&a2)];
    pool.put(a1);
    pool.put(b1);
    pool.put(a2);
    assert!(pages.iter().all(|&p| resident(p)));
    pool.last_trim = Instant::now() - Duration::from_secs(2);
    assert!(
        pool.trim(Instant::now()),
        "a second after the last, trim works"
    );
    assert!(
        !pool.trim(Instant::now()),
        "and not again within the second"
    );
    assert!(!pages.iter().any(|&p| resident(p)), "trim left deep pages");

    // Taking `b1` moves `a2` into its place; `b1` comes back used.
    let b1 = pool.pop(b).expect("the pooled stack of class b");
    touch(deep_page(&b1));
    pool.put(b1);
    pool.last_trim = Instant::now() - Duration::from_secs(2);
    assert!(pool.trim(Instant::now()));
    assert!(!resident(pages[1]), "a stack pooled again was not trimmed");
}

/// A reservation counts every slot on the class's lists, including the
/// dirty ones an idle worker is giving back. A fiber that first runs
/// while those are off every list must wait for them, not find
/// nothing: that `expect` killed a worker thread mid-loop (a hang at
/// the next `join`, the panic message lost in the test's captured
/// output).
#[test]
fn a_stack_taken_while_dirty_slots_are_given_back_waits_for_them() {
    // 40 MiB stacks: a region holds two slots, so both lists and the
    // untouched span run dry after two.
    let class = class(40 << 10);
    let mut pool = StackPool::new(0, class);
    let first = pool.take(class.reserve().unwrap()).unwrap();
    let second = pool.take(class.reserve().unwrap()).unwrap();
    let first_base = first.limit;
    drop(first); // dirty, counted in headroom
    let reservation = class.reserve().unwrap(); // no new region needed
    assert_eq!(class.regions(), 1);
    // An idle worker's trim, stopped between its two halves.
    let returning = SizeClass::take_dirty(&mut class.carve.lock().unwrap());
    assert_eq!(returning, vec![first_base]);
    let taker = std::thread::spawn(move || {
        let mut pool = StackPool::new(0, class);
        pool.take(reservation).map(|s| s.limit)
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(!taker.is_finished(), "took a stack with every list empty");
    class.put_back_clean(returning);
    let taken = taker.join().expect("the take panicked").unwrap();
    assert_eq!(taken, first_base, "the slot that was given back");
    assert_eq!(class.regions(), 1);
    drop(second);
}

#[test]
fn stack_sizes_past_the_limit_are_an_error() {
    assert_eq!(
        round_stack_size(usize::MAX).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    assert_eq!(round_stack_size(1).unwrap(), MIN_STACK_SIZE);
}
