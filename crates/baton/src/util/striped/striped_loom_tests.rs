//! Model checking with loom: every interleaving, up to two preemptions, of threads that
//! claim an owned stripe, count into it with a plain load and store, and give it back, as
//! threads that exit leave their stripe to the next.
//!
//! A count lost to two writers of one stripe, or an owner that does not see what the
//! previous owner wrote, shows as a wrong sum.

use loom::sync::Arc;
use loom::thread;

use super::{Bump, Count, OWNED, Owners, is_owned};
use crate::util::sync::LoomSync;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(f);
}

/// Counts of the first two owned stripes, and one shared stripe past them.
struct Stripes {
    owners: Owners<LoomSync>,
    counts: [Count<LoomSync>; 3],
}

impl Stripes {
    /// Claims a stripe, as a thread's first count does, counts `n` into it, and gives it
    /// back, as the thread's exit does. Past two owned stripes, it counts into the shared
    /// one.
    fn count(&self, n: usize) {
        let index = match self.owners.claim() {
            Some(i) if i < 2 => Some(i),
            Some(i) => {
                self.owners.give_back(i);
                None
            }
            None => None,
        };
        // The stripe's index among all: a shared one is past the owned ones.
        let stripe = index.unwrap_or(OWNED);
        let count = &self.counts[index.unwrap_or(2)];
        for _ in 0..n {
            Bump::new(count, is_owned(stripe)).incr();
        }
        if let Some(i) = index {
            self.owners.give_back(i);
        }
    }
}

/// Three threads, more than the owned stripes the model lets them take, count at once, and
/// the stripes go from one owner to the next: the sum is exact.
#[test]
fn owners_that_come_and_go_lose_no_count() {
    model(|| {
        let stripes = Arc::new(Stripes {
            owners: Owners::empty(),
            counts: Default::default(),
        });
        // Hold every owned stripe past the first two, so that a third thread at once shares.
        for _ in 2..OWNED {
            assert!(stripes.owners.claim().is_some());
        }
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let stripes = Arc::clone(&stripes);
                thread::spawn(move || stripes.count(2))
            })
            .collect();
        for t in threads {
            t.join().expect("a counting thread");
        }
        let sum: i64 = stripes.counts.iter().map(Count::get).sum();
        assert_eq!(sum, 6);
    });
}
