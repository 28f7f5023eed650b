//! Model checking with loom: every interleaving, up to two preemptions, of one thread
//! writing a cell while another reads it, and of the cell's last handle dropped on either.
//!
//! The cell is instantiated with [`LoomSync`], loom's atomic and unsafe cell, through the
//! sync shim, so these run under a plain `cargo test`. Loom checks each access to the
//! value: a read, a take or a drop not ordered after the write fails the model even where
//! the values happen to come out right.

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

/// One thread writes the cell and then tries to write it again, while another reads it.
/// The cell's last handle goes to whichever of the two drops it last, or the value is taken
/// out once both are done. Either way each value, the written one and the refused one, is
/// dropped exactly once.
#[test]
fn each_value_is_dropped_exactly_once() {
    for take in [false, true] {
        model(move || {
            for d in &DROPS {
                d.store(0, Relaxed);
            }
            let cell = Arc::new(WriteOnce::<Counted, LoomSync>::default());
            let writer = {
                let cell = Arc::clone(&cell);
                // SAFETY: this thread is the cell's only writer, and its two writes are one
                // after the other.
                thread::spawn(move || unsafe {
                    let first = cell.set_alone(Counted { id: 0 });
                    let second = cell.set_alone(Counted { id: 1 });
                    (first, second)
                })
            };
            let reader = {
                let cell = Arc::clone(&cell);
                thread::spawn(move || cell.get().map(|c| c.id))
            };
            // Kept to take the value from, or dropped now: the last of the writer and the
            // reader to finish drops it.
            let kept = if take {
                Some(cell)
            } else {
                drop(cell);
                None
            };
            assert_eq!(
                writer.join().unwrap(),
                (true, false),
                "writes, then refused"
            );
            let seen = reader.join().unwrap();
            assert!(seen.is_none() || seen == Some(0), "the reader saw {seen:?}");
            if let Some(mut cell) = kept {
                let taken = Arc::get_mut(&mut cell).and_then(WriteOnce::take);
                assert_eq!(taken.as_ref().map(|c| c.id), Some(0));
                assert_eq!(DROPS[0].load(Relaxed), 0, "taking does not drop");
                drop(taken);
                drop(cell);
            }
            let counts = DROPS.each_ref().map(|d| d.load(Relaxed));
            assert_eq!(counts, [1, 1], "drops per value");
        });
    }
}
