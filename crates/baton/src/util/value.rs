//! A node's value, type-erased while it sits in its run.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::Arc;

/// A node's value, type-erased while it sits in the run's value array.
///
/// `()`, the value of side-effect nodes, is [`Value::Unit`]: it is written and dropped
/// without touching a reference count, and a downstream that takes it as input gets its
/// thread's shared `Arc<()>`. Any other value is one `Arc`, which every downstream that
/// takes it as input clones.
#[derive(Clone)]
pub(crate) enum Value {
    /// `()`.
    Unit,
    /// Any other value.
    Shared(Arc<dyn Any + Send + Sync>),
}

impl Value {
    /// Wraps a task's output.
    #[inline]
    pub(crate) fn new<T: Send + Sync + 'static>(value: T) -> Value {
        if TypeId::of::<T>() == TypeId::of::<()>() {
            Value::Unit
        } else {
            Value::Shared(Arc::new(value))
        }
    }

    /// Wraps a value that is shared already, as a fallback's is.
    pub(crate) fn from_arc<T: Send + Sync + 'static>(value: Arc<T>) -> Value {
        if TypeId::of::<T>() == TypeId::of::<()>() {
            Value::Unit
        } else {
            Value::Shared(value)
        }
    }

    /// The value, to look at or downcast.
    #[inline]
    pub(crate) fn as_any(&self) -> &(dyn Any + Send + Sync) {
        match self {
            Value::Unit => &(),
            Value::Shared(value) => &**value,
        }
    }

    /// The value as a `T`; `None` when it is not one.
    #[inline]
    pub(crate) fn downcast_ref<T: 'static>(&self) -> Option<&T> {
        self.as_any().downcast_ref::<T>()
    }

    /// The value as a shared `Arc<T>`; `None` when it is not a `T`. For `()`, an `Arc`
    /// that every caller on this thread shares: the reference count of one that every
    /// worker cloned and dropped would be a cache line the workers fight over.
    #[inline]
    pub(crate) fn to_arc<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        match self {
            Value::Shared(value) => Arc::clone(value).downcast::<T>().ok(),
            Value::Unit => unit().downcast::<T>().ok(),
        }
    }
}

/// This thread's shared `Arc<()>`; a new one while the thread's locals are torn down.
fn unit() -> Arc<dyn Any + Send + Sync> {
    thread_local! {
        static UNIT: Arc<dyn Any + Send + Sync> = Arc::new(());
    }
    UNIT.try_with(Arc::clone).unwrap_or_else(|_| Arc::new(()))
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Unit => f.write_str("Unit"),
            Value::Shared(_) => f.write_str("Shared(..)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_is_stored_without_an_arc_and_read_back_as_one() {
        let unit = Value::new(());
        assert!(matches!(unit, Value::Unit));
        assert_eq!(unit.downcast_ref::<()>(), Some(&()));
        assert!(unit.downcast_ref::<u8>().is_none());
        let (a, b) = (unit.to_arc::<()>(), unit.to_arc::<()>());
        assert!(a.is_some_and(|a| b.is_some_and(|b| Arc::ptr_eq(&a, &b))));
        assert!(unit.to_arc::<u8>().is_none());
        assert!(matches!(Value::from_arc(Arc::new(())), Value::Unit));
    }

    #[test]
    fn any_other_value_is_shared() {
        let value = Value::new(7_u32);
        assert!(matches!(value, Value::Shared(_)));
        assert_eq!(value.downcast_ref::<u32>(), Some(&7));
        assert!(value.downcast_ref::<()>().is_none());
        assert_eq!(value.to_arc::<u32>().as_deref(), Some(&7));
        let shared = Arc::new(String::from("in-app"));
        let value = Value::from_arc(Arc::clone(&shared));
        assert!(
            value
                .to_arc::<String>()
                .is_some_and(|s| Arc::ptr_eq(&s, &shared))
        );
    }
}
