//! A graph's tasks, stored by type: the tasks of one type (a closure written once and
//! given to many nodes, as graphs built in a loop are) sit side by side in one column of
//! that type, instead of in a box each.
//!
//! A graph of a million nodes then costs no allocation per task while it is built and no
//! free per task while it is dropped, and its tasks' data (what their closures capture) is
//! read in node order from a few large blocks, not from a million small ones spread over
//! the heap (measured in the README's design notes).
//!
//! A node reaches its task as it would a `Box<dyn ErasedTask>`, through a fat pointer and
//! one dynamic call: its [`TaskRef`] points into its column. So that it stays valid, a column never moves a task
//! once stored: it is a list of chunks, each allocated with room for twice as many tasks
//! as the one before and never grown past that room (`Vec::push` does not reallocate below
//! its capacity), so a task keeps its address until its [`Tasks`] is dropped. The price is
//! the last chunk's unused room: less than the tasks stored in the chunks before it, and
//! none when the tasks capture nothing.

#![allow(unsafe_code)]

use std::any::{Any, TypeId};
use std::fmt;
use std::ptr::NonNull;

use rustc_hash::FxHashMap;

use crate::task::ErasedTask;

/// Where one node's task is: a pointer into a column of the [`Tasks`] that stored it. It
/// is neither `Clone` nor `Copy`: each lives in the node it was made for, next to the
/// `Tasks` that own its task (the builder's, then the graph's), and is read only through
/// them ([`get`](Self::get)).
pub(crate) struct TaskRef<I>(NonNull<dyn ErasedTask<I>>);

// SAFETY: a `TaskRef` is a shared pointer to a task, which is `Send + Sync`
// (`ErasedTask`'s supertraits): sending it to another thread, or reading it from several,
// is reading a `Sync` value through `&`, nothing more. It never writes or frees the task.
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

    /// The task.
    ///
    /// # Safety
    ///
    /// The [`Tasks`] whose [`push`](Tasks::push) made this `TaskRef` must not have been
    /// dropped; the returned reference must not outlive it.
    #[inline]
    pub(crate) unsafe fn get(&self) -> &dyn ErasedTask<I> {
        // SAFETY: the pointer was made from a reference to a task stored in a chunk of a
        // column of that `Tasks` (`push`), which never moves, mutates or drops a stored
        // task until it is dropped itself; the caller guarantees that it is not.
        unsafe { self.0.as_ref() }
    }
}

/// The tasks of one type `X`, in chunks that never move them (see the module docs).
struct Column<X> {
    /// Chunks with no room left.
    full: Vec<Vec<X>>,
    /// The chunk tasks go to, with room for as many tasks as all of `full`'s, plus one.
    current: Vec<X>,
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
            // (Never for tasks that capture nothing: their capacity is `usize::MAX`.)
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
    columns: Vec<Box<dyn Any + Send + Sync>>,
    /// While the graph is built: the column of each type seen, and the last one used
    /// (nodes added in a loop have the same type, and skip the lookup).
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
    /// Stores `task` in its type's column (a new one for a type not seen yet) and returns
    /// where it is, valid as long as these `Tasks` are.
    pub(crate) fn push<I: 'static, X: ErasedTask<I>>(&mut self, task: X) -> TaskRef<I> {
        let ty = TypeId::of::<X>();
        self.stored += 1;
        let seen = match self.last {
            Some((last, at)) if last == ty => Some(at),
            _ => self.by_type.get(&ty).copied(),
        };
        if let Some(at) = seen {
            let column = self.columns.get_mut(at);
            if let Some(column) = column.and_then(|c| c.downcast_mut::<Column<X>>()) {
                self.last = Some((ty, at));
                return TaskRef::new(column.push(task));
            }
        }
        // A type not seen yet (or, were the lookup ever wrong, a column of its own).
        let mut column = Box::new(Column::<X>::new());
        let stored = TaskRef::new(column.push(task));
        let at = self.columns.len();
        // Moves the column's box, not the column or its chunks: `stored` stays valid.
        self.columns.push(column);
        self.by_type.insert(ty, at);
        self.last = Some((ty, at));
        stored
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
    use std::future::{Ready, ready};

    use super::*;
    use crate::task::TypedTask;
    use crate::{BoxError, Ctx};

    #[test]
    fn a_column_never_moves_a_task_it_stored() {
        let mut column = Column::<u64>::new();
        let stored: Vec<*const u64> = (0..5_000u64)
            .map(|i| std::ptr::from_ref(column.push(i)))
            .collect();
        // Chunks of 1, 2, 4, ... 4 096: thirteen, the last one not full.
        assert_eq!(column.full.len(), 12);
        assert_eq!(column.current.capacity(), 4_096);
        // Where each task is now, in order: where `push` said it was (a chunk that grew by
        // reallocating would have moved its tasks).
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
        }
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

    fn returning<T: Default + Send + Sync + 'static>(tag: u32) -> impl ErasedTask<()> + use<T> {
        TypedTask::<(), _, _, _, _>::new(move |_: Ctx<()>, ()| -> Ready<Result<T, BoxError>> {
            let _ = tag;
            ready(Ok(T::default()))
        })
    }

    #[test]
    fn tasks_of_one_type_share_a_column_and_are_found_where_they_were_put() {
        let mut tasks = Tasks::default();
        let mut refs = Vec::new();
        for i in 0..100 {
            // Two types, interleaved: every other push misses `last` and looks the type up.
            if i % 2 == 0 {
                refs.push((tasks.push(returning::<u8>(i)), TypeId::of::<u8>()));
            } else {
                refs.push((tasks.push(returning::<u16>(i)), TypeId::of::<u16>()));
            }
        }
        tasks.freeze();
        assert_eq!(format!("{tasks:?}"), "Tasks { types: 2, tasks: 100 }");
        for (task, ty) in &refs {
            // SAFETY: `tasks`, which made every `TaskRef` here, is alive.
            assert_eq!(unsafe { task.get() }.value_type().0, *ty);
        }
    }
}
