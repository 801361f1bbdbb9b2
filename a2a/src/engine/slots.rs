//! How many slots of one kind (running turns, open SSE streams) callers hold: in all, per
//! owner and per source, and the check that refuses one more beyond a share. Plain counting;
//! the engine takes and gives back under its live-state lock.

use std::collections::HashMap;

use crate::auth::{Caller, Owner, Source};
use crate::error::ProtocolError;

/// What one kind of slot (running turns, streams) holds: in all, per owner, per source.
#[derive(Default)]
pub(super) struct Held {
    pub(super) total: usize,
    by_owner: HashMap<Owner, usize>,
    by_source: HashMap<Source, usize>,
}

/// The bounds of one kind of slot, and how its refusals name it.
pub(super) struct Shares {
    pub(super) total: usize,
    pub(super) per_owner: usize,
    pub(super) per_source: usize,
    /// "tasks", "streams".
    pub(super) what: &'static str,
    /// "running", "open".
    pub(super) state: &'static str,
    /// Said to an owner at its share.
    pub(super) hint: &'static str,
}

impl Held {
    /// Refuse one more for `caller` beyond `s` (in all, then the owner's, then the source's
    /// share).
    pub(super) fn check(&self, caller: &Caller, s: &Shares) -> Result<(), ProtocolError> {
        let (what, state) = (s.what, s.state);
        if self.total >= s.total {
            return Err(ProtocolError::Busy(format!(
                "{} {what} are {state} on this agent",
                s.total
            )));
        }
        let mine = held(&self.by_owner, &caller.owner);
        if mine >= s.per_owner {
            return Err(ProtocolError::Busy(format!(
                "you have {mine} {what} {state} on this agent (at most {}){}",
                s.per_owner, s.hint
            )));
        }
        let ours = held(&self.by_source, &caller.source);
        if ours >= s.per_source {
            return Err(ProtocolError::Busy(format!(
                "{ours} {what} from your network ({}) are {state} on this agent (at most {})",
                caller.source, s.per_source
            )));
        }
        Ok(())
    }

    /// Count one more held by `owner` from `source`.
    pub(super) fn take(&mut self, owner: &Owner, source: &Source) {
        self.total += 1;
        count_up(&mut self.by_owner, owner);
        count_up(&mut self.by_source, source);
    }

    /// Count one less held by `owner` from `source`.
    pub(super) fn give_back(&mut self, owner: &Owner, source: &Source) {
        self.total = self.total.saturating_sub(1);
        count_down(&mut self.by_owner, owner);
        count_down(&mut self.by_source, source);
    }
}

/// How many `key` holds in `counts` (absent is zero).
fn held<K: std::hash::Hash + Eq>(counts: &HashMap<K, usize>, key: &K) -> usize {
    counts.get(key).copied().unwrap_or(0)
}

/// Count one more for `key`.
fn count_up<K: std::hash::Hash + Eq + Clone>(counts: &mut HashMap<K, usize>, key: &K) {
    *counts.entry(key.clone()).or_default() += 1;
}

/// Count one less for `key`; an entry lives only while it is above zero, so the maps never
/// hold more entries than the totals they share.
fn count_down<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = counts.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            counts.remove(key);
        }
    }
}
