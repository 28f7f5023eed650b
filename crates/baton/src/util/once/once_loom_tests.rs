//! Model checking with loom: every interleaving, up to two preemptions, of threads racing
//! to write one cell while another reads it.
//!
//! The cell is instantiated with [`LoomSync`], loom's atomic and unsafe cell, through the
//! sync shim, so these run under a plain `cargo test`. Loom checks each access to the
//! value: a read or a drop not ordered after the write, or two writes, fail the model even
//! where the values happen to come out right.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

use loom::sync::Arc;
use loom::thread;

use super::WriteOnce;
use crate::util::sync::LoomSync;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(f);
}

/// Two writers race while a reader looks: exactly one write wins, the loser gets its value
/// back, and the reader sees nothing or the winner's whole value.
#[test]
fn one_of_two_writers_wins_and_a_reader_sees_none_or_its_whole_value() {
    model(|| {
        let cell = Arc::new(WriteOnce::<[usize; 2], LoomSync>::default());
        let writers: Vec<_> = (1..=2)
            .map(|t| {
                let cell = Arc::clone(&cell);
                thread::spawn(move || match cell.set([t, t]) {
                    Ok(()) => Some(t),
                    Err(back) => {
                        assert_eq!(back, [t, t], "the refused value comes back");
                        None
                    }
                })
            })
            .collect();
        let reader = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || cell.get().copied())
        };
        let winners: Vec<usize> = writers
            .into_iter()
            .filter_map(|w| w.join().unwrap())
            .collect();
        let [winner] = winners[..] else {
            panic!("{} writes won", winners.len());
        };
        let seen = reader.join().unwrap();
        assert!(
            seen.is_none() || seen == Some([winner, winner]),
            "the reader saw {seen:?}, the winner wrote {winner}"
        );
        assert_eq!(cell.get(), Some(&[winner, winner]));
    });
}

/// A lone writer publishes while a reader looks: the reader sees nothing or the whole value,
/// and a later write finds the cell written.
#[test]
fn a_lone_writer_publishes_its_whole_value() {
    model(|| {
        let cell = Arc::new(WriteOnce::<[usize; 2], LoomSync>::default());
        let writer = {
            let cell = Arc::clone(&cell);
            // SAFETY: this thread is the cell's only writer until it is joined.
            thread::spawn(move || unsafe { cell.set_alone([7, 7]) })
        };
        let reader = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || cell.get().copied())
        };
        assert!(writer.join().unwrap());
        let seen = reader.join().unwrap();
        assert!(
            seen.is_none() || seen == Some([7, 7]),
            "the reader saw {seen:?}"
        );
        // SAFETY: the writer was joined; this is the only writer now.
        assert!(!unsafe { cell.set_alone([8, 8]) });
        assert_eq!(cell.set([9, 9]), Err([9, 9]));
        assert_eq!(cell.get(), Some(&[7, 7]));
    });
}

/// Drops per value, reset by each execution of the model.
static DROPS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// Counts its drops in `DROPS[id]`; holds nothing else, so a double drop is counted, not a
/// double free.
struct Counted {
    id: usize,
}

impl Drop for Counted {
    fn drop(&mut self) {
        DROPS[self.id].fetch_add(1, Relaxed);
    }
}

/// Two writers race; the cell's last handle goes to whichever thread drops it last, or
/// the value is taken out once the writers are done. Either way each value, the winner's
/// and the refused one, is dropped exactly once.
#[test]
fn each_value_is_dropped_exactly_once() {
    for take in [false, true] {
        model(move || {
            for d in &DROPS {
                d.store(0, Relaxed);
            }
            let cell = Arc::new(WriteOnce::<Counted, LoomSync>::default());
            let writers: Vec<_> = (0..2)
                .map(|id| {
                    let cell = Arc::clone(&cell);
                    thread::spawn(move || cell.set(Counted { id }).is_ok())
                })
                .collect();
            // Kept to take the value from, or dropped now: the last writer to finish drops it.
            let kept = if take {
                Some(cell)
            } else {
                drop(cell);
                None
            };
            let wins: Vec<bool> = writers.into_iter().map(|w| w.join().unwrap()).collect();
            let winner = wins.iter().position(|&won| won);
            assert_eq!(wins.iter().filter(|&&won| won).count(), 1, "{wins:?}");
            if let Some(mut cell) = kept {
                let taken = Arc::get_mut(&mut cell).and_then(WriteOnce::take);
                assert_eq!(taken.as_ref().map(|c| c.id), winner);
                drop(taken);
                drop(cell);
            }
            let counts = DROPS.each_ref().map(|d| d.load(Relaxed));
            assert_eq!(counts, [1, 1], "drops per value");
        });
    }
}
