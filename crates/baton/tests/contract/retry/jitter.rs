//! Backoff and jitter properties: no jittered delay exceeds the cap; full and equal jitter
//! stay within their ranges; decorrelated jitter lengthens delays within `[d, 3·previous]`;
//! arithmetic saturates for any attempt number (`docs/contract.md`, rule 7).

use std::time::Duration;

use baton_graph::{Backoff, Jitter};
use proptest::prelude::*;

fn jitter() -> impl Strategy<Value = Jitter> {
    prop_oneof![
        Just(Jitter::None),
        Just(Jitter::Full),
        Just(Jitter::Equal),
        Just(Jitter::Decorrelated),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn exponential_jitter_never_exceeds_the_cap(
        base_ms in 0u64..10_000,
        multiplier in 1.0f64..20.0,
        cap_ms in 1u64..120_000,
        j in jitter(),
        seed in any::<u64>(),
        steps in 1usize..200,
    ) {
        let cap = Duration::from_millis(cap_ms);
        let base = Duration::from_millis(base_ms).min(cap);
        let b = Backoff::exponential(base).multiplier(multiplier).max_delay(cap).jitter(j);
        let plain: Vec<Duration> = Backoff::exponential(base)
            .multiplier(multiplier)
            .max_delay(cap)
            .iter()
            .take(steps)
            .collect();
        let mut prev: Option<Duration> = None;
        for (i, d) in b.iter().with_seed(seed).take(steps).enumerate() {
            prop_assert!(d <= cap, "step {i}: {d:?} > cap {cap:?}");
            let computed = plain[i];
            match j {
                Jitter::None => prop_assert_eq!(d, computed),
                Jitter::Full => prop_assert!(d <= computed),
                Jitter::Equal => prop_assert!(d >= computed / 2 && d <= computed),
                Jitter::Decorrelated => {
                    let hi = prev.unwrap_or(computed).saturating_mul(3).max(computed).min(cap);
                    prop_assert!(d >= computed.min(hi) && d <= hi, "step {i}: {d:?}");
                }
                _ => {}
            }
            prev = Some(d);
        }
    }

    #[test]
    fn decorrelated_jitter_lengthens_custom_and_constant_delays(
        delays in prop::collection::vec(1u64..1_000, 1..20),
        seed in any::<u64>(),
    ) {
        let delays: Vec<Duration> = delays.into_iter().map(Duration::from_millis).collect();
        let got: Vec<Duration> = Backoff::custom(delays.clone())
            .jitter(Jitter::Decorrelated)
            .iter()
            .with_seed(seed)
            .collect();
        prop_assert_eq!(got.len(), delays.len());
        for (d, computed) in got.iter().zip(&delays) {
            prop_assert!(d >= computed, "{d:?} < {computed:?}");
        }
        let c = Duration::from_millis(100);
        for d in Backoff::constant(c).jitter(Jitter::Decorrelated).iter().with_seed(seed).take(20) {
            prop_assert!(d >= c);
        }
    }

    #[test]
    fn any_attempt_number_saturates(k in 0usize..100_000, multiplier in 1.0f64..1000.0) {
        let cap = Duration::from_secs(30);
        let d = Backoff::exponential(Duration::from_millis(1))
            .multiplier(multiplier)
            .iter()
            .nth(k)
            .unwrap();
        prop_assert!(d <= cap);
        prop_assert!(d > Duration::ZERO);
    }
}
