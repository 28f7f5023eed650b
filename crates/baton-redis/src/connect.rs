//! The connection every backend of one server shares, and what can go wrong making it.

use redis::RedisError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::{OptionsError, RedisBreakerState, RedisOptions};

/// A connection to Redis that makes shared-state backends for breakers (and fleet rate
/// limiters).
#[derive(Clone)]
pub struct RedisBreakers {
    pub(crate) client: redis::Client,
    pub(crate) conn: ConnectionManager,
    pub(crate) options: RedisOptions,
    pub(crate) runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for RedisBreakers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBreakers")
            .field("server", &self.client.get_connection_info().addr())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Why [`RedisBreakers::connect`] (or [`connect_lazy`](RedisBreakers::connect_lazy))
/// failed. Its message names Redis and the server's URL (without its password).
#[derive(Debug)]
#[non_exhaustive]
pub enum ConnectError {
    /// The options cannot work.
    Options(OptionsError),
    /// The URL is not a Redis URL.
    Url {
        /// The URL given, its password hidden.
        url: String,
        /// The client's reason.
        source: RedisError,
    },
    /// The server did not answer within the timeout, or refused the connection.
    Unreachable {
        /// The URL given, its password hidden.
        url: String,
        /// The client's reason.
        source: RedisError,
    },
    /// Called outside a tokio runtime.
    NoRuntime,
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Options(e) => e.fmt(f),
            ConnectError::Url { url, source } => {
                write!(f, "`{url}` is not a Redis URL: {source}")
            }
            ConnectError::Unreachable { url, source } => {
                write!(f, "cannot reach Redis at `{url}`: {source}")
            }
            ConnectError::NoRuntime => {
                f.write_str("Redis backends must be made inside a tokio runtime")
            }
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConnectError::Options(e) => Some(e),
            ConnectError::Url { source, .. } | ConnectError::Unreachable { source, .. } => {
                Some(source)
            }
            ConnectError::NoRuntime => None,
        }
    }
}

impl From<OptionsError> for ConnectError {
    fn from(e: OptionsError) -> Self {
        ConnectError::Options(e)
    }
}

/// `url` with the password of its user part replaced by `***`.
fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let host_start = rest.find('/').unwrap_or(rest.len());
    match rest[..host_start].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***{}", &rest[at..])
        }
        None => url.to_owned(),
    }
}

impl RedisBreakers {
    /// Connects to the Redis server at `url` (`redis://host:port/db`,
    /// `redis+unix:///path`). Must be called inside a tokio runtime, on which the
    /// backends' tasks then run.
    ///
    /// # Errors
    /// A [`ConnectError`]: options that cannot work, an invalid URL, or a server that
    /// cannot be reached within `options.timeout`.
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self, ConnectError> {
        let redis = Self::connect_lazy(url, options)?;
        let mut conn = redis.conn.clone();
        let cmd = redis::cmd("PING");
        let ping = cmd.query_async::<()>(&mut conn);
        match tokio::time::timeout(redis.options.timeout, ping).await {
            Ok(Ok(())) => Ok(redis),
            Ok(Err(source)) => Err(ConnectError::Unreachable {
                url: redacted(url),
                source,
            }),
            Err(_) => Err(ConnectError::Unreachable {
                url: redacted(url),
                source: RedisError::from((redis::ErrorKind::Io, "timed out")),
            }),
        }
    }

    /// Like [`connect`](Self::connect), without waiting for the server: breakers built
    /// with its backends judge alone (with a transition for the loss, as any shared
    /// breaker that cannot reach Redis) and follow the shared state once Redis answers.
    /// Must be called inside a tokio runtime.
    ///
    /// # Errors
    /// A [`ConnectError`]: options that cannot work, an invalid URL, or no runtime.
    pub fn connect_lazy(url: &str, options: RedisOptions) -> Result<Self, ConnectError> {
        options.validate()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ConnectError::NoRuntime)?;
        let client = redis::Client::open(url).map_err(|source| ConnectError::Url {
            url: redacted(url),
            source,
        })?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.timeout))
            .set_response_timeout(Some(options.timeout))
            .set_number_of_retries(1);
        let conn =
            ConnectionManager::new_lazy_with_config(client.clone(), config).map_err(|source| {
                ConnectError::Url {
                    url: redacted(url),
                    source,
                }
            })?;
        Ok(RedisBreakers {
            client,
            conn,
            options,
            runtime,
        })
    }

    /// A backend for one breaker: give it to
    /// [`CircuitBreakerBuilder::shared`](baton_graph::breaker::CircuitBreakerBuilder::shared). Every
    /// breaker with the same name (and key prefix) on this server shares its state.
    #[must_use]
    pub fn backend(&self) -> RedisBreakerState {
        RedisBreakerState::new(self)
    }
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn a_password_never_shows() {
        assert_eq!(
            redacted("redis://app:s3cret@cache:6379/0"),
            "redis://app:***@cache:6379/0"
        );
        assert_eq!(redacted("redis://cache:6379/"), "redis://cache:6379/");
    }
}
