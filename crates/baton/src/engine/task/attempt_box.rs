//! The box an attempt's future runs in, and the boxes of ended attempts that a graph keeps
//! for its next attempts.
//!
//! A driver writes each node's attempt into the box of its last one when the two futures
//! have the same layout, so a run of nodes whose attempts look alike allocates one box.
//! Nodes whose attempts differ, as a handler's calls to different services do, each need a
//! box of their own, made and freed once per node and run; with many requests in flight,
//! boxes of a few hundred bytes and more go through the allocator's slower paths. So when
//! a driver replaces a large box with one for another large future, or ends with one, the
//! box goes to the graph, in the stripe of its spare run arrays that the run belongs to
//! (`graph/spare.rs`), and later attempts of its layout are written into it instead of into
//! new boxes. A box replaced by a small future's is freed, as before.
//!
//! Only an ended attempt's box is kept, and the attempt in it has completed: [`put`] is
//! given `async` blocks, which drop everything they hold, the task's future included, as
//! they return `Ready`. So a kept box holds nothing of its run. A driver's box holds an
//! ended attempt whenever the driver begins a node or ends: one still running is moved out
//! with it, or dropped.

use std::alloc::Layout;
use std::fmt;
use std::future::Future;

use tokio_util::sync::ReusableBoxFuture;

use crate::error::BoxError;
use crate::util::try_cell::TryCell;
use crate::util::value::Value;

/// One attempt of a task, boxed, in a box that tokio-util can reuse. A driver keeps the box
/// of its last attempt and writes its next node's attempt into it when the two futures have
/// the same layout, instead of freeing one box and allocating another; see [`put`].
pub(crate) type AttemptFuture = ReusableBoxFuture<'static, Result<Value, BoxError>>;

/// The smallest attempt future, in bytes, whose box is kept. Common allocators serve
/// smaller ones from a per-thread cache, about as fast as a kept box is found.
pub(crate) const KEPT_MIN_BYTES: usize = 256;

/// The largest attempt future, in bytes, whose box is kept.
pub(crate) const KEPT_MAX_BYTES: usize = 16 * 1024;

/// The most bytes of boxes one [`KeptAttempts`] holds.
pub(crate) const KEPT_BYTES: usize = 256 * 1024;

/// The most layouts one [`KeptAttempts`] holds boxes of.
pub(crate) const KEPT_LAYOUTS: usize = 16;

/// What an attempt is written for: a run, whose graph keeps the boxes of large attempts
/// that ended, in the stripe of its spare run arrays the run belongs to. `Sync`, so that
/// what holds a `&dyn KeptBoxes` may be sent and shared.
pub(crate) trait KeptBoxes: Sync {
    /// The boxes to take one from, and to keep one in, if there are any.
    fn kept_attempts(&self) -> Option<&KeptAttempts>;
}

/// Boxes of ended attempts, of [`KEPT_MIN_BYTES`] to [`KEPT_MAX_BYTES`], by layout, for
/// later attempts of those layouts: at most [`KEPT_BYTES`] of them, of at most
/// [`KEPT_LAYOUTS`] layouts. One caller at a time reaches them; another gives up at once
/// and allocates, or frees, its own box.
pub(crate) struct KeptAttempts(TryCell<Kept>);

impl Default for KeptAttempts {
    fn default() -> Self {
        KeptAttempts(TryCell::new(Kept::default()))
    }
}

/// What a [`KeptAttempts`] holds.
#[derive(Default)]
struct Kept {
    /// The boxes of each layout, in the order the layouts were first kept.
    by_layout: Vec<(Layout, Vec<AttemptFuture>)>,
    /// The bytes of every box held.
    bytes: usize,
}

impl fmt::Debug for KeptAttempts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("KeptAttempts").finish_non_exhaustive()
    }
}

impl KeptAttempts {
    /// A kept box whose future has `layout`, if there is one and no other caller holds the
    /// boxes now.
    fn take(&self, layout: Layout) -> Option<AttemptFuture> {
        self.0.try_with(|kept| {
            let (_, boxes) = kept.by_layout.iter_mut().find(|(l, _)| *l == layout)?;
            let boxed = boxes.pop()?;
            kept.bytes -= layout.size();
            Some(boxed)
        })?
    }

    /// Keeps `boxed`, whose attempt ended, if its size is one that is kept and there is
    /// room; drops it otherwise.
    #[inline]
    pub(crate) fn keep(&self, mut boxed: AttemptFuture) {
        let layout = layout_of(&mut boxed);
        if kept_size(layout.size()) {
            self.keep_sized(boxed, layout);
        }
    }

    /// [`keep`](Self::keep), for a box of a size that is kept, of `layout`.
    #[inline(never)]
    fn keep_sized(&self, boxed: AttemptFuture, layout: Layout) {
        let refused = self.0.try_with(|kept| {
            if kept.bytes + layout.size() > KEPT_BYTES {
                return Some(boxed);
            }
            let at = match kept.by_layout.iter().position(|(l, _)| *l == layout) {
                Some(at) => at,
                None if kept.by_layout.len() < KEPT_LAYOUTS => {
                    kept.by_layout.push((layout, Vec::new()));
                    kept.by_layout.len() - 1
                }
                None => return Some(boxed),
            };
            kept.by_layout[at].1.push(boxed);
            kept.bytes += layout.size();
            None
        });
        // A refused box is freed here, outside the cell.
        drop(refused);
    }

    /// How many boxes are kept, and their bytes, if no other caller holds them now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> Option<(usize, usize)> {
        self.0.try_with(|kept| {
            let boxes = kept.by_layout.iter().map(|(_, b)| b.len()).sum();
            (boxes, kept.bytes)
        })
    }
}

/// Whether a box for a future of `size` bytes is kept.
const fn kept_size(size: usize) -> bool {
    KEPT_MIN_BYTES <= size && size <= KEPT_MAX_BYTES
}

/// The layout of the future in `boxed`.
fn layout_of(boxed: &mut AttemptFuture) -> Layout {
    Layout::for_value(&*boxed.get_pin())
}

/// Writes `future` into `into`: into the box already there when its layout matches, else
/// into a box of its layout from those `kept()` gives when it is large, else into a new
/// one. A box replaced by a large future's, whose attempt ended, goes there too. Inlined:
/// on the common path, the future is written straight into the box there, and `kept` is
/// not called.
///
/// The caller must have ended the attempt in `into`, if any: its future returned `Ready`,
/// or it never ran. `future` must drop what it holds as it returns `Ready`, as an `async`
/// block does, since a box may be kept once its attempt ended and must then hold nothing:
/// every caller passes an `async move` block that owns what the attempt uses. Wrapping
/// the future in one that drops it would move every large future once more.
#[inline(always)]
pub(crate) fn put<'k, F, K>(into: &mut Option<AttemptFuture>, future: F, kept: K)
where
    F: Future<Output = Result<Value, BoxError>> + Send + 'static,
    K: FnOnce() -> Option<&'k KeptAttempts>,
{
    // Known when this is compiled. A small future goes where `ReusableBoxFuture` puts it:
    // into the box there, or into a new one, freeing the box there, large or not.
    if !kept_size(size_of::<F>()) {
        match into {
            Some(boxed) => boxed.set(future),
            None => *into = Some(ReusableBoxFuture::new(future)),
        }
        return;
    }
    // A large one's layout is checked here: `ReusableBoxFuture` frees a box whose layout
    // differs.
    if let Some(boxed) = into {
        if layout_of(boxed) == Layout::new::<F>() {
            boxed.set(future);
            return;
        }
    }
    put_in_another(into, future, kept);
}

/// [`put`], for a large future, when the box in `into`, if any, has another layout.
#[inline(never)]
fn put_in_another<'k, F, K>(into: &mut Option<AttemptFuture>, future: F, kept: K)
where
    F: Future<Output = Result<Value, BoxError>> + Send + 'static,
    K: FnOnce() -> Option<&'k KeptAttempts>,
{
    let layout = Layout::new::<F>();
    let kept = kept();
    let found = kept.and_then(|kept| kept.take(layout));
    let fresh = match found {
        // Found by its layout: the future is written into it.
        Some(mut boxed) => {
            boxed.set(future);
            boxed
        }
        None => ReusableBoxFuture::new(future),
    };
    if let (Some(old), Some(kept)) = (into.replace(fresh), kept) {
        kept.keep(old);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A future of `N` bytes that ends at once with a value.
    fn sized<const N: usize>() -> impl Future<Output = Result<Value, BoxError>> + Send {
        let pad = [0_u8; N];
        async move {
            let _ = std::hint::black_box(pad);
            Ok(crate::util::value::Value::new(()))
        }
    }

    fn ended(into: &mut Option<AttemptFuture>) {
        let Some(boxed) = into.as_mut() else {
            panic!("an attempt was written")
        };
        let waker = std::task::Waker::noop();
        let polled = boxed.poll(&mut std::task::Context::from_waker(waker));
        assert!(polled.is_ready());
    }

    #[test]
    fn a_replaced_large_box_is_kept_and_found_by_its_layout() {
        let kept = KeptAttempts::default();
        let mut into = None;
        put(&mut into, sized::<512>(), || Some(&kept));
        ended(&mut into);
        // Another layout: the box of 512 is kept.
        put(&mut into, sized::<1024>(), || Some(&kept));
        assert_eq!(kept.held().map(|h| h.0), Some(1));
        ended(&mut into);
        // Back to the first layout: it is found, and the box of 1 024 kept in its place.
        put(&mut into, sized::<512>(), || Some(&kept));
        assert_eq!(kept.held().map(|h| h.0), Some(1));
        ended(&mut into);
        let mut other = None;
        put(&mut other, sized::<1024>(), || Some(&kept));
        assert_eq!(
            kept.held().map(|h| h.0),
            Some(0),
            "the box of 1 024 was taken"
        );
    }

    /// A box of `N` bytes' future, as `put` makes it, its attempt ended.
    fn ended_box<const N: usize>() -> AttemptFuture {
        let mut boxed = None;
        put(&mut boxed, sized::<N>(), || None);
        ended(&mut boxed);
        let Some(boxed) = boxed else {
            unreachable!("written above")
        };
        boxed
    }

    #[test]
    fn small_and_huge_boxes_are_not_kept() {
        let kept = KeptAttempts::default();
        kept.keep(ended_box::<64>());
        kept.keep(ended_box::<{ KEPT_MAX_BYTES + 64 }>());
        assert_eq!(kept.held(), Some((0, 0)));
    }

    #[test]
    fn boxes_are_kept_up_to_the_most_bytes() {
        let kept = KeptAttempts::default();
        let mut one = ended_box::<8192>();
        let size = layout_of(&mut one).size();
        kept.keep(one);
        for _ in 0..KEPT_BYTES / size + 5 {
            kept.keep(ended_box::<8192>());
        }
        let most = KEPT_BYTES / size;
        assert_eq!(kept.held(), Some((most, most * size)));
        // Taking one makes room for one.
        let mut into = None;
        put(&mut into, sized::<8192>(), || Some(&kept));
        assert_eq!(kept.held().map(|h| h.0), Some(most - 1));
        kept.keep(ended_box::<8192>());
        kept.keep(ended_box::<8192>());
        assert_eq!(kept.held().map(|h| h.0), Some(most));
    }

    #[test]
    fn boxes_are_kept_of_at_most_the_most_layouts() {
        let kept = KeptAttempts::default();
        macro_rules! keep {
            ($($n:literal)*) => { $(kept.keep(ended_box::<$n>());)* };
        }
        keep!(300 320 340 360 380 400 420 440 460 480 500 520 540 560 580 600);
        assert_eq!(kept.held().map(|h| h.0), Some(KEPT_LAYOUTS));
        keep!(620);
        assert_eq!(
            kept.held().map(|h| h.0),
            Some(KEPT_LAYOUTS),
            "a 17th layout"
        );
        keep!(300);
        assert_eq!(
            kept.held().map(|h| h.0),
            Some(KEPT_LAYOUTS + 1),
            "a known one"
        );
    }

    /// Counts its drops.
    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_kept_box_holds_nothing_of_its_attempt() {
        let drops = Arc::new(AtomicUsize::new(0));
        let kept = KeptAttempts::default();
        let mut into = None;
        let held = Counted(Arc::clone(&drops));
        let pad = [0_u8; 512];
        put(
            &mut into,
            async move {
                let _ = std::hint::black_box(pad);
                let _held = held;
                Ok(crate::util::value::Value::new(()))
            },
            || Some(&kept),
        );
        ended(&mut into);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "dropped as the attempt ended"
        );
        put(&mut into, sized::<2048>(), || Some(&kept));
        assert_eq!(kept.held().map(|h| h.0), Some(1));
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }
}
