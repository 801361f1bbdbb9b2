//! The hosted agents' A2A tasks, in the node's one RocksDB database.
//!
//! [`TaskDb`] keeps the tasks of every hosted agent in two column families of the node's
//! [`Store`] (opened with [`Store::open_with_families`] and [`FAMILIES`]); [`AgentTasks`] is one
//! agent's view, the [`TaskStore`] its engine uses.
//!
//! # Layout
//!
//! `lp(x)` is `x`'s length as a u16 big-endian, then its bytes; `A` is `lp(agent)`, `O` is
//! `lp(owner key)` ([`Owner::key`]), `t` the task's status time in µs (u64 BE, negative times
//! as 0).
//!
//! | CF | key | value |
//! |---|---|---|
//! | `a2a_tasks` | `A ‖ O ‖ id` | the task as JSON (history and artifacts included) |
//! | `a2a_index` | `i ‖ A ‖ O ‖ (u64::MAX − t) ‖ id` | state name ‖ `0x00` ‖ context id: the list index, newest first |
//! | `a2a_index` | `e ‖ t ‖ A ‖ O ‖ id` | empty: tasks not running, oldest first, for the retention sweep |
//! | `a2a_index` | `l ‖ A ‖ O ‖ id` | empty: tasks `SUBMITTED` or `WORKING`, for the restart |
//! | `a2a_index` | `c ‖ A ‖ O` | tasks of this owner at this agent (u64 BE) |
//! | `a2a_index` | `C` | tasks in all (u64 BE) |
//!
//! Keys start with the agent and the owner, so another owner's lookup misses by construction
//! (A2A's "another DID gets 404"). Every change of a task is one atomic batch that moves its
//! index entries with it. A page of `ListTasks` is a forward scan of the owner's `i` range after
//! the cursor; the filters (state, context) are read from the index values without loading
//! the tasks, and status-after from the key, so a page reads at most [`MAX_SCAN`] index entries
//! and its page of tasks.
//!
//! # Bounds
//!
//! [`Retention::max_tasks`] tasks in all and [`Retention::max_per_owner`] per owner and agent:
//! a new task beyond either is refused ([`StoreError::Full`], `RESOURCE_EXHAUSTED` to the
//! caller); updates of existing tasks always pass. Room comes back as the retention sweep
//! ([`TaskDb::sweep`]) deletes tasks that are not running and whose status is older than
//! [`Retention::keep`]: terminal tasks, and tasks left waiting for their caller
//! (`INPUT_REQUIRED`, `AUTH_REQUIRED`).
//!
//! # Restart
//!
//! A task `SUBMITTED` or `WORKING` when the node stopped has lost its turn: the work ran in the
//! old process. [`TaskDb::recover`] (called at start, before anything is served) marks each
//! `FAILED` with the agent message [`RESTART_MESSAGE`]; the caller sees a terminal state and
//! may send a new message. It does not run the turn again: a turn may have had effects (a
//! command run, an upstream call), and repeating them silently would be worse than saying so.
//! Terminal and interrupted tasks are unchanged by a restart.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentnet_a2a::auth::Owner;
use agentnet_a2a::store::{Cursor, ListQuery, StoreError, TaskPage, TaskStore};
use agentnet_a2a::types::{Message, Part, Role, Task, TaskState, TaskStatus};
use agentnet_discovery::store::{Family, FamilyOp, Store, StoreError as DbError};

/// The task records.
pub const CF_TASKS: &str = "a2a_tasks";
/// The indexes and counters.
pub const CF_INDEX: &str = "a2a_index";
/// The column families to open the node's store with.
pub const FAMILIES: [&str; 2] = [CF_TASKS, CF_INDEX];

/// Most index entries one `ListTasks` page (or its count) reads.
pub const MAX_SCAN: usize = 10_000;
/// Tasks deleted per sweep batch.
const SWEEP_BATCH: usize = 512;
/// The status message of a task failed by a restart.
pub const RESTART_MESSAGE: &str = "the node restarted while this task was working";

const TOTAL_KEY: &[u8] = b"C";

/// How long tasks are kept, and how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Tasks not running whose last status is older than this are deleted: 7 days.
    pub keep: Duration,
    /// Most tasks in all: 1,000,000.
    pub max_tasks: u64,
    /// Most tasks of one owner at one agent: 10,000 (anonymous callers of an open agent are
    /// one owner).
    pub max_per_owner: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep: Duration::from_secs(7 * 24 * 3600),
            max_tasks: 1_000_000,
            max_per_owner: 10_000,
        }
    }
}

fn backend(e: DbError) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn lp(out: &mut Vec<u8>, b: &[u8]) {
    // Agent names and owner keys are bounded far below u16::MAX (checked in `keys`).
    out.extend_from_slice(&(b.len() as u16).to_be_bytes());
    out.extend_from_slice(b);
}

/// Read one `lp` field; the rest.
fn read_lp(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = u16::from_be_bytes(b.get(..2)?.try_into().ok()?) as usize;
    Some((b.get(2..2 + n)?, &b[2 + n..]))
}

/// The smallest key greater than every key starting with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xff; 16]
}

fn micros(status: &TaskStatus) -> u64 {
    status
        .timestamp
        .map(|t| t.timestamp_micros())
        .unwrap_or(0)
        .max(0) as u64
}

fn is_running(s: &TaskState) -> bool {
    matches!(s, TaskState::Submitted | TaskState::Working)
}

fn state_name(s: &TaskState) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn decode_u64(v: Option<Vec<u8>>) -> u64 {
    v.and_then(|v| v.as_slice().try_into().ok().map(u64::from_be_bytes))
        .unwrap_or(0)
}

/// The A2A tasks of every hosted agent. Blocking; cheap to share behind an `Arc`.
pub struct TaskDb {
    tasks: Family,
    index: Family,
    retention: Retention,
    /// Serializes inserts and deletes (the counters); updates do not take it.
    counts: Mutex<()>,
    total: AtomicU64,
}

impl std::fmt::Debug for TaskDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskDb")
            .field("retention", &self.retention)
            .field("total", &self.total.load(Ordering::Relaxed))
            .finish()
    }
}

/// The `(agent, owner)` prefix of a task's keys: `A ‖ O`.
#[derive(Debug, Clone)]
struct Scope(Vec<u8>);

impl Scope {
    fn new(agent: &str, owner: &[u8]) -> Result<Scope, StoreError> {
        if agent.len() > 1024 || owner.len() > 4096 {
            return Err(StoreError::Backend("agent name or owner too long".into()));
        }
        let mut v = Vec::with_capacity(4 + agent.len() + owner.len());
        lp(&mut v, agent.as_bytes());
        lp(&mut v, owner);
        Ok(Scope(v))
    }

    fn task_key(&self, id: &str) -> Vec<u8> {
        [&self.0[..], id.as_bytes()].concat()
    }

    fn list_prefix(&self) -> Vec<u8> {
        [&b"i"[..], &self.0].concat()
    }

    fn list_key(&self, t: u64, id: &str) -> Vec<u8> {
        [
            &b"i"[..],
            &self.0,
            &(u64::MAX - t).to_be_bytes(),
            id.as_bytes(),
        ]
        .concat()
    }

    fn expiry_key(&self, t: u64, id: &str) -> Vec<u8> {
        [&b"e"[..], &t.to_be_bytes(), &self.0, id.as_bytes()].concat()
    }

    fn live_key(&self, id: &str) -> Vec<u8> {
        [&b"l"[..], &self.0, id.as_bytes()].concat()
    }

    fn count_key(&self) -> Vec<u8> {
        [&b"c"[..], &self.0].concat()
    }

    /// Split `A ‖ O ‖ id` (the tail of a key) into the scope and the id.
    fn split(b: &[u8]) -> Option<(Scope, String)> {
        let (_, rest) = read_lp(b)?;
        let (_, rest) = read_lp(rest)?;
        let scope_len = b.len() - rest.len();
        Some((
            Scope(b[..scope_len].to_vec()),
            String::from_utf8(rest.to_vec()).ok()?,
        ))
    }
}

impl TaskDb {
    /// The task store in `store`, which must have been opened with [`FAMILIES`].
    pub fn open(store: &Store, retention: Retention) -> Result<Arc<TaskDb>, StoreError> {
        let tasks = store.family(CF_TASKS).map_err(backend)?;
        let index = store.family(CF_INDEX).map_err(backend)?;
        let total = decode_u64(index.get(TOTAL_KEY).map_err(backend)?);
        Ok(Arc::new(TaskDb {
            tasks,
            index,
            retention,
            counts: Mutex::new(()),
            total: AtomicU64::new(total),
        }))
    }

    /// The retention in force.
    pub fn retention(&self) -> &Retention {
        &self.retention
    }

    /// Tasks stored, in all.
    pub fn len(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Whether no task is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One agent's tasks: the [`TaskStore`] for its engine.
    pub fn agent(self: &Arc<Self>, agent: &str) -> AgentTasks {
        AgentTasks {
            db: self.clone(),
            agent: agent.to_string(),
        }
    }

    fn load(&self, scope: &Scope, id: &str) -> Result<Option<Task>, StoreError> {
        let Some(bytes) = self.tasks.get(&scope.task_key(id)).map_err(backend)? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StoreError::Backend(format!("corrupt task record {id:?}: {e}")))
    }

    /// One atomic batch: the record op and the index ops.
    fn write(&self, record: FamilyOp, index: Vec<FamilyOp>) -> Result<(), StoreError> {
        Family::write_all(
            std::iter::once((&self.tasks, record))
                .chain(index.into_iter().map(|op| (&self.index, op))),
        )
        .map_err(backend)
    }

    fn put_scoped(&self, scope: &Scope, task: &Task) -> Result<(), StoreError> {
        let old = self.load(scope, &task.id)?.map(|t| t.status);
        self.write_task(scope, old.as_ref(), task, true)
    }

    /// Refuse a new task of `scope` beyond the bounds ([`StoreError::Full`]).
    fn check_room(&self, scope: &Scope) -> Result<(), StoreError> {
        if self.total.load(Ordering::Relaxed) >= self.retention.max_tasks {
            return Err(StoreError::Full(self.retention.max_tasks as usize));
        }
        let mine = decode_u64(self.index.get(&scope.count_key()).map_err(backend)?);
        if mine >= self.retention.max_per_owner {
            return Err(StoreError::Full(self.retention.max_per_owner as usize));
        }
        Ok(())
    }

    /// Write `task` whose stored status is `old` (`None`: a new task, refused beyond the
    /// bounds when `bounded`), moving its index entries.
    fn write_task(
        &self,
        scope: &Scope,
        old: Option<&TaskStatus>,
        task: &Task,
        bounded: bool,
    ) -> Result<(), StoreError> {
        let id = task.id.as_str();
        let mut ops = Vec::with_capacity(7);
        if let Some(old) = old {
            let t = micros(old);
            ops.push(FamilyOp::Delete(scope.list_key(t, id)));
            if is_running(&old.state) {
                ops.push(FamilyOp::Delete(scope.live_key(id)));
            } else {
                ops.push(FamilyOp::Delete(scope.expiry_key(t, id)));
            }
        }
        let t = micros(&task.status);
        let mut entry = state_name(&task.status.state).into_bytes();
        entry.push(0);
        entry.extend_from_slice(task.context_id.as_bytes());
        ops.push(FamilyOp::Put(scope.list_key(t, id), entry));
        if is_running(&task.status.state) {
            ops.push(FamilyOp::Put(scope.live_key(id), Vec::new()));
        } else {
            ops.push(FamilyOp::Put(scope.expiry_key(t, id), Vec::new()));
        }
        let json = serde_json::to_vec(task)
            .map_err(|e| StoreError::Backend(format!("serializing task: {e}")))?;
        // What is written must read back (serde_json stops at 128 levels): a deeper record
        // would fail every later read of it.
        let depth = agentnet_a2a::store::json_depth(&json);
        if depth > agentnet_a2a::store::MAX_RECORD_DEPTH {
            return Err(StoreError::Backend(format!(
                "task {id} nests JSON {depth} levels deep (at most {})",
                agentnet_a2a::store::MAX_RECORD_DEPTH
            )));
        }
        let record = FamilyOp::Put(scope.task_key(id), json);
        if old.is_some() {
            return self.write(record, ops);
        }
        // A new task: check and move the counters under the lock.
        let _g = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if bounded {
            self.check_room(scope)?;
        }
        let total = self.total.load(Ordering::Relaxed);
        let mine = decode_u64(self.index.get(&scope.count_key()).map_err(backend)?);
        ops.push(FamilyOp::Put(
            scope.count_key(),
            (mine + 1).to_be_bytes().to_vec(),
        ));
        ops.push(FamilyOp::Put(
            TOTAL_KEY.to_vec(),
            (total + 1).to_be_bytes().to_vec(),
        ));
        self.write(record, ops)?;
        self.total.store(total + 1, Ordering::Relaxed);
        Ok(())
    }

    /// Mark every task left `SUBMITTED` or `WORKING` by the previous run `FAILED` (see the
    /// module doc). Returns how many. Call before serving.
    pub fn recover(&self) -> Result<usize, StoreError> {
        let mut n = 0;
        loop {
            let mut batch = Vec::new();
            self.index
                .scan(b"l", b"m", SWEEP_BATCH, |k, _| {
                    batch.push(k[1..].to_vec());
                    true
                })
                .map_err(backend)?;
            if batch.is_empty() {
                return Ok(n);
            }
            for tail in batch {
                let Some((scope, id)) = Scope::split(&tail) else {
                    self.index
                        .write(vec![FamilyOp::Delete([&b"l"[..], &tail].concat())])
                        .map_err(backend)?;
                    continue;
                };
                match self.load(&scope, &id)? {
                    Some(mut task) if is_running(&task.status.state) => {
                        let mut m = Message::new(Role::Agent, vec![Part::text(RESTART_MESSAGE)]);
                        m.task_id = Some(task.id.clone());
                        m.context_id = Some(task.context_id.clone());
                        task.status.state = TaskState::Failed;
                        task.status.message = Some(m);
                        task.status.timestamp = Some(chrono::Utc::now());
                        self.put_scoped(&scope, &task)?;
                        n += 1;
                    }
                    // A stale entry: drop it.
                    _ => self
                        .index
                        .write(vec![FamilyOp::Delete(scope.live_key(&id))])
                        .map_err(backend)?,
                }
            }
        }
    }

    /// Delete the tasks not running whose status is older than [`Retention::keep`] at `now`,
    /// at most `max` of them. Returns how many.
    pub fn sweep(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        max: usize,
    ) -> Result<usize, StoreError> {
        let keep = chrono::Duration::from_std(self.retention.keep).unwrap_or(chrono::Duration::MAX);
        let cutoff = now
            .checked_sub_signed(keep)
            .map(|t| t.timestamp_micros().max(0) as u64)
            .unwrap_or(0);
        let mut end = b"e".to_vec();
        end.extend_from_slice(&cutoff.to_be_bytes());
        let mut deleted = 0;
        while deleted < max {
            let mut due = Vec::new();
            self.index
                .scan(b"e", &end, SWEEP_BATCH.min(max - deleted), |k, _| {
                    due.push(k.to_vec());
                    true
                })
                .map_err(backend)?;
            if due.is_empty() {
                break;
            }
            let _g = self.counts.lock().unwrap_or_else(|p| p.into_inner());
            for key in due {
                let Some(t) = key.get(1..9).and_then(|b| b.try_into().ok()) else {
                    continue;
                };
                let t = u64::from_be_bytes(t);
                let mut ops = vec![FamilyOp::Delete(key.clone())];
                if let Some((scope, id)) = Scope::split(&key[9..]) {
                    if self
                        .tasks
                        .get(&scope.task_key(&id))
                        .map_err(backend)?
                        .is_some()
                    {
                        ops.push(FamilyOp::Delete(scope.list_key(t, &id)));
                        let mine = decode_u64(self.index.get(&scope.count_key()).map_err(backend)?);
                        ops.push(if mine <= 1 {
                            FamilyOp::Delete(scope.count_key())
                        } else {
                            FamilyOp::Put(scope.count_key(), (mine - 1).to_be_bytes().to_vec())
                        });
                        let total = self.total.load(Ordering::Relaxed).saturating_sub(1);
                        ops.push(FamilyOp::Put(
                            TOTAL_KEY.to_vec(),
                            total.to_be_bytes().to_vec(),
                        ));
                        self.write(FamilyOp::Delete(scope.task_key(&id)), ops)?;
                        self.total.store(total, Ordering::Relaxed);
                        deleted += 1;
                        continue;
                    }
                }
                self.index.write(ops).map_err(backend)?;
            }
        }
        Ok(deleted)
    }
}

/// One agent's tasks in the [`TaskDb`].
#[derive(Debug, Clone)]
pub struct AgentTasks {
    db: Arc<TaskDb>,
    agent: String,
}

impl AgentTasks {
    fn scope(&self, owner: &Owner) -> Result<Scope, StoreError> {
        Scope::new(&self.agent, owner.key().as_bytes())
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

impl TaskStore for AgentTasks {
    fn get(&self, owner: &Owner, id: &str) -> Result<Option<Task>, StoreError> {
        self.db.load(&self.scope(owner)?, id)
    }

    fn put(&self, owner: &Owner, task: &Task) -> Result<(), StoreError> {
        self.db.put_scoped(&self.scope(owner)?, task)
    }

    fn replace(&self, owner: &Owner, old: &TaskStatus, task: &Task) -> Result<(), StoreError> {
        self.db
            .write_task(&self.scope(owner)?, Some(old), task, true)
    }

    fn admit(&self, owner: &Owner) -> Result<(), StoreError> {
        self.db.check_room(&self.scope(owner)?)
    }

    fn insert(&self, owner: &Owner, task: &Task) -> Result<(), StoreError> {
        self.db.write_task(&self.scope(owner)?, None, task, false)
    }

    /// RocksDB writes here go to its log without a sync (the page cache keeps them across a
    /// crash of the process, not of the machine) and to its memtable, reads of live tasks hit
    /// the memtable or block cache: microseconds, cheaper than a hand-off to a blocking thread
    /// (measured in `docs/BENCHMARKS.md`). What can still block is RocksDB's own write stall
    /// when compaction falls behind; it then slows every writer alike.
    fn runs_inline(&self) -> bool {
        true
    }

    fn list(&self, owner: &Owner, q: &ListQuery) -> Result<TaskPage, StoreError> {
        let scope = self.scope(owner)?;
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
        self.db
            .index
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
        for (_, id) in &hits {
            if let Some(task) = self.db.load(&scope, id)? {
                page.tasks.push(task);
            }
        }
        if more {
            page.next = hits.last().map(|(t, id)| Cursor {
                time_micros: *t as i64,
                id: id.clone(),
            });
        }
        // The count: the owner's counter without filters, else a bounded scan.
        let unfiltered = q.status.is_none() && q.context_id.is_none() && q.status_after.is_none();
        page.total_size = if unfiltered {
            decode_u64(self.db.index.get(&scope.count_key()).map_err(backend)?) as usize
        } else {
            let mut n = 0;
            self.db
                .index
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentnet_a2a::types::TaskStatus;
    use agentnet_discovery::store::Limits;

    fn task(id: &str, micros: i64, state: TaskState) -> Task {
        Task {
            id: id.into(),
            context_id: "ctx".into(),
            status: TaskStatus {
                state,
                message: None,
                timestamp: chrono::DateTime::from_timestamp_micros(micros),
            },
            artifacts: None,
            history: None,
            metadata: None,
        }
    }

    fn open(dir: &std::path::Path, r: Retention) -> (Store, Arc<TaskDb>) {
        let s = Store::open_with_families(dir, Limits::default(), &FAMILIES).unwrap();
        let db = TaskDb::open(&s, r).unwrap();
        (s, db)
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
    fn caps_refuse_new_tasks_but_not_updates() {
        let dir = tempfile::tempdir().unwrap();
        let (_s, db) = open(
            dir.path(),
            Retention {
                max_per_owner: 2,
                max_tasks: 3,
                ..Default::default()
            },
        );
        let a = db.agent("echo");
        let o1 = Owner::Caller("did:key:1".into());
        let o2 = Owner::Caller("did:key:2".into());
        a.put(&o1, &task("x", 1, TaskState::Working)).unwrap();
        a.put(&o1, &task("y", 1, TaskState::Working)).unwrap();
        assert_eq!(
            a.put(&o1, &task("z", 1, TaskState::Working)),
            Err(StoreError::Full(2))
        );
        a.put(&o1, &task("x", 2, TaskState::Completed)).unwrap();
        a.put(&o2, &task("z", 1, TaskState::Working)).unwrap();
        assert_eq!(
            a.put(
                &Owner::Anonymous(agentnet_a2a::auth::Source::Local),
                &task("w", 1, TaskState::Working)
            ),
            Err(StoreError::Full(3))
        );
    }

    #[test]
    fn restart_fails_working_tasks_and_keeps_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let o = Owner::Caller("did:key:o".into());
        {
            let (s, db) = open(dir.path(), Retention::default());
            let a = db.agent("echo");
            a.put(&o, &task("working", 10, TaskState::Working)).unwrap();
            a.put(&o, &task("submitted", 11, TaskState::Submitted))
                .unwrap();
            a.put(&o, &task("done", 12, TaskState::Completed)).unwrap();
            a.put(&o, &task("canceled", 13, TaskState::Canceled))
                .unwrap();
            a.put(&o, &task("asking", 14, TaskState::InputRequired))
                .unwrap();
            s.flush().unwrap();
        }
        let (_s, db) = open(dir.path(), Retention::default());
        assert_eq!(db.recover().unwrap(), 2);
        assert_eq!(db.recover().unwrap(), 0, "recovery is done once");
        let a = db.agent("echo");
        let state = |id: &str| a.get(&o, id).unwrap().unwrap().status.state;
        assert_eq!(state("working"), TaskState::Failed);
        assert_eq!(state("submitted"), TaskState::Failed);
        assert_eq!(state("done"), TaskState::Completed);
        assert_eq!(state("canceled"), TaskState::Canceled);
        assert_eq!(state("asking"), TaskState::InputRequired);
        assert_eq!(db.len(), 5);
    }

    #[test]
    fn retention_sweeps_old_tasks_that_are_not_running() {
        let dir = tempfile::tempdir().unwrap();
        let (_s, db) = open(
            dir.path(),
            Retention {
                keep: Duration::from_secs(60),
                max_per_owner: 3,
                ..Default::default()
            },
        );
        let a = db.agent("echo");
        let o = Owner::Caller("did:key:o".into());
        let now = chrono::Utc::now();
        let old = (now - chrono::Duration::seconds(120)).timestamp_micros();
        let fresh = now.timestamp_micros();
        a.put(&o, &task("old-done", old, TaskState::Completed))
            .unwrap();
        a.put(&o, &task("old-working", old, TaskState::Working))
            .unwrap();
        a.put(&o, &task("new-done", fresh, TaskState::Completed))
            .unwrap();
        assert_eq!(db.sweep(now, 100).unwrap(), 1);
        assert!(a.get(&o, "old-done").unwrap().is_none());
        assert!(a.get(&o, "old-working").unwrap().is_some());
        assert!(a.get(&o, "new-done").unwrap().is_some());
        assert_eq!(db.len(), 2);
        let p = a
            .list(
                &o,
                &ListQuery {
                    page_size: 10,
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(p.total_size, 2);
        assert_eq!(p.tasks.len(), 2);
        // The owner has room again.
        a.put(&o, &task("another", fresh, TaskState::Completed))
            .unwrap();
    }
}
