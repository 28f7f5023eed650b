//! Node names: one text arena for all of a graph's names and a hash table of node indices,
//! so that a graph of a million nodes costs no allocation per name.

use std::fmt;
use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

/// The names of a graph's nodes, by index, and the index of each distinct name.
///
/// Fx-hashed: names come from code or configuration, not from requests.
#[derive(Default)]
pub(crate) struct Names {
    text: String,
    /// `text[ends[i - 1]..ends[i]]` is node `i`'s name (`ends[-1]` being 0).
    ends: Vec<u32>,
    /// The first node with each name.
    index: HashTable<u32>,
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

    /// Node `id`'s name (`"<unknown>"` out of range).
    pub(crate) fn get(&self, id: u32) -> &str {
        let i = id as usize;
        let end = match self.ends.get(i) {
            Some(&e) => e as usize,
            None => return "<unknown>",
        };
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        self.text.get(start..end).unwrap_or("<unknown>")
    }

    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = &str> {
        (0..self.len() as u32).map(|i| self.get(i))
    }

    /// Adds the next node's name; `false` when an earlier node has it (the name is stored
    /// anyway, and lookups find the earlier node).
    pub(crate) fn push(&mut self, name: &str) -> bool {
        let id = self.ends.len() as u32;
        self.text.push_str(name);
        self.ends.push(self.text.len() as u32);
        let h = hash(name);
        if self.find_hashed(name, h).is_some() {
            return false;
        }
        let Names {
            text, ends, index, ..
        } = self;
        index.insert_unique(h, id, |&j| hash(name_of(text, ends, j)));
        true
    }

    /// The index of the (first) node called `name`.
    pub(crate) fn find(&self, name: &str) -> Option<u32> {
        self.find_hashed(name, hash(name))
    }

    fn find_hashed(&self, name: &str, h: u64) -> Option<u32> {
        self.index.find(h, |&j| self.get(j) == name).copied()
    }

    /// Frees spare capacity once the graph is complete.
    pub(crate) fn shrink(&mut self) {
        self.text.shrink_to_fit();
        self.ends.shrink_to_fit();
        self.index
            .shrink_to_fit(|&j| hash(name_of(&self.text, &self.ends, j)));
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
