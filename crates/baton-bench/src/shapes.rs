//! The benchmark shapes (Taskflow's suite), as plain adjacency lists that every
//! implementation turns into its own graph.
//!
//! Every generator numbers nodes in a topological order (each upstream has a smaller index
//! than its downstream), so the sequential baseline is a plain loop over `0..n`.

use std::fmt;
use std::str::FromStr;

/// A benchmark shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Shape {
    /// `0 -> 1 -> ... -> n-1`.
    Chain,
    /// A complete binary fan-out tree whose leaves fan back in through a mirrored tree.
    BinaryTree,
    /// `n` independent nodes.
    Parallel,
    /// A `side x side` grid; cell `(r, c)` depends on `(r-1, c)` and `(r, c-1)`.
    Wavefront,
    /// Node `i > 0` depends on 1..=5 (average 3) distinct earlier nodes, drawn with a fixed
    /// seed.
    Random,
    /// The 5-node order graph: `user ∥ sku -> stock -> promo -> notify`.
    Order,
}

impl Shape {
    pub(crate) const ALL: [Shape; 6] = [
        Shape::Chain,
        Shape::BinaryTree,
        Shape::Parallel,
        Shape::Wavefront,
        Shape::Random,
        Shape::Order,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Shape::Chain => "chain",
            Shape::BinaryTree => "binary-tree",
            Shape::Parallel => "parallel",
            Shape::Wavefront => "wavefront",
            Shape::Random => "random",
            Shape::Order => "order",
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Shape {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Shape::ALL
            .into_iter()
            .find(|shape| shape.name() == s || (s == "tree" && *shape == Shape::BinaryTree))
            .ok_or_else(|| {
                format!(
                    "unknown shape `{s}` (chain, binary-tree, parallel, wavefront, random, order)"
                )
            })
    }
}

/// A DAG in compressed form: upstreams and downstreams of every node.
#[derive(Debug, Clone)]
pub(crate) struct Dag {
    pub(crate) shape: Shape,
    up_at: Vec<u32>,
    ups: Vec<u32>,
    down_at: Vec<u32>,
    downs: Vec<u32>,
}

impl Dag {
    /// The shape at (about) `size` nodes; the real count is [`len`](Self::len) (the tree and
    /// the wavefront round to their natural sizes, the order graph has 5 nodes).
    pub(crate) fn new(shape: Shape, size: usize) -> Dag {
        let lists = match shape {
            Shape::Chain => (0..size)
                .map(|i| if i == 0 { vec![] } else { vec![i as u32 - 1] })
                .collect(),
            Shape::Parallel => vec![Vec::new(); size],
            Shape::BinaryTree => binary_tree(size),
            Shape::Wavefront => wavefront(size),
            Shape::Random => random(size),
            Shape::Order => vec![vec![], vec![], vec![0, 1], vec![2], vec![3]],
        };
        Dag::from_lists(shape, &lists)
    }

    fn from_lists(shape: Shape, lists: &[Vec<u32>]) -> Dag {
        let n = lists.len();
        let mut up_at = Vec::with_capacity(n + 1);
        let mut ups = Vec::new();
        let mut out_degree = vec![0u32; n];
        up_at.push(0);
        for (i, list) in lists.iter().enumerate() {
            for &u in list {
                assert!((u as usize) < i, "generators number nodes topologically");
                ups.push(u);
                out_degree[u as usize] += 1;
            }
            up_at.push(ups.len() as u32);
        }
        let mut down_at = Vec::with_capacity(n + 1);
        down_at.push(0u32);
        for d in &out_degree {
            down_at.push(down_at.last().copied().unwrap_or(0) + d);
        }
        let mut fill: Vec<u32> = down_at[..n].to_vec();
        let mut downs = vec![0u32; ups.len()];
        for (i, list) in lists.iter().enumerate() {
            for &u in list {
                downs[fill[u as usize] as usize] = i as u32;
                fill[u as usize] += 1;
            }
        }
        Dag {
            shape,
            up_at,
            ups,
            down_at,
            downs,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.up_at.len() - 1
    }

    pub(crate) fn ups(&self, i: usize) -> &[u32] {
        &self.ups[self.up_at[i] as usize..self.up_at[i + 1] as usize]
    }

    pub(crate) fn downs(&self, i: usize) -> &[u32] {
        &self.downs[self.down_at[i] as usize..self.down_at[i + 1] as usize]
    }

    #[cfg(test)]
    pub(crate) fn edges(&self) -> usize {
        self.ups.len()
    }

    #[cfg(test)]
    pub(crate) fn max_in_degree(&self) -> usize {
        (0..self.len())
            .map(|i| self.ups(i).len())
            .max()
            .unwrap_or(0)
    }
}

/// A fan-out tree of `levels` levels (root at level 0, `2^(levels-1)` leaves), then its
/// mirror image fanning the leaves back into one sink: `3 * 2^(levels-1) - 2` nodes. Picks
/// the largest tree not above `size` (at least 1 node).
fn binary_tree(size: usize) -> Vec<Vec<u32>> {
    let mut levels = 1u32;
    while 3 * (1usize << levels) - 2 <= size.max(1) {
        levels += 1;
    }
    // The tree of `levels` levels fits; one more level would not.
    let mut lists: Vec<Vec<u32>> = Vec::new();
    // Fan-out: node k (heap order) has children 2k+1, 2k+2.
    let out_nodes = (1usize << levels) - 1;
    for k in 0..out_nodes {
        if k == 0 {
            lists.push(Vec::new());
        } else {
            lists.push(vec![((k - 1) / 2) as u32]);
        }
    }
    // Fan-in: pairs of the previous layer merge, starting from the leaves.
    let mut layer: Vec<u32> = ((out_nodes / 2)..out_nodes).map(|k| k as u32).collect();
    while layer.len() > 1 {
        let mut next = Vec::with_capacity(layer.len() / 2);
        for pair in layer.chunks(2) {
            let id = lists.len() as u32;
            lists.push(pair.to_vec());
            next.push(id);
        }
        layer = next;
    }
    lists
}

/// A `side x side` grid with `side = round(sqrt(size))`, row-major.
fn wavefront(size: usize) -> Vec<Vec<u32>> {
    let side = ((size as f64).sqrt().round() as usize).max(1);
    let mut lists = Vec::with_capacity(side * side);
    for r in 0..side {
        for c in 0..side {
            let mut ups = Vec::with_capacity(2);
            if r > 0 {
                ups.push(((r - 1) * side + c) as u32);
            }
            if c > 0 {
                ups.push((r * side + c - 1) as u32);
            }
            lists.push(ups);
        }
    }
    lists
}

/// Node `i > 0` draws `k = 1..=5` (uniform, mean 3) and depends on `min(k, i)` distinct
/// nodes drawn uniformly from `0..i`. Seeded, so every implementation and every run sees
/// the same graph.
fn random(size: usize) -> Vec<Vec<u32>> {
    let mut rng = fastrand::Rng::with_seed(0x5eed_ba70);
    let mut lists = Vec::with_capacity(size);
    for i in 0..size {
        let k = rng.usize(1..=5).min(i);
        let mut ups: Vec<u32> = Vec::with_capacity(k);
        while ups.len() < k {
            let u = rng.u32(0..i as u32);
            if !ups.contains(&u) {
                ups.push(u);
            }
        }
        ups.sort_unstable();
        lists.push(ups);
    }
    lists
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_edges() {
        assert_eq!(Dag::new(Shape::Chain, 10).len(), 10);
        assert_eq!(Dag::new(Shape::Chain, 10).edges(), 9);
        assert_eq!(Dag::new(Shape::Parallel, 10).edges(), 0);
        let t = Dag::new(Shape::BinaryTree, 100);
        // 3 * 2^5 - 2 = 94 <= 100 < 190
        assert_eq!(t.len(), 94);
        assert_eq!(t.max_in_degree(), 2);
        assert_eq!((0..t.len()).filter(|&i| t.ups(i).is_empty()).count(), 1);
        assert_eq!((0..t.len()).filter(|&i| t.downs(i).is_empty()).count(), 1);
        let w = Dag::new(Shape::Wavefront, 100);
        assert_eq!(w.len(), 100);
        assert_eq!(w.edges(), 2 * 10 * 9);
        let r = Dag::new(Shape::Random, 10_000);
        let avg = r.edges() as f64 / r.len() as f64;
        assert!((2.9..3.1).contains(&avg), "{avg}");
        assert!(r.max_in_degree() <= 5);
        assert_eq!(Dag::new(Shape::Order, 1).len(), 5);
        assert_eq!(Dag::new(Shape::BinaryTree, 1).len(), 1);
        assert_eq!(Dag::new(Shape::BinaryTree, 10).len(), 10);
    }
}
