//! Node names: one text arena for all of a graph's names and a hash table of node indices,
//! so that a graph of a million nodes costs no allocation per name.
//!
//! The hash table is built on the first lookup by name, not while the graph is built.
//! `build()` checks that names are unique by sorting their hashes, a sequential pass that
//! is cheaper than a million random inserts. Graphs that are never searched by name never
//! pay for the table.

use std::fmt;
use std::hash::BuildHasher;
use std::sync::OnceLock;

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use rustc_hash::FxBuildHasher;

/// The names of a graph's nodes, by index, and the index of each distinct name.
///
/// Fx-hashed: names come from code or configuration, not from requests.
#[derive(Default)]
pub(crate) struct Names {
    text: String,
    /// `text[ends[i - 1]..ends[i]]` is node `i`'s name, where `ends[-1]` is taken as 0.
    ends: Vec<u32>,
    /// The first node with each name; built on first use.
    index: OnceLock<HashTable<u32>>,
}

impl fmt::Debug for Names {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

fn hash(name: &str) -> u64 {
    FxBuildHasher.hash_one(name)
}

impl Names {
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Node `id`'s name, or `"<unknown>"` when `id` is out of range.
    pub(crate) fn get(&self, id: u32) -> &str {
        let i = id as usize;
        let end = match self.ends.get(i) {
            Some(&e) => e as usize,
            None => return "<unknown>",
        };
        let start = match i.checked_sub(1) {
            Some(p) => self.ends.get(p).map_or(0, |&e| e as usize),
            None => 0,
        };
        self.text.get(start..end).unwrap_or("<unknown>")
    }

    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = &str> {
        (0..self.len() as u32).map(|i| self.get(i))
    }

    /// Starts the next node's name: `name` goes after the last node's. It replaces any
    /// pending name that a builder dropped before it finished. Pending names are the only
    /// text ever removed, here and by [`check_unique`](Self::check_unique).
    /// [`commit`](Self::commit) makes it the next node's. No lookup table is kept up to date
    /// meanwhile: [`build_index`](Self::build_index) builds one when needed, sized for all of
    /// them, in one pass instead of a table that rehashes as it grows.
    pub(crate) fn begin(&mut self, name: &str) {
        let committed = self.committed();
        self.text.truncate(committed);
        self.text.push_str(name);
    }

    /// The name [`begin`](Self::begin) started, or an empty name if none.
    pub(crate) fn pending(&self) -> &str {
        self.text.get(self.committed()..).unwrap_or("")
    }

    /// Makes the pending name the next node's.
    pub(crate) fn commit(&mut self) {
        self.ends.push(self.text.len() as u32);
    }

    /// Where the last node's name ends in `text`.
    fn committed(&self) -> usize {
        self.ends.last().map_or(0, |&e| e as usize)
    }

    /// Frees spare capacity and returns the first node, in declaration order, whose name
    /// an earlier node already has. Lookups find the earlier node.
    pub(crate) fn check_unique(&mut self) -> Option<u32> {
        let committed = self.committed();
        self.text.truncate(committed);
        self.text.shrink_to_fit();
        self.ends.shrink_to_fit();
        let mut hashes: Vec<u64> = self.iter().map(hash).collect();
        hashes.sort_unstable();
        if hashes.windows(2).all(|w| w[0] != w[1]) {
            return None;
        }
        // Two names hash alike: a duplicate or, rarely, a collision. Compare them exactly.
        let (_, duplicate) = self.build_index();
        duplicate
    }

    /// The lookup table, and the first node whose name an earlier node has.
    fn build_index(&self) -> (HashTable<u32>, Option<u32>) {
        let Names { text, ends, .. } = self;
        let mut index = HashTable::with_capacity(ends.len());
        let mut duplicate = None;
        for id in 0..ends.len() as u32 {
            let name = name_of(text, ends, id);
            let same = |&j: &u32| name_of(text, ends, j) == name;
            match index.entry(hash(name), same, |&j| hash(name_of(text, ends, j))) {
                Entry::Occupied(_) => duplicate = duplicate.or(Some(id)),
                Entry::Vacant(slot) => {
                    slot.insert(id);
                }
            }
        }
        (index, duplicate)
    }

    /// The index of the first node called `name`. The first call builds the lookup table in
    /// O(n); later calls are O(1).
    pub(crate) fn find(&self, name: &str) -> Option<u32> {
        let index = self.index.get_or_init(|| self.build_index().0);
        index.find(hash(name), |&j| self.get(j) == name).copied()
    }
}

fn name_of<'a>(text: &'a str, ends: &[u32], j: u32) -> &'a str {
    let i = j as usize;
    let end = ends.get(i).map_or(0, |&e| e as usize);
    let start = if i == 0 {
        0
    } else {
        ends.get(i - 1).map_or(0, |&e| e as usize)
    };
    text.get(start..end).unwrap_or("")
}
