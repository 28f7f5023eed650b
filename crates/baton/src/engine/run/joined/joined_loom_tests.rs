//! Model checking with loom: an inline run's future polling its joined drivers while their
//! wake-ups come from other threads, and while it moves from one task to another.
//!
//! [`Joined`] and [`Inbox`] are the real ones, instantiated with [`LoomSync`] (loom's
//! mutex, atomics and waker cell) through the sync shim, so these run under a plain
//! `cargo test`. The drivers are small futures in place of `Driver` (which needs a tokio runtime
//! and a run): each waits for a gate that another thread opens (as a timer or a socket
//! wakes a node), and may "spawn" one more such driver into the inbox from its poll, as a
//! driver whose node ended and made a downstream ready does while the run is local. The
//! tasks are small wakers that wake the model's main thread. What `Run::poll` does
//! after polling its drivers, registering its waker for the run's end only when it
//! changed, is a faithful copy of its few lines ([`End`]), as that future needs a
//! runtime and a graph. The set past [`POLLED_TOGETHER`] drivers, `ready_set.rs`, is the
//! real one too: its stack of woken places and their flags are loom's atomics.
//!
//! Each model checks that no wake-up is lost: the main thread plays the run's task and
//! waits whenever the run's future returns `Pending`; loom reports a deadlock if it is
//! never woken, and the model asserts that every driver ended, once.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::task::{Context, Poll, Wake, Waker};

use loom::future::AtomicWaker;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicUsize};
use loom::sync::{Condvar, Mutex};
use loom::thread;

use super::{
    CancelWake, Inbox, Joined, POLLED_TOGETHER, PolledTogether, REPOLL_MAX, SpareWaker, Woken,
};
use crate::util::sync::LoomSync;

fn model(f: impl Fn() + Sync + Send + 'static) {
    model_with(3, f);
}

/// [`model`] with `preemptions` as loom's preemption bound.
fn model_with(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(f);
}

/// A task: its waker marks it woken and wakes the thread that waits for it (a loom
/// mutex and condition variable, as a runtime's worker parks).
#[derive(Default)]
struct Task {
    woken: Mutex<bool>,
    wake_up: Condvar,
}

impl Wake for Task {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        *self.woken.lock().unwrap() = true;
        self.wake_up.notify_one();
    }
}

/// A task for the model's main thread to run.
fn task() -> std::sync::Arc<Task> {
    std::sync::Arc::default()
}

impl Task {
    /// Waits until the task is woken (a wake-up before this call counts).
    fn wait(&self) {
        let mut woken = self.woken.lock().unwrap();
        while !*woken {
            woken = self.wake_up.wait(woken).unwrap();
        }
        *woken = false;
    }
}

/// What another thread opens, waking whoever waits for it: a timer, a socket, a oneshot.
#[derive(Default)]
struct Gate {
    open: AtomicBool,
    waker: AtomicWaker,
}

impl Gate {
    fn open(&self) {
        self.open.store(true, Release);
        self.waker.wake();
    }
}

type Shared = std::sync::Arc<Inbox<Node, LoomSync>>;

/// A driver: wakes itself and returns `Pending` at its first `spins` polls (as a future
/// whose I/O is ready at once), waits for its gate, then for its second gate if it has
/// one, then pushes `next` (if any) to the inbox and ends. With `also`, it leaves its waker
/// in that gate too, without waiting for it: a waker that wakes it late, maybe after it
/// ended.
struct Node {
    spins: usize,
    gate: Arc<Gate>,
    then: Option<Arc<Gate>>,
    also: Option<Arc<Gate>>,
    next: Option<Box<Node>>,
    inbox: Shared,
    ended: Arc<AtomicUsize>,
}

impl PolledTogether for Node {
    type Shared = ();

    fn poll_together(&mut self, cx: &mut Context<'_>, (): &mut (), _: usize) -> Poll<()> {
        Pin::new(self).poll(cx)
    }
}

impl Future for Node {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(also) = &self.also {
            also.waker.register_by_ref(cx.waker());
        }
        if self.spins > 0 {
            self.spins -= 1;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        loop {
            self.gate.waker.register_by_ref(cx.waker());
            if !self.gate.open.load(Acquire) {
                return Poll::Pending;
            }
            match self.then.take() {
                Some(then) => self.gate = then,
                None => break,
            }
        }
        if let Some(next) = self.next.take() {
            self.inbox.push(*next);
        }
        self.ended.fetch_add(1, AcqRel);
        Poll::Ready(())
    }
}

/// The run's end as `Run::poll` waits for it: `RunCore::mark_ended`, `wait_end` and
/// `is_ended`.
#[derive(Default)]
struct End {
    ended: AtomicBool,
    done: AtomicWaker,
}

impl End {
    /// `Run::poll` after polling its drivers, with the waker it registered last: whether the
    /// run ended.
    fn poll(&self, registered: &mut Option<Waker>, cx: &Context<'_>) -> bool {
        if !self.ended.load(Acquire) {
            let waker = cx.waker();
            if !registered.as_ref().is_some_and(|w| w.will_wake(waker)) {
                self.done.register_by_ref(waker);
                *registered = Some(waker.clone());
            }
            if !self.ended.load(Acquire) {
                return false;
            }
        }
        true
    }

    /// `RunCore::mark_ended`.
    fn end(&self) {
        self.ended.store(true, Release);
        self.done.wake();
    }
}

/// A run's parts shared with its drivers.
struct Run {
    inbox: Shared,
    ended: Arc<AtomicUsize>,
}

impl Run {
    fn new() -> Self {
        Run {
            inbox: std::sync::Arc::new(Inbox::new()),
            ended: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// A driver waiting for `gate`, pushing `next` when it ends.
    fn node(&self, gate: &Arc<Gate>, next: Option<Node>) -> Node {
        Node {
            spins: 0,
            gate: Arc::clone(gate),
            then: None,
            also: None,
            next: next.map(Box::new),
            inbox: std::sync::Arc::clone(&self.inbox),
            ended: Arc::clone(&self.ended),
        }
    }
}

type TaskRef = std::sync::Arc<Task>;

/// Polls `joined` as the run's future does until `nodes` drivers ended (the run's `live`
/// count), in task `first`, then in `then` (when they differ, the future moved: `then`
/// polls it at once), waiting for the task whenever a poll returns `Pending`.
fn drive(
    joined: &mut Joined<Node, LoomSync>,
    run: &Run,
    nodes: usize,
    first: &TaskRef,
    then: &TaskRef,
) {
    let over = || run.ended.load(Acquire) == nodes;
    let waker = Waker::from(TaskRef::clone(first));
    joined.poll(
        &run.inbox,
        &mut Context::from_waker(&waker),
        &Passes::default(),
    );
    let waker = Waker::from(TaskRef::clone(then));
    if !TaskRef::ptr_eq(first, then) && !over() {
        joined.poll(
            &run.inbox,
            &mut Context::from_waker(&waker),
            &Passes::default(),
        );
    }
    while !over() {
        then.wait();
        joined.poll(
            &run.inbox,
            &mut Context::from_waker(&waker),
            &Passes::default(),
        );
    }
    assert!(joined.is_empty());
}

/// Two threads, each opening `gates` in the order its list gives.
fn open_from_threads(gates: &[Arc<Gate>], plan: [Vec<usize>; 2]) -> Vec<thread::JoinHandle<()>> {
    plan.into_iter()
        .map(|opens| {
            let gates = gates.to_vec();
            thread::spawn(move || opens.into_iter().for_each(|i| gates[i].open()))
        })
        .collect()
}

/// Opens `gates` from two threads as `plan` says, while a fresh [`Joined`] is driven in
/// one task until `nodes` drivers ended; then joins the threads.
fn drive_while_opening(run: &Run, gates: &[Arc<Gate>], plan: [Vec<usize>; 2], nodes: usize) {
    let openers = open_from_threads(gates, plan);
    let task = task();
    drive(
        &mut Joined::<Node, LoomSync>::new(),
        run,
        nodes,
        &task,
        &task,
    );
    openers.into_iter().for_each(|t| t.join().unwrap());
}

impl Run {
    /// Pushes [`POLLED_TOGETHER`] drivers whose gate is open: they end at their first
    /// poll, and the drivers pushed after them go to the set.
    fn fill_polled_together(&self) {
        let open: Arc<Gate> = Arc::default();
        open.open.store(true, Release);
        for _ in 0..POLLED_TOGETHER {
            self.inbox.push(self.node(&open, None));
        }
    }
}

/// Two drivers wait for gates that two other threads open; the first to end spawns a third,
/// which waits for a gate opened by one of them too. Every driver ends and the run's
/// future is polled after each wake-up: none is lost, whatever the interleaving.
#[test]
fn no_driver_pushed_while_the_run_polls_is_left_unpolled() {
    model(|| {
        let run = Run::new();
        let gates: Vec<Arc<Gate>> = (0..3).map(|_| Arc::default()).collect();
        let third = run.node(&gates[2], None);
        run.inbox.push(run.node(&gates[0], Some(third)));
        run.inbox.push(run.node(&gates[1], None));
        drive_while_opening(&run, &gates, [vec![0, 2], vec![1]], 3);
        assert!(run.inbox.take().is_empty());
    });
}

/// The run's future moves to another task after its first poll (as a request's future
/// handed to `tokio::spawn`): a driver it polls together with others, and one in its set
/// past [`POLLED_TOGETHER`], is woken in the new task, never only in the old one.
#[test]
fn a_run_moved_to_another_task_is_woken_there() {
    for nodes in [1, POLLED_TOGETHER + 1] {
        model(move || {
            let run = Run::new();
            let open: Arc<Gate> = Arc::default();
            open.open.store(true, Release);
            let gate: Arc<Gate> = Arc::default();
            // `nodes - 1` drivers that end at their first poll, then one that waits: past
            // `POLLED_TOGETHER`, in the set.
            for _ in 1..nodes {
                run.inbox.push(run.node(&open, None));
            }
            run.inbox.push(run.node(&gate, None));
            let opener = {
                let gate = Arc::clone(&gate);
                thread::spawn(move || gate.open())
            };
            drive(
                &mut Joined::<Node, LoomSync>::new(),
                &run,
                nodes,
                &task(),
                &task(),
            );
            opener.join().unwrap();
        });
    }
}

/// The run's end, told from another thread (its last driver ended on another worker), wakes
/// the task that polled the run's future last, also when it moved there after registering
/// its waker in the first: a poll with another waker registers that one.
#[test]
fn the_run_s_end_wakes_the_task_that_polled_it_last() {
    model(|| {
        let end: Arc<End> = Arc::default();
        let ender = {
            let end = Arc::clone(&end);
            thread::spawn(move || end.end())
        };
        let (old, new) = (task(), task());
        let (old_waker, new_waker) = (Waker::from(old), Waker::from(TaskRef::clone(&new)));
        let mut registered = None;
        let mut ended = end.poll(&mut registered, &Context::from_waker(&old_waker));
        if !ended {
            ended = end.poll(&mut registered, &Context::from_waker(&new_waker));
        }
        while !ended {
            new.wait();
            ended = end.poll(&mut registered, &Context::from_waker(&new_waker));
        }
        ender.join().unwrap();
    });
}

/// Past [`POLLED_TOGETHER`], two drivers in the set wait at once, one of them twice: each
/// wake-up, from two other threads, pushes its driver's place on the set's stack, and a
/// place woken again after the run's poll took it, or while its driver is polled, is
/// pushed again. Every driver ends: no wake-up is lost, and none leaves a place on the
/// stack twice.
#[test]
fn the_set_polls_every_driver_woken_from_other_threads() {
    // Two preemptions: the ten drivers make three a long model.
    model_with(2, || {
        let run = Run::new();
        run.fill_polled_together();
        let gates: Vec<Arc<Gate>> = (0..3).map(|_| Arc::default()).collect();
        let mut twice = run.node(&gates[0], None);
        twice.then = Some(Arc::clone(&gates[1]));
        run.inbox.push(twice);
        run.inbox.push(run.node(&gates[2], None));
        drive_while_opening(&run, &gates, [vec![0, 1], vec![2]], POLLED_TOGETHER + 2);
    });
}

/// Past [`POLLED_TOGETHER`], a driver in the set ends and its place is reused by the driver
/// it makes ready, while a waker it left elsewhere wakes the place late: before it ends,
/// after, or once the place holds the new driver. The late wake-up may leave the place on
/// the set's stack when the new driver moves in; the new driver is still polled when its
/// own wake-up comes, and the place is never pushed twice.
#[test]
fn a_reused_place_woken_late_loses_no_wake_up() {
    model_with(2, || {
        let run = Run::new();
        run.fill_polled_together();
        let gates: Vec<Arc<Gate>> = (0..4).map(|_| Arc::default()).collect();
        let reuser = run.node(&gates[2], None);
        let mut first = run.node(&gates[0], Some(reuser));
        first.also = Some(Arc::clone(&gates[3]));
        run.inbox.push(first);
        run.inbox.push(run.node(&gates[1], None));
        drive_while_opening(&run, &gates, [vec![0, 2], vec![3, 1]], POLLED_TOGETHER + 3);
    });
}

/// What a run tells the future of its passes, as `RunCore` does: a driver never gives the
/// task's turn back here. Counts the passes after the first.
#[derive(Default)]
struct Passes {
    again: std::cell::Cell<usize>,
    over: std::cell::Cell<usize>,
}

impl super::Passes<LoomSync> for Passes {
    fn again(&self) -> bool {
        self.again.set(self.again.get() + 1);
        true
    }
    fn over(&self) {
        self.over.set(self.over.get() + 1);
    }
}

/// A task that counts its wake-ups, for the tests that run without loom's threads.
#[derive(Default)]
struct Counted(std::sync::atomic::AtomicUsize);

impl Wake for Counted {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Drivers that wake themselves during their poll, a few polled together and one in the
/// set, end in one poll of the run's future, which wakes no task: it polls them again
/// itself. Without the passes after the first, the poll returns `Pending` and wakes its
/// task.
#[test]
fn drivers_woken_during_the_poll_are_polled_again_in_it() {
    for nodes in [2, POLLED_TOGETHER + 1] {
        loom::model(move || {
            let run = Run::new();
            let open: Arc<Gate> = Arc::default();
            open.open.store(true, Release);
            for _ in 0..nodes {
                let mut node = run.node(&open, None);
                node.spins = 2;
                run.inbox.push(node);
            }
            let task = std::sync::Arc::new(Counted::default());
            let waker = Waker::from(std::sync::Arc::clone(&task));
            let mut joined = Joined::<Node, LoomSync>::new();
            let passes = Passes::default();
            joined.poll(&run.inbox, &mut Context::from_waker(&waker), &passes);
            assert!(joined.is_empty(), "every driver ended in the first poll");
            assert_eq!(run.ended.load(Acquire), nodes);
            assert_eq!(task.0.load(std::sync::atomic::Ordering::Relaxed), 0);
            assert_eq!(passes.again.get(), 2, "two passes after the first");
            assert_eq!(passes.over.get(), 1);
        });
    }
}

/// A driver that wakes itself at every poll gets the task's turn given back: the poll
/// stops after its budget of polls, wakes its task once and returns.
#[test]
fn a_driver_that_always_wakes_itself_gives_the_turn_back() {
    // One thread, but some `REPOLL_MAX` polls of loom's atomics: more branches than loom's
    // default allows.
    let mut b = loom::model::Builder::new();
    b.max_branches = 100 * REPOLL_MAX;
    b.check(|| {
        let run = Run::new();
        let open: Arc<Gate> = Arc::default();
        open.open.store(true, Release);
        let mut node = run.node(&open, None);
        node.spins = usize::MAX;
        run.inbox.push(node);
        let task = std::sync::Arc::new(Counted::default());
        let waker = Waker::from(std::sync::Arc::clone(&task));
        let mut joined = Joined::<Node, LoomSync>::new();
        let passes = Passes::default();
        joined.poll(&run.inbox, &mut Context::from_waker(&waker), &passes);
        assert!(!joined.is_empty());
        assert_eq!(task.0.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(passes.again.get(), REPOLL_MAX);
        // The next poll goes on, and a wake-up from outside after it returned wakes the
        // task again.
        joined.poll(
            &run.inbox,
            &mut Context::from_waker(&waker),
            &Passes::default(),
        );
        assert_eq!(task.0.load(std::sync::atomic::Ordering::Relaxed), 2);
    });
}

/// Drivers that wake themselves during the poll while another thread opens the gate of a
/// driver polled together with them, and of one in the set: whether the gate's wake-up
/// comes during a pass, between two, or after the poll returned, no wake-up is lost.
#[test]
fn wake_ups_from_other_threads_during_passes_are_not_lost() {
    model_with(2, || {
        let run = Run::new();
        let gates: Vec<Arc<Gate>> = (0..2).map(|_| Arc::default()).collect();
        let open: Arc<Gate> = Arc::default();
        open.open.store(true, Release);
        let mut spinner = run.node(&open, None);
        spinner.spins = 2;
        run.inbox.push(spinner);
        run.inbox.push(run.node(&gates[0], None));
        for _ in 2..POLLED_TOGETHER {
            run.inbox.push(run.node(&open, None));
        }
        let mut spinner = run.node(&open, None);
        spinner.spins = 1;
        run.inbox.push(spinner);
        run.inbox.push(run.node(&gates[1], None));
        drive_while_opening(&run, &gates, [vec![0], vec![1]], POLLED_TOGETHER + 2);
    });
}

/// A cancel on another thread while the future makes the run's waker for its first joined
/// driver, which then reads the cancel flag: the driver sees the flag, or the cancel wakes
/// the run's waker, which fails the first pass's end (the future then polls its drivers
/// again) or wakes the run's task. Never none: joined drivers register no waker of their
/// own. The flag's own accesses are relaxed: `CancelWake` orders them. With the waker made
/// new, and of a spare one an earlier run left.
#[test]
fn a_cancel_racing_the_first_driver_s_join_reaches_it() {
    for with_spare in [false, true] {
        model(move || {
            let spare = with_spare
                .then(|| Woken::polling(Waker::noop()))
                .and_then(SpareWaker::of);
            assert_eq!(
                spare.is_some(),
                with_spare,
                "a waker no one holds is a spare"
            );
            let cancel = Arc::new(CancelWake::<LoomSync>::new());
            let flag = Arc::new(AtomicBool::new(false));
            let canceller = {
                let (cancel, flag) = (Arc::clone(&cancel), Arc::clone(&flag));
                thread::spawn(move || {
                    flag.store(true, Relaxed);
                    cancel.cancelled();
                })
            };
            let task = task();
            let woken = cancel.make(&Waker::from(std::sync::Arc::clone(&task)), || spare);
            let seen = flag.load(Relaxed);
            let quiet = woken.end_pass();
            canceller.join().unwrap();
            let task_woken = *task.woken.lock().unwrap();
            assert!(seen || !quiet || task_woken, "the cancel reached no driver");
        });
    }
}
