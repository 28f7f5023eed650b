//! How a node declares its upstreams, and how its task receives their values.
//!
//! A node's upstreams are a typed [`Node`] handle, a tuple of 1 to 16 handles, a `Vec` of
//! handles of one type, or a list of names given to [`NodeBuilder::after_names`]. The task
//! receives the values in the same shape, each behind an `Arc`, since values are shared,
//! never copied:
//!
//! | upstreams | the task receives |
//! |---|---|
//! | none: `()` | `()` |
//! | `Node<A>` | `Arc<A>` |
//! | `(Node<A>, Node<B>)` | `(Arc<A>, Arc<B>)` |
//! | `Vec<Node<A>>` | `Vec<Arc<A>>` |
//! | `after_names::<V>([..])` | [`Inputs<V>`] |
//!
//! This is axum's tuple-extractor pattern: the compiler checks that the task's arguments
//! match its upstreams, so no value is ever cast at run time by user code.
//!
//! [`NodeBuilder::after_names`]: crate::NodeBuilder::after_names

use std::any::TypeId;
use std::marker::PhantomData;
use std::sync::Arc;

use super::attempt_box::KeptBoxes;
use crate::id::Node;
use crate::util::names::Names;
use crate::util::once::WriteOnce;
use crate::util::value::Value;

/// A set of upstream nodes and the shape in which their values reach the task.
///
/// Implemented for `()`, [`Node<T>`], tuples of 1 to 16 handles, `Vec<Node<T>>` and
/// the names of [`after_names`](crate::NodeBuilder::after_names). It is sealed: the scheduler relies on how these fetch their values.
///
/// ```
/// use baton_graph::{BoxError, Graph};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), BoxError> {
/// let mut g = Graph::<()>::builder();
/// let parts: Vec<_> = (1..=3_u64)
///     .map(|i| {
///         let part = g.node(format!("part{i}"));
///         part.task(move |_ctx, ()| async move { Ok::<_, BoxError>(i) })
///     })
///     .collect();
/// // A `Vec` of handles gives a `Vec` of values, in the same order.
/// let total = g.node("total").after(parts).task(|_ctx, parts| async move {
///     Ok::<_, BoxError>(parts.iter().map(|p| **p).sum::<u64>())
/// });
/// let report = g.build()?.run(()).await?;
/// assert_eq!(report.get(total), Some(&6));
/// # Ok(())
/// # }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a node's upstreams",
    note = "upstreams are a `Node<T>`, a tuple of 1 to 16 `Node<_>` handles, a `Vec<Node<T>>`, or `after_names([..])`"
)]
pub trait Upstreams:
    sealed::Sealed<Fetched = <Self as Upstreams>::Values> + Clone + Send + Sync + 'static
{
    /// What the node's task receives: `Arc<T>` for each upstream, in the shape of `Self`.
    type Values: Send + 'static;
}

/// How upstreams declare themselves and fetch their values: outside the crate this trait
/// can be neither named nor implemented, which is what seals [`Upstreams`].
pub(crate) mod sealed {
    use super::{FetchCx, UpstreamRef};

    pub trait Sealed {
        /// What the values fetched are: the same type as [`Upstreams::Values`](super::Upstreams::Values).
        type Fetched;

        /// Declares the upstreams, in order, for `build()` to resolve.
        fn __declare(&self, out: &mut Vec<UpstreamRef>);

        /// Fetches the values from the run; the node's declared upstreams are in `cx`, so
        /// the handles themselves need not be kept after `build()`.
        fn __fetch(cx: &FetchCx<'_>) -> Option<Self::Fetched>;
    }
}

/// One declared upstream, before `build()` resolves it to a node index.
#[derive(Debug, Clone)]
pub enum UpstreamRef {
    /// A typed handle.
    Handle {
        /// The builder the handle came from.
        graph: u64,
        /// Its index there.
        index: u32,
    },
    /// A name, resolved at `build()`; the upstream must produce `type_id`.
    Name {
        /// The upstream's name.
        name: String,
        /// The type the task expects from it.
        type_id: TypeId,
        /// Its name, for the error message.
        type_name: &'static str,
    },
}

impl UpstreamRef {
    fn handle<T>(node: &Node<T>) -> Self {
        UpstreamRef::Handle {
            graph: node.graph,
            index: node.index,
        }
    }
}

impl Upstreams for () {
    type Values = ();
}
impl sealed::Sealed for () {
    type Fetched = ();
    fn __declare(&self, _out: &mut Vec<UpstreamRef>) {}
    fn __fetch(_cx: &FetchCx<'_>) -> Option<()> {
        Some(())
    }
}

impl<T: Send + Sync + 'static> Upstreams for Node<T> {
    type Values = Arc<T>;
}
impl<T: Send + Sync + 'static> sealed::Sealed for Node<T> {
    type Fetched = Arc<T>;
    fn __declare(&self, out: &mut Vec<UpstreamRef>) {
        out.push(UpstreamRef::handle(self));
    }
    fn __fetch(cx: &FetchCx<'_>) -> Option<Arc<T>> {
        cx.typed(0)
    }
}

impl<T: Send + Sync + 'static> Upstreams for Vec<Node<T>> {
    type Values = Vec<Arc<T>>;
}
impl<T: Send + Sync + 'static> sealed::Sealed for Vec<Node<T>> {
    type Fetched = Vec<Arc<T>>;
    fn __declare(&self, out: &mut Vec<UpstreamRef>) {
        out.extend(self.iter().map(UpstreamRef::handle));
    }
    fn __fetch(cx: &FetchCx<'_>) -> Option<Vec<Arc<T>>> {
        // Allocated once at its length: collecting through `Option` would start from no
        // size hint and grow.
        let mut values = Vec::with_capacity(cx.len());
        for i in 0..cx.len() {
            values.push(cx.typed(i)?);
        }
        Some(values)
    }
}

macro_rules! tuple_upstreams {
    ($($T:ident $i:tt),+) => {
        impl<$($T: Send + Sync + 'static),+> Upstreams for ($(Node<$T>,)+) {
            type Values = ($(Arc<$T>,)+);
        }
        impl<$($T: Send + Sync + 'static),+> sealed::Sealed for ($(Node<$T>,)+) {
            type Fetched = ($(Arc<$T>,)+);
            fn __declare(&self, out: &mut Vec<UpstreamRef>) {
                $( out.push(UpstreamRef::handle(&self.$i)); )+
            }
            fn __fetch(cx: &FetchCx<'_>) -> Option<Self::Fetched> {
                Some(($(cx.typed::<$T>($i)?,)+))
            }
        }
    };
}

tuple_upstreams!(A 0);
tuple_upstreams!(A 0, B 1);
tuple_upstreams!(A 0, B 1, C 2);
tuple_upstreams!(A 0, B 1, C 2, D 3);
tuple_upstreams!(A 0, B 1, C 2, D 3, E 4);
tuple_upstreams!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_upstreams!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_upstreams!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_upstreams!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, J 8);
tuple_upstreams!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, J 8, K 9);
tuple_upstreams!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, J 8, K 9, L 10);
tuple_upstreams!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, J 8, K 9, L 10, M 11);
tuple_upstreams!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, J 8, K 9, L 10, M 11, N 12);
tuple_upstreams!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, J 8, K 9, L 10, M 11, N 12, O 13);
tuple_upstreams!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, J 8, K 9, L 10, M 11, N 12, O 13, P 14);
tuple_upstreams!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, J 8, K 9, L 10, M 11, N 12, O 13, P 14, Q 15);

/// Upstreams given by name, each producing a `V`; see
/// [`NodeBuilder::after_names`](crate::NodeBuilder::after_names).
///
/// Names are resolved at `build()`: an unknown name is
/// [`BuildError::UnknownUpstream`](crate::BuildError::UnknownUpstream), an upstream of another
/// type is [`BuildError::TypeMismatch`](crate::BuildError::TypeMismatch), and a cycle through
/// names is [`BuildError::Cycle`](crate::BuildError::Cycle).
pub struct Named<V> {
    names: Vec<String>,
    _value: PhantomData<fn() -> V>,
}

impl<V> Clone for Named<V> {
    fn clone(&self) -> Self {
        Named::new(self.names.clone())
    }
}

impl<V> Named<V> {
    pub(crate) fn new(names: Vec<String>) -> Self {
        Named {
            names,
            _value: PhantomData,
        }
    }
}

impl<V> std::fmt::Debug for Named<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Named").field(&self.names).finish()
    }
}

impl<V: Send + Sync + 'static> Upstreams for Named<V> {
    type Values = Inputs<V>;
}
impl<V: Send + Sync + 'static> sealed::Sealed for Named<V> {
    type Fetched = Inputs<V>;
    fn __declare(&self, out: &mut Vec<UpstreamRef>) {
        out.extend(self.names.iter().map(|name| UpstreamRef::Name {
            name: name.clone(),
            type_id: TypeId::of::<V>(),
            type_name: std::any::type_name::<V>(),
        }));
    }
    fn __fetch(cx: &FetchCx<'_>) -> Option<Inputs<V>> {
        let entries = (0..cx.len())
            .map(|i| Some((cx.upstream(i)?, cx.typed::<V>(i)?)))
            .collect::<Option<Vec<_>>>()?;
        Some(Inputs {
            names: Arc::clone(cx.names()),
            entries,
        })
    }
}

/// The values of name-based upstreams, in the order the names were declared.
///
/// Built for graphs that come from configuration, where every node produces the same type
/// `V`, for example `serde_json::Value`.
#[derive(Clone)]
pub struct Inputs<V> {
    names: Arc<Names>,
    /// Each upstream's node index and its value, in declaration order.
    entries: Vec<(u32, Arc<V>)>,
}

impl<V: std::fmt::Debug> std::fmt::Debug for Inputs<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<V> Inputs<V> {
    /// The value of the upstream named `name`, or `None` when no upstream has that name.
    ///
    /// ```
    /// use baton_graph::{BoxError, Graph};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// g.node("net").task(|_ctx, ()| async { Ok::<_, BoxError>(100_i64) });
    /// g.node("tax").task(|_ctx, ()| async { Ok::<_, BoxError>(19_i64) });
    /// let gross = g.node("gross").after_names::<i64>(["net", "tax"]);
    /// let gross = gross.task(|_ctx, inputs| async move {
    ///     let (net, tax) = (inputs.get("net").unwrap(), inputs.get("tax").unwrap());
    ///     Ok::<_, BoxError>(**net + **tax)
    /// });
    /// let report = g.build()?.run(()).await?;
    /// assert_eq!(report.get(gross), Some(&119));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&Arc<V>> {
        self.entries
            .iter()
            .find(|(n, _)| self.names.get(*n) == name)
            .map(|(_, v)| v)
    }

    /// The upstreams' names and values, in declaration order.
    #[must_use]
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Arc<V>)> {
        self.entries.iter().map(|(n, v)| (self.names.get(*n), v))
    }

    /// How many upstreams the node has.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the node has no upstreams.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// What a task's upstreams fetch their values from: the run's slots and the node's
/// resolved upstream indices. With the run, whose graph keeps boxes for its attempts
/// (`attempt_box.rs`).
pub struct FetchCx<'a> {
    pub(crate) ups: &'a [u32],
    pub(crate) values: &'a [WriteOnce<Value>],
    pub(crate) names: &'a Arc<Names>,
    pub(crate) boxes: &'a dyn KeptBoxes,
}

impl std::fmt::Debug for FetchCx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchCx")
            .field("ups", &self.ups)
            .field("values", &self.values)
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

impl FetchCx<'_> {
    /// The value of the `pos`-th declared upstream, as a `T`. A `()` is not read from the
    /// run's value array: a node runs only once every upstream produced its value, and the
    /// build checked that this one's is a `()`.
    pub(crate) fn typed<T: Send + Sync + 'static>(&self, pos: usize) -> Option<Arc<T>> {
        let up = *self.ups.get(pos)? as usize;
        if TypeId::of::<T>() == TypeId::of::<()>() {
            debug_assert!(self.values.get(up).is_some_and(|v| v.get().is_some()));
            return Value::Unit.to_arc::<T>();
        }
        let value = self.values.get(up)?.get()?;
        value.to_arc::<T>()
    }

    /// How many upstreams the node declared.
    pub(crate) fn len(&self) -> usize {
        self.ups.len()
    }

    /// The node index of the `pos`-th declared upstream.
    pub(crate) fn upstream(&self, pos: usize) -> Option<u32> {
        self.ups.get(pos).copied()
    }

    /// The graph's names.
    pub(crate) fn names(&self) -> &Arc<Names> {
        self.names
    }
}
