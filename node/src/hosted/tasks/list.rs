//! The index queries: a page of `ListTasks` (read from the owner's list index, its filters
//! from the index values) and the newest tasks of every agent for the status page
//! ([`TaskDb::recent`]).

use agentnet_a2a::store::{Cursor, ListQuery, StoreError, TaskPage};

use super::accounting::{Acct, Usage};
use super::keys::{prefix_end, state_name, Scope};
use super::{backend, TaskDb, MAX_SCAN};

impl TaskDb {
    /// A page of `ListTasks` of `scope` ([`TaskStore::list`]): a forward scan of its list
    /// index after the cursor, filtered on the index values, then its records.
    ///
    /// [`TaskStore::list`]: agentnet_a2a::store::TaskStore::list
    pub(super) fn list(&self, scope: &Scope, q: &ListQuery) -> Result<TaskPage, StoreError> {
        let prefix = scope.list_prefix();
        let end = prefix_end(&prefix);
        let start = match &q.cursor {
            Some(c) => {
                let mut k = scope.list_key(c.time_micros.max(0) as u64, &c.id);
                k.push(0);
                k
            }
            None => prefix.clone(),
        };
        let mut hits: Vec<(u64, String)> = Vec::new();
        let mut more = false;
        self.index
            .scan(&start, &end, MAX_SCAN, |k, v| {
                let Some(tail) = k.get(prefix.len()..) else {
                    return true;
                };
                let Some(inv) = tail.get(..8).and_then(|b| b.try_into().ok()) else {
                    return true;
                };
                let t = u64::MAX - u64::from_be_bytes(inv);
                if !index_matches(q, t, v) {
                    return true;
                }
                if hits.len() == q.page_size {
                    more = true;
                    return false;
                }
                if let Ok(id) = std::str::from_utf8(&tail[8..]) {
                    hits.push((t, id.to_string()));
                }
                true
            })
            .map_err(backend)?;
        let mut page = TaskPage::default();
        let mut bytes = 0usize;
        // The last entry the page covers: the cursor of the next page.
        let mut last: Option<&(u64, String)> = None;
        for hit in &hits {
            let Some(raw) = self.tasks.get(&scope.task_key(&hit.1)).map_err(backend)? else {
                last = Some(hit);
                continue;
            };
            // The byte bound: stop before a record that would pass it (one task at least).
            if q.max_bytes > 0
                && !page.tasks.is_empty()
                && bytes.saturating_add(raw.len()) > q.max_bytes
            {
                more = true;
                break;
            }
            bytes = bytes.saturating_add(raw.len());
            last = Some(hit);
            // Cut as it is read: what the page drops is never parsed.
            if let Some(task) = self.decode_for_page(scope, &hit.1, raw, q)? {
                page.tasks.push(task);
            }
        }
        if more {
            page.next = last.map(|(t, id)| Cursor {
                time_micros: *t as i64,
                id: id.clone(),
            });
        }
        // The count: the owner's counter without filters, else a bounded scan.
        let unfiltered = q.status.is_none() && q.context_id.is_none() && q.status_after.is_none();
        page.total_size = if unfiltered {
            Usage::decode(self.index.get(&scope.count_key()).map_err(backend)?).tasks as usize
        } else {
            let mut n = 0;
            self.index
                .scan(&prefix, &end, MAX_SCAN, |k, v| {
                    let t = k
                        .get(prefix.len()..prefix.len() + 8)
                        .and_then(|b| b.try_into().ok())
                        .map(|b| u64::MAX - u64::from_be_bytes(b))
                        .unwrap_or(0);
                    if index_matches(q, t, v) {
                        n += 1;
                    }
                    true
                })
                .map_err(backend)?;
            n
        };
        Ok(page)
    }

    /// The `limit` tasks of every agent and owner whose status changed last, newest first
    /// (the admin status page). Read from the accounting entries (`b`) and the list index,
    /// never the task records: at most [`MAX_SCAN`] entries are read, and when there are more
    /// tasks than that the answer is the newest of the first [`MAX_SCAN`] in key order
    /// ([`Recent::complete`] is then false).
    pub fn recent(&self, limit: usize) -> Result<Recent, StoreError> {
        let mut newest: std::collections::BinaryHeap<std::cmp::Reverse<(u64, Vec<u8>, bool)>> =
            Default::default();
        let mut seen = 0;
        self.index
            .scan(b"b", b"c", MAX_SCAN + 1, |k, v| {
                seen += 1;
                if seen > MAX_SCAN {
                    return false;
                }
                if let Some(a) = Acct::decode(v) {
                    newest.push(std::cmp::Reverse((a.t, k[1..].to_vec(), a.running)));
                    if newest.len() > limit {
                        newest.pop();
                    }
                }
                true
            })
            .map_err(backend)?;
        let mut tasks = Vec::with_capacity(newest.len());
        for std::cmp::Reverse((t, tail, running)) in newest.into_sorted_vec() {
            let Some((scope, id)) = Scope::split(&tail) else {
                continue;
            };
            let entry = self.index.get(&scope.list_key(t, &id)).map_err(backend)?;
            let state = entry
                .as_deref()
                .and_then(|e| e.split(|b| *b == 0).next())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .unwrap_or_default();
            let (agent, owner) = scope.describe();
            tasks.push(RecentTask {
                agent,
                owner,
                id,
                state,
                updated_micros: t,
                running,
            });
        }
        Ok(Recent {
            tasks,
            complete: seen <= MAX_SCAN,
        })
    }
}

fn index_matches(q: &ListQuery, t: u64, value: &[u8]) -> bool {
    let (state, ctx) = match value.iter().position(|b| *b == 0) {
        Some(i) => (&value[..i], &value[i + 1..]),
        None => (value, &b""[..]),
    };
    if let Some(s) = &q.status {
        if state != state_name(s).as_bytes() {
            return false;
        }
    }
    if let Some(c) = &q.context_id {
        if ctx != c.as_bytes() {
            return false;
        }
    }
    if let Some(after) = &q.status_after {
        if (t as i64) <= after.timestamp_micros() {
            return false;
        }
    }
    true
}

/// [`TaskDb::recent`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Recent {
    /// Newest status first.
    pub tasks: Vec<RecentTask>,
    /// Whether every task was looked at (at most [`MAX_SCAN`] are).
    pub complete: bool,
}

/// One task as [`TaskDb::recent`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RecentTask {
    /// The hosted agent's id.
    pub agent: String,
    /// Its owner's key ([`Owner::key`]: `c:<caller>` or `a:<network block>`).
    ///
    /// [`Owner::key`]: agentnet_a2a::auth::Owner::key
    pub owner: String,
    /// The task id.
    pub id: String,
    /// Its state as A2A names it (`TASK_STATE_COMPLETED`, …).
    pub state: String,
    /// Its status time, microseconds since the Unix epoch.
    pub updated_micros: u64,
    /// `SUBMITTED` or `WORKING`.
    pub running: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosted::tasks::fixtures::{open, task};
    use crate::hosted::tasks::Retention;
    use agentnet_a2a::auth::Owner;
    use agentnet_a2a::store::TaskStore;
    use agentnet_a2a::types::{Message, Part, Role, TaskState};

    #[test]
    fn recent_lists_newest_of_every_agent_and_owner() {
        let dir = tempfile::tempdir().unwrap();
        let (_s, db) = open(dir.path(), Retention::default());
        assert_eq!(
            db.recent(5).unwrap(),
            Recent {
                tasks: vec![],
                complete: true
            }
        );
        let alice = Owner::Caller("did:key:alice".into());
        let bob = Owner::Anonymous(agentnet_a2a::auth::Source::Local);
        for i in 0..4 {
            db.agent("echo")
                .put(
                    &alice,
                    &task(&format!("a{i}"), 1000 + i, TaskState::Completed),
                )
                .unwrap();
        }
        db.agent("ask")
            .put(&bob, &task("b0", 5000, TaskState::Working))
            .unwrap();
        // An update moves the task to the front with its new state.
        db.agent("echo")
            .put(&alice, &task("a0", 9000, TaskState::Failed))
            .unwrap();
        let r = db.recent(3).unwrap();
        assert!(r.complete);
        let got: Vec<_> = r
            .tasks
            .iter()
            .map(|t| {
                (
                    t.agent.as_str(),
                    t.owner.as_str(),
                    t.id.as_str(),
                    t.state.as_str(),
                    t.running,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("echo", "c:did:key:alice", "a0", "TASK_STATE_FAILED", false),
                ("ask", "a:local", "b0", "TASK_STATE_WORKING", true),
                (
                    "echo",
                    "c:did:key:alice",
                    "a3",
                    "TASK_STATE_COMPLETED",
                    false
                ),
            ]
        );
        assert_eq!(r.tasks[0].updated_micros, 9000);
        assert_eq!(db.recent(0).unwrap().tasks, vec![]);
    }

    #[test]
    fn owner_scoped_paged_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let (_s, db) = open(dir.path(), Retention::default());
        let echo = db.agent("echo");
        let other_agent = db.agent("ask");
        let alice = Owner::Caller("did:key:alice".into());
        let bob = Owner::Caller("did:key:bob".into());
        for i in 0..5 {
            echo.put(
                &alice,
                &task(&format!("a{i}"), 1000 + i, TaskState::Completed),
            )
            .unwrap();
        }
        echo.put(&bob, &task("b0", 5000, TaskState::Working))
            .unwrap();
        assert!(echo.get(&bob, "a0").unwrap().is_none());
        assert!(echo
            .get(&Owner::Anonymous(agentnet_a2a::auth::Source::Local), "a0")
            .unwrap()
            .is_none());
        assert!(other_agent.get(&alice, "a0").unwrap().is_none());
        assert!(echo.get(&alice, "a0").unwrap().is_some());

        let mut q = ListQuery {
            page_size: 2,
            ..Default::default()
        };
        let mut ids = Vec::new();
        loop {
            let p = echo.list(&alice, &q).unwrap();
            assert_eq!(p.total_size, 5);
            ids.extend(p.tasks.iter().map(|t| t.id.clone()));
            match p.next {
                Some(c) => q.cursor = Some(Cursor::from_token(&c.to_token()).unwrap()),
                None => break,
            }
        }
        assert_eq!(ids, ["a4", "a3", "a2", "a1", "a0"]);

        // An update moves the entry; filters read the index.
        echo.put(&alice, &task("a0", 9000, TaskState::Failed))
            .unwrap();
        let p = echo
            .list(
                &alice,
                &ListQuery {
                    page_size: 10,
                    status: Some(TaskState::Failed),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(p.tasks.len(), 1);
        assert_eq!(p.total_size, 1);
        assert_eq!(
            echo.list(
                &alice,
                &ListQuery {
                    page_size: 1,
                    ..Default::default()
                }
            )
            .unwrap()
            .tasks[0]
                .id,
            "a0"
        );
        assert_eq!(db.len(), 6);
    }

    #[test]
    fn a_page_stops_at_its_byte_bound_and_paging_sees_every_task_once() {
        let dir = tempfile::tempdir().unwrap();
        let (_s, db) = open(dir.path(), Retention::default());
        let a = db.agent("echo");
        let o = Owner::Caller("did:key:o".into());
        for i in 0..10 {
            let mut t = task(&format!("t{i}"), 100 + i, TaskState::Completed);
            t.artifacts = Some(vec![agentnet_a2a::types::Artifact {
                artifact_id: format!("a{i}"),
                name: None,
                description: None,
                parts: vec![Part::text("y".repeat(300 << 10))],
                metadata: None,
                extensions: None,
            }]);
            t.history = Some(
                (0..5)
                    .map(|j| Message::new(Role::User, vec![Part::text(format!("m{j}"))]))
                    .collect(),
            );
            a.put(&o, &t).unwrap();
        }
        let mut q = ListQuery {
            page_size: 100,
            max_bytes: 1 << 20,
            history_length: Some(2),
            drop_artifacts: true,
            ..Default::default()
        };
        let mut seen = Vec::new();
        let mut pages = 0;
        loop {
            let p = a.list(&o, &q).unwrap();
            pages += 1;
            assert!(pages <= 10);
            assert!(!p.tasks.is_empty());
            assert!(p.tasks.len() <= 3, "a page holds at most 1 MiB of records");
            for t in &p.tasks {
                assert!(t.artifacts.is_none());
                assert_eq!(t.history.as_ref().map(Vec::len), Some(2));
                assert_eq!(
                    t.history.as_ref().unwrap()[1].parts[0].as_text(),
                    Some("m4"),
                    "the newest messages are kept"
                );
            }
            seen.extend(p.tasks.iter().map(|t| t.id.clone()));
            match p.next {
                Some(c) => q.cursor = Some(c),
                None => break,
            }
        }
        assert!(pages >= 4, "{pages} pages");
        let want: Vec<_> = (0..10).rev().map(|i| format!("t{i}")).collect();
        assert_eq!(seen, want);
        // One task larger than the bound still makes a page.
        q.cursor = None;
        q.max_bytes = 1;
        let p = a.list(&o, &q).unwrap();
        assert_eq!(p.tasks.len(), 1);
        assert!(p.next.is_some());
    }
}
