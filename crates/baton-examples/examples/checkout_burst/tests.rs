//! The `/checkout` burst scenario's figures, with and without the breaker's options: what
//! `count_every_attempt` saves the dead downstream, what a recovery ramp holds back from
//! the recovered one, and that the fallback serves every rejected request.

use std::time::Duration;

use crate::scenario::{self, Figures, Options, Scenario};

async fn figures(count_every_attempt: bool, ramp: bool) -> Figures {
    let options = Options {
        count_every_attempt,
        recovery_ramp: ramp.then_some(Duration::from_secs(1)),
    };
    scenario::run(&Scenario::default(), options).await.unwrap()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_checkout_burst_with_and_without_the_options() {
    let default = figures(false, false).await;
    let every_attempt = figures(true, false).await;
    let ramp = figures(false, true).await;
    let both = figures(true, true).await;
    for f in [&default, &every_attempt, &ramp, &both] {
        assert_eq!(
            f.failed, 0,
            "the fallback serves every rejected request: {f:?}"
        );
    }
    // One result per series: every request of the first burst makes its 4 attempts before
    // the breaker hears of one, and the next bursts arrive meanwhile.
    assert!(default.calls_before_open >= 800, "{default:?}");
    // One result per attempt: the first burst's first attempts, and no more.
    assert!(every_attempt.calls_before_open <= 200, "{every_attempt:?}");
    assert!(both.calls_before_open <= 200, "{both:?}");
    // Closing at once lets whole bursts through; a ramp lets a share through.
    assert_eq!(default.peak_after_recovery, 200, "{default:?}");
    assert!(ramp.peak_after_recovery < 150, "{ramp:?}");
    assert!(ramp.served_after_recovery < default.served_after_recovery);
    assert!(ramp.served_after_recovery > 0);
    assert_eq!(ramp.served_after_recovery, both.served_after_recovery);
}
