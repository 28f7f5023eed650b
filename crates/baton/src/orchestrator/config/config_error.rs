//! The one error of a configuration: its key's path, its kind and its message.

use std::fmt;

/// What is wrong with a configuration, at which key.
///
/// Its `Display` is `path: message`, e.g.
/// ``breakers.inventory.half_open_probes: circuit breaker `inventory`: `half_open_probes`
/// must not be zero``.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    path: String,
    kind: ConfigErrorKind,
    message: String,
}

/// The kind of a [`ConfigError`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// The format or the schema rejected it: a syntax error, an unknown key, a bad
    /// duration, a value of the wrong type.
    Format,
    /// A value no policy can work with, such as a zero count or a rate above 1.
    Invalid,
    /// A policy set names a policy that neither the configuration nor the orchestrator
    /// has.
    UnknownName {
        /// `circuit breaker`, `bulkhead`, `rate limiter` or `retry budget`.
        kind: &'static str,
        /// The name.
        name: String,
    },
    /// A policy set names, as one kind, a policy defined only as another, such as a
    /// `breaker` that is a bulkhead.
    WrongKind {
        /// The kind the key expects.
        expected: &'static str,
        /// The kinds the name is defined as.
        found: Vec<&'static str>,
        /// The name.
        name: String,
    },
    /// A policy given in the configuration cannot take its new settings in place: a breaker
    /// or rate limiter whose state is shared with other processes.
    NotInPlace,
}

impl ConfigError {
    pub(crate) fn new(path: String, kind: ConfigErrorKind, message: impl fmt::Display) -> Self {
        ConfigError {
            path,
            kind,
            message: message.to_string(),
        }
    }

    pub(crate) fn format(path: String, message: String) -> Self {
        ConfigError::new(path, ConfigErrorKind::Format, message)
    }

    pub(crate) fn invalid(path: String, message: impl fmt::Display) -> Self {
        ConfigError::new(path, ConfigErrorKind::Invalid, message)
    }

    /// The path of the key at fault, keys joined by `.`, for example
    /// `policies.checkout.retry.backoff.exponential`; `.` for the document itself.
    #[must_use]
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What kind of error it is.
    #[must_use]
    pub fn kind(&self) -> &ConfigErrorKind {
        &self.kind
    }

    /// The message, without the path.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }
}
