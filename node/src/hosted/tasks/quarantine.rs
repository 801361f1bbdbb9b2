//! Unreadable records: taken out of the tasks where they are met, kept under `q` for an
//! operator while there is room, counted and logged ("Unreadable records" in [`super`]'s
//! module doc).

use std::sync::atomic::Ordering;

use agentnet_a2a::store::StoreError;
use agentnet_discovery::store::FamilyOp;

use super::accounting::{Acct, Usage};
use super::keys::{prefix_end, Scope, QUARANTINE_KEY};
use super::{backend, TaskDb, MAX_SCAN};

/// Unreadable records kept in quarantine for an operator to look at; beyond these (or
/// [`MAX_QUARANTINE_BYTES`]), an unreadable record is deleted (and still counted and logged).
pub const MAX_QUARANTINED: u64 = 64;

/// Most bytes of quarantined records kept: 64 MiB.
pub const MAX_QUARANTINE_BYTES: u64 = 64 << 20;

impl TaskDb {
    /// Take the unreadable record `raw` of `scope`/`id` out of the tasks: delete it with its
    /// index entries, uncharge it, and keep it under `q ‖ A ‖ O ‖ id` while the quarantine
    /// has room.
    pub(super) fn quarantine(
        &self,
        scope: &Scope,
        id: &str,
        raw: &[u8],
        reason: &str,
    ) -> Result<(), StoreError> {
        let key = scope.task_key(id);
        let _g = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if self.tasks.get(&key).map_err(backend)?.as_deref() != Some(raw) {
            return Ok(()); // rewritten or deleted meanwhile
        }
        let acct = self
            .index
            .get(&scope.acct_key(id))
            .map_err(backend)?
            .and_then(|v| Acct::decode(&v));
        // Where its list entry is: in the accounting entry, else (a record written before
        // accounting) found in the owner's list range.
        let t = match &acct {
            Some(a) => Some(a.t),
            None => {
                let prefix = scope.list_prefix();
                let mut found = None;
                self.index
                    .scan(&prefix, &prefix_end(&prefix), MAX_SCAN, |k, _| {
                        let tail = &k[prefix.len()..];
                        if tail.get(8..) == Some(id.as_bytes()) {
                            found = tail
                                .get(..8)
                                .and_then(|b| b.try_into().ok())
                                .map(|b| u64::MAX - u64::from_be_bytes(b));
                            return false;
                        }
                        true
                    })
                    .map_err(backend)?;
                found
            }
        };
        let mut ops = vec![
            FamilyOp::Delete(scope.live_key(id)),
            FamilyOp::Delete(scope.acct_key(id)),
        ];
        if let Some(t) = t {
            ops.push(FamilyOp::Delete(scope.list_key(t, id)));
            ops.push(FamilyOp::Delete(scope.expiry_key(t, id)));
        }
        let mut records = vec![FamilyOp::Delete(key)];
        let total = self.uncharge(scope, id, acct.as_ref(), &mut records, &mut ops)?;
        // The quarantine's counter: found ever, then (as bytes) the bytes held; records held
        // are counted by a bounded scan of the `q` range.
        let q = Usage::decode(self.index.get(QUARANTINE_KEY).map_err(backend)?);
        let mut held = 0u64;
        self.index
            .scan(b"q", b"r", MAX_QUARANTINED as usize + 1, |_, _| {
                held += 1;
                true
            })
            .map_err(backend)?;
        let keep = held < MAX_QUARANTINED
            && q.bytes.saturating_add(raw.len() as u64) <= MAX_QUARANTINE_BYTES;
        let mut q = q.add(1, 0);
        if keep {
            ops.push(FamilyOp::Put(scope.quarantine_key(id), raw.to_vec()));
            q = q.add(0, raw.len() as i64);
        }
        ops.push(FamilyOp::Put(QUARANTINE_KEY.to_vec(), q.encode()));
        self.write(records, ops)?;
        self.total.store(total.tasks, Ordering::Relaxed);
        self.bytes.store(total.bytes, Ordering::Relaxed);
        self.quarantined.store(q.tasks, Ordering::Relaxed);
        let (agent, owner) = scope.describe();
        let reason: String = reason.chars().take(200).collect();
        tracing::warn!(
            %agent, %owner, task = %id.escape_debug(), %reason, kept = keep,
            "unreadable task record quarantined (the task is not found from now on)"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosted::tasks::fixtures::{open, task};
    use crate::hosted::tasks::{AgentTasks, Retention};
    use agentnet_a2a::auth::Owner;
    use agentnet_a2a::store::{ListQuery, TaskPage, TaskStore};
    use agentnet_a2a::types::{Task, TaskState};

    /// A task whose metadata is nested `depth` levels: serde_json writes it, and reads back
    /// only up to 128 levels (the attack of issue 15: one message 124 levels deep, wrapped
    /// once more by the task).
    fn deep(id: &str, micros: i64, state: TaskState, depth: usize) -> Task {
        let mut v = serde_json::Value::Null;
        for _ in 0..depth {
            v = serde_json::Value::Array(vec![v]);
        }
        let mut t = task(id, micros, state);
        t.metadata = Some([("x".to_string(), v)].into_iter().collect());
        t
    }

    fn page(a: &AgentTasks, o: &Owner) -> TaskPage {
        a.list(
            o,
            &ListQuery {
                page_size: 100,
                ..Default::default()
            },
        )
        .unwrap()
    }

    #[test]
    fn unreadable_records_are_quarantined_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let o = Owner::Caller("did:key:o".into());
        {
            let (s, db) = open(dir.path(), Retention::default());
            let a = db.agent("echo");
            a.put(&o, &task("fine", 10, TaskState::Working)).unwrap();
            a.put(&o, &task("done", 11, TaskState::Completed)).unwrap();
            // Unreadable: a running task nested past serde_json's limit (read by the restart).
            // The store refuses to write one, so its bytes are put under it ...
            let too_deep = deep("deep", 12, TaskState::Working, 200);
            assert!(matches!(a.put(&o, &too_deep), Err(StoreError::Backend(_))));
            a.put(&o, &task("deep", 12, TaskState::Working)).unwrap();
            let key = a.scope(&o).unwrap().task_key("deep");
            db.tasks
                .write(vec![FamilyOp::Put(
                    key,
                    serde_json::to_vec(&too_deep).unwrap(),
                )])
                .unwrap();
            // ... and a terminal one with corrupt bytes (read by get and list).
            a.put(&o, &task("garbled", 13, TaskState::Completed))
                .unwrap();
            let key = a.scope(&o).unwrap().task_key("garbled");
            db.tasks
                .write(vec![FamilyOp::Put(key, b"{\"id\": \xff\xfe".to_vec())])
                .unwrap();
            assert_eq!(db.len(), 4);
            s.flush().unwrap();
        }
        let (_s, db) = open(dir.path(), Retention::default());
        // The node starts: the unreadable running task is quarantined, the other failed.
        assert_eq!(db.recover().unwrap(), 1);
        assert_eq!(db.quarantined(), 1);
        let a = db.agent("echo");
        assert!(a.get(&o, "deep").unwrap().is_none());
        // The owner's listing skips the unreadable one and returns the others.
        let p = page(&a, &o);
        let ids: Vec<_> = p.tasks.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(
            ids,
            ["fine", "done"],
            "newest first: fine was failed just now"
        );
        assert_eq!(db.quarantined(), 2, "garbled met in the list");
        assert_eq!(p.total_size, 2);
        assert!(a.get(&o, "garbled").unwrap().is_none());
        assert_eq!(db.len(), 2);
        // Both are kept under the quarantine prefix; the task ids are free again.
        let mut held = 0;
        db.index
            .scan(b"q", b"r", 10, |_, _| {
                held += 1;
                true
            })
            .unwrap();
        assert_eq!(held, 2);
        a.put(&o, &task("deep", 20, TaskState::Completed)).unwrap();
        assert_eq!(
            a.get(&o, "deep").unwrap().unwrap().status.state,
            TaskState::Completed
        );
        assert_eq!(db.len(), 3);
        // The counters survive a reopen.
        drop((a, db, _s));
        let (_s, db) = open(dir.path(), Retention::default());
        assert_eq!((db.len(), db.quarantined()), (3, 2));
        assert_eq!(db.recover().unwrap(), 0);
    }
}
