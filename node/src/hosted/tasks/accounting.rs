//! What each task is charged and to whom: the counters ([`Usage`]: an owner's `c`, a
//! source's `s`, the store's `C`, a chain's holders `h`), a task's accounting entry
//! ([`Acct`]), and the ops that move them in a write's batch.

use std::sync::atomic::Ordering;

use agentnet_a2a::store::StoreError;
use agentnet_discovery::store::FamilyOp;

use super::eviction::evictable;
use super::keys::{chain_key, rank_key, source_key, ChainDigest, Scope, TOTAL_KEY};
use super::{backend, TaskDb};

/// A count of tasks and their bytes: the value of the `c`, `s` and `C` counters. Stores
/// written before byte accounting hold the count alone (8 bytes).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Usage {
    pub(super) tasks: u64,
    pub(super) bytes: u64,
}

impl Usage {
    pub(super) fn decode(v: Option<Vec<u8>>) -> Usage {
        let Some(v) = v else {
            return Usage::default();
        };
        let word = |i: usize| {
            v.get(i * 8..i * 8 + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes)
                .unwrap_or(0)
        };
        Usage {
            tasks: word(0),
            bytes: word(1),
        }
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        [self.tasks.to_be_bytes(), self.bytes.to_be_bytes()].concat()
    }

    pub(super) fn add(self, tasks: i64, bytes: i64) -> Usage {
        Usage {
            tasks: self.tasks.saturating_add_signed(tasks),
            bytes: self.bytes.saturating_add_signed(bytes),
        }
    }

    /// The op writing it under `key`: a delete once it is zero.
    pub(super) fn op(&self, key: Vec<u8>) -> FamilyOp {
        if *self == Usage::default() {
            FamilyOp::Delete(key)
        } else {
            FamilyOp::Put(key, self.encode())
        }
    }
}

/// A task's accounting entry (`b ‖ A ‖ O ‖ id`): what it is charged, where its index entries
/// are, the chain it holds, and the source charged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Acct {
    pub(super) size: u64,
    pub(super) t: u64,
    pub(super) running: bool,
    pub(super) chain: Option<ChainDigest>,
    pub(super) source: Vec<u8>,
}

const RUNNING: u8 = 1;

const HOLDS_CHAIN: u8 = 2;

impl Acct {
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(49 + self.source.len());
        v.extend_from_slice(&self.size.to_be_bytes());
        v.extend_from_slice(&self.t.to_be_bytes());
        let flags = if self.running { RUNNING } else { 0 }
            | if self.chain.is_some() { HOLDS_CHAIN } else { 0 };
        v.push(flags);
        if let Some(d) = &self.chain {
            v.extend_from_slice(d);
        }
        v.extend_from_slice(&self.source);
        v
    }

    pub(super) fn decode(v: &[u8]) -> Option<Acct> {
        let flags = *v.get(16)?;
        let (chain, rest) = if flags & HOLDS_CHAIN != 0 {
            (Some(v.get(17..49)?.try_into().ok()?), &v[49..])
        } else {
            (None, &v[17..])
        };
        Some(Acct {
            size: u64::from_be_bytes(v.get(..8)?.try_into().ok()?),
            t: u64::from_be_bytes(v.get(8..16)?.try_into().ok()?),
            running: flags & RUNNING != 0,
            chain,
            source: rest.to_vec(),
        })
    }
}

impl TaskDb {
    /// The ops that move `source`'s counter from `old` to `new`, its rank entry with it.
    pub(super) fn source_ops(source: &[u8], old: Usage, new: Usage, ops: &mut Vec<FamilyOp>) {
        ops.push(new.op(source_key(source)));
        if evictable(source) && old != new {
            // Deleted, then put: the same key (bytes unchanged) ends up put.
            if old.tasks > 0 {
                ops.push(FamilyOp::Delete(rank_key(source, old.bytes)));
            }
            if new.tasks > 0 {
                ops.push(FamilyOp::Put(rank_key(source, new.bytes), Vec::new()));
            }
        }
    }

    /// The ops that take one task (`id`, charged as `acct` says; `None`: no bytes, no
    /// source) off its owner's, its source's and the store's counts, and out of its source's
    /// terminal tasks; the store's new totals, to keep once
    /// the batch is written. Called under the counts lock.
    pub(super) fn uncharge(
        &self,
        scope: &Scope,
        id: &str,
        acct: Option<&Acct>,
        records: &mut Vec<FamilyOp>,
        ops: &mut Vec<FamilyOp>,
    ) -> Result<Usage, StoreError> {
        self.hold(acct.and_then(|a| a.chain.as_ref()), None, records, ops)?;
        let delta = -(acct.map_or(0, |a| a.size).min(i64::MAX as u64) as i64);
        let mine = Usage::decode(self.index.get(&scope.count_key()).map_err(backend)?);
        ops.push(mine.add(-1, delta).op(scope.count_key()));
        if let Some(a) = acct.filter(|a| !a.source.is_empty()) {
            let theirs = Usage::decode(self.index.get(&source_key(&a.source)).map_err(backend)?);
            Self::source_ops(&a.source, theirs, theirs.add(-1, delta), ops);
            ops.push(FamilyOp::Delete(scope.terminal_key(&a.source, a.t, id)));
        }
        let total = Usage {
            tasks: self.total.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
        .add(-1, delta);
        ops.push(FamilyOp::Put(TOTAL_KEY.to_vec(), total.encode()));
        Ok(total)
    }

    /// The ops that move one task's hold from the chain `old` to the chain `new` (digest and
    /// JSON; either may be none): each one's count, the chain written as its first holder
    /// comes and deleted as its last goes. Called under the counts lock.
    pub(super) fn hold(
        &self,
        old: Option<&ChainDigest>,
        new: Option<(ChainDigest, Vec<u8>)>,
        records: &mut Vec<FamilyOp>,
        index: &mut Vec<FamilyOp>,
    ) -> Result<(), StoreError> {
        if old == new.as_ref().map(|(d, _)| d) {
            return Ok(());
        }
        // The holders are a counter like the others (`Usage`, its bytes unused): deleted at 0.
        let holders = |k: &[u8]| -> Result<Usage, StoreError> {
            Ok(Usage::decode(self.index.get(k).map_err(backend)?))
        };
        if let Some((d, json)) = new {
            let k = chain_key(&d);
            let n = holders(&k)?;
            if n.tasks == 0 {
                records.push(FamilyOp::Put(k.clone(), json));
            }
            index.push(n.add(1, 0).op(k));
        }
        if let Some(d) = old {
            let k = chain_key(d);
            let n = holders(&k)?.add(-1, 0);
            if n.tasks == 0 {
                records.push(FamilyOp::Delete(k.clone()));
            }
            index.push(n.op(k));
        }
        Ok(())
    }
}
