//! The downstream services the stand-in server plays, and the notification channels.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// One of the downstream services the embedded server plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Service {
    /// `GET /user/{id}`: looks the user up (200 ms).
    User,
    /// `GET /sku/{id}`: looks the product up (200 ms).
    Sku,
    /// `POST /stock/deduct`: reserves one unit of the sku for the user and answers how many
    /// are in stock (150 ms).
    Stock,
    /// `POST /ship`: ships the reserved unit (80 ms).
    Ship,
    /// `POST /shortage`: records a shortage, to ship when stock arrives (80 ms).
    Shortage,
    /// `POST /notify`: tells the user how their order went (50 ms).
    Notify,
    /// `POST /mail`: sends a notice by e-mail; slow but reliable (150 ms).
    Mail,
    /// `POST /sms`: sends a notice by SMS (60 ms).
    Sms,
    /// `POST /push`: sends a notice by a third party's push service (30 ms).
    Push,
}

impl Service {
    /// Every service: the order placement's, then the notification channels.
    pub const ALL: [Service; 9] = [
        Service::User,
        Service::Sku,
        Service::Stock,
        Service::Ship,
        Service::Shortage,
        Service::Notify,
        Service::Mail,
        Service::Sms,
        Service::Push,
    ];

    /// The services of the order placement, in the flow's order.
    pub const ORDER_FLOW: [Service; 6] = [
        Service::User,
        Service::Sku,
        Service::Stock,
        Service::Ship,
        Service::Shortage,
        Service::Notify,
    ];

    /// The lower-case name, as used for graph nodes, flags and messages.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Service::User => "user",
            Service::Sku => "sku",
            Service::Stock => "stock",
            Service::Ship => "ship",
            Service::Shortage => "shortage",
            Service::Notify => "notify",
            Service::Mail => "mail",
            Service::Sms => "sms",
            Service::Push => "push",
        }
    }

    /// How long the service takes to answer before any [`Behavior`](crate::Behavior) adds to it.
    #[must_use]
    pub fn base_latency(self) -> Duration {
        Duration::from_millis(match self {
            Service::User | Service::Sku => 200,
            Service::Stock | Service::Mail => 150,
            Service::Ship | Service::Shortage => 80,
            Service::Notify => 50,
            Service::Sms => 60,
            Service::Push => 30,
        })
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// The error of parsing an unknown service (or channel) name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} `{name}` (expected one of: {expected})")]
pub struct UnknownService {
    /// `service` or `channel`.
    pub kind: &'static str,
    /// The name given.
    pub name: String,
    /// The names accepted, comma-separated.
    pub expected: String,
}

impl FromStr for Service {
    type Err = UnknownService;

    /// Parses a service's [`name`](Service::name), in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Service::ALL
            .into_iter()
            .find(|svc| svc.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownService {
                kind: "service",
                name: s.to_owned(),
                expected: Service::ALL.map(Service::name).join(", "),
            })
    }
}

/// The three notification channels of the fan-out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Channel {
    /// E-mail: slow but reliable.
    Mail,
    /// SMS: cheap, answers 503 now and then.
    Sms,
    /// Push, run by a third party: when it is down, it is down for a while.
    Push,
}

impl Channel {
    /// Every channel.
    pub const ALL: [Channel; 3] = [Channel::Mail, Channel::Sms, Channel::Push];

    /// The service that plays this channel.
    #[must_use]
    pub fn service(self) -> Service {
        match self {
            Channel::Mail => Service::Mail,
            Channel::Sms => Service::Sms,
            Channel::Push => Service::Push,
        }
    }

    /// `mail`, `sms` or `push`.
    #[must_use]
    pub fn name(self) -> &'static str {
        self.service().name()
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl FromStr for Channel {
    type Err = UnknownService;

    /// Parses `mail`, `sms` or `push`, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Channel::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownService {
                kind: "channel",
                name: s.to_owned(),
                expected: Channel::ALL.map(Channel::name).join(", "),
            })
    }
}
