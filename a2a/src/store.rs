//! Where tasks live: the [`TaskStore`] trait and the in-memory [`MemoryStore`].
//!
//! # The trait is blocking
//!
//! A store's calls may block: the engine calls every method from
//! `tokio::task::spawn_blocking`, never from an async worker thread, unless the store says
//! through [`TaskStore::runs_inline`] that its calls are short enough to run there (the
//! in-memory store, and the node's RocksDB store, which writes to its log without a sync per
//! write); [`TaskStore::list`] always goes to `spawn_blocking` (a page reads up to
//! [`MAX_PAGE_BYTES`] of records). One engine serves one agent: a node that hosts several agents gives each its own
//! store (for RocksDB, a key prefix per agent).
//!
//! # Keys a RocksDB implementation would use
//!
//! Every task is stored under its owner, so that a lookup by another owner misses by
//! construction and the existence of someone else's task is never revealed:
//!
//! - `task / <owner key> / <task id>` → the task as JSON (history and artifacts included);
//! - `by_time / <owner key> / <u64::MAX - status time in µs, big-endian> / <task id>` → empty,
//!   the list index, newest first; [`TaskStore::put`] moves a task's index entry when its
//!   status time changes.
//!
//! [`Owner::key`] gives the owner key. A page is a bounded forward scan of the owner's
//! `by_time` range starting after the [`Cursor`]; the cursor is the last index entry returned,
//! so pages stay consistent while tasks are added.
//!
//! # Read-modify-write
//!
//! The engine serializes the updates of one task itself (a lock striped by task id around
//! get-then-put), so a store needs no transactions: `put` replaces the task whole.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use a2a::{Task, TaskState, TaskStatus};
use base64::Engine as _;
use chrono::{DateTime, Utc};

use crate::auth::{Caller, Owner};

/// A store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store holds as many tasks as it may; a new one is refused.
    #[error("task store full ({0} tasks)")]
    Full(usize),
    /// A bound other than the task count refused a new task or a task's growth: bytes (in
    /// all, of the owner, of the caller's network block), tasks of the caller's block, or the
    /// free-disk watermark. The message names the bound. Nothing was written.
    #[error("task refused: {0}")]
    Refused(String),
    /// The backend failed (I/O, corruption); the message says what was being done.
    #[error("task store: {0}")]
    Backend(String),
}

/// Most bytes of stored task records one `ListTasks` page reads (4 MiB): a page stops early,
/// with a next-page cursor, when the next task would pass it (a page holds at least one task).
pub const MAX_PAGE_BYTES: usize = 4 << 20;

/// Where a page starts: just after the index entry `(time, id)`, times in µs since the epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The status time of the last task of the previous page, in µs since the epoch.
    pub time_micros: i64,
    /// Its id.
    pub id: String,
}

impl Cursor {
    /// The opaque page token (`nextPageToken`): base64url of `<time>:<id>`.
    pub fn to_token(&self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(format!("{}:{}", self.time_micros, self.id))
    }

    /// Parse a page token; `None` when it is not one of ours.
    pub fn from_token(token: &str) -> Option<Cursor> {
        if token.len() > 1024 {
            return None;
        }
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .ok()?;
        let raw = String::from_utf8(raw).ok()?;
        let (t, id) = raw.split_once(':')?;
        Some(Cursor {
            time_micros: t.parse().ok()?,
            id: id.to_string(),
        })
    }
}

/// What to list: the owner's tasks matching every filter that is set, newest status first.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// Only tasks of this context.
    pub context_id: Option<String>,
    /// Only tasks in this state.
    pub status: Option<TaskState>,
    /// Only tasks whose status time is after this.
    pub status_after: Option<DateTime<Utc>>,
    /// At most this many tasks (the engine has bounded it already).
    pub page_size: usize,
    /// Start after this entry; `None` for the first page.
    pub cursor: Option<Cursor>,
    /// Stop the page early (with a cursor) when the stored records read pass this many bytes;
    /// at least one task is returned. 0: no byte bound (the engine passes [`MAX_PAGE_BYTES`]).
    pub max_bytes: usize,
    /// Keep at most this many of the newest history messages of each task (the rest is dropped
    /// as each record is read, not kept for the page); `None`: all.
    pub history_length: Option<usize>,
    /// Drop each task's artifacts as it is read.
    pub drop_artifacts: bool,
}

impl ListQuery {
    /// Cut `task` to what the page returns (history length, artifacts).
    pub fn trim(&self, task: &mut Task) {
        if self.drop_artifacts {
            task.artifacts = None;
        }
        if let (Some(n), Some(h)) = (self.history_length, task.history.as_mut()) {
            if h.len() > n {
                h.drain(..h.len() - n);
            }
        }
    }
}

/// One page of tasks.
#[derive(Debug, Clone, Default)]
pub struct TaskPage {
    /// The tasks, newest status first.
    pub tasks: Vec<Task>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<Cursor>,
    /// How many of the owner's tasks match the filters; an implementation may stop counting at
    /// a bound of its own (the in-memory store counts at most [`MAX_COUNT`]).
    pub total_size: usize,
}

/// The in-memory store stops counting `total_size` here.
pub const MAX_COUNT: usize = 10_000;

/// Task persistence. Blocking unless [`TaskStore::runs_inline`] says otherwise; see the module
/// doc.
pub trait TaskStore: Send + Sync + 'static {
    /// The owner's task with this id, if the owner has one.
    fn get(&self, owner: &Owner, id: &str) -> Result<Option<Task>, StoreError>;
    /// Insert or replace the owner's task (`task.id`), moving its list-index entry to its
    /// current status time.
    fn put(&self, owner: &Owner, task: &Task) -> Result<(), StoreError>;
    /// Replace the owner's stored task by `task` (same id); `old` is the stored task's status.
    /// The engine calls this under its per-task lock with the status of the task it has just
    /// read, so a store may use it instead of reading the record again (to find the index
    /// entries to move). The default calls [`TaskStore::put`].
    fn replace(&self, owner: &Owner, old: &TaskStatus, task: &Task) -> Result<(), StoreError> {
        let _ = old;
        self.put(owner, task)
    }
    /// Called by the engine on every task it is about to write for `owner` (a new task, an
    /// update), under the task's lock and before [`TaskStore::insert`] or
    /// [`TaskStore::replace`], so a store may add to the task what it adds to every task (the
    /// node signs a receipt into a task that reaches a terminal state, `docs/PROTOCOL.md`,
    /// "Receipts"); the task written and returned to the caller is the sealed one. The default
    /// changes nothing.
    fn seal(&self, owner: &Owner, task: &mut Task) {
        let _ = (owner, task);
    }
    /// Whether the caller may start a new task now: the quota checks of [`TaskStore::put`]
    /// (per owner, per source, in all), without writing anything. The engine asks before a new
    /// task's turn starts, and stores the task later with [`TaskStore::insert`] (see
    /// [`crate::engine::Limits::defer_first_write`]). The default admits every task.
    fn admit(&self, caller: &Caller) -> Result<(), StoreError> {
        let _ = caller;
        Ok(())
    }
    /// Store a new task that [`TaskStore::admit`] let in: its id is fresh (no stored task has
    /// it), and it is not refused for quota, so the bounds may be passed by as many tasks as
    /// there are turns running at once ([`crate::engine::Limits::max_running`]). A store that
    /// counts per source charges the task, and its later updates, to `caller.source`. The
    /// default calls [`TaskStore::put`].
    fn insert(&self, caller: &Caller, task: &Task) -> Result<(), StoreError> {
        self.put(&caller.owner, task)
    }
    /// One page of the owner's tasks, cut as the query says ([`ListQuery::trim`],
    /// [`ListQuery::max_bytes`]). The engine calls it from `spawn_blocking` whatever
    /// [`TaskStore::runs_inline`] says: a page can read megabytes.
    fn list(&self, owner: &Owner, query: &ListQuery) -> Result<TaskPage, StoreError>;
    /// `true` when every call returns in microseconds without waiting on the network or on a
    /// lock held across I/O (memory; an embedded store that does not sync to disk per write).
    /// The engine then calls the store on the async worker that serves the request instead of
    /// handing each call to `spawn_blocking`: a thread hand-off costs more than such a call.
    /// The default is `false`.
    fn runs_inline(&self) -> bool {
        false
    }
}

/// Deepest JSON nesting a store must be able to read back: serde_json refuses deeper input
/// (its recursion limit is 128), so a store refuses to write a task record deeper than this,
/// and the server refuses requests deeper than [`crate::engine::Limits::max_json_depth`],
/// which leaves room for the levels a task record wraps around a message (task, history,
/// message: three) many times over.
pub const MAX_RECORD_DEPTH: usize = 120;

/// How deeply `bytes` (JSON) nests arrays and objects; strings are skipped, so brackets inside
/// them do not count. A byte scan, no parse: it is what decides whether a parse may be tried.
/// (`agentnet-did` has its own for DID documents: this crate does not depend on it.)
pub fn json_depth(bytes: &[u8]) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                // To the closing quote: the next quote not escaped. A backslash skips the byte
                // after it; memchr finds the next quote or backslash a vector at a time.
                i += 1;
                loop {
                    match memchr::memchr2(b'"', b'\\', &bytes[i.min(bytes.len())..]) {
                        None => return max,
                        Some(at) if bytes[i + at] == b'\\' => i += at + 2,
                        Some(at) => {
                            i += at;
                            break;
                        }
                    }
                }
            }
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    max
}

/// A task's status time in µs, the list order; a task without one sorts as the epoch.
pub fn status_micros(task: &Task) -> i64 {
    task.status
        .timestamp
        .map(|t| t.timestamp_micros())
        .unwrap_or(0)
}

/// Index key: owner, then newest first, then id.
type IndexKey = (Owner, std::cmp::Reverse<i64>, String);

#[derive(Debug, Default)]
struct Mem {
    tasks: HashMap<(Owner, String), Task>,
    index: BTreeSet<IndexKey>,
}

/// The in-memory store, for tests and examples: the same owner-scoped keys and index as the
/// RocksDB layout above, with a cap on the number of tasks.
#[derive(Debug)]
pub struct MemoryStore {
    max_tasks: usize,
    inner: Mutex<Mem>,
}

impl MemoryStore {
    /// A store that refuses new tasks beyond `max_tasks`.
    pub fn new(max_tasks: usize) -> Self {
        MemoryStore {
            max_tasks,
            inner: Mutex::new(Mem::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Mem> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Insert or replace; a new task beyond `max_tasks` is refused when `bounded`.
    fn store(&self, owner: &Owner, task: &Task, bounded: bool) -> Result<(), StoreError> {
        let mut m = self.lock();
        let key = (owner.clone(), task.id.clone());
        match m.tasks.get(&key) {
            Some(old) => {
                let old_idx = (
                    owner.clone(),
                    std::cmp::Reverse(status_micros(old)),
                    task.id.clone(),
                );
                m.index.remove(&old_idx);
            }
            None if bounded && m.tasks.len() >= self.max_tasks => {
                return Err(StoreError::Full(self.max_tasks))
            }
            None => {}
        }
        m.index.insert((
            owner.clone(),
            std::cmp::Reverse(status_micros(task)),
            task.id.clone(),
        ));
        m.tasks.insert(key, task.clone());
        Ok(())
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new(100_000)
    }
}

fn matches(task: &Task, q: &ListQuery) -> bool {
    if let Some(c) = &q.context_id {
        if &task.context_id != c {
            return false;
        }
    }
    if let Some(s) = &q.status {
        if &task.status.state != s {
            return false;
        }
    }
    if let Some(after) = &q.status_after {
        match task.status.timestamp {
            Some(t) if t > *after => {}
            _ => return false,
        }
    }
    true
}

impl TaskStore for MemoryStore {
    fn get(&self, owner: &Owner, id: &str) -> Result<Option<Task>, StoreError> {
        Ok(self
            .lock()
            .tasks
            .get(&(owner.clone(), id.to_string()))
            .cloned())
    }

    fn put(&self, owner: &Owner, task: &Task) -> Result<(), StoreError> {
        self.store(owner, task, true)
    }

    fn admit(&self, _caller: &Caller) -> Result<(), StoreError> {
        if self.lock().tasks.len() >= self.max_tasks {
            return Err(StoreError::Full(self.max_tasks));
        }
        Ok(())
    }

    fn insert(&self, caller: &Caller, task: &Task) -> Result<(), StoreError> {
        self.store(&caller.owner, task, false)
    }

    fn runs_inline(&self) -> bool {
        true
    }

    fn list(&self, owner: &Owner, q: &ListQuery) -> Result<TaskPage, StoreError> {
        use std::cmp::Reverse;
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let m = self.lock();
        let start = match &q.cursor {
            Some(c) => Excluded((owner.clone(), Reverse(c.time_micros), c.id.clone())),
            None => Included((owner.clone(), Reverse(i64::MAX), String::new())),
        };
        let mut page = TaskPage::default();
        let mut last: Option<Cursor> = None;
        let mut bytes = 0usize;
        for (o, Reverse(t), id) in m.index.range((start, Unbounded)) {
            if o < owner {
                continue;
            }
            if o != owner {
                break;
            }
            let Some(task) = m.tasks.get(&(o.clone(), id.clone())) else {
                continue;
            };
            if !matches(task, q) {
                continue;
            }
            if page.tasks.len() == q.page_size {
                page.next = last.clone();
                break;
            }
            if q.max_bytes > 0 {
                let size = serde_json::to_vec(task).map_or(0, |v| v.len());
                if !page.tasks.is_empty() && bytes.saturating_add(size) > q.max_bytes {
                    page.next = last.clone();
                    break;
                }
                bytes = bytes.saturating_add(size);
            }
            let mut task = task.clone();
            q.trim(&mut task);
            page.tasks.push(task);
            last = Some(Cursor {
                time_micros: *t,
                id: id.clone(),
            });
        }
        // Count the owner's matching tasks, bounded.
        page.total_size = m
            .index
            .range((
                Included((owner.clone(), Reverse(i64::MAX), String::new())),
                Unbounded,
            ))
            .take_while(|(o, _, _)| o == owner)
            .filter(|(o, _, id)| {
                m.tasks
                    .get(&(o.clone(), id.clone()))
                    .is_some_and(|t| matches(t, q))
            })
            .take(MAX_COUNT)
            .count();
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2a::TaskStatus;

    /// The byte-at-a-time scan json_depth replaced; every input must give the same depth.
    fn depth_by_bytes(bytes: &[u8]) -> usize {
        let (mut depth, mut max) = (0usize, 0usize);
        let (mut in_string, mut escaped) = (false, false);
        for &b in bytes {
            if in_string {
                match (escaped, b) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    max = max.max(depth);
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        max
    }

    #[test]
    fn json_depth_skips_strings_and_their_escapes() {
        for (json, want) in [
            (&br#"{"a":[1,{"b":[]}]}"#[..], 4),
            (br#"{"a":"[[[[{{{{"}"#, 1),
            (br#"{"a":"\"[[[","b":[]}"#, 2),
            (br#"{"a":"\\","b":[[]]}"#, 3),
            (br#"["\\\"[[",[]]"#, 2),
            (br#"[[["unterminated \"[["#, 3),
            (br#"["ends in a backslash \"#, 1),
            (b"", 0),
        ] {
            assert_eq!(json_depth(json), want, "{}", String::from_utf8_lossy(json));
            assert_eq!(depth_by_bytes(json), want);
        }
        // Every mix of the bytes that matter, up to 7 of them.
        let alphabet = [b'"', b'\\', b'[', b']', b'{', b'}', b'x'];
        for len in 0..=7u32 {
            for n in 0..7usize.pow(len) {
                let (mut v, mut k) = (Vec::new(), n);
                for _ in 0..len {
                    v.push(alphabet[k % 7]);
                    k /= 7;
                }
                assert_eq!(
                    json_depth(&v),
                    depth_by_bytes(&v),
                    "{}",
                    String::from_utf8_lossy(&v)
                );
            }
        }
    }

    fn task(id: &str, micros: i64, state: TaskState) -> Task {
        Task {
            id: id.into(),
            context_id: "ctx".into(),
            status: TaskStatus {
                state,
                message: None,
                timestamp: DateTime::from_timestamp_micros(micros),
            },
            artifacts: None,
            history: None,
            metadata: None,
        }
    }

    #[test]
    fn owner_scoped_and_paged_newest_first() {
        let s = MemoryStore::new(100);
        let alice = Owner::Caller("did:alice".into());
        let bob = Owner::Caller("did:bob".into());
        for i in 0..5 {
            s.put(
                &alice,
                &task(&format!("a{i}"), 1000 + i, TaskState::Working),
            )
            .unwrap();
        }
        s.put(&bob, &task("b0", 5000, TaskState::Working)).unwrap();
        assert!(s.get(&bob, "a0").unwrap().is_none());
        assert!(s
            .get(&Owner::Anonymous(crate::auth::Source::Local), "a0")
            .unwrap()
            .is_none());

        let mut q = ListQuery {
            page_size: 2,
            ..Default::default()
        };
        let p1 = s.list(&alice, &q).unwrap();
        assert_eq!(
            p1.tasks.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
            ["a4", "a3"]
        );
        assert_eq!(p1.total_size, 5);
        q.cursor = Some(Cursor::from_token(&p1.next.unwrap().to_token()).unwrap());
        let p2 = s.list(&alice, &q).unwrap();
        assert_eq!(
            p2.tasks.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
            ["a2", "a1"]
        );
        q.cursor = p2.next;
        let p3 = s.list(&alice, &q).unwrap();
        assert_eq!(
            p3.tasks.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
            ["a0"]
        );
        assert!(p3.next.is_none());

        // An update moves the task to the front.
        s.put(&alice, &task("a0", 9000, TaskState::Completed))
            .unwrap();
        q.cursor = None;
        q.status = Some(TaskState::Completed);
        let p = s.list(&alice, &q).unwrap();
        assert_eq!(p.tasks.len(), 1);
        assert_eq!(p.total_size, 1);
    }

    #[test]
    fn full_store_refuses_new_tasks_but_updates_old_ones() {
        let s = MemoryStore::new(1);
        let o = Owner::Anonymous(crate::auth::Source::Local);
        s.put(&o, &task("x", 1, TaskState::Working)).unwrap();
        assert_eq!(
            s.put(&o, &task("y", 1, TaskState::Working)),
            Err(StoreError::Full(1))
        );
        s.put(&o, &task("x", 2, TaskState::Completed)).unwrap();
    }

    #[test]
    fn garbage_tokens_are_refused() {
        assert!(Cursor::from_token("!!!").is_none());
        assert!(Cursor::from_token("bm9jb2xvbg").is_none()); // "nocolon"
        assert!(Cursor::from_token(&"A".repeat(2000)).is_none());
    }
}
