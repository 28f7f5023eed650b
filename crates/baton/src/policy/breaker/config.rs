//! The builder, its defaults, and validation into the machine's [`Config`].

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::window::{CountWindow, TimeWindow, Window};
use super::{BreakerConfigError, CircuitBreaker, SharedBreakerState, machine::Machine};

/// The sliding window the rate rules look at, as resilience4j's sliding window types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerWindow {
    /// The last N calls, as `COUNT_BASED`. N ≥ 1 and ≤ 1,000,000; it costs one byte per call.
    Count(u32),
    /// The calls that ended in the last T, as `TIME_BASED`, kept in 10 buckets of T/10:
    /// a call counts for at least 0.9 T and at most T. T > 0.
    Time(Duration),
}

/// The largest count window. It costs one byte of memory per call.
pub(crate) const MAX_COUNT_WINDOW: u32 = 1_000_000;
/// The largest number of half-open probes: the free-probe count lives in 16 bits of the
/// state word.
pub(crate) const MAX_PROBES: u32 = 0xFFFF;

/// The window used when only [`slow_calls`](CircuitBreakerBuilder::slow_calls) is set:
/// resilience4j's defaults, the last 100 calls and at least 100 of them.
const DEFAULT_WINDOW: BreakerWindow = BreakerWindow::Count(100);
const DEFAULT_MIN_CALLS: u32 = 100;

/// Builds a [`CircuitBreaker`]; from [`CircuitBreaker::builder`].
///
/// Setters take and return the builder by value; [`build`](Self::build) validates
/// everything and never panics.
///
/// # Defaults
/// - trip rule: [`consecutive_failures(5)`](Self::consecutive_failures), only when neither
///   [`failure_rate`](Self::failure_rate) nor [`slow_calls`](Self::slow_calls) is set;
/// - [`open_duration`](Self::open_duration): 5 s, Polly's default break duration. It is
///   long enough to shed load and short enough to notice a recovery;
/// - [`open_duration_growth`](Self::open_duration_growth): none, so every trip waits
///   `open_duration`;
/// - [`half_open_probes`](Self::half_open_probes): 1, a single trial call;
/// - [`half_open_max_wait`](Self::half_open_max_wait): 30 s;
/// - [`recovery_ramp`](Self::recovery_ramp): none, so it closes as soon as the probes
///   succeed;
/// - [`count_every_attempt`](Self::count_every_attempt): `false`, so a node's breaker is
///   told one result per retry series;
/// - the window for `slow_calls` without `failure_rate`: the last 100 calls, 100 minimum.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `.build()`"]
pub struct CircuitBreakerBuilder {
    name: String,
    consecutive_failures: Option<u32>,
    failure_rate: Option<(f64, BreakerWindow, u32)>,
    slow_calls: Option<(Duration, f64)>,
    open_duration: Duration,
    growth: Option<(f64, Duration)>,
    half_open_probes: u32,
    half_open_max_wait: Duration,
    recovery_ramp: Option<Duration>,
    count_every_attempt: bool,
    pub(super) shared: Option<Arc<dyn SharedBreakerState>>,
}

impl CircuitBreakerBuilder {
    pub(crate) fn new(name: String) -> Self {
        CircuitBreakerBuilder {
            name,
            consecutive_failures: None,
            failure_rate: None,
            slow_calls: None,
            open_duration: Duration::from_secs(5),
            growth: None,
            half_open_probes: 1,
            half_open_max_wait: Duration::from_secs(30),
            recovery_ramp: None,
            count_every_attempt: false,
            shared: None,
        }
    }

    /// Trip from closed to open after `n` failures in a row; a success resets the count and an
    /// ignored or cancelled call leaves it alone.
    ///
    /// A node's breaker records one result per retry series, so `n` counts failed
    /// *requests*, not attempts: a threshold above the retry's attempts is only needed when
    /// a breaker is told about every attempt.
    ///
    /// Combines with the rate rules: whichever fires first trips. `n` ≥ 1, else
    /// [`BreakerConfigError::Zero`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{CircuitBreaker, breaker::BreakerState};
    ///
    /// let ms = Duration::from_millis;
    /// let breaker = CircuitBreaker::builder("inventory").consecutive_failures(2).build()?;
    /// breaker.try_acquire()?.failure(ms(5));
    /// breaker.try_acquire()?.success(ms(5)); // a success resets the count
    /// breaker.try_acquire()?.failure(ms(5));
    /// assert_eq!(breaker.state(), BreakerState::Closed);
    /// breaker.try_acquire()?.failure(ms(5));
    /// assert_eq!(breaker.state(), BreakerState::Open);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn consecutive_failures(mut self, n: u32) -> Self {
        self.consecutive_failures = Some(n);
        self
    }

    /// Trip when failed calls / calls in `window` ≥ `threshold`, evaluated once the window
    /// holds at least `min_calls` calls. These are resilience4j's `failureRateThreshold`,
    /// `slidingWindow` and `minimumNumberOfCalls`.
    ///
    /// `threshold` in `(0, 1]`, where `0.5` is 50 %; `min_calls` ≥ 1 and, for a
    /// [`BreakerWindow::Count`], ≤ the window's size; else [`BreakerConfigError`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{CircuitBreaker, breaker::{BreakerState, BreakerWindow}};
    ///
    /// let ms = Duration::from_millis;
    /// let breaker = CircuitBreaker::builder("payments")
    ///     .failure_rate(0.5, BreakerWindow::Count(10), 4) // 50 % of the last 10, once 4 are in
    ///     .build()?;
    /// breaker.try_acquire()?.failure(ms(5));
    /// breaker.try_acquire()?.success(ms(5));
    /// breaker.try_acquire()?.success(ms(5));
    /// assert_eq!(breaker.state(), BreakerState::Closed); // 3 calls: too few to judge
    /// breaker.try_acquire()?.failure(ms(5)); // 2 of 4 failed
    /// assert_eq!(breaker.state(), BreakerState::Open);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn failure_rate(mut self, threshold: f64, window: BreakerWindow, min_calls: u32) -> Self {
        self.failure_rate = Some((threshold, window, min_calls));
        self
    }

    /// Count a call that took at least `slower_than` as slow, whether it succeeded or
    /// failed, and trip when slow calls / calls ≥ `rate`. The window and `min_calls` are
    /// those of [`failure_rate`](Self::failure_rate), or the default window when that is not
    /// set. These are resilience4j's `slowCallDurationThreshold` and
    /// `slowCallRateThreshold`.
    ///
    /// In half-open, probes at least `slower_than` long count against the same `rate`
    /// over the configured probes: with one probe, a slow probe re-opens the breaker.
    ///
    /// `slower_than` > 0 and `rate` in `(0, 1]`, else [`BreakerConfigError`].
    pub fn slow_calls(mut self, slower_than: Duration, rate: f64) -> Self {
        self.slow_calls = Some((slower_than, rate));
        self
    }

    /// How long an open breaker rejects calls before the next caller may probe, as
    /// resilience4j's `waitDurationInOpenState`. Zero is allowed: the
    /// next call after a trip is a probe. Default 5 s.
    pub fn open_duration(mut self, d: Duration) -> Self {
        self.open_duration = d;
        self
    }

    /// Lengthen the open duration on repeated trips without a close in between, like the
    /// exponential wait in open state of failsafe-rs and resilience4j. The k-th consecutive
    /// trip, counting k from 0, waits `min(open_duration × multiplier^k, max)`; a close
    /// resets k.
    ///
    /// `multiplier` finite and ≥ 1, `max` ≥ `open_duration`, else [`BreakerConfigError`].
    pub fn open_duration_growth(mut self, multiplier: f64, max: Duration) -> Self {
        self.growth = Some((multiplier, max));
        self
    }

    /// How many probe calls a half-open breaker admits, under any concurrency, as
    /// resilience4j's `permittedNumberOfCallsInHalfOpenState`. All must succeed to close it;
    /// any failure re-opens it. 1 ..= 65535, default 1.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{CircuitBreaker, breaker::BreakerState};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let ms = Duration::from_millis;
    /// let breaker = CircuitBreaker::builder("inventory")
    ///     .consecutive_failures(1)
    ///     .open_duration(Duration::from_secs(5))
    ///     .half_open_probes(2)
    ///     .build()?;
    /// breaker.try_acquire()?.failure(ms(5));
    /// assert!(breaker.try_acquire().is_err()); // open: rejected
    /// tokio::time::advance(Duration::from_secs(5)).await;
    /// let (a, b) = (breaker.try_acquire()?, breaker.try_acquire()?); // the two probes
    /// assert_eq!(breaker.state(), BreakerState::HalfOpen);
    /// assert!(breaker.try_acquire().is_err()); // no third call while they run
    /// a.success(ms(5));
    /// b.success(ms(5));
    /// assert_eq!(breaker.state(), BreakerState::Closed);
    /// # Ok(())
    /// # }
    /// ```
    pub fn half_open_probes(mut self, n: u32) -> Self {
        self.half_open_probes = n;
        self
    }

    /// How long half-open probes may stay unanswered, with neither a result nor a drop,
    /// before that counts as a failure, as resilience4j's `maxWaitDurationInHalfOpenState`.
    /// The next caller then re-opens the breaker with a fresh cooldown. Measured from the
    /// admission of the first probe that is still outstanding. > 0, default 30 s.
    pub fn half_open_max_wait(mut self, d: Duration) -> Self {
        self.half_open_max_wait = d;
        self
    }

    /// After the half-open probes succeed, bring traffic back over `ramp` instead of all at
    /// once: the breaker is [`Recovering`](super::BreakerState::Recovering) and admits a
    /// share of calls rising linearly from 10 % to 100 % over `ramp`, then closes. The rest
    /// are rejected with [`BreakerOpen`](super::BreakerOpen), and a node's fallback serves
    /// them. Failures while recovering count against the trip rules as when closed; a trip
    /// re-opens the breaker with the grown cooldown. The share is kept exactly, not drawn
    /// at random: of the calls asking during the ramp, the admitted count follows the
    /// share to within one call. `ramp` > 0, else [`BreakerConfigError::Zero`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::CircuitBreaker;
    ///
    /// let breaker = CircuitBreaker::builder("inventory")
    ///     .half_open_probes(3)
    ///     .recovery_ramp(Duration::from_secs(10))
    ///     .build()?;
    /// # Ok::<(), baton_graph::breaker::BreakerConfigError>(())
    /// ```
    pub fn recovery_ramp(mut self, ramp: Duration) -> Self {
        self.recovery_ramp = Some(ramp);
        self
    }

    /// Tell the breaker the result of every attempt, not one per retry series. Each attempt
    /// of a node or [`Pipeline`](crate::Pipeline) call guarded by it asks for a permit
    /// and reports at once. A dead downstream trips the breaker after `n` failed attempts
    /// instead of `n` failed series. Series already under way stop before their next
    /// attempt once it is open, with [`NodeError::GaveUp`](crate::NodeError::GaveUp) and
    /// reason `BreakerOpened`, and go to their fallback. Half-open probes are single attempts.
    /// Default `false`.
    ///
    /// ```
    /// use baton_graph::{BoxError, CircuitBreaker, Graph, NodeError, Retry, retry::StopReason};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let inventory = CircuitBreaker::builder("inventory")
    ///     .consecutive_failures(2)
    ///     .count_every_attempt(true)
    ///     .build()?;
    /// let mut g = Graph::<()>::builder();
    /// let stock = g
    ///     .node("stock")
    ///     .retry(Retry::new(5))
    ///     .breaker(&inventory)
    ///     .task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
    /// let report = g.build()?.run(()).await?;
    /// let stock = report.node(stock).unwrap();
    /// assert_eq!(stock.attempts(), 2); // the second failed attempt opened the breaker
    /// let reason = match stock.error() {
    ///     Some(NodeError::GaveUp { reason, .. }) => reason.clone(),
    ///     other => panic!("{other:?}"),
    /// };
    /// assert_eq!(reason, StopReason::BreakerOpened);
    /// # Ok(())
    /// # }
    /// ```
    pub fn count_every_attempt(mut self, yes: bool) -> Self {
        self.count_every_attempt = yes;
        self
    }

    /// Validates the configuration and returns the breaker, closed.
    ///
    /// # Errors
    /// A [`BreakerConfigError`] naming the breaker and the first bad setting, or a setting
    /// that a [`shared`](Self::shared) backend cannot keep. Never panics.
    ///
    /// ```
    /// use baton_graph::{CircuitBreaker, breaker::BreakerConfigError};
    ///
    /// let err = CircuitBreaker::builder("inventory").half_open_probes(0).build().unwrap_err();
    /// assert!(matches!(err, BreakerConfigError::Zero { .. }));
    /// assert_eq!(
    ///     err.to_string(),
    ///     "circuit breaker `inventory`: `half_open_probes` must not be zero"
    /// );
    /// ```
    pub fn build(mut self) -> Result<CircuitBreaker, BreakerConfigError> {
        let name: Arc<str> = Arc::from(self.name.as_str());
        let shared = self.shared.take();
        let config = self.validate()?;
        let mut machine = Machine::new(name, config, Instant::now());
        shared.map(|b| machine.set_shared(b)).transpose()?;
        Ok(CircuitBreaker::from_machine(machine))
    }

    /// The same settings for the breaker `name`.
    pub(crate) fn named(mut self, name: &str) -> Self {
        name.clone_into(&mut self.name);
        self
    }

    /// Whether a shared-state backend is set.
    pub(crate) fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    pub(crate) fn validate(self) -> Result<Config, BreakerConfigError> {
        if self.name.is_empty() {
            return Err(BreakerConfigError::EmptyName);
        }
        if self.consecutive_failures == Some(0) {
            return Err(self.zero("consecutive_failures"));
        }
        let rates = self.rate_rules()?;
        let consecutive_failures = match (self.consecutive_failures, &rates) {
            (Some(n), _) => Some(n),
            (None, None) => Some(5),
            (None, Some(_)) => None,
        };
        self.check_recovery()?;
        Ok(Config {
            consecutive_failures,
            rates,
            open_duration: self.open_duration,
            growth: self.growth,
            half_open_probes: self.half_open_probes,
            half_open_max_wait: self.half_open_max_wait,
            recovery_ramp: self.recovery_ramp,
            count_every_attempt: self.count_every_attempt,
        })
    }

    /// The error for a `field` that must not be zero.
    fn zero(&self, field: &'static str) -> BreakerConfigError {
        BreakerConfigError::Zero {
            breaker: self.name.clone(),
            field,
        }
    }

    /// The error for a rate `field` outside `(0, 1]`, if `value` is; NaN is outside.
    fn rate(&self, field: &'static str, value: f64) -> Result<(), BreakerConfigError> {
        if value > 0.0 && value <= 1.0 {
            return Ok(());
        }
        Err(BreakerConfigError::RateOutOfRange {
            breaker: self.name.clone(),
            field,
            value,
        })
    }

    /// The failure-rate and slow-call rules, validated, with their window; `None` without
    /// either rule.
    fn rate_rules(&self) -> Result<Option<RateRules>, BreakerConfigError> {
        let mut window = None;
        if let Some((threshold, w, min_calls)) = self.failure_rate {
            self.rate("failure_rate.threshold", threshold)?;
            window = Some((w, min_calls));
        }
        let slow = match self.slow_calls {
            Some((slower_than, rate)) => {
                if slower_than.is_zero() {
                    return Err(self.zero("slow_calls.slower_than"));
                }
                self.rate("slow_calls.rate", rate)?;
                window.get_or_insert((DEFAULT_WINDOW, DEFAULT_MIN_CALLS));
                Some(SlowRule { slower_than, rate })
            }
            None => None,
        };
        let Some((w, min_calls)) = window else {
            return Ok(None);
        };
        if min_calls == 0 {
            return Err(self.zero("failure_rate.min_calls"));
        }
        match w {
            BreakerWindow::Count(0) => return Err(self.zero("failure_rate.window")),
            BreakerWindow::Count(n) if n > MAX_COUNT_WINDOW => {
                return Err(BreakerConfigError::TooLarge {
                    breaker: self.name.clone(),
                    field: "failure_rate.window",
                    value: u64::from(n),
                    max: u64::from(MAX_COUNT_WINDOW),
                });
            }
            BreakerWindow::Count(n) if min_calls > n => {
                return Err(BreakerConfigError::MinCallsExceedWindow {
                    breaker: self.name.clone(),
                    min_calls,
                    window: n,
                });
            }
            BreakerWindow::Time(d) if d.is_zero() => {
                return Err(self.zero("failure_rate.window"));
            }
            _ => {}
        }
        Ok(Some(RateRules {
            window: w,
            min_calls,
            failure_rate: self.failure_rate.map(|(t, _, _)| t),
            slow,
        }))
    }

    /// Checks the open duration's growth and the half-open settings.
    fn check_recovery(&self) -> Result<(), BreakerConfigError> {
        if let Some((multiplier, max)) = self.growth {
            if !(multiplier.is_finite() && multiplier >= 1.0) {
                return Err(BreakerConfigError::InvalidMultiplier {
                    breaker: self.name.clone(),
                    value: multiplier,
                });
            }
            if max < self.open_duration {
                return Err(BreakerConfigError::GrowthCapBelowOpenDuration {
                    breaker: self.name.clone(),
                    max,
                    open_duration: self.open_duration,
                });
            }
        }
        if self.half_open_probes == 0 {
            return Err(self.zero("half_open_probes"));
        }
        if self.half_open_probes > MAX_PROBES {
            return Err(BreakerConfigError::TooLarge {
                breaker: self.name.clone(),
                field: "half_open_probes",
                value: u64::from(self.half_open_probes),
                max: u64::from(MAX_PROBES),
            });
        }
        if self.half_open_max_wait.is_zero() {
            return Err(self.zero("half_open_max_wait"));
        }
        if self.recovery_ramp.is_some_and(|r| r.is_zero()) {
            return Err(self.zero("recovery_ramp"));
        }
        Ok(())
    }
}

/// The slow-call rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SlowRule {
    pub(crate) slower_than: Duration,
    pub(crate) rate: f64,
}

/// The window-based rules.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RateRules {
    pub(crate) window: BreakerWindow,
    pub(crate) min_calls: u32,
    pub(crate) failure_rate: Option<f64>,
    pub(crate) slow: Option<SlowRule>,
}

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Config {
    pub(crate) consecutive_failures: Option<u32>,
    pub(crate) rates: Option<RateRules>,
    pub(crate) open_duration: Duration,
    pub(crate) growth: Option<(f64, Duration)>,
    pub(crate) half_open_probes: u32,
    pub(crate) half_open_max_wait: Duration,
    pub(crate) recovery_ramp: Option<Duration>,
    pub(crate) count_every_attempt: bool,
}

impl Config {
    /// A fresh window for the rate rules, if any.
    pub(crate) fn new_window(&self) -> Option<Window> {
        self.rates.map(|r| match r.window {
            BreakerWindow::Count(n) => Window::Count(CountWindow::new(n)),
            BreakerWindow::Time(d) => Window::Time(TimeWindow::new(d)),
        })
    }

    /// Whether `elapsed` makes a call slow.
    pub(crate) fn is_slow(&self, elapsed: Duration) -> bool {
        self.rates
            .and_then(|r| r.slow)
            .is_some_and(|s| elapsed >= s.slower_than)
    }

    /// The open duration of the `trips`-th trip since the last close, counted from 0; saturates
    /// at the growth cap, never panics.
    pub(crate) fn cooldown(&self, trips: u32) -> Duration {
        let Some((multiplier, max)) = self.growth else {
            return self.open_duration;
        };
        let exp = i32::try_from(trips).unwrap_or(i32::MAX);
        let secs = self.open_duration.as_secs_f64() * multiplier.powi(exp);
        Duration::try_from_secs_f64(secs).map_or(max, |d| d.min(max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b() -> CircuitBreakerBuilder {
        CircuitBreakerBuilder::new("inventory".to_owned())
    }

    fn err(builder: CircuitBreakerBuilder) -> BreakerConfigError {
        match builder.validate() {
            Err(e) => e,
            Ok(c) => panic!("expected an error, got {c:?}"),
        }
    }

    #[test]
    fn defaults() {
        let c = b().validate().unwrap();
        assert_eq!(c.consecutive_failures, Some(5));
        assert!(c.rates.is_none());
        assert_eq!(c.open_duration, Duration::from_secs(5));
        assert_eq!(c.half_open_probes, 1);
        assert_eq!(c.half_open_max_wait, Duration::from_secs(30));
        assert_eq!(c.recovery_ramp, None);
        assert!(!c.count_every_attempt);
        assert_eq!(c.cooldown(7), Duration::from_secs(5));
    }

    #[test]
    fn a_rate_rule_replaces_the_default_consecutive_rule() {
        let c = b()
            .failure_rate(0.5, BreakerWindow::Count(10), 5)
            .validate()
            .unwrap();
        assert_eq!(c.consecutive_failures, None);
        let c = b()
            .slow_calls(Duration::from_secs(1), 0.8)
            .validate()
            .unwrap();
        assert_eq!(c.consecutive_failures, None);
        let r = c.rates.unwrap();
        assert_eq!((r.window, r.min_calls), (BreakerWindow::Count(100), 100));
        let c = b()
            .consecutive_failures(3)
            .failure_rate(0.5, BreakerWindow::Time(Duration::from_secs(10)), 5)
            .validate()
            .unwrap();
        assert_eq!(c.consecutive_failures, Some(3));
    }

    #[test]
    fn bad_settings_are_named() {
        let zero = |field| BreakerConfigError::Zero {
            breaker: "inventory".into(),
            field,
        };
        assert_eq!(
            err(CircuitBreakerBuilder::new(String::new())),
            BreakerConfigError::EmptyName
        );
        assert_eq!(
            err(b().consecutive_failures(0)),
            zero("consecutive_failures")
        );
        assert_eq!(err(b().half_open_probes(0)), zero("half_open_probes"));
        assert_eq!(
            err(b().half_open_max_wait(Duration::ZERO)),
            zero("half_open_max_wait")
        );
        assert_eq!(
            err(b().recovery_ramp(Duration::ZERO)),
            zero("recovery_ramp")
        );
        assert_eq!(
            err(b().failure_rate(0.5, BreakerWindow::Count(0), 1)),
            zero("failure_rate.window")
        );
        assert_eq!(
            err(b().failure_rate(0.5, BreakerWindow::Time(Duration::ZERO), 1)),
            zero("failure_rate.window")
        );
        assert_eq!(
            err(b().failure_rate(0.5, BreakerWindow::Count(10), 0)),
            zero("failure_rate.min_calls")
        );
        assert_eq!(
            err(b().slow_calls(Duration::ZERO, 0.5)),
            zero("slow_calls.slower_than")
        );
        for bad in [0.0, -0.1, 1.01, f64::NAN, f64::INFINITY] {
            let e = err(b().failure_rate(bad, BreakerWindow::Count(10), 1));
            assert!(
                matches!(
                    e,
                    BreakerConfigError::RateOutOfRange {
                        field: "failure_rate.threshold",
                        ..
                    }
                ),
                "{bad}: {e}"
            );
            let e = err(b().slow_calls(Duration::from_secs(1), bad));
            assert!(
                matches!(
                    e,
                    BreakerConfigError::RateOutOfRange {
                        field: "slow_calls.rate",
                        ..
                    }
                ),
                "{bad}: {e}"
            );
        }
        for bad in [f64::NAN, f64::INFINITY, 0.5, -2.0] {
            let e = err(b().open_duration_growth(bad, Duration::from_secs(60)));
            assert!(
                matches!(e, BreakerConfigError::InvalidMultiplier { .. }),
                "{e}"
            );
        }
        assert!(matches!(
            err(b().open_duration_growth(2.0, Duration::from_secs(1))),
            BreakerConfigError::GrowthCapBelowOpenDuration { .. }
        ));
        assert!(matches!(
            err(b().failure_rate(0.5, BreakerWindow::Count(10), 11)),
            BreakerConfigError::MinCallsExceedWindow {
                min_calls: 11,
                window: 10,
                ..
            }
        ));
        assert!(matches!(
            err(b().half_open_probes(70_000)),
            BreakerConfigError::TooLarge {
                field: "half_open_probes",
                ..
            }
        ));
        assert!(matches!(
            err(b().failure_rate(0.5, BreakerWindow::Count(2_000_000), 1)),
            BreakerConfigError::TooLarge {
                field: "failure_rate.window",
                ..
            }
        ));
        let e = err(b().half_open_probes(0));
        assert_eq!(e.breaker(), Some("inventory"));
        assert_eq!(
            e.to_string(),
            "circuit breaker `inventory`: `half_open_probes` must not be zero"
        );
    }

    #[test]
    fn cooldown_grows_and_saturates_without_panicking() {
        let c = b()
            .open_duration(Duration::from_millis(100))
            .open_duration_growth(2.0, Duration::from_secs(1))
            .validate()
            .unwrap();
        let ms = |n| Duration::from_millis(n);
        assert_eq!(c.cooldown(0), ms(100));
        assert_eq!(c.cooldown(1), ms(200));
        assert_eq!(c.cooldown(3), ms(800));
        assert_eq!(c.cooldown(4), ms(1_000));
        assert_eq!(c.cooldown(u32::MAX), ms(1_000));
        let c = b()
            .open_duration(Duration::MAX)
            .open_duration_growth(1e300, Duration::MAX)
            .validate()
            .unwrap();
        assert_eq!(c.cooldown(u32::MAX), Duration::MAX);
    }
}
