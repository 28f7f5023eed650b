//! The benchmark's scenarios: how the stand-in `stock` service answers while a build is
//! loaded. The stand-ins themselves are the `baton-stand-in` fixture's, with the latencies
//! of the order example: `user` and `sku` 200 ms, `stock` 150 ms, `ship` and `shortage`
//! 80 ms, `notify` 50 ms.

use baton_stand_in::{Behavior, Downstreams, Service};

/// How the `stock` service answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    /// Every service answers well.
    Healthy,
    /// `stock` answers `503` to half its calls (seeded generator), after its usual latency.
    StockFlaky,
    /// `stock` answers `503` at once to every call.
    StockDown,
}

impl Scenario {
    /// Every scenario, in the table's order.
    pub(crate) const ALL: [Scenario; 3] =
        [Scenario::Healthy, Scenario::StockFlaky, Scenario::StockDown];

    /// The scenario's name in the table and on the command line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Scenario::Healthy => "healthy",
            Scenario::StockFlaky => "stock-flaky",
            Scenario::StockDown => "stock-down",
        }
    }

    /// Parses [`name`](Self::name).
    pub(crate) fn parse(s: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|x| x.name() == s)
    }

    /// Sets the stand-ins to this scenario, the flaky stock's generator seeded with `seed`.
    pub(crate) fn apply(self, downstreams: &Downstreams, seed: u64) {
        let stock = match self {
            Scenario::Healthy => Behavior::new(),
            Scenario::StockFlaky => Behavior::new().fail_percent(50),
            Scenario::StockDown => Behavior::new().down(),
        };
        downstreams.set(Service::Stock, stock);
        downstreams.seed(seed);
    }
}
