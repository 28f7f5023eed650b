//! What applying a configuration changed, as [`Event::ConfigApplied`](super::Event) tells it.

use std::fmt;

/// One policy a configuration named, and what applying it did to it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigChange {
    /// `circuit breaker`, `bulkhead`, `rate limiter`, `retry budget` or `policy set`.
    pub kind: &'static str,
    /// The policy's name.
    pub name: String,
    /// What happened to it.
    pub action: ConfigAction,
}

/// What applying a configuration did to one policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigAction {
    /// It was not registered: it is now.
    Added,
    /// It was registered with other settings: they were changed in place.
    Updated,
    /// It was registered with these settings already.
    Unchanged,
}

impl ConfigChange {
    #[cfg_attr(not(feature = "serde"), allow(dead_code))]
    pub(crate) fn new(kind: &'static str, name: &str, action: ConfigAction) -> Self {
        ConfigChange {
            kind,
            name: name.to_owned(),
            action,
        }
    }
}

impl fmt::Display for ConfigChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let action = match self.action {
            ConfigAction::Added => "added",
            ConfigAction::Updated => "updated",
            ConfigAction::Unchanged => "unchanged",
        };
        write!(f, "{} `{}` {action}", self.kind, self.name)
    }
}
