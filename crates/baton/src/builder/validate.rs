//! What `build()` checks: upstream names resolve, types match, policies are valid, no
//! cycle. Hands the engine the resolved upstream lists to compile.

use std::collections::HashMap;

use std::sync::Arc;

use super::graph_builder::{NameRef, Up};
use super::policy::Declared;
use crate::engine::{
    Extras, FailureMode, GraphInner, GraphMeta, NodeDef, NodeKind, StartMode, States, Tasks,
};
use crate::error::BuildError;
use crate::onion::reload::Reload;
use crate::onion::{Policies, ResolvedPolicies};
use crate::orchestrator::Orchestrator;
use crate::util::names::Names;

/// What nodes that share an extras block have in common: their resolved policy, and for
/// a branch its router.
type SharedKey = (*const ResolvedPolicies, Option<u32>);

#[allow(clippy::too_many_arguments)]
pub(super) fn build<I: 'static>(
    id: u64,
    nodes: Vec<NodeDef<I, Box<Extras<Arc<Declared>>>>>,
    tasks: Tasks,
    names: Names,
    up_at: Vec<u32>,
    declared: Vec<u32>,
    name_refs: Vec<NameRef>,
    mode: FailureMode,
    start: StartMode,
    orchestrator: &Orchestrator,
    states: States,
) -> Result<GraphInner<I>, BuildError> {
    // Handles are node indices already: when no upstream was given by name, the declared
    // list is the resolved one. Handles only point to nodes added earlier, so such a graph
    // cannot have a cycle either.
    let by_name = !name_refs.is_empty();
    let ups: Vec<u32> = if by_name {
        resolve_names(&nodes, &tasks, &names, &up_at, &declared, &name_refs)?
    } else {
        declared
    };
    drop(name_refs);
    let is_branch = |node: usize| {
        nodes
            .get(node)
            .and_then(|d| d.extras.as_deref())
            .is_some_and(|e| matches!(e.kind, NodeKind::Branch { .. }))
    };
    let unit = |node: usize| produces_unit(&nodes, &tasks, node);
    let meta = GraphMeta::compile(id, names, up_at, ups, is_branch, unit);

    // Nodes that share a declared record share the resolved one, and plain tasks, or
    // branches of one router, with the same resolved policy and no callbacks share one
    // extras block.
    let changes = orchestrator.policy_sets_changed();
    let mut resolved = Resolved::default();
    let mut shared: rustc_hash::FxHashMap<SharedKey, Arc<Extras<Arc<ResolvedPolicies>>>> =
        rustc_hash::FxHashMap::default();
    // In place: both forms of a node have the same layout.
    let nodes = nodes
        .into_iter()
        .enumerate()
        .map(|(i, NodeDef { task, extras })| {
            let extras = match extras {
                None => None,
                Some(e) => {
                    let Extras {
                        kind,
                        policy,
                        callbacks,
                    } = *e;
                    let policy = match policy {
                        None => None,
                        Some(spec) => resolved.get(meta.name(i as u32), spec, orchestrator)?,
                    };
                    let key = match (&kind, &policy, &callbacks) {
                        (NodeKind::Task, Some(p), None) => Some((Arc::as_ptr(p), None)),
                        (&NodeKind::Branch { router }, Some(p), None) => {
                            Some((Arc::as_ptr(p), Some(router)))
                        }
                        _ => None,
                    };
                    let make = || {
                        Arc::new(Extras {
                            kind,
                            policy,
                            callbacks,
                        })
                    };
                    Some(match key {
                        Some(key) => Arc::clone(shared.entry(key).or_insert_with(make)),
                        None => make(),
                    })
                }
            };
            Ok(NodeDef { task, extras })
        })
        .collect::<Result<Vec<NodeDef<I>>, BuildError>>()?;
    let mut inner = GraphInner::new(
        meta,
        nodes.into_boxed_slice(),
        tasks,
        orchestrator.clone(),
        mode,
        start,
        states,
    );
    inner.set_reload(Reload::new(resolved.named_sets, changes));
    if by_name {
        if let Some(path) = find_cycle(&inner) {
            return Err(BuildError::Cycle { path });
        }
    }
    Ok(inner)
}

/// Resolves the upstreams given by name to node indices, checking that each exists and
/// produces the type its downstream expects.
/// Whether node `node` of the builder's `nodes`, whose tasks are in `tasks`, produces `()`.
fn produces_unit<I: 'static, E>(nodes: &[NodeDef<I, E>], tasks: &Tasks, node: usize) -> bool {
    nodes.get(node).is_some_and(|d| {
        // SAFETY: `tasks` are the builder's, which made every node's `TaskRef`:
        // `GraphBuilder::add` takes only tasks its own `Tasks` stored.
        #[allow(unsafe_code)]
        let task = unsafe { d.task.get(tasks) };
        task.value_type().0 == std::any::TypeId::of::<()>()
    })
}

fn resolve_names<I: 'static>(
    nodes: &[NodeDef<I, Box<Extras<Arc<Declared>>>>],
    tasks: &Tasks,
    names: &Names,
    up_at: &[u32],
    declared: &[u32],
    name_refs: &[NameRef],
) -> Result<Vec<u32>, BuildError> {
    let mut ups: Vec<u32> = Vec::with_capacity(declared.len());
    for node_id in 0..nodes.len() {
        let (from, to) = (up_at[node_id] as usize, up_at[node_id + 1] as usize);
        for &raw in declared.get(from..to).unwrap_or(&[]) {
            let index = match Up::decode(raw) {
                Up::Index(index) => index,
                Up::Name(k) => {
                    let Some(r) = name_refs.get(k as usize) else {
                        continue;
                    };
                    let node_name = || names.get(node_id as u32).to_owned();
                    let Some(index) = names.find(&r.name) else {
                        return Err(BuildError::UnknownUpstream {
                            node: node_name(),
                            upstream: r.name.clone(),
                        });
                    };
                    let Some(node) = nodes.get(index as usize) else {
                        continue;
                    };
                    // SAFETY: `tasks` are the builder's, which made every node's `TaskRef`:
                    // `GraphBuilder::add` takes only tasks its own `Tasks` stored.
                    #[allow(unsafe_code)]
                    let task = unsafe { node.task.get(tasks) };
                    let (found, found_name) = task.value_type();
                    if found != r.type_id {
                        return Err(BuildError::TypeMismatch {
                            node: node_name(),
                            upstream: r.name.clone(),
                            expected: r.type_name,
                            found: found_name,
                        });
                    }
                    index
                }
            };
            ups.push(index);
        }
    }
    Ok(ups)
}

/// The policies resolved so far, by declared record. The builder shares one declared record
/// between nodes declared alike, and the nodes that share a declared record share the
/// resolved one.
#[derive(Default)]
struct Resolved {
    /// Keyed by the declared record's address; the record is kept alive with it, so the
    /// address stays its own.
    by_spec: rustc_hash::FxHashMap<*const Declared, (Arc<Declared>, Option<Arc<ResolvedPolicies>>)>,
    /// The records that name a policy set, by reload slot: a node's name and the record as
    /// declared.
    named_sets: Vec<(Box<str>, Arc<Policies>)>,
}

impl Resolved {
    /// Node `node`'s policies, resolved from `spec` once per declared record.
    fn get(
        &mut self,
        node: &str,
        spec: Arc<Declared>,
        orchestrator: &Orchestrator,
    ) -> Result<Option<Arc<ResolvedPolicies>>, BuildError> {
        if let Some((_, policy)) = self.by_spec.get(&Arc::as_ptr(&spec)) {
            return Ok(policy.clone());
        }
        let mut policy = resolve(node, (*spec).clone(), orchestrator)?;
        if let Some(p) = policy.as_mut() {
            if let Some(declared) = p.named_set.clone() {
                p.reload_slot = u32::try_from(self.named_sets.len()).ok();
                self.named_sets.push((node.into(), declared));
            }
        }
        let policy = policy.map(Arc::new);
        self.by_spec
            .insert(Arc::as_ptr(&spec), (spec, policy.clone()));
        Ok(policy)
    }
}

/// Validates a node's policies and resolves its breaker, bulkhead and rate limiter through
/// the orchestrator. `None` when the node has no policy, which is the scheduler's fast
/// path.
fn resolve(
    node: &str,
    spec: Declared,
    orchestrator: &Orchestrator,
) -> Result<Option<ResolvedPolicies>, BuildError> {
    if spec.is_empty() {
        return Ok(None);
    }
    spec.policies.resolve(node, Some(orchestrator)).map(Some)
}

/// Kahn's algorithm; when some nodes are never freed, walks upstream edges among them until a
/// node repeats, and returns that cycle in flow direction, starting at its earliest-declared
/// node and ending with it again. A branch counts as a downstream of its router.
fn find_cycle<I: 'static>(graph: &GraphInner<I>) -> Option<Vec<String>> {
    let meta = &graph.meta;
    let n = meta.len();
    const NONE: u32 = u32::MAX;
    let mut router_of = vec![NONE; n];
    for r in 0..n {
        if let NodeKind::Router { branches } = graph.kind(r as u32) {
            for &(_, b) in branches.iter() {
                if let Some(slot) = router_of.get_mut(b as usize) {
                    *slot = r as u32;
                }
            }
        }
    }
    let mut pending: Vec<u32> = (0..n)
        .map(|i| match router_of[i] {
            NONE => meta.in_degree(i as u32),
            _ => 1,
        })
        .collect();
    let mut ready: Vec<u32> = (0..n as u32)
        .filter(|&i| pending[i as usize] == 0)
        .collect();
    let mut freed = 0usize;
    let free = |d: u32, pending: &mut Vec<u32>, ready: &mut Vec<u32>| {
        pending[d as usize] -= 1;
        if pending[d as usize] == 0 {
            ready.push(d);
        }
    };
    while let Some(id) = ready.pop() {
        freed += 1;
        for &d in meta.downstreams(id) {
            free(d, &mut pending, &mut ready);
        }
        if let NodeKind::Router { branches } = graph.kind(id) {
            for &(_, b) in branches.iter() {
                free(b, &mut pending, &mut ready);
            }
        }
    }
    if freed == n {
        return None;
    }
    // Every node left has an upstream that is left too; follow those until one repeats.
    let next_up = |id: u32| -> Option<u32> {
        match router_of[id as usize] {
            NONE => meta
                .upstreams(id)
                .iter()
                .copied()
                .find(|&u| pending[u as usize] > 0),
            r => Some(r),
        }
    };
    let start = pending.iter().position(|&p| p > 0)? as u32;
    let mut seen_at: HashMap<u32, usize> = HashMap::new();
    let mut walk = vec![start];
    let mut cur = start;
    loop {
        seen_at.insert(cur, walk.len() - 1);
        let next = next_up(cur)?;
        if let Some(&at) = seen_at.get(&next) {
            // walk[at..] is the cycle, each step going to an upstream; reverse for flow order.
            let mut cycle: Vec<u32> = walk[at..].to_vec();
            cycle.reverse();
            let first = cycle
                .iter()
                .enumerate()
                .min_by_key(|&(_, &id)| id)
                .map_or(0, |(i, _)| i);
            cycle.rotate_left(first);
            let mut path: Vec<String> = cycle.iter().map(|&i| meta.name(i).to_owned()).collect();
            path.push(meta.name(cycle[0]).to_owned());
            return Some(path);
        }
        walk.push(next);
        cur = next;
    }
}

#[cfg(test)]
mod tests {
    use std::future::{Ready, ready};
    use std::sync::Arc;
    use std::time::Duration;

    use crate::onion::PolicyRef;
    use crate::{BoxError, CircuitBreaker, Fallback, Graph, GraphBuilder, Retry};

    fn ok() -> Ready<Result<u32, BoxError>> {
        ready(Ok(1))
    }

    /// Adds node `name` with a per-attempt `timeout`, `retry`, `breaker` and, if
    /// `fallback`, a fallback value.
    fn declare(
        g: &mut GraphBuilder<()>,
        name: &str,
        timeout: Duration,
        retry: Retry,
        breaker: impl Into<PolicyRef<CircuitBreaker>>,
        fallback: bool,
    ) {
        let node = g.node(name).timeout(timeout).retry(retry).breaker(breaker);
        let node = if fallback {
            node.fallback(Fallback::value(0u32))
        } else {
            node
        };
        let _ = node.task(|_, ()| ok());
    }

    /// The resolved policy records of `graph`'s nodes, in order; `None` for no policy.
    fn records(graph: &Graph<()>) -> Vec<Option<*const crate::onion::ResolvedPolicies>> {
        graph
            .inner
            .nodes
            .iter()
            .map(|n| {
                n.extras
                    .as_ref()
                    .and_then(|e| e.policy.as_ref())
                    .map(Arc::as_ptr)
            })
            .collect()
    }

    /// Nodes declared with the same policies share one record. A node declared otherwise
    /// gets its own, and a declaration seen before shares again. Declared otherwise means
    /// another timeout, another breaker, a breaker by name, or a retry built again with its
    /// own predicate.
    #[test]
    fn nodes_declared_alike_share_one_policy_record() {
        let b1 = CircuitBreaker::builder("b1").build().unwrap();
        let b2 = CircuitBreaker::builder("b2").build().unwrap();
        let retry = Retry::new(3).retry_if(|_| true);
        let mut g = Graph::<()>::builder();
        let second = Duration::from_secs(1);
        let alike = |g: &mut GraphBuilder<()>, name: &str| {
            declare(g, name, second, retry.clone(), &b1, true);
        };
        alike(&mut g, "a0");
        alike(&mut g, "a1");
        declare(&mut g, "longer", 2 * second, retry.clone(), &b1, true);
        declare(&mut g, "other-breaker", second, retry.clone(), &b2, true);
        declare(&mut g, "by-name", second, retry.clone(), "b1", true);
        let own = Retry::new(3).retry_if(|_| true);
        declare(&mut g, "own-predicate", second, own, &b1, true);
        declare(&mut g, "no-fallback", second, retry.clone(), &b1, false);
        let _ = g.node("plain").task(|_, ()| ok());
        alike(&mut g, "a2");
        let graph = g.build().unwrap();
        let r = records(&graph);
        let a = r[0].expect("a0 has policies");
        assert_eq!(r[1], Some(a), "a1 shares a0's record");
        assert_eq!(r[8], Some(a), "a2 too, after other declarations");
        for (i, other) in r.iter().enumerate().take(7).skip(2) {
            let other = other.expect("has policies");
            assert_ne!(other, a, "node {i} is declared otherwise");
        }
        assert_eq!(r[7], None, "a plain node has no policy");
        let distinct: std::collections::HashSet<_> = r.iter().flatten().collect();
        assert_eq!(distinct.len(), 6);
    }

    /// Task nodes with the same resolved policy and no callbacks share one extras block;
    /// a node with callbacks, a router's branch and a node declared otherwise get their own.
    #[test]
    fn nodes_with_the_same_policy_share_one_extras_block() {
        let second = Duration::from_secs(1);
        let mut g = Graph::<()>::builder();
        let _ = g.node("a").timeout(second).task(|_, ()| ok());
        let _ = g.node("b").timeout(second).task(|_, ()| ok());
        let _ = g
            .node("watched")
            .timeout(second)
            .on_success(|_: &u32| {})
            .task(|_, ()| ok());
        let _ = g.node("longer").timeout(2 * second).task(|_, ()| ok());
        let _ = g
            .router("r")
            .select(|_, ()| "x")
            .branch("x", |b| b.timeout(second).task(|_, ()| ok()))
            .finish();
        let _ = g.node("c").timeout(second).task(|_, ()| ok());
        let graph = g.build().unwrap();
        let id = |name: &str| {
            let names = &graph.inner.meta.names;
            names.find(name).expect("a node of that name")
        };
        let block = |name: &str| {
            let node = &graph.inner.nodes[id(name) as usize];
            node.extras.as_ref().map(Arc::as_ptr).expect("has extras")
        };
        assert_eq!(block("a"), block("b"), "declared alike: one block");
        assert_eq!(block("a"), block("c"), "after other declarations too");
        assert_ne!(block("a"), block("watched"), "its callbacks are its own");
        assert_ne!(block("a"), block("longer"), "another policy");
        assert_ne!(block("a"), block("x"), "a branch is another kind");
        assert_ne!(block("x"), block("r"));
        // What each node reads from the shared block is what it declared.
        let kind = |name: &str| graph.inner.kind(id(name)).clone();
        assert!(matches!(kind("a"), super::NodeKind::Task));
        assert!(matches!(kind("x"), super::NodeKind::Branch { .. }));
    }

    /// More distinct declarations than are remembered, in turns: every node still gets the
    /// policy it declared.
    #[test]
    fn many_distinct_declarations_each_resolve_to_their_own() {
        let mut g = Graph::<()>::builder();
        for round in 0..3u64 {
            for k in 1..=20u64 {
                let _ = g
                    .node(format!("n{round}-{k}"))
                    .timeout(Duration::from_millis(k))
                    .task(|_, ()| ok());
            }
        }
        let graph = g.build().unwrap();
        for (i, node) in graph.inner.nodes.iter().enumerate() {
            let policy = node.extras.as_ref().and_then(|e| e.policy.as_ref());
            let want = Duration::from_millis(i as u64 % 20 + 1);
            assert_eq!(
                policy.and_then(|p| p.declared.timeout),
                Some(want),
                "node {i}"
            );
        }
    }
}
