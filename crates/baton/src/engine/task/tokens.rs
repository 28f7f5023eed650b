//! Attempt cancellation tokens. They are created only when a task asks for one, which is
//! rare, so they live beside the slots, not in them. At most one per node: its current
//! attempt's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use rustc_hash::FxHashMap;
use tokio_util::sync::CancellationToken;

use crate::engine::run::node_state::{NodeState, Slot};

/// The tokens of a run's attempts that asked for one and have not ended.
#[derive(Debug, Default)]
pub(in crate::engine) struct Tokens {
    /// Set, and never cleared, once any task of the run asked for a token.
    used: AtomicBool,
    /// For each node, the attempt that asked for a token and has not ended, with that
    /// token. Boxed, made when the first token is, so that a run's state holds one word
    /// for it.
    live: Mutex<Option<Box<Live>>>,
}

/// Node → (attempt, token).
type Live = FxHashMap<u32, (u32, CancellationToken)>;

/// The number under which a node's fallback keeps its token: after every attempt's.
pub(in crate::engine) const FALLBACK: u32 = u32::MAX;

impl Tokens {
    fn live(&self) -> MutexGuard<'_, Option<Box<Live>>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The token of `node`'s attempt `attempt`, created as a child of `parent` on first
    /// request. An attempt that has visibly ended, because a later attempt started or the
    /// node ended, gets a cancelled token.
    pub(in crate::engine) fn get(
        &self,
        state: &NodeState,
        slot: &Slot,
        node: u32,
        attempt: u32,
        parent: &CancellationToken,
    ) -> CancellationToken {
        self.used.store(true, Ordering::SeqCst);
        let mut live = self.live();
        let live = live.get_or_insert_with(Box::default);
        if let Some((a, t)) = live.get(&node) {
            if *a == attempt {
                return t.clone();
            }
        }
        if slot.attempts() > attempt || state.is_done() {
            let t = CancellationToken::new();
            t.cancel();
            return t;
        }
        let t = parent.child_token();
        if let Some((_, old)) = live.insert(node, (attempt, t.clone())) {
            old.cancel();
        }
        t
    }

    /// `node`'s attempts up to `attempt` ended: cancels and forgets their token. Inline: on
    /// every node's path, and nothing to do unless a task asked for a token.
    #[inline]
    pub(in crate::engine) fn end(&self, node: u32, attempt: u32) {
        if self.used.load(Ordering::SeqCst) {
            self.end_used(node, attempt);
        }
    }

    #[cold]
    fn end_used(&self, node: u32, attempt: u32) {
        let mut live = self.live();
        let Some(live) = live.as_deref_mut() else {
            return;
        };
        if live.get(&node).is_some_and(|(a, _)| *a <= attempt) {
            if let Some((_, t)) = live.remove(&node) {
                t.cancel();
            }
        }
    }
}

/// Ends an attempt's token when the attempt's future completes or is dropped.
pub(in crate::engine) struct AttemptGuard<'a> {
    pub(in crate::engine) tokens: &'a Tokens,
    pub(in crate::engine) node: u32,
    pub(in crate::engine) attempt: u32,
}

impl Drop for AttemptGuard<'_> {
    fn drop(&mut self) {
        self.tokens.end(self.node, self.attempt);
    }
}
