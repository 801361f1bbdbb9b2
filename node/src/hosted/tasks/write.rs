//! Writing a task: its record, its index entries and its charges moved in one atomic batch,
//! a new task bounded ([`super::quotas`]), an update refused only when it grows past a bound.

use std::sync::atomic::Ordering;

use agentnet_a2a::store::StoreError;
use agentnet_a2a::types::{Task, TaskStatus};
use agentnet_discovery::store::FamilyOp;

use super::accounting::{Acct, Usage};
use super::eviction::evictable;
use super::keys::{is_running, is_terminal, micros, source_key, state_name, Scope, TOTAL_KEY};
use super::record::Record;
use super::{backend, TaskDb};

/// Bytes charged per task on top of its JSON and key: its five index entries.
const ENTRY_OVERHEAD: u64 = 256;

/// How a write is bounded.
#[derive(Debug, Clone, Copy)]
pub(super) enum Write<'a> {
    /// A new task charged to `source`; refused beyond the bounds when `bounded`, else only
    /// below the free-disk watermark.
    New { source: &'a [u8], bounded: bool },
    /// A change of the stored task whose status is this: refused only when it grows past a
    /// byte bound or below the watermark.
    Update(&'a TaskStatus),
}

impl TaskDb {
    /// Insert or replace; a new task is charged to `source` and bounded.
    pub(super) fn put_scoped(
        &self,
        scope: &Scope,
        task: &Task,
        source: &[u8],
    ) -> Result<(), StoreError> {
        match self.load(scope, &task.id)? {
            Some(old) => self.write_task(scope, task, Write::Update(&old.status)),
            None => self.write_task(
                scope,
                task,
                Write::New {
                    source,
                    bounded: true,
                },
            ),
        }
    }

    /// Write `task` as `how` says, moving its index entries and its charges in one batch.
    pub(super) fn write_task(
        &self,
        scope: &Scope,
        task: &Task,
        how: Write<'_>,
    ) -> Result<(), StoreError> {
        let id = task.id.as_str();
        let record =
            Record::of(task).map_err(|e| StoreError::Backend(format!("serializing task: {e}")))?;
        // What is written must read back (serde_json stops at 128 levels): a deeper record
        // would fail every later read of it.
        let depth = record.depth();
        if depth > agentnet_a2a::store::MAX_RECORD_DEPTH {
            return Err(StoreError::Backend(format!(
                "task {id} nests JSON {depth} levels deep (at most {})",
                agentnet_a2a::store::MAX_RECORD_DEPTH
            )));
        }
        let Record { bytes: json, chain } = record;
        let key = scope.task_key(id);
        // Charged the chain's bytes as if it held them (see "Chains kept once").
        let chain_len = chain.as_ref().map_or(0, |(_, c)| c.len());
        let size = (json.len() + key.len() + chain_len) as u64 + ENTRY_OVERHEAD;
        // Read before the lock: a statvfs at most once a second, never under the lock.
        let free = self.store.free_disk_bytes();
        let _g = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let acct_key = scope.acct_key(id);
        let old_acct = self
            .index
            .get(&acct_key)
            .map_err(backend)?
            .and_then(|v| Acct::decode(&v));
        let mut ops = Vec::with_capacity(10);
        let (source, old_size, new) = match how {
            Write::Update(old) => {
                let t = micros(old);
                ops.push(FamilyOp::Delete(scope.list_key(t, id)));
                if is_running(&old.state) {
                    ops.push(FamilyOp::Delete(scope.live_key(id)));
                } else {
                    ops.push(FamilyOp::Delete(scope.expiry_key(t, id)));
                }
                // A task stored before accounting is charged from now on, to no source; one
                // deleted meanwhile (swept) is counted again as it is written back.
                let gone = old_acct.is_none() && self.tasks.get(&key).map_err(backend)?.is_none();
                let a = old_acct.clone();
                (
                    a.as_ref().map(|a| a.source.clone()).unwrap_or_default(),
                    a.map_or(0, |a| a.size),
                    gone,
                )
            }
            Write::New { source, bounded } => {
                if bounded {
                    self.check_room(scope, source, size, free)?;
                } else {
                    self.disk_low(free)?;
                }
                (source.to_vec(), 0, true)
            }
        };
        let growth = (size as i64).saturating_sub(old_size.min(i64::MAX as u64) as i64);
        let mine = Usage::decode(self.index.get(&scope.count_key()).map_err(backend)?);
        let sk = (!source.is_empty()).then(|| source_key(&source));
        let theirs = match &sk {
            Some(k) => Usage::decode(self.index.get(k).map_err(backend)?),
            None => Usage::default(),
        };
        if let Write::Update(old) = how {
            if evictable(&source) {
                ops.push(FamilyOp::Delete(scope.terminal_key(
                    &source,
                    micros(old),
                    id,
                )));
            }
        }
        if !new && growth > 0 {
            self.disk_low(free)?;
            self.check_bytes(mine.bytes, theirs.bytes, growth as u64, true)?;
        }
        let t = micros(&task.status);
        let running = is_running(&task.status.state);
        let mut entry = state_name(&task.status.state).into_bytes();
        entry.push(0);
        entry.extend_from_slice(task.context_id.as_bytes());
        ops.push(FamilyOp::Put(scope.list_key(t, id), entry));
        if is_terminal(&task.status.state) && evictable(&source) {
            ops.push(FamilyOp::Put(
                scope.terminal_key(&source, t, id),
                Vec::new(),
            ));
        }
        if running {
            ops.push(FamilyOp::Put(scope.live_key(id), Vec::new()));
        } else {
            ops.push(FamilyOp::Put(scope.expiry_key(t, id), Vec::new()));
        }
        let mut records = Vec::with_capacity(3);
        let digest = chain.as_ref().map(|(d, _)| *d);
        self.hold(
            old_acct.as_ref().and_then(|a| a.chain.as_ref()),
            chain,
            &mut records,
            &mut ops,
        )?;
        let acct = Acct {
            size,
            t,
            running,
            chain: digest,
            source: source.clone(),
        };
        ops.push(FamilyOp::Put(acct_key, acct.encode()));
        let n = i64::from(new);
        ops.push(mine.add(n, growth).op(scope.count_key()));
        if sk.is_some() {
            Self::source_ops(&source, theirs, theirs.add(n, growth), &mut ops);
        }
        let total = Usage {
            tasks: self.total.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
        .add(n, growth);
        ops.push(FamilyOp::Put(TOTAL_KEY.to_vec(), total.encode()));
        records.push(FamilyOp::Put(key, json));
        self.write(records, ops)?;
        self.total.store(total.tasks, Ordering::Relaxed);
        self.bytes.store(total.bytes, Ordering::Relaxed);
        Ok(())
    }
}
