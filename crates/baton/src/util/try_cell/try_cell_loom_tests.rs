//! Model checking with loom: every interleaving, up to two preemptions, of callers racing
//! for one cell.
//!
//! The cell is instantiated with [`LoomSync`], loom's atomic and unsafe cell, through the
//! sync shim, so these run under a plain `cargo test`. Loom checks each access to the
//! value: two callers reaching it at once, or one not ordered after the last, fail the
//! model even where the counts happen to come out right.

use loom::sync::Arc;
use loom::thread;

use super::TryCell;
use crate::util::sync::LoomSync;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(f);
}

/// Three callers race to bump the value: those let in bump it one at a time, each seeing
/// every earlier bump, those refused change nothing, and once all are done the cell is
/// free.
#[test]
fn callers_reach_the_value_one_at_a_time_and_see_earlier_writes() {
    model(|| {
        let cell = Arc::new(TryCell::<(u32, u32), LoomSync>::new((0, 0)));
        let callers: Vec<_> = (0..2)
            .map(|_| {
                let cell = Arc::clone(&cell);
                thread::spawn(move || {
                    cell.try_with(|(a, b)| {
                        // Two writes a second caller would see torn, were it let in.
                        *a += 1;
                        *b += 1;
                    })
                    .is_some()
                })
            })
            .collect();
        let here = cell.try_with(|(a, b)| {
            assert_eq!(a, b, "a holder never sees another's write half done");
            *a += 1;
            *b += 1;
        });
        let mut bumps = u32::from(here.is_some());
        for caller in callers {
            bumps += u32::from(caller.join().unwrap());
        }
        let seen = cell.try_with(|v| *v);
        assert_eq!(
            seen,
            Some((bumps, bumps)),
            "every bump let in, and only those"
        );
    });
}
