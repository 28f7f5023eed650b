//! The error of a setting changed in place that a policy could not work with.

/// A setting a bulkhead, rate limiter or retry budget could not work with, given to its
/// `reconfigure`; the message names the policy and the setting. The policy is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct InvalidSetting {
    reason: String,
}

impl InvalidSetting {
    pub(crate) fn new(reason: String) -> Self {
        InvalidSetting { reason }
    }

    /// Why the setting cannot work, naming the policy.
    #[must_use]
    pub fn reason(&self) -> &str {
        &self.reason
    }
}
