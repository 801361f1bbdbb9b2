//! The hosted agents' A2A tasks, in the node's one RocksDB database.
//!
//! [`TaskDb`] keeps the tasks of every hosted agent in two column families of the node's
//! [`Store`] (opened by [`crate::db::open`]); [`AgentTasks`] is one
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
//! | `a2a_tasks` | `A ‖ O ‖ id` | the task as JSON (history and artifacts included); or, for a task holding a delegation chain, `0x00 ‖ D ‖` the JSON without `metadata.actorChain` |
//! | `a2a_tasks` | `h ‖ D` | the chain whose SHA-256 (of these bytes) is `D`, as JSON |
//! | `a2a_index` | `i ‖ A ‖ O ‖ (u64::MAX − t) ‖ id` | state name ‖ `0x00` ‖ context id: the list index, newest first |
//! | `a2a_index` | `e ‖ t ‖ A ‖ O ‖ id` | empty: tasks not running, oldest first, for the retention sweep |
//! | `a2a_index` | `l ‖ A ‖ O ‖ id` | empty: tasks `SUBMITTED` or `WORKING`, for the restart |
//! | `a2a_index` | `b ‖ A ‖ O ‖ id` | the task's accounting: bytes charged ‖ `t` ‖ flags (u8: running 1, holds a chain 2) ‖ `D` if it holds one ‖ source key |
//! | `a2a_index` | `h ‖ D` | tasks holding the chain `D` ‖ 0 (u64 BE each, a counter like `c`) |
//! | `a2a_index` | `c ‖ A ‖ O` | tasks ‖ bytes of this owner at this agent (u64 BE each) |
//! | `a2a_index` | `s ‖ source key` | tasks ‖ bytes created from this network block, at every agent |
//! | `a2a_index` | `w ‖ (u64::MAX − bytes) ‖ source key` | empty: the sources holding tasks, the most bytes first (not the node's own) |
//! | `a2a_index` | `v ‖ lp(source key) ‖ t ‖ A ‖ O ‖ id` | empty: a source's terminal tasks, oldest first, taken to make room |
//! | `a2a_index` | `W` | empty: the `w` entries of a store written before them were made |
//! | `a2a_index` | `C` | tasks ‖ bytes in all |
//! | `a2a_index` | `q ‖ A ‖ O ‖ id` | a quarantined record, as it was read |
//! | `a2a_index` | `Q` | records quarantined ever ‖ bytes held in quarantine |
//!
//! Counters written before byte accounting hold the count alone (8 bytes), read as 0 bytes;
//! such tasks are charged from their next update on, to no source.
//!
//! # Chains kept once
//!
//! A task admitted under a delegation chain holds it in `metadata.actorChain` (a few KB: the
//! load of one caller presents the same chain on every message). Its record holds the chain's
//! digest `D` instead, and the chain is kept once under `h ‖ D`, counted by the tasks that hold
//! it (`h ‖ D` in the index, moved in the same batch as their accounting entries); the last
//! task to go takes it with it. A read puts the chain back: the task reads as it was written.
//! Each task is still charged the chain's bytes, as if it held them, so the bounds are what
//! they were. A record that names a chain the store does not hold is unreadable (quarantined).
//! Records written whole (before this layout, or holding no chain) read as they are.
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
//! [`Retention::max_tasks`] tasks in all, [`Retention::max_per_owner`] per owner and agent and
//! [`Retention::max_per_source`] per network block (the [`Source`] of the caller who created
//! the task, at every agent together: DIDs are free to mint); the bytes of the records
//! ([`Retention::max_bytes`], [`Retention::max_owner_bytes`], [`Retention::max_source_bytes`]);
//! and the free-disk watermark of the node's store ([`Retention::min_free_bytes`]). A new task
//! beyond an owner's or a source's share is refused ([`StoreError::Full`],
//! [`StoreError::Refused`]: `RESOURCE_EXHAUSTED` to the caller).
//!
//! A new task that finds the total full (count or bytes) makes room first: the source holding
//! the most bytes (`w`) loses its oldest terminal task (`v`: completed, failed, canceled,
//! rejected), again until there is room (at most [`MAX_EVICTIONS`]), so that a new source is
//! served while the largest holder is cut back, and a handful of blocks cannot keep the store
//! full for the whole retention. A source is taken from only while it holds at least the
//! bytes the newcomer will (a newcomer holding the most takes its own oldest). Never taken: a
//! task that is working or waiting for its caller (`INPUT_REQUIRED`, `AUTH_REQUIRED`: its
//! caller may still come back), the node's own tasks and its operator's in-process calls
//! ([`Source::Local`]), tasks charged to no source. When the [`RANK_SCAN`] largest holders
//! have nothing terminal, the new task is refused as before, and nothing is taken. Taken tasks
//! are counted ([`TaskDb::evicted`]) and logged; their owners find them gone (not found), as
//! after the sweep. Terminal tasks written before `v` was kept are not taken (the sweep takes
//! them). An update that grows a task is charged to its owner and
//! its creating source and refused past a byte bound or below the watermark; one that does not
//! grow always passes (a task can always end). [`TaskStore::insert`] (a task admitted before
//! its turn) passes the bounds except the watermark, so they are passed by at most one task
//! per turn admitted at once. Every write takes one lock and moves its charges in the same
//! atomic batch. Room comes back as the retention sweep
//! ([`TaskDb::sweep`]) deletes tasks that are not running and whose status is older than
//! [`Retention::keep`]: terminal tasks, and tasks left waiting for their caller
//! (`INPUT_REQUIRED`, `AUTH_REQUIRED`).
//!
//! # Unreadable records
//!
//! A record that does not parse (JSON nested past serde_json's 128 levels, corrupt bytes) is
//! quarantined where it is met (the restart, `get`, `list`): deleted with its index entries and
//! charges, kept under `q` while the quarantine holds fewer than [`MAX_QUARANTINED`] records
//! and [`MAX_QUARANTINE_BYTES`], logged with its key and the reason, and counted
//! ([`TaskDb::quarantined`]). The task then reads as absent (`GetTask`: not found): a `FAILED`
//! stub would need the record's status, which is what cannot be read.
//!
//! # Restart
//!
//! A task `SUBMITTED` or `WORKING` when the node stopped has lost its turn: the work ran in the
//! old process. [`TaskDb::recover`] (called at start, before anything is served) marks each
//! `FAILED` with the agent message [`RESTART_MESSAGE`]; the caller sees a terminal state and
//! may send a new message. It does not run the turn again: a turn may have had effects (a
//! command run, an upstream call), and repeating them silently would be worse than saying so.
//! Terminal and interrupted tasks are unchanged by a restart.
//!
//! # The code
//!
//! This file is the front door: [`TaskDb`], one agent's [`AgentTasks`] and its [`TaskStore`]
//! implementation. The parts are in `tasks/`: `keys` (the key
//! layout above), `record` (a task's record, its chain kept apart), `write` (a task written in
//! one batch), `accounting` (the counters and charges it moves), `quotas` (the bounds a new
//! task passes), `bounds` ([`Retention`], [`CreationRate`]), `eviction` (making room in a full
//! store), `quarantine` (unreadable records), `sweep` (the retention sweep), `restart`
//! ([`TaskDb::recover`]) and `list` (the index queries: `ListTasks` pages, [`TaskDb::recent`]).
//!
//! [`MAX_EVICTIONS`]: eviction::MAX_EVICTIONS
//! [`RANK_SCAN`]: eviction::RANK_SCAN

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agentnet_a2a::auth::{Caller, Owner, Source};
use agentnet_a2a::store::{ListQuery, StoreError, TaskPage, TaskStore};
use agentnet_a2a::types::{Task, TaskStatus};
use agentnet_discovery::store::{Family, FamilyOp, Store, StoreError as DbError};

mod accounting;
mod bounds;
mod eviction;
mod keys;
mod list;
mod quarantine;
mod quotas;
mod record;
mod restart;
mod sweep;
mod write;

pub use bounds::{
    CreationRate, Retention, MAX_RATE_SOURCES, OWNER_BYTES_SHARE, OWNER_SHARE, SOURCE_BYTES_SHARE,
    SOURCE_SHARE,
};
pub use list::{Recent, RecentTask};
pub use quarantine::{MAX_QUARANTINED, MAX_QUARANTINE_BYTES};
pub use restart::RESTART_MESSAGE;

use accounting::Usage;
use keys::{source_key, Scope, QUARANTINE_KEY, TOTAL_KEY};
use write::Write;

/// The task records.
pub const CF_TASKS: &str = crate::db::TASKS;

/// The indexes and counters.
pub const CF_INDEX: &str = crate::db::TASK_INDEX;

/// Most index entries one `ListTasks` page (or its count) reads.
pub const MAX_SCAN: usize = 10_000;

/// The source key of tasks written without a caller ([`TaskStore::put`]).
const LOCAL_SOURCE: &str = "local";

/// The A2A tasks of every hosted agent. Blocking; cheap to share behind an `Arc`.
pub struct TaskDb {
    store: Store,
    tasks: Family,
    index: Family,
    retention: Retention,
    /// Serializes every write (the counters move with each).
    counts: Mutex<()>,
    total: AtomicU64,
    bytes: AtomicU64,
    quarantined: AtomicU64,
    evicted: AtomicU64,
    rate: Mutex<CreationRate>,
}

impl std::fmt::Debug for TaskDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskDb")
            .field("retention", &self.retention)
            .field("total", &self.total.load(Ordering::Relaxed))
            .field("bytes", &self.bytes.load(Ordering::Relaxed))
            .field("quarantined", &self.quarantined.load(Ordering::Relaxed))
            .finish()
    }
}

impl TaskDb {
    /// The task store in `store`, which must have been opened by [`crate::db::open`].
    pub fn open(store: &Store, retention: Retention) -> Result<Arc<TaskDb>, StoreError> {
        let tasks = store.family(CF_TASKS).map_err(backend)?;
        let index = store.family(CF_INDEX).map_err(backend)?;
        let total = Usage::decode(index.get(TOTAL_KEY).map_err(backend)?);
        let quarantined = Usage::decode(index.get(QUARANTINE_KEY).map_err(backend)?).tasks;
        let db = Arc::new(TaskDb {
            store: store.clone(),
            tasks,
            index,
            retention,
            counts: Mutex::new(()),
            total: AtomicU64::new(total.tasks),
            bytes: AtomicU64::new(total.bytes),
            quarantined: AtomicU64::new(quarantined),
            evicted: AtomicU64::new(0),
            rate: Mutex::new(CreationRate::new(retention.new_per_second_per_source)),
        });
        db.rank_sources()?;
        Ok(db)
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

    /// Bytes of task records charged, in all.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Unreadable task records found since the store was created: each was taken out of the
    /// tasks (the task is then not found), logged with its key and the reason, and kept under
    /// the `q` prefix up to [`MAX_QUARANTINED`] records.
    pub fn quarantined(&self) -> u64 {
        self.quarantined.load(Ordering::Relaxed)
    }

    /// Terminal tasks taken since the node started to make room in a full store (see
    /// "Bounds" in the module doc).
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Tasks and bytes charged to one network block.
    pub fn source_usage(&self, source: &Source) -> Result<(u64, u64), StoreError> {
        let u = Usage::decode(
            self.index
                .get(&source_key(source.key().as_bytes()))
                .map_err(backend)?,
        );
        Ok((u.tasks, u.bytes))
    }

    /// One agent's tasks: the [`TaskStore`] for its engine.
    pub fn agent(self: &Arc<Self>, agent: &str) -> AgentTasks {
        AgentTasks {
            db: self.clone(),
            agent: agent.to_string(),
            seal: None,
        }
    }

    /// One atomic batch: the ops on the records and on the index.
    fn write(&self, records: Vec<FamilyOp>, index: Vec<FamilyOp>) -> Result<(), StoreError> {
        Family::write_all(
            records
                .into_iter()
                .map(|op| (&self.tasks, op))
                .chain(index.into_iter().map(|op| (&self.index, op))),
        )
        .map_err(backend)
    }
}

fn backend(e: DbError) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// Open the task store of a stopped node's store directory (`<data-dir>/store`), for
/// maintenance and tests; the node must not be running (RocksDB locks the directory).
pub fn open_dir(
    path: &std::path::Path,
    retention: Retention,
) -> Result<(Store, Arc<TaskDb>), StoreError> {
    let store =
        crate::db::open(path, agentnet_discovery::store::Limits::default()).map_err(backend)?;
    let db = TaskDb::open(&store, retention)?;
    Ok((store, db))
}

/// What an agent adds to each task it writes ([`TaskStore::seal`]): called with the owner's
/// DID, if it has one, and the task (the node's hosted agents sign receipts,
/// `crate::hosted`).
pub type Seal = Arc<dyn Fn(Option<&str>, &mut Task) + Send + Sync>;

/// One agent's tasks in the [`TaskDb`].
#[derive(Clone)]
pub struct AgentTasks {
    db: Arc<TaskDb>,
    agent: String,
    seal: Option<Seal>,
}

impl std::fmt::Debug for AgentTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentTasks")
            .field("agent", &self.agent)
            .field("sealed", &self.seal.is_some())
            .finish()
    }
}

impl AgentTasks {
    /// These tasks, each passed to `seal` before it is written.
    pub fn sealed(mut self, seal: Seal) -> Self {
        self.seal = Some(seal);
        self
    }

    fn scope(&self, owner: &Owner) -> Result<Scope, StoreError> {
        Scope::new(&self.agent, owner.key().as_bytes())
    }
}

impl TaskStore for AgentTasks {
    fn get(&self, owner: &Owner, id: &str) -> Result<Option<Task>, StoreError> {
        self.db.load(&self.scope(owner)?, id)
    }

    /// A new task written here is charged to no network block but the local one.
    fn put(&self, owner: &Owner, task: &Task) -> Result<(), StoreError> {
        self.db
            .put_scoped(&self.scope(owner)?, task, LOCAL_SOURCE.as_bytes())
    }

    fn replace(&self, owner: &Owner, old: &TaskStatus, task: &Task) -> Result<(), StoreError> {
        self.db
            .write_task(&self.scope(owner)?, task, Write::Update(old))
    }

    fn seal(&self, owner: &Owner, task: &mut Task) {
        if let Some(seal) = &self.seal {
            seal(owner.caller(), task);
        }
    }

    fn admit(&self, caller: &Caller) -> Result<(), StoreError> {
        let free = self.db.store.free_disk_bytes();
        let _g = self.db.counts.lock().unwrap_or_else(|p| p.into_inner());
        self.db.check_room(
            &self.scope(&caller.owner)?,
            caller.source.key().as_bytes(),
            0,
            free,
        )
    }

    fn insert(&self, caller: &Caller, task: &Task) -> Result<(), StoreError> {
        self.db.write_task(
            &self.scope(&caller.owner)?,
            task,
            Write::New {
                source: caller.source.key().as_bytes(),
                bounded: false,
            },
        )
    }

    /// RocksDB writes here go to its log without a sync (the page cache keeps them across a
    /// crash of the process, not of the machine) and to its memtable, reads of live tasks hit
    /// the memtable or block cache: microseconds, cheaper than a hand-off to a blocking thread
    /// (measured in `docs/BENCHMARKS.md`). What can still block is RocksDB's own write stall
    /// when compaction falls behind; it then slows every writer alike. `list` reads up to
    /// [`agentnet_a2a::store::MAX_PAGE_BYTES`] of records; the engine runs it off the request
    /// workers whatever this says.
    fn runs_inline(&self) -> bool {
        true
    }

    fn list(&self, owner: &Owner, q: &ListQuery) -> Result<TaskPage, StoreError> {
        self.db.list(&self.scope(owner)?, q)
    }
}

#[cfg(test)]
mod fixtures {
    //! What the tests of every part of the store start from.
    use std::sync::Arc;

    use agentnet_a2a::types::{Task, TaskState, TaskStatus};
    use agentnet_discovery::store::{Limits, Store};

    use super::{Retention, TaskDb};

    /// A task `id` in context `ctx`, its status `state` at `micros`.
    pub(super) fn task(id: &str, micros: i64, state: TaskState) -> Task {
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

    /// The node's store in `dir` and its task store under `r`.
    pub(super) fn open(dir: &std::path::Path, r: Retention) -> (Store, Arc<TaskDb>) {
        let s = crate::db::open(dir, Limits::default()).unwrap();
        let db = TaskDb::open(&s, r).unwrap();
        (s, db)
    }
}
