//! Orchestrator-wide statistics: atomic counters and gauges, read as an immutable snapshot.
//! The snapshot carries tokio's runtime metrics where a thread pool's would be.
//!
//! Counters are striped per thread, so counting costs a few nanoseconds and no contention;
//! a snapshot sums the stripes. A snapshot taken while runs are in flight is not atomic
//! across fields: each field is exact, but the set is not a single instant. One taken when
//! no run is in flight is exact.

use std::fmt;
use std::marker::PhantomData;

use crate::report::Outcome;
use crate::util::striped::{Bump, Count, Padded, STRIPES, is_owned, stripe};

macro_rules! counters {
    (counts: [$($count:ident),* $(,)?], gauges: [$($gauge:ident),* $(,)?] $(,)?) => {
        /// One stripe of the live counters behind [`Stats`].
        #[derive(Debug, Default)]
        pub(crate) struct Stripe {
            $($count: Count,)*
            $($gauge: Count,)*
        }

        impl<'a> Local<'a> {
            $(
                #[inline]
                pub(crate) fn $count(&self) -> Bump<'a> {
                    Bump::new(&self.stripe.$count, self.owner)
                }
            )*
            $(
                #[inline]
                pub(crate) fn $gauge(&self) -> Bump<'a> {
                    Bump::new(&self.stripe.$gauge, self.owner)
                }
            )*
        }

        impl Counters {
            /// The stripes summed: counts since the counters were made, gauges now.
            fn sums(&self) -> Stripe {
                let total = Stripe::default();
                for s in self.stripes.iter() {
                    $(total.$count.set(total.$count.get().wrapping_add(s.0.$count.get()));)*
                    $(total.$gauge.set(total.$gauge.get().wrapping_add(s.0.$gauge.get()));)*
                }
                total
            }

            /// Zeroes the counts; the gauges are kept. The stripes are not written, since
            /// their owners write them with plain stores: their sums now become the
            /// baseline that later reads subtract.
            pub(crate) fn reset(&self) {
                let t = self.sums();
                $(self.baseline.$count.set(t.$count.get());)*
            }

            /// The counts since the last reset, and the gauges.
            fn current(&self) -> Stripe {
                let t = self.sums();
                $(t.$count.set(t.$count.get().wrapping_sub(self.baseline.$count.get()));)*
                t
            }
        }
    };
}

counters!(
    counts: [
        runs_started,
        runs_finished,
        runs_rejected,
        nodes_submitted,
        succeeded,
        recovered,
        failed,
        skipped,
        not_taken,
        cancelled,
        items_started,
        items_succeeded,
        items_recovered,
        items_failed,
        items_cancelled,
        compensations_succeeded,
        compensations_failed,
        attempts,
        retries,
        timeouts,
        breaker_rejections,
        fallbacks,
        rate_limited,
        hedges,
        faults_injected,
    ],
    gauges: [runs_in_flight, nodes_in_flight],
);

/// The live counters behind [`Stats`], striped per thread; see `util/striped.rs`.
#[derive(Debug)]
pub(crate) struct Counters {
    stripes: Box<[Padded<Stripe>; STRIPES]>,
    /// The counts' sums at the last reset.
    baseline: Stripe,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            stripes: Box::new(std::array::from_fn(|_| Padded::default())),
            baseline: Stripe::default(),
        }
    }
}

/// This thread's stripe of an orchestrator's counters, to bump at once: it is neither
/// `Send` nor `Sync`, so it is never held across an `.await`; see `util/striped.rs`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Local<'a> {
    stripe: &'a Stripe,
    /// This thread owns the stripe.
    owner: bool,
    _thread: PhantomData<*const ()>,
}

impl Local<'_> {
    #[inline]
    pub(crate) fn outcome(&self, outcome: Outcome) {
        match outcome {
            Outcome::Succeeded => self.succeeded().incr(),
            Outcome::Recovered => self.recovered().incr(),
            Outcome::Failed => self.failed().incr(),
            Outcome::Skipped => self.skipped().incr(),
            Outcome::NotTaken => self.not_taken().incr(),
            Outcome::Cancelled => self.cancelled().incr(),
        }
    }

    /// Counts a compensation that ended with `outcome`.
    pub(crate) fn compensation(&self, outcome: Outcome) {
        match outcome {
            Outcome::Succeeded => self.compensations_succeeded().incr(),
            _ => self.compensations_failed().incr(),
        }
    }

    /// Counts an item of a map node that ended with `outcome`.
    pub(crate) fn item(&self, outcome: Outcome) {
        match outcome {
            Outcome::Succeeded => self.items_succeeded().incr(),
            Outcome::Recovered => self.items_recovered().incr(),
            Outcome::Failed => self.items_failed().incr(),
            _ => self.items_cancelled().incr(),
        }
    }
}

impl Counters {
    /// This thread's stripe: bump its fields.
    #[inline]
    pub(crate) fn local(&self) -> Local<'_> {
        let index = stripe();
        debug_assert!(index < STRIPES, "stripe {index} out of range");
        Local {
            stripe: &self.stripes[index.min(STRIPES - 1)].0,
            owner: is_owned(index),
            _thread: PhantomData,
        }
    }

    pub(crate) fn snapshot(&self, bulkhead_waiters: usize) -> Stats {
        let runtime = tokio::runtime::Handle::try_current().ok().map(|h| {
            let m = h.metrics();
            RuntimeStats {
                workers: m.num_workers(),
                alive_tasks: m.num_alive_tasks(),
                global_queue_depth: m.global_queue_depth(),
            }
        });
        let t = self.current();
        let n = |c: &Count| c.get().max(0) as u64;
        Stats {
            runs_started: n(&t.runs_started),
            runs_finished: n(&t.runs_finished),
            runs_rejected: n(&t.runs_rejected),
            nodes_submitted: n(&t.nodes_submitted),
            succeeded: n(&t.succeeded),
            recovered: n(&t.recovered),
            failed: n(&t.failed),
            skipped: n(&t.skipped),
            not_taken: n(&t.not_taken),
            cancelled: n(&t.cancelled),
            attempts: n(&t.attempts),
            retries: n(&t.retries),
            timeouts: n(&t.timeouts),
            breaker_rejections: n(&t.breaker_rejections),
            fallbacks: n(&t.fallbacks),
            rate_limited: n(&t.rate_limited),
            hedges: n(&t.hedges),
            faults_injected: n(&t.faults_injected),
            items_started: n(&t.items_started),
            items_succeeded: n(&t.items_succeeded),
            items_recovered: n(&t.items_recovered),
            items_failed: n(&t.items_failed),
            items_cancelled: n(&t.items_cancelled),
            compensations_succeeded: n(&t.compensations_succeeded),
            compensations_failed: n(&t.compensations_failed),
            runs_in_flight: n(&t.runs_in_flight),
            nodes_in_flight: n(&t.nodes_in_flight),
            bulkhead_waiters: bulkhead_waiters as u64,
            runtime,
        }
    }
}

/// An immutable snapshot of an [`Orchestrator`](crate::Orchestrator)'s statistics, from
/// [`Orchestrator::stats`](crate::Orchestrator::stats).
///
/// Counters count since the orchestrator was created or last
/// [`reset`](crate::Orchestrator::reset_stats); gauges are current values. `Display` prints
/// a one-line panel:
///
/// ```text
/// runs[started 120 finished 118 in-flight 2 rejected 0] nodes[submitted 600 in-flight 3 succeeded 590 recovered 4 failed 1 skipped 2 not-taken 0 cancelled 0] items[started 0 succeeded 0 recovered 0 failed 0 cancelled 0] compensations[succeeded 0 failed 0] attempts[612 retries 12 timeouts 5 breaker-rejections 3 fallbacks 4 rate-limited 0 hedges 0 faults-injected 0] bulkhead-waiters 0 runtime[workers 2 tasks 5 queue 0]
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Stats {
    /// Runs that started, that is were first polled and accepted.
    pub runs_started: u64,
    /// Runs whose every node ended and whose tasks all exited.
    pub runs_finished: u64,
    /// Runs refused because the orchestrator was shutting down.
    pub runs_rejected: u64,
    /// Nodes of started runs.
    pub nodes_submitted: u64,
    /// Nodes that ended `Succeeded`.
    pub succeeded: u64,
    /// Nodes that ended `Recovered`.
    pub recovered: u64,
    /// Nodes that ended `Failed`.
    pub failed: u64,
    /// Nodes that ended `Skipped`.
    pub skipped: u64,
    /// Nodes that ended `NotTaken`.
    pub not_taken: u64,
    /// Nodes that ended `Cancelled`.
    pub cancelled: u64,
    /// Items of map nodes that started.
    pub items_started: u64,
    /// Items of map nodes that ended `Succeeded`.
    pub items_succeeded: u64,
    /// Items of map nodes that ended `Recovered`, because their fallback answered.
    pub items_recovered: u64,
    /// Items of map nodes that ended `Failed`.
    pub items_failed: u64,
    /// Items of map nodes that ended `Cancelled`: the completion rule was decided while
    /// they ran or before they started.
    pub items_cancelled: u64,
    /// Compensations that ended `Succeeded`; see
    /// [`NodeBuilder::compensate`](crate::NodeBuilder::compensate).
    pub compensations_succeeded: u64,
    /// Compensations that ended `Failed`, their attempts spent. A compensation that did not
    /// run, its runtime gone, is in neither count.
    pub compensations_failed: u64,
    /// Attempts started, an item's attempts included.
    pub attempts: u64,
    /// Attempts that were retries, with attempt number 2 or more.
    pub retries: u64,
    /// Attempts cut by a per-attempt timeout or a deadline.
    pub timeouts: u64,
    /// Series rejected by an open circuit breaker.
    pub breaker_rejections: u64,
    /// Fallbacks that ran.
    pub fallbacks: u64,
    /// Attempts a rate limiter refused: no permit came within its maximum wait or the
    /// attempt's cut.
    pub rate_limited: u64,
    /// Hedges started, that is attempts started in parallel with a slow one. Each is counted
    /// in `attempts` and `retries` too.
    pub hedges: u64,
    /// Attempts to which fault injection, [`Chaos`](crate::chaos::Chaos), added a latency or an
    /// error.
    pub faults_injected: u64,
    /// Gauge: runs started and not finished.
    pub runs_in_flight: u64,
    /// Gauge: nodes whose task is running or whose retry series is in a backoff.
    pub nodes_in_flight: u64,
    /// Gauge: attempts waiting for a bulkhead permit, over the orchestrator's bulkheads.
    pub bulkhead_waiters: u64,
    /// The tokio runtime's own metrics, when the snapshot was taken inside a runtime.
    pub runtime: Option<RuntimeStats>,
}

/// What the tokio runtime exposes about itself in its stable `RuntimeMetrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct RuntimeStats {
    /// Worker threads.
    pub workers: usize,
    /// Tasks alive on the runtime: all of them, not only baton's.
    pub alive_tasks: usize,
    /// Tasks waiting in the global queue.
    pub global_queue_depth: usize,
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "runs[started {} finished {} in-flight {} rejected {}] \
             nodes[submitted {} in-flight {} succeeded {} recovered {} failed {} skipped {} not-taken {} cancelled {}] \
             items[started {} succeeded {} recovered {} failed {} cancelled {}] \
             compensations[succeeded {} failed {}] \
             attempts[{} retries {} timeouts {} breaker-rejections {} fallbacks {} rate-limited {} hedges {} faults-injected {}] \
             bulkhead-waiters {}",
            self.runs_started,
            self.runs_finished,
            self.runs_in_flight,
            self.runs_rejected,
            self.nodes_submitted,
            self.nodes_in_flight,
            self.succeeded,
            self.recovered,
            self.failed,
            self.skipped,
            self.not_taken,
            self.cancelled,
            self.items_started,
            self.items_succeeded,
            self.items_recovered,
            self.items_failed,
            self.items_cancelled,
            self.compensations_succeeded,
            self.compensations_failed,
            self.attempts,
            self.retries,
            self.timeouts,
            self.breaker_rejections,
            self.fallbacks,
            self.rate_limited,
            self.hedges,
            self.faults_injected,
            self.bulkhead_waiters,
        )?;
        if let Some(rt) = &self.runtime {
            write!(
                f,
                " runtime[workers {} tasks {} queue {}]",
                rt.workers, rt.alive_tasks, rt.global_queue_depth
            )?;
        }
        Ok(())
    }
}
