//! A graph's tasks, stored by type. The tasks of one type, such as a closure written once
//! and given to many nodes as graphs built in a loop do, sit side by side in one column of
//! that type, instead of in a box each.
//!
//! A graph of a million nodes whose tasks share a few types then costs no allocation per
//! task while it is built and no free per task while it is dropped. Its tasks' data, what
//! their closures capture, is read in node order from a few large blocks, not from a
//! million small ones spread over the heap. A type seen for the first time costs two
//! allocations, its column and a first chunk; nothing is allocated per task while the graph
//! runs. What a task holds on its own, such as a blocking task's `Arc` or a fallback's box,
//! is its own allocation.
//!
//! A node reaches its task as it would a `Box<dyn ErasedTask>`, through a fat pointer and
//! one dynamic call: its [`TaskRef`] points into its column. So that it stays valid, a
//! column never moves a task once stored. A column is a list of chunks, each allocated with
//! room for twice as many tasks as the one before and never grown past that room, since
//! `Vec::push` does not reallocate below its capacity. So a task keeps its address until
//! its [`Tasks`] is dropped; this is the scheme of the `typed-arena` crate. The price is
//! the last chunk's unused room: at most as many slots as the tasks stored in the chunks
//! before it, never touched and so never resident, and none when the tasks capture nothing.

#![allow(unsafe_code)]

use std::any::{Any, TypeId};
use std::fmt;
use std::ptr::NonNull;

use rustc_hash::FxHashMap;

use super::ctx::ErasedTask;

/// Where one node's task is: a pointer into a column of the [`Tasks`] that stored it. It is
/// neither `Clone` nor `Copy`. Each lives in the node it was made for, next to the `Tasks`
/// that own its task, first the builder's and then the graph's, and is read only with them
/// in hand: [`get`](Self::get) takes them, and in debug builds checks that they hold it.
pub(crate) struct TaskRef<I>(NonNull<dyn ErasedTask<I>>);

// SAFETY: a `TaskRef` is a shared pointer to a task, which is `Send + Sync` through
// `ErasedTask`'s supertraits. Sending it to another thread, or reading it from several, is
// reading a `Sync` value through `&`, nothing more. It never writes or frees the task.
unsafe impl<I> Send for TaskRef<I> {}
// SAFETY: as for `Send`.
unsafe impl<I> Sync for TaskRef<I> {}

impl<I> fmt::Debug for TaskRef<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TaskRef").field(&self.0.as_ptr()).finish()
    }
}

impl<I> TaskRef<I> {
    fn new<X: ErasedTask<I>>(task: &X) -> Self {
        TaskRef(NonNull::from(task as &dyn ErasedTask<I>))
    }

    /// The task, borrowed from `owner`.
    ///
    /// # Safety
    ///
    /// `owner` must be the [`Tasks`] whose [`push`](Tasks::push) made this `TaskRef`. A
    /// debug build checks that it holds the task, and panics otherwise.
    #[inline]
    pub(crate) unsafe fn get<'t>(&self, owner: &'t Tasks) -> &'t dyn ErasedTask<I> {
        debug_assert!(
            owner.holds(self.0.as_ptr().cast::<u8>()),
            "a TaskRef read with Tasks that did not make it"
        );
        // SAFETY: the pointer was made by `push` from a reference to a task stored in a
        // chunk of a column of `owner`, per the caller's guarantee. That column never
        // moves, mutates or drops a stored task until it is dropped itself, and the borrow
        // of `owner` keeps it alive for `'t`.
        unsafe { self.0.as_ref() }
    }
}

/// The tasks of one type `X`, in chunks that never move them; see the module docs.
struct Column<X> {
    /// Chunks with no room left.
    full: Vec<Vec<X>>,
    /// The chunk tasks go to, with room for as many tasks as all of `full`'s, plus one.
    current: Vec<X>,
}

/// A column, its type erased: found again by type when a task is added, asked in debug
/// builds whether it holds a task.
trait Store: Send + Sync {
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// Whether `at` is the address of one of its tasks.
    fn holds(&self, at: *const u8) -> bool;
}

impl<X: Send + Sync + 'static> Store for Column<X> {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn holds(&self, at: *const u8) -> bool {
        let size = std::mem::size_of::<X>();
        self.full.iter().chain([&self.current]).any(|chunk| {
            let start = chunk.as_ptr().cast::<u8>();
            if size == 0 {
                return std::ptr::eq(start, at);
            }
            let offset = (at as usize).wrapping_sub(start as usize);
            offset < chunk.len() * size && offset % size == 0
        })
    }
}

impl<X> Column<X> {
    fn new() -> Self {
        Column {
            full: Vec::new(),
            current: Vec::new(),
        }
    }

    /// Stores `task` and returns it where it now stays.
    fn push(&mut self, task: X) -> &X {
        if self.current.len() == self.current.capacity() {
            // Never for tasks that capture nothing: their capacity is `usize::MAX`.
            let size = self.current.capacity().saturating_mul(2).max(1);
            let done = std::mem::replace(&mut self.current, Vec::with_capacity(size));
            if !done.is_empty() {
                // Moves the chunk's handle, not its tasks.
                self.full.push(done);
            }
        }
        let at = self.current.len();
        // Below its capacity: the chunk is not reallocated, its tasks stay where they are.
        self.current.push(task);
        &self.current[at]
    }
}

/// A graph's tasks: one column per task type, each owning its tasks until it is dropped.
#[derive(Default)]
pub(crate) struct Tasks {
    columns: Vec<Box<dyn Store>>,
    /// While the graph is built: the column of each type seen, and the last one used. Nodes
    /// added in a loop have the same type, and skip the lookup.
    by_type: FxHashMap<TypeId, usize>,
    last: Option<(TypeId, usize)>,
    stored: usize,
}

impl fmt::Debug for Tasks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tasks")
            .field("types", &self.columns.len())
            .field("tasks", &self.stored)
            .finish()
    }
}

impl Tasks {
    /// Stores `task` in its type's column, a new one for a type not seen yet, and returns
    /// where it is, valid as long as these `Tasks` are.
    pub(crate) fn push<I: 'static, X: ErasedTask<I>>(&mut self, task: X) -> TaskRef<I> {
        let ty = TypeId::of::<X>();
        self.stored += 1;
        let seen = match self.last {
            Some((last, at)) if last == ty => Some(at),
            _ => self.by_type.get(&ty).copied(),
        };
        if let Some(at) = seen {
            let column = self.columns.get_mut(at).map(|c| c.as_any_mut());
            if let Some(column) = column.and_then(|c| c.downcast_mut::<Column<X>>()) {
                self.last = Some((ty, at));
                return TaskRef::new(column.push(task));
            }
        }
        // A type not seen yet or, were the lookup ever wrong, a column of its own.
        let mut column = Box::new(Column::<X>::new());
        let stored = TaskRef::new(column.push(task));
        let at = self.columns.len();
        // Moves the column's box, not the column or its chunks: `stored` stays valid.
        self.columns.push(column);
        self.by_type.insert(ty, at);
        self.last = Some((ty, at));
        stored
    }

    /// Whether `at` is the address of a task stored here.
    fn holds(&self, at: *const u8) -> bool {
        self.columns.iter().any(|c| c.holds(at))
    }

    /// The graph is built: no task is added any more; frees the lookup by type.
    pub(crate) fn freeze(&mut self) {
        self.by_type = FxHashMap::default();
        self.last = None;
        self.columns.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use std::any::TypeId;
    use std::sync::Arc;

    use super::*;
    use crate::Ctx;
    use crate::engine::FetchCx;
    use crate::engine::{AttemptFuture, FallbackFuture, FallbackScope};
    use crate::error::NodeError;
    use crate::policy::limit::bulkhead::BulkheadPermit;

    #[test]
    fn a_column_never_moves_a_task_it_stored() {
        let mut column = Column::<u64>::new();
        let stored: Vec<*const u64> = (0..5_000u64)
            .map(|i| std::ptr::from_ref(column.push(i)))
            .collect();
        // Chunks of at least 1, 2, 4, ... 4 096 slots: thirteen at most, the last one not
        // full.
        assert!(column.full.len() <= 12, "{} full chunks", column.full.len());
        assert!(column.current.len() < column.current.capacity());
        // Where each task is now, in order, is where `push` said it was. A chunk that grew
        // by reallocating would have moved its tasks.
        let now: Vec<(*const u64, u64)> = column
            .full
            .iter()
            .flatten()
            .chain(&column.current)
            .map(|task| (std::ptr::from_ref(task), *task))
            .collect();
        assert_eq!(now.len(), stored.len());
        for (i, (&at, &(now_at, value))) in stored.iter().zip(&now).enumerate() {
            assert_eq!(value, i as u64);
            assert_eq!(at, now_at, "task {i} moved");
            assert!(column.holds(at.cast()));
        }
        assert!(!column.holds(std::ptr::null()));
    }

    #[test]
    fn tasks_that_capture_nothing_take_no_memory() {
        let mut column = Column::<()>::new();
        for _ in 0..1_000 {
            column.push(());
        }
        assert!(column.full.is_empty());
        assert_eq!(column.current.len(), 1_000);
        assert_eq!(column.current.capacity(), usize::MAX, "no allocation");
    }

    /// A task that is its tag, of one of two types, `W` = 1 or 2, for tests that read the
    /// task back through its `TaskRef` and check that it is the one stored.
    struct Tagged<const W: usize>(u32);

    impl<const W: usize> ErasedTask<()> for Tagged<W> {
        fn value_type(&self) -> (TypeId, &'static str) {
            (TypeId::of::<[u8; W]>(), "tagged")
        }

        fn call(
            &self,
            _: Ctx<()>,
            _: &FetchCx<'_>,
            _: Option<BulkheadPermit>,
            _: &mut Option<AttemptFuture>,
        ) -> bool {
            false
        }

        fn fallback(&self, _: &FallbackScope<'_, ()>, _: Arc<NodeError>) -> Option<FallbackFuture> {
            None
        }
    }

    /// The task at `at`, if it is a `Tagged<W>` stored in `tasks`: its tag.
    fn tag_at<const W: usize>(tasks: &mut Tasks, at: *const u8) -> Option<u32> {
        tasks.columns.iter_mut().find_map(|c| {
            let column = c.as_any_mut().downcast_mut::<Column<Tagged<W>>>()?;
            let all = column.full.iter().flatten().chain(&column.current);
            all.into_iter()
                .find(|t| std::ptr::addr_eq(std::ptr::from_ref(*t), at))
                .map(|t| t.0)
        })
    }

    #[test]
    fn tasks_of_one_type_share_a_column_and_are_found_where_they_were_put() {
        let mut tasks = Tasks::default();
        let mut refs = Vec::new();
        for tag in 0..100u32 {
            // Two types, interleaved: every other push misses `last` and looks the type up.
            let task = if tag % 2 == 0 {
                tasks.push(Tagged::<1>(tag))
            } else {
                tasks.push(Tagged::<2>(tag))
            };
            refs.push((task, tag));
        }
        tasks.freeze();
        assert_eq!(format!("{tasks:?}"), "Tasks { types: 2, tasks: 100 }");
        for (task, tag) in &refs {
            // SAFETY: `tasks` made every `TaskRef` here.
            let got = unsafe { task.get(&tasks) };
            let width = if tag % 2 == 0 { 1 } else { 2 };
            assert_eq!(
                got.value_type().0,
                if width == 1 {
                    TypeId::of::<[u8; 1]>()
                } else {
                    TypeId::of::<[u8; 2]>()
                }
            );
            // The task read is the one stored with this tag, not another of its type.
            let at = std::ptr::from_ref(got).cast::<u8>();
            let found = if width == 1 {
                tag_at::<1>(&mut tasks, at)
            } else {
                tag_at::<2>(&mut tasks, at)
            };
            assert_eq!(found, Some(*tag));
        }
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "did not make it")]
    fn a_debug_build_catches_a_task_read_with_other_tasks() {
        let mut ours = Tasks::default();
        let mut theirs = Tasks::default();
        let task = ours.push(Tagged::<1>(0));
        let _ = theirs.push(Tagged::<1>(1));
        // SAFETY: not met, on purpose: the debug check panics before the pointer is read,
        // and `ours`, which holds the task, is alive anyway.
        let _ = unsafe { task.get(&theirs) };
    }

    /// The graph's "three words wide" node, in `engine/graph/mod.rs`.
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_node_is_three_words() {
        assert_eq!(
            std::mem::size_of::<crate::engine::NodeDef<()>>(),
            3 * std::mem::size_of::<usize>()
        );
    }
}
