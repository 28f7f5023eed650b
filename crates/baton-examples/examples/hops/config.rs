//! How each hop behaves: its local work, the margin it keeps back of its budget, and C's
//! work with its minimum attempt time.

use std::time::Duration;

/// How each hop behaves.
#[derive(Debug, Clone)]
pub(crate) struct HopConfig {
    /// The local work each hop does before it calls the next.
    pub(crate) local_work: Duration,
    /// What each hop keeps back of its budget for the request's trip and the answer's.
    pub(crate) margin: Duration,
    /// How long C's `work` would take with no deadline.
    pub(crate) work: Duration,
    /// C's `work` does not start with less than this left.
    pub(crate) min_attempt: Duration,
}

impl Default for HopConfig {
    /// 20 ms of local work per hop, a 5 ms margin, 5 s of work at C with a 50 ms
    /// minimum attempt time.
    fn default() -> Self {
        HopConfig {
            local_work: Duration::from_millis(20),
            margin: Duration::from_millis(5),
            work: Duration::from_secs(5),
            min_attempt: Duration::from_millis(50),
        }
    }
}
