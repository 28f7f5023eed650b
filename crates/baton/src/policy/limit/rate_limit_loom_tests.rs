//! Model checking with loom: threads racing on one GCRA rate limiter's state.
//!
//! The state is instantiated with [`LoomSync`] through the sync shim, so these run under a
//! plain `cargo test`. Time is passed explicitly.

use std::sync::Arc;

use super::rate_limit::{Gcra, Reserved};
use crate::util::sync::LoomSync;

type G = Gcra<LoomSync>;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// `threads` reservations at one instant, each waiting at most `max_wait`.
fn race(g: &Arc<G>, threads: usize, max_wait: u64) -> Vec<Result<Reserved, u64>> {
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let g = Arc::clone(g);
            loom::thread::spawn(move || g.reserve(0, max_wait))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Three requests at once, one permit per 10 ns and bursts of 2, waiting up to 15 ns: two
/// conform at once and the third 10 ns later, whatever the interleaving: no slot is given
/// twice and none is lost.
#[test]
fn racing_reservations_each_get_their_own_slot() {
    model(|| {
        let g = Arc::new(G::new(10, 2));
        let mut waits: Vec<u64> = race(&g, 3, 15)
            .into_iter()
            .map(|r| r.expect("all three fit").wait)
            .collect();
        waits.sort_unstable();
        assert_eq!(waits, [0, 0, 10]);
        assert_eq!(
            g.reserve(0, u64::MAX).map(|r| r.wait),
            Ok(20),
            "the next slot"
        );
    });
}

/// The same race without waiting: exactly the burst is granted, and the refused request
/// learns when it would have conformed.
#[test]
fn without_waiting_exactly_the_burst_is_granted() {
    model(|| {
        let g = Arc::new(G::new(10, 2));
        let out = race(&g, 3, 0);
        let granted = out.iter().filter(|r| r.is_ok()).count();
        assert_eq!(granted, 2, "{out:?}");
        assert!(out.contains(&Err(10)), "{out:?}");
    });
}

/// A waiter that gives its reservation back races with a new request: the new request
/// gets the slot given back, or the one after it, and the state ends at its reservation
/// either way. No slot is granted twice, and none is leaked past the latest.
#[test]
fn a_reservation_given_back_races_with_a_new_one() {
    model(|| {
        let g = Arc::new(G::new(10, 1));
        let _first = g.reserve(0, 0).expect("a free slot");
        let waiting = g.reserve(0, 100).expect("the next slot");
        assert_eq!(waiting.wait, 10);
        let back = {
            let g = Arc::clone(&g);
            loom::thread::spawn(move || g.give_back(waiting.tat))
        };
        let new = {
            let g = Arc::clone(&g);
            loom::thread::spawn(move || g.reserve(0, 100))
        };
        back.join().unwrap();
        let new = new.join().unwrap().expect("fits");
        assert!(new.wait == 10 || new.wait == 20, "{new:?}");
        let next = g.reserve(0, u64::MAX).expect("fits");
        assert_eq!(
            next.wait,
            new.wait + 10,
            "the slot after the latest reservation"
        );
    });
}
