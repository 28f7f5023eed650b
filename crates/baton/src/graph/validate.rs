//! What `build()` checks: upstream names resolve, types match, no cycle. Produces the
//! compressed adjacency the scheduler walks.

use std::collections::HashMap;
use std::sync::Arc;

use super::builder::PendingNode;
use super::upstreams::UpstreamRef;
use super::{GraphInner, GraphMeta};
use crate::error::BuildError;
use crate::run::FailureMode;

pub(super) fn build<I>(
    id: u64,
    nodes: Vec<PendingNode<I>>,
    by_name: HashMap<Arc<str>, u32>,
    mode: FailureMode,
) -> Result<GraphInner<I>, BuildError> {
    let n = nodes.len();
    // Resolve every upstream to an index, in declaration order.
    let mut up_at = Vec::with_capacity(n + 1);
    let mut ups: Vec<u32> = Vec::new();
    up_at.push(0u32);
    for node in &nodes {
        for up in &node.upstreams {
            let index = match up {
                UpstreamRef::Handle { index, .. } => *index,
                UpstreamRef::Name {
                    name,
                    type_id,
                    type_name,
                } => {
                    let Some(&index) = by_name.get(name.as_str()) else {
                        return Err(BuildError::UnknownUpstream {
                            node: node.name.to_string(),
                            upstream: name.clone(),
                        });
                    };
                    let found = &nodes[index as usize];
                    if found.type_id != *type_id {
                        return Err(BuildError::TypeMismatch {
                            node: node.name.to_string(),
                            upstream: name.clone(),
                            expected: type_name,
                            found: found.type_name,
                        });
                    }
                    index
                }
            };
            ups.push(index);
        }
        up_at.push(ups.len() as u32);
    }

    // Downstream lists: counting sort of the edges by upstream.
    let mut down_at = vec![0u32; n + 1];
    for &u in &ups {
        down_at[u as usize + 1] += 1;
    }
    for i in 0..n {
        down_at[i + 1] += down_at[i];
    }
    let mut fill = down_at.clone();
    let mut downs = vec![0u32; ups.len()];
    for node in 0..n {
        for &u in &ups[up_at[node] as usize..up_at[node + 1] as usize] {
            downs[fill[u as usize] as usize] = node as u32;
            fill[u as usize] += 1;
        }
    }

    let mut names = Vec::with_capacity(n);
    let mut tasks = Vec::with_capacity(n);
    for node in nodes {
        names.push(node.name);
        tasks.push(node.task);
    }
    let meta = GraphMeta {
        id,
        roots: (0..n as u32)
            .filter(|&i| up_at[i as usize] == up_at[i as usize + 1])
            .collect(),
        names: names.into_boxed_slice(),
        by_name,
        up_at: up_at.into_boxed_slice(),
        ups: ups.into_boxed_slice(),
        down_at: down_at.into_boxed_slice(),
        downs: downs.into_boxed_slice(),
    };
    if let Some(path) = find_cycle(&meta) {
        return Err(BuildError::Cycle { path });
    }
    Ok(GraphInner {
        meta,
        tasks: tasks.into_boxed_slice(),
        mode,
    })
}

/// Kahn's algorithm; when some nodes are never freed, walks upstream edges among them until a
/// node repeats, and returns that cycle in flow direction, starting at its earliest-declared
/// node and ending with it again.
fn find_cycle(meta: &GraphMeta) -> Option<Vec<String>> {
    let n = meta.len();
    let mut pending: Vec<u32> = (0..n as u32).map(|i| meta.in_degree(i)).collect();
    let mut ready: Vec<u32> = meta.roots.to_vec();
    let mut freed = 0usize;
    while let Some(id) = ready.pop() {
        freed += 1;
        for &d in meta.downstreams(id) {
            pending[d as usize] -= 1;
            if pending[d as usize] == 0 {
                ready.push(d);
            }
        }
    }
    if freed == n {
        return None;
    }
    // Every node left has an upstream that is left too; follow those until one repeats.
    let start = pending.iter().position(|&p| p > 0)? as u32;
    let mut seen_at: HashMap<u32, usize> = HashMap::new();
    let mut walk = vec![start];
    let mut cur = start;
    loop {
        seen_at.insert(cur, walk.len() - 1);
        let next = *meta
            .upstreams(cur)
            .iter()
            .find(|&&u| pending[u as usize] > 0)?;
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
