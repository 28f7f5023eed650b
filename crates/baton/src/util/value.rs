//! A node's value, type-erased while it sits in its run.

use std::any::Any;
use std::sync::Arc;

/// A node's value, type-erased while it sits in the run's value array.
pub(crate) type Value = Arc<dyn Any + Send + Sync>;

/// Wraps a task's output as a [`Value`]. `()`, the value of side-effect nodes, shares one
/// `Arc` per thread instead of allocating one per node and run. It is per thread, not per
/// process: the reference count of an `Arc` that every worker clones and drops is a cache
/// line the workers would fight over.
pub(crate) fn into_value<T: Send + Sync + 'static>(value: T) -> Value {
    thread_local! {
        static UNIT: Value = Arc::new(());
    }
    if (&value as &dyn Any).is::<()>() {
        if let Ok(unit) = UNIT.try_with(Arc::clone) {
            return unit;
        }
    }
    Arc::new(value)
}
