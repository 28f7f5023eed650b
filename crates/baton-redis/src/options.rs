//! The backend's settings, and the quorum mode.

use std::time::Duration;

use baton_graph::shared::Unreachable;

/// Settings of the Redis backend.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedisOptions {
    /// How long one Redis call may take before the breaker judges alone. Default 50 ms.
    /// A replica so loaded that Redis's answers take longer is treated as cut off too (it
    /// judges alone, and probes on its own): set it well above the latency seen under load.
    pub timeout: Duration,
    /// How often batched outcomes are flushed. Default 5 ms.
    pub flush_every: Duration,
    /// How often the shared state is read again (besides the published transitions), and
    /// Redis retried while it cannot be reached. Default 250 ms.
    pub resync_every: Duration,
    /// What the breaker does while Redis cannot be reached. Default: judge alone.
    pub unreachable: Unreachable,
    /// The first part of every key: `<prefix>:{<breaker>}:…`. Default `baton`.
    pub key_prefix: String,
    /// A quorum mode, if set: see [`Quorum`]. Default: none, any trip opens the fleet.
    pub quorum: Option<Quorum>,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            timeout: Duration::from_millis(50),
            flush_every: Duration::from_millis(5),
            resync_every: Duration::from_millis(250),
            unreachable: Unreachable::Local,
            key_prefix: "baton".to_owned(),
            quorum: None,
        }
    }
}

impl RedisOptions {
    /// Sets [`timeout`](Self::timeout).
    #[must_use]
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = d;
        self
    }

    /// Sets [`flush_every`](Self::flush_every).
    #[must_use]
    pub fn flush_every(mut self, d: Duration) -> Self {
        self.flush_every = d;
        self
    }

    /// Sets [`resync_every`](Self::resync_every).
    #[must_use]
    pub fn resync_every(mut self, d: Duration) -> Self {
        self.resync_every = d;
        self
    }

    /// Sets [`unreachable`](Self::unreachable).
    #[must_use]
    pub fn unreachable(mut self, mode: Unreachable) -> Self {
        self.unreachable = mode;
        self
    }

    /// Sets [`quorum`](Self::quorum).
    #[must_use]
    pub fn quorum(mut self, quorum: Quorum) -> Self {
        self.quorum = Some(quorum);
        self
    }

    /// Sets [`key_prefix`](Self::key_prefix).
    #[must_use]
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }
}

/// A quorum mode: one bad replica no longer opens the breakers of the whole fleet.
///
/// Without a quorum the fleet pools its outcomes and any trip opens every replica. With
/// one, each replica trips by its own counts and opens its own breaker at once (it judges
/// alone: its own cooldown and probes); the shared state opens, for every replica, once
/// at least [`replicas`](Self::replicas) distinct replicas tripped within
/// [`within`](Self::within). Once open fleet-wide, half-open probes and closing are shared
/// as without a quorum. Each backend is one replica (its id is made when the backend is).
///
/// ```
/// use std::time::Duration;
/// use baton_redis::{Quorum, RedisOptions};
///
/// let options = RedisOptions::default().quorum(Quorum::new(2, Duration::from_secs(10))?);
/// assert!(Quorum::new(0, Duration::from_secs(10)).is_err());
/// # Ok::<(), baton_redis::QuorumError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quorum {
    replicas: u32,
    within: Duration,
}

impl Quorum {
    /// Opens the fleet once `replicas` replicas tripped within `within` (a trip counts for
    /// `within` after it is reported; whole milliseconds).
    ///
    /// # Errors
    /// [`QuorumError::NoReplicas`] for `replicas == 0`, [`QuorumError::NoWindow`] for a
    /// `within` under one millisecond.
    pub fn new(replicas: u32, within: Duration) -> Result<Self, QuorumError> {
        if replicas == 0 {
            return Err(QuorumError::NoReplicas);
        }
        if within < Duration::from_millis(1) {
            return Err(QuorumError::NoWindow { within });
        }
        Ok(Quorum { replicas, within })
    }

    /// How many replicas must have tripped.
    #[must_use]
    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// How long a replica's trip counts.
    #[must_use]
    pub fn within(&self) -> Duration {
        self.within
    }
}

/// A [`Quorum`] that cannot be made.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuorumError {
    /// `replicas` was 0: the fleet would open with no trip at all.
    NoReplicas,
    /// `within` was under a millisecond: no trip would count.
    NoWindow {
        /// The window given.
        within: Duration,
    },
}

impl std::fmt::Display for QuorumError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QuorumError::NoReplicas => f.write_str("quorum: `replicas` must be at least 1"),
            QuorumError::NoWindow { within } => {
                write!(f, "quorum: `within` must be at least 1 ms, not {within:?}")
            }
        }
    }
}

impl std::error::Error for QuorumError {}

impl RedisOptions {
    /// Checks that every timeout and interval is above zero.
    ///
    /// # Errors
    /// [`OptionsError::Zero`] naming the first setting that is zero: a zero timeout would
    /// fail every call, a zero interval would spin.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_redis::{OptionsError, RedisOptions};
    ///
    /// assert!(RedisOptions::default().validate().is_ok());
    /// let zero = RedisOptions::default().flush_every(Duration::ZERO);
    /// assert_eq!(zero.validate(), Err(OptionsError::Zero { setting: "flush_every" }));
    /// ```
    pub fn validate(&self) -> Result<(), OptionsError> {
        let settings = [
            ("timeout", self.timeout),
            ("flush_every", self.flush_every),
            ("resync_every", self.resync_every),
        ];
        match settings.iter().find(|(_, d)| d.is_zero()) {
            Some(&(setting, _)) => Err(OptionsError::Zero { setting }),
            None => Ok(()),
        }
    }
}

/// [`RedisOptions`] that cannot work.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OptionsError {
    /// A timeout or an interval is zero.
    Zero {
        /// The setting's name (`"timeout"`, `"flush_every"`, `"resync_every"`).
        setting: &'static str,
    },
}

impl std::fmt::Display for OptionsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OptionsError::Zero { setting } => {
                write!(f, "Redis options: `{setting}` must be above zero")
            }
        }
    }
}

impl std::error::Error for OptionsError {}
