//! Where ready nodes go: the run's ready queue and the drivers that drain it, spawned as
//! the queue needs them; and the run's start, which claims its roots.

use std::cell::Cell;
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::engine::driver::Driver;
use crate::engine::run::node_state::Claim;
use crate::engine::run::state::RunState;
use crate::observe::{Event, trace};

impl<I: Send + Sync + 'static> RunState<I> {
    /// Queues node `id`, which the caller moved to `RUNNING`, for a driver to run, and
    /// spawns a driver if fewer than the runtime's workers are draining the queue; whether
    /// it spawned one as a tokio task. [`share`](Self::share) does the same for several nodes.
    ///
    /// A task spawned from a tokio worker waits in that worker's LIFO slot, which other
    /// workers cannot steal from, and no idle worker is woken for it. A caller that goes on
    /// running a node itself must first yield once, or the two would share one worker. Its
    /// own task then goes to the stealable queue, an idle worker is woken, and the new
    /// driver runs here.
    pub(in crate::engine) fn schedule(self: &Arc<Self>, id: u32) -> bool {
        let ready = self.core.ready();
        let id = match ready.push(id) {
            Ok(()) if ready.try_activate(self.workers()) => None,
            Ok(()) => return false,
            // Only a node queued twice could fill the queue; run it all the same.
            Err(id) => Some(id),
        };
        self.spawn_driver(id, id.is_none())
    }

    /// Queues `nodes`, moved to `RUNNING`, for any driver, like
    /// [`schedule`](Self::schedule) with one spawn at most. Returns whether it spawned a
    /// driver as a tokio task.
    pub(in crate::engine) fn share(self: &Arc<Self>, nodes: impl Iterator<Item = u32>) -> bool {
        let ready = self.core.ready();
        let mut queued = false;
        for id in nodes {
            match ready.push(id) {
                Ok(()) => queued = true,
                // Only a node queued twice could fill the queue; run it all the same.
                Err(id) => {
                    let _ = self.spawn_driver(Some(id), false);
                }
            }
        }
        queued && ready.try_activate(self.workers()) && self.spawn_driver(None, true)
    }

    /// How many drivers at most drain the ready queue: the runtime's worker threads, or one
    /// for an inline run while its future drives it.
    #[inline]
    pub(in crate::engine) fn workers(&self) -> usize {
        self.core.drivers()
    }

    /// Spawns a driver, counted in `live`: one that starts with node `id`, moved to
    /// `RUNNING` by the caller, or with `None` one that starts with the ready queue.
    /// `active`: the caller counted it as an active driver. Returns whether it became a
    /// tokio task, as [`spawn`](Self::spawn) says.
    pub(in crate::engine) fn spawn_driver(self: &Arc<Self>, id: Option<u32>, active: bool) -> bool {
        self.spawn(Driver::new(Arc::clone(self), id, active))
    }

    /// Spawns `driver` of this run, counted in `live`; returns whether it became a tokio
    /// task. An inline run that has not spread, as [`RunCore::is_local`] tells, spawns no
    /// task: the driver goes to the run's inbox, for the run's future to poll, as
    /// `tokio::join!` or a `FuturesUnordered` polls its futures. See `Run::poll` in
    /// `run/joined.rs`. Only code that future polls spawns while the run is local, so the
    /// future looks at the inbox before it returns.
    ///
    /// [`RunCore::is_local`]: crate::engine::run::core::RunCore::is_local
    pub(in crate::engine) fn spawn(&self, mut driver: Driver<I>) -> bool {
        self.core.retain();
        if self.core.is_local() {
            driver.set_joined();
            self.inbox.push(driver);
            return false;
        }
        self.spawn_task(driver);
        true
    }

    /// Spawns `driver`, already counted in `live`, as a tokio task on the run's runtime.
    pub(in crate::engine) fn spawn_task(&self, driver: Driver<I>) {
        match self.core.handle() {
            Some(handle) => {
                handle.spawn(driver);
            }
            None => {
                tokio::spawn(driver);
            }
        }
    }

    /// Starts the run: fixes its origin and deadline, and makes its span, a child of the
    /// current span unless `detached`. Emits `RunStarted`, marks the run admitted, so that
    /// its nodes count in the stats from here on, and starts its first roots with
    /// [`start_roots`](Self::start_roots).
    ///
    /// # Safety
    ///
    /// Called once per run: no other call of `start` on this run may run before or at the
    /// same time as this one. `Run::poll` makes the one call, in the poll that starts the
    /// run, through `&mut Run`; `RunCore::fix_start` relies on it.
    ///
    /// Where one thread runs every task, and the run is inline, as with the default
    /// [`StartMode::Inline`], the first driver is not spawned but returned, for the run's
    /// future to poll at once. One thread is taken to run every task on a current-thread
    /// runtime, or on a one-worker runtime awaited from a task. A graph whose nodes end at
    /// once then runs in the task that awaits it, without a spawn, as `tokio::join!` would.
    /// That driver holds nothing across a `Pending`: a node that waits, and whatever it
    /// would yield with, goes to a driver spawned for it in `driver/`. In an inline run
    /// that is one that the run's future polls too, see [`spawn`](Self::spawn); in a spread
    /// run it is a task, so that run goes on while its future is held without being polled.
    /// An inline run schedules as on a one-worker runtime until it spreads, see
    /// [`RunCore::spread`]. Otherwise every first driver is a task: a node that computes
    /// must not hold the awaiting task, with its timeout and the other futures it joins,
    /// while other workers could run it.
    ///
    /// [`StartMode::Inline`]: crate::engine::StartMode::Inline
    /// [`RunCore::spread`]: crate::engine::run::core::RunCore::spread
    #[allow(unsafe_code)]
    pub(in crate::engine) unsafe fn start(
        self: &Arc<Self>,
        handle: Handle,
        detached: bool,
    ) -> Option<Driver<I>> {
        let core = &self.core;
        let now = Instant::now();
        let runtime_workers = workers_of(&handle);
        // Whether one thread runs every task, the caller's included, so that a node run in
        // the task that awaits the run holds nothing another worker could have run. Tokio
        // does not say which thread is a worker: this is a current-thread runtime, or one
        // worker and the caller is a task. A `LocalSet`, a blocking thread from
        // `spawn_blocking` or `Handle::block_on`, or a `Handle::block_on` from another
        // thread pass it too; there a node that computes holds the awaiting thread, as in a
        // `tokio::join!`.
        let one_thread = core.is_inline()
            || (runtime_workers == 1
                && (handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread
                    || tokio::task::try_id().is_some()));
        let nodes = self.graph.meta.len();
        let span = trace::run_span(core.run_id(), nodes, self.graph_name(), detached);
        // An inline run counts one worker while its future drives it: at most one driver
        // at a time drains the ready queue, and a driver keeps the nodes it makes ready for
        // itself. Once the future stops driving it, it spreads.
        // SAFETY: `start` is called once per run, as its contract says, and it is
        // `fix_start`'s one caller: no other call of `fix_start` runs at the same time.
        #[allow(unsafe_code)]
        unsafe {
            core.fix_start(now, handle, runtime_workers, span);
        }
        if self.observed() {
            self.emit(&Event::RunStarted {
                run: core.run_id(),
                graph: self.graph_name(),
                nodes: self.graph.meta.len(),
            });
        }
        // Admitted after `RunStarted` and before the first driver. From here on a cancel
        // may end the run, and `RunFinished` must come second. The first driver may record
        // nodes on another worker before this returns.
        self.mark_admitted();
        // An empty graph is over at once.
        if self.graph.meta.len() == 0 {
            self.on_end();
            return None;
        }
        // The run's origin is its first node's start, when no observer runs in between: the
        // run's future polls that node next.
        let start = (one_thread && !self.observed()).then_some(now);
        self.start_roots(one_thread, start)
    }

    /// Claims the run's roots: the first ones, one per driver the run may have, get a
    /// driver of their own, and the others wait in the queue for those drivers. They are
    /// queued first, so that a driver that ends its root at once finds them. With
    /// `embedded`, the first driver is returned for the run's future to poll, its root
    /// starting at `start` if given.
    fn start_roots(self: &Arc<Self>, embedded: bool, start: Option<Instant>) -> Option<Driver<I>> {
        let core = &self.core;
        let workers = self.workers();
        let claim = |root: u32| core.node(root).is_some_and(|n| n.claim() == Claim::Claimed);
        let roots = &self.graph.meta.roots;
        let (own, queued) = roots.split_at(roots.len().min(workers));
        for &root in queued {
            if claim(root) {
                if let Err(root) = core.ready().push(root) {
                    self.spawn_driver(Some(root), false);
                }
            }
        }
        let mut first = None;
        for &root in own {
            if claim(root) {
                let active = core.ready().try_activate(workers);
                if embedded {
                    core.retain();
                    first = Some(Driver::embedded(Arc::clone(self), root, active, start));
                } else {
                    self.spawn_driver(Some(root), active);
                }
            }
        }
        // A cancel between the two loops sweeps first roots that were not claimed yet: the
        // queued ones then have no driver. Honour the pusher's side of the protocol.
        if !core.ready().is_empty() && core.ready().try_activate(workers) {
            self.spawn_driver(None, true);
        }
        first
    }
}

/// How many workers `handle`'s runtime has, at least one; read from tokio's metrics once per
/// runtime and thread, as `handle.metrics()` clones the handle, and a runtime's count of
/// workers never changes. Runtimes are told apart by their id, as `timers_on` does: tokio
/// gives each runtime of the process an id of its own.
fn workers_of(handle: &Handle) -> usize {
    thread_local! {
        static LAST: Cell<Option<(tokio::runtime::Id, usize)>> = const { Cell::new(None) };
    }
    let id = handle.id();
    if let Ok(Some((seen, workers))) = LAST.try_with(Cell::get) {
        if seen == id {
            return workers;
        }
    }
    let workers = handle.metrics().num_workers().max(1);
    let _ = LAST.try_with(|last| last.set(Some((id, workers))));
    workers
}
