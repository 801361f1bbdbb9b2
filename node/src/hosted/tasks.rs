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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentnet_a2a::auth::{Caller, Owner, Source};
use agentnet_a2a::store::{Cursor, ListQuery, StoreError, TaskPage, TaskStore};
use agentnet_a2a::types::{Message, Part, Role, Task, TaskState, TaskStatus};
use agentnet_did::delegation::METADATA_MEMBER as CHAIN_MEMBER;
use agentnet_discovery::store::{Family, FamilyOp, Store, StoreError as DbError};
use sha2::Digest as _;

/// The task records.
pub const CF_TASKS: &str = crate::db::TASKS;
/// The indexes and counters.
pub const CF_INDEX: &str = crate::db::TASK_INDEX;

/// Most index entries one `ListTasks` page (or its count) reads.
pub const MAX_SCAN: usize = 10_000;
/// Tasks deleted per sweep batch.
const SWEEP_BATCH: usize = 512;
/// The status message of a task failed by a restart.
pub const RESTART_MESSAGE: &str = "the node restarted while this task was working";

const TOTAL_KEY: &[u8] = b"C";
/// Present once the rank entries (`w`) of every source are written.
const RANKED_KEY: &[u8] = b"W";
/// Most tasks one new task takes to make room in a full store (a large new task may need a
/// few small ones to go).
const MAX_EVICTIONS: usize = 64;
/// Most holders, largest first, looked at for a finished task to take; past them a full
/// store refuses (their tasks are all working or waiting for their callers).
const RANK_SCAN: usize = 64;

/// How long tasks are kept, how many, and how many bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Tasks not running whose last status is older than this are deleted: 7 days.
    pub keep: Duration,
    /// Most tasks in all: 1,000,000.
    pub max_tasks: u64,
    /// Most tasks of one owner at one agent: 10,000, `max_tasks / 100` (anonymous callers of
    /// an open agent are owned by their network block).
    pub max_per_owner: u64,
    /// Most tasks created from one network block ([`Source`]), at every agent together:
    /// 20,000, `max_tasks / 50`. DIDs are free to mint; the block is what a stranger cannot
    /// multiply cheaply.
    pub max_per_source: u64,
    /// Most bytes of task records in all: 1 GiB.
    pub max_bytes: u64,
    /// Most bytes of one owner's tasks at one agent: 64 MiB, `max_bytes / 16`.
    pub max_owner_bytes: u64,
    /// Most bytes of the tasks created from one network block: 128 MiB, `max_bytes / 8`.
    pub max_source_bytes: u64,
    /// New tasks and growing updates are refused while the store's file system has less free
    /// space than this (the node passes the store's `--store-min-free-mib`): 256 MiB, left to
    /// the node's own duties (its adverts, the sweeps' deletions, compactions).
    pub min_free_bytes: u64,
    /// New tasks per second from one network block, with a burst of ten seconds' worth: 200
    /// (0: no rate bound). Ahead of the per-source count, it keeps one block from filling the
    /// total at full speed.
    pub new_per_second_per_source: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep: Duration::from_secs(7 * 24 * 3600),
            max_tasks: 1_000_000,
            max_per_owner: 10_000,
            max_per_source: 20_000,
            max_bytes: 1 << 30,
            max_owner_bytes: 64 << 20,
            max_source_bytes: 128 << 20,
            min_free_bytes: 256 << 20,
            new_per_second_per_source: 200,
        }
    }
}

/// `max_tasks / OWNER_SHARE` is the default of [`Retention::max_per_owner`] (10 000 of the
/// default million).
pub const OWNER_SHARE: u64 = 100;
/// `max_tasks / SOURCE_SHARE` is the default of [`Retention::max_per_source`] (20 000 of the
/// default million).
pub const SOURCE_SHARE: u64 = 50;
/// `max_bytes / OWNER_BYTES_SHARE` is the default of [`Retention::max_owner_bytes`] (64 MiB of
/// the default GiB).
pub const OWNER_BYTES_SHARE: u64 = 16;
/// `max_bytes / SOURCE_BYTES_SHARE` is the default of [`Retention::max_source_bytes`] (128 MiB
/// of the default GiB).
pub const SOURCE_BYTES_SHARE: u64 = 8;

impl Retention {
    /// The default bounds with these totals: every share is the default fraction of its total
    /// ([`OWNER_SHARE`], [`SOURCE_SHARE`], [`OWNER_BYTES_SHARE`], [`SOURCE_BYTES_SHARE`]), at
    /// least one task and one MiB, so that a small total keeps small shares.
    pub fn with_totals(max_tasks: u64, max_bytes: u64) -> Retention {
        Retention {
            max_tasks,
            max_per_owner: (max_tasks / OWNER_SHARE).max(1).min(max_tasks),
            max_per_source: (max_tasks / SOURCE_SHARE).max(1).min(max_tasks),
            max_bytes,
            max_owner_bytes: (max_bytes / OWNER_BYTES_SHARE).max(1 << 20).min(max_bytes),
            max_source_bytes: (max_bytes / SOURCE_BYTES_SHARE).max(1 << 20).min(max_bytes),
            ..Retention::default()
        }
    }
}

/// Network blocks whose creation rate is tracked at once; past them an untracked block is not
/// rate-bounded (its counts and bytes still are), so that many blocks cannot lock out others.
pub const MAX_RATE_SOURCES: usize = 65_536;

/// Token buckets of task creation, one per network block: `rate` tokens a second up to
/// `burst`. A plain struct; the caller passes `now`.
#[derive(Debug)]
pub struct CreationRate {
    rate: f64,
    burst: f64,
    buckets: std::collections::HashMap<Vec<u8>, (f64, std::time::Instant)>,
}

impl CreationRate {
    /// `per_second` new tasks a second per block, bursts of ten seconds' worth.
    pub fn new(per_second: u32) -> Self {
        CreationRate {
            rate: f64::from(per_second),
            burst: f64::from(per_second) * 10.0,
            buckets: std::collections::HashMap::new(),
        }
    }

    fn level(&self, tokens: f64, at: std::time::Instant, now: std::time::Instant) -> f64 {
        (tokens + now.saturating_duration_since(at).as_secs_f64() * self.rate).min(self.burst)
    }

    /// Whether `source` may create a task at `now`; takes its token if so.
    pub fn take(&mut self, source: &[u8], now: std::time::Instant) -> bool {
        if self.rate <= 0.0 {
            return true;
        }
        if !self.buckets.contains_key(source) && self.buckets.len() >= MAX_RATE_SOURCES {
            // A full bucket is the same as none: forget those first.
            let (rate, burst) = (self.rate, self.burst);
            self.buckets.retain(|_, (tokens, at)| {
                *tokens + now.saturating_duration_since(*at).as_secs_f64() * rate < burst
            });
            if self.buckets.len() >= MAX_RATE_SOURCES {
                return true;
            }
        }
        let burst = self.burst;
        let (tokens, at) = *self.buckets.entry(source.to_vec()).or_insert((burst, now));
        let level = self.level(tokens, at, now);
        if level < 1.0 {
            return false;
        }
        self.buckets.insert(source.to_vec(), (level - 1.0, now));
        true
    }
}

/// Bytes charged per task on top of its JSON and key: its five index entries.
const ENTRY_OVERHEAD: u64 = 256;
/// Unreadable records kept in quarantine for an operator to look at; beyond these (or
/// [`MAX_QUARANTINE_BYTES`]), an unreadable record is deleted (and still counted and logged).
pub const MAX_QUARANTINED: u64 = 64;
/// Most bytes of quarantined records kept: 64 MiB.
pub const MAX_QUARANTINE_BYTES: u64 = 64 << 20;
const QUARANTINE_KEY: &[u8] = b"Q";
/// The source key of tasks written without a caller ([`TaskStore::put`]).
const LOCAL_SOURCE: &str = "local";

/// A count of tasks and their bytes: the value of the `c`, `s` and `C` counters. Stores
/// written before byte accounting hold the count alone (8 bytes).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Usage {
    tasks: u64,
    bytes: u64,
}

impl Usage {
    fn decode(v: Option<Vec<u8>>) -> Usage {
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

    fn encode(&self) -> Vec<u8> {
        [self.tasks.to_be_bytes(), self.bytes.to_be_bytes()].concat()
    }

    fn add(self, tasks: i64, bytes: i64) -> Usage {
        Usage {
            tasks: self.tasks.saturating_add_signed(tasks),
            bytes: self.bytes.saturating_add_signed(bytes),
        }
    }

    /// The op writing it under `key`: a delete once it is zero.
    fn op(&self, key: Vec<u8>) -> FamilyOp {
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
struct Acct {
    size: u64,
    t: u64,
    running: bool,
    chain: Option<ChainDigest>,
    source: Vec<u8>,
}

const RUNNING: u8 = 1;
const HOLDS_CHAIN: u8 = 2;

impl Acct {
    fn encode(&self) -> Vec<u8> {
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

    fn decode(v: &[u8]) -> Option<Acct> {
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

/// The SHA-256 of a chain's JSON as the store keeps it.
type ChainDigest = [u8; 32];

/// The first byte of a record that holds its chain's digest (then 32 bytes) rather than the
/// chain: a JSON record starts with `{`.
const APART: u8 = 0;

fn chain_key(d: &ChainDigest) -> Vec<u8> {
    [&b"h"[..], d].concat()
}

/// A task as its record is written: the record's bytes, and the chain kept apart (its digest
/// and JSON) when the task holds one.
struct Record {
    bytes: Vec<u8>,
    chain: Option<(ChainDigest, Vec<u8>)>,
}

impl Record {
    /// `task`'s record. A chain is a JSON array (what the delegation gate admits); any other
    /// value under the member stays in the record.
    fn of(task: &Task) -> Result<Record, serde_json::Error> {
        let chain = task
            .metadata
            .as_ref()
            .and_then(|m| m.get(CHAIN_MEMBER))
            .filter(|c| c.is_array());
        let Some(chain) = chain else {
            return Ok(Record {
                bytes: serde_json::to_vec(task)?,
                chain: None,
            });
        };
        let json = serde_json::to_vec(chain)?;
        let digest: ChainDigest = sha2::Sha256::digest(&json).into();
        let mut bytes = Vec::with_capacity(33 + 1024);
        bytes.push(APART);
        bytes.extend_from_slice(&digest);
        serde_json::to_writer(&mut bytes, &WithoutChain(task))?;
        Ok(Record {
            bytes,
            chain: Some((digest, json)),
        })
    }

    /// The JSON of the record `raw` and the digest of the chain it holds apart, if it does.
    fn split(raw: &[u8]) -> (Option<ChainDigest>, &[u8]) {
        match raw.split_first() {
            Some((&APART, rest)) if rest.len() >= 32 => {
                let (d, json) = rest.split_at(32);
                (d.try_into().ok(), json)
            }
            _ => (None, raw),
        }
    }

    /// How deep the task nests once read back: the record's JSON, or the chain two levels
    /// down (`metadata`, the member).
    fn depth(&self) -> usize {
        let (_, json) = Record::split(&self.bytes);
        let own = agentnet_a2a::store::json_depth(json);
        match &self.chain {
            Some((_, c)) => own.max(2 + agentnet_a2a::store::json_depth(c)),
            None => own,
        }
    }
}

/// A task serialized as [`Task`] serializes, without `metadata.actorChain` (and without
/// `metadata` when that was its only member).
struct WithoutChain<'a>(&'a Task);

impl serde::Serialize for WithoutChain<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        // Every field named: a field added to `Task` fails to compile here rather than be
        // dropped from the records.
        let Task {
            id,
            context_id,
            status,
            artifacts,
            history,
            metadata,
        } = self.0;
        let rest: Option<std::collections::BTreeMap<&String, &serde_json::Value>> =
            metadata.as_ref().map(|m| {
                m.iter()
                    .filter(|(k, _)| k.as_str() != CHAIN_MEMBER)
                    .collect()
            });
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("id", id)?;
        m.serialize_entry("contextId", context_id)?;
        m.serialize_entry("status", status)?;
        if let Some(a) = artifacts {
            m.serialize_entry("artifacts", a)?;
        }
        if let Some(h) = history {
            m.serialize_entry("history", h)?;
        }
        if let Some(rest) = rest.filter(|r| !r.is_empty()) {
            m.serialize_entry("metadata", &rest)?;
        }
        m.end()
    }
}

fn source_key(source: &[u8]) -> Vec<u8> {
    [&b"s"[..], source].concat()
}

/// The rank entry of a source holding `bytes`: `w ‖ (u64::MAX − bytes) ‖ source`, so that a
/// forward scan meets the largest holders first.
fn rank_key(source: &[u8], bytes: u64) -> Vec<u8> {
    crate::db::rank_key(b"w", bytes, source)
}

/// The prefix of a source's terminal tasks, oldest first: `v ‖ lp(source)`.
fn terminal_prefix(source: &[u8]) -> Vec<u8> {
    let mut k = vec![b'v'];
    lp(&mut k, source);
    k
}

/// A source whose tasks are never taken to make room: the node's own writes and its
/// operator's in-process calls ([`Source::Local`]), and tasks charged to no source.
fn evictable(source: &[u8]) -> bool {
    !source.is_empty() && source != LOCAL_SOURCE.as_bytes()
}

/// How a write is bounded.
#[derive(Debug, Clone, Copy)]
enum Write<'a> {
    /// A new task charged to `source`; refused beyond the bounds when `bounded`, else only
    /// below the free-disk watermark.
    New { source: &'a [u8], bounded: bool },
    /// A change of the stored task whose status is this: refused only when it grows past a
    /// byte bound or below the watermark.
    Update(&'a TaskStatus),
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

/// Finished for good: the only tasks taken to make room in a full store.
fn is_terminal(s: &TaskState) -> bool {
    matches!(
        s,
        TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected
    )
}

fn state_name(s: &TaskState) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

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

    fn acct_key(&self, id: &str) -> Vec<u8> {
        [&b"b"[..], &self.0, id.as_bytes()].concat()
    }

    /// `v ‖ lp(source) ‖ t ‖ A ‖ O ‖ id`: a terminal task of `source`.
    fn terminal_key(&self, source: &[u8], t: u64, id: &str) -> Vec<u8> {
        [
            &terminal_prefix(source)[..],
            &t.to_be_bytes(),
            &self.0,
            id.as_bytes(),
        ]
        .concat()
    }

    fn quarantine_key(&self, id: &str) -> Vec<u8> {
        [&b"q"[..], &self.0, id.as_bytes()].concat()
    }

    /// Agent and owner key, for logs.
    fn describe(&self) -> (String, String) {
        let Some((agent, rest)) = read_lp(&self.0) else {
            return (String::new(), String::new());
        };
        let owner = read_lp(rest).map(|(o, _)| o).unwrap_or_default();
        (
            String::from_utf8_lossy(agent).into_owned(),
            String::from_utf8_lossy(owner).into_owned(),
        )
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

    /// Write the rank entries (`w`) of a store written before they were kept, once.
    fn rank_sources(&self) -> Result<(), StoreError> {
        if self.index.get(RANKED_KEY).map_err(backend)?.is_some() {
            return Ok(());
        }
        let mut ops = Vec::new();
        self.index
            .scan(b"s", b"t", usize::MAX, |k, v| {
                let u = Usage::decode(Some(v.to_vec()));
                if evictable(&k[1..]) && u.tasks > 0 {
                    ops.push(FamilyOp::Put(rank_key(&k[1..], u.bytes), Vec::new()));
                }
                true
            })
            .map_err(backend)?;
        ops.push(FamilyOp::Put(RANKED_KEY.to_vec(), Vec::new()));
        self.index.write(ops).map_err(backend)
    }

    /// The ops that move `source`'s counter from `old` to `new`, its rank entry with it.
    fn source_ops(source: &[u8], old: Usage, new: Usage, ops: &mut Vec<FamilyOp>) {
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

    /// Whether the store's total holds no room for one more task of `size` bytes.
    fn total_full(&self, size: u64) -> bool {
        let r = &self.retention;
        self.total.load(Ordering::Relaxed) >= r.max_tasks
            || self
                .bytes
                .load(Ordering::Relaxed)
                .saturating_add(size.max(1))
                > r.max_bytes
    }

    /// Make room in a full store for a new task of `size` bytes from `newcomer`, taking the
    /// oldest terminal task of the source holding the most bytes, again until there is room.
    /// A source is taken from only while it holds at least what the newcomer will (so a
    /// newcomer that holds the most takes from itself); a source whose tasks are all working
    /// or waiting for their caller is passed over; the node's own tasks are never taken.
    /// Whether there is room now. Called under the counts lock.
    fn make_room(&self, newcomer: &[u8], size: u64) -> Result<bool, StoreError> {
        let theirs = Usage::decode(self.index.get(&source_key(newcomer)).map_err(backend)?);
        let floor = theirs.bytes.saturating_add(size.max(1));
        for _ in 0..MAX_EVICTIONS {
            if !self.total_full(size) {
                return Ok(true);
            }
            let mut holders = Vec::new();
            self.index
                .scan(b"w", b"x", RANK_SCAN, |k, _| {
                    let held = crate::db::rank_of(k, 1).unwrap_or(0);
                    let source = &k[9.min(k.len())..];
                    if held < floor && source != newcomer {
                        return false;
                    }
                    holders.push(source.to_vec());
                    true
                })
                .map_err(backend)?;
            let mut took = false;
            for source in holders {
                if self.evict_oldest(&source)? {
                    took = true;
                    break;
                }
            }
            if !took {
                return Ok(false);
            }
        }
        Ok(!self.total_full(size))
    }

    /// Delete the oldest terminal task of `source`; whether one was. Stale entries met on
    /// the way are dropped. Called under the counts lock.
    fn evict_oldest(&self, source: &[u8]) -> Result<bool, StoreError> {
        let prefix = terminal_prefix(source);
        let mut found = Vec::new();
        self.index
            .scan(&prefix, &prefix_end(&prefix), 8, |k, _| {
                found.push(k.to_vec());
                true
            })
            .map_err(backend)?;
        for key in found {
            let tail = &key[prefix.len()..];
            let Some(t) = tail.get(..8).and_then(|b| b.try_into().ok()) else {
                self.index
                    .write(vec![FamilyOp::Delete(key)])
                    .map_err(backend)?;
                continue;
            };
            let t = u64::from_be_bytes(t);
            let Some((scope, id)) = Scope::split(&tail[8..]) else {
                self.index
                    .write(vec![FamilyOp::Delete(key)])
                    .map_err(backend)?;
                continue;
            };
            let acct = self
                .index
                .get(&scope.acct_key(&id))
                .map_err(backend)?
                .and_then(|v| Acct::decode(&v));
            let live = acct
                .as_ref()
                .is_some_and(|a| !a.running && a.t == t && a.source == source);
            let stored = self.tasks.get(&scope.task_key(&id)).map_err(backend)?;
            if !live || stored.is_none() {
                self.index
                    .write(vec![FamilyOp::Delete(key)])
                    .map_err(backend)?;
                continue;
            }
            let mut ops = vec![
                FamilyOp::Delete(scope.list_key(t, &id)),
                FamilyOp::Delete(scope.expiry_key(t, &id)),
                FamilyOp::Delete(scope.acct_key(&id)),
            ];
            let mut records = vec![FamilyOp::Delete(scope.task_key(&id))];
            let total = self.uncharge(&scope, &id, acct.as_ref(), &mut records, &mut ops)?;
            self.write(records, ops)?;
            self.total.store(total.tasks, Ordering::Relaxed);
            self.bytes.store(total.bytes, Ordering::Relaxed);
            self.evicted.fetch_add(1, Ordering::Relaxed);
            let (agent, owner) = scope.describe();
            tracing::info!(
                %agent, %owner, task = %id.escape_debug(),
                source = %String::from_utf8_lossy(source),
                "task store full: took the oldest finished task of the largest holder"
            );
            return Ok(true);
        }
        Ok(false)
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

    /// The stored task, its record's size; an unreadable record is quarantined and reads as
    /// absent. Never call with `counts` held.
    fn read(&self, scope: &Scope, id: &str) -> Result<Option<(Task, usize)>, StoreError> {
        let Some(bytes) = self.tasks.get(&scope.task_key(id)).map_err(backend)? else {
            return Ok(None);
        };
        self.decode(scope, id, bytes)
    }

    fn decode(
        &self,
        scope: &Scope,
        id: &str,
        bytes: Vec<u8>,
    ) -> Result<Option<(Task, usize)>, StoreError> {
        match self.parse_record(&bytes, None)? {
            Ok(t) => Ok(Some((t, bytes.len()))),
            Err(reason) => {
                self.quarantine(scope, id, &bytes, &reason)?;
                Ok(None)
            }
        }
    }

    /// A record as a page returns it: the fields the page drops (artifacts not asked for,
    /// history past `history_length`) are skipped as raw JSON, never parsed into a task. An
    /// unreadable record is quarantined and reads as absent.
    fn decode_for_page(
        &self,
        scope: &Scope,
        id: &str,
        raw: Vec<u8>,
        q: &ListQuery,
    ) -> Result<Option<Task>, StoreError> {
        match self.parse_record(&raw, Some(q))? {
            Ok(t) => Ok(Some(t)),
            Err(reason) => {
                self.quarantine(scope, id, &raw, &reason)?;
                Ok(None)
            }
        }
    }

    /// The task of the record `raw` (cut as `page` says, for a page), its chain put back if
    /// it is kept apart. `Ok(Err(reason))`: the record is unreadable.
    fn parse_record(
        &self,
        raw: &[u8],
        page: Option<&ListQuery>,
    ) -> Result<Result<Task, String>, StoreError> {
        let (digest, json) = Record::split(raw);
        let task = match page {
            Some(q) => trimmed(json, q),
            None => serde_json::from_slice::<Task>(json),
        };
        let mut task = match task {
            Ok(t) => t,
            Err(e) => return Ok(Err(e.to_string())),
        };
        let Some(d) = digest else {
            return Ok(Ok(task));
        };
        let Some(chain) = self.tasks.get(&chain_key(&d)).map_err(backend)? else {
            return Ok(Err(format!(
                "the delegation chain {} it holds is not in the store",
                d.iter().map(|b| format!("{b:02x}")).collect::<String>()
            )));
        };
        let chain: serde_json::Value = match serde_json::from_slice(&chain) {
            Ok(c) => c,
            Err(e) => return Ok(Err(format!("its delegation chain does not parse: {e}"))),
        };
        task.metadata
            .get_or_insert_with(Default::default)
            .insert(CHAIN_MEMBER.to_string(), chain);
        Ok(Ok(task))
    }

    fn load(&self, scope: &Scope, id: &str) -> Result<Option<Task>, StoreError> {
        Ok(self.read(scope, id)?.map(|(t, _)| t))
    }

    /// Take the unreadable record `raw` of `scope`/`id` out of the tasks: delete it with its
    /// index entries, uncharge it, and keep it under `q ‖ A ‖ O ‖ id` while the quarantine
    /// has room.
    fn quarantine(
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

    /// The ops that take one task (`id`, charged as `acct` says; `None`: no bytes, no
    /// source) off its owner's, its source's and the store's counts, and out of its source's
    /// terminal tasks; the store's new totals, to keep once
    /// the batch is written. Called under the counts lock.
    fn uncharge(
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
    fn hold(
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

    /// Insert or replace; a new task is charged to `source` and bounded.
    fn put_scoped(&self, scope: &Scope, task: &Task, source: &[u8]) -> Result<(), StoreError> {
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

    fn disk_low(&self, free: Option<u64>) -> Result<(), StoreError> {
        match free {
            Some(free) if free < self.retention.min_free_bytes => {
                Err(StoreError::Refused(format!(
                    "the node's disk is nearly full ({} MiB free, {} MiB kept for the node); \
                 try again later",
                    free >> 20,
                    self.retention.min_free_bytes >> 20
                )))
            }
            _ => Ok(()),
        }
    }

    /// Refuse a new task of `scope` from `source` of `size` bytes (0: not known yet) beyond
    /// the bounds ([`StoreError::Full`] for counts, [`StoreError::Refused`] for bytes and disk).
    /// The owner's and the source's shares are checked first; a full total then makes room
    /// ([`TaskDb::make_room`]) before it refuses. Called under the counts lock.
    fn check_room(
        &self,
        scope: &Scope,
        source: &[u8],
        size: u64,
        free: Option<u64>,
    ) -> Result<(), StoreError> {
        let r = &self.retention;
        self.disk_low(free)?;
        let mine = Usage::decode(self.index.get(&scope.count_key()).map_err(backend)?);
        if mine.tasks >= r.max_per_owner {
            return Err(StoreError::Full(r.max_per_owner as usize));
        }
        let theirs = Usage::decode(self.index.get(&source_key(source)).map_err(backend)?);
        if theirs.tasks >= r.max_per_source {
            return Err(StoreError::Refused(format!(
                "this network block created {} tasks (max_per_source); wait for the retention \
                 sweep",
                r.max_per_source
            )));
        }
        let growth = size.max(1);
        let over = |used: u64, cap: u64| used.saturating_add(growth) > cap;
        if over(mine.bytes, r.max_owner_bytes) || over(theirs.bytes, r.max_source_bytes) {
            // The total is not the reason: say which share is.
            return self.check_bytes(mine.bytes, theirs.bytes, growth, false);
        }
        let now = std::time::Instant::now();
        if !self
            .rate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(source, now)
        {
            return Err(StoreError::Refused(format!(
                "this network block creates tasks faster than {} a second \
                 (new_per_second_per_source); slow down",
                r.new_per_second_per_source
            )));
        }
        if self.total_full(size) && !self.make_room(source, size)? {
            if self.total.load(Ordering::Relaxed) >= r.max_tasks {
                return Err(StoreError::Full(r.max_tasks as usize));
            }
            return self.check_bytes(mine.bytes, theirs.bytes, growth, true);
        }
        Ok(())
    }

    /// Refuse `growth` bytes beyond the byte bounds (the total's only when `total`), given
    /// the owner's and the source's bytes.
    fn check_bytes(
        &self,
        mine: u64,
        theirs: u64,
        growth: u64,
        total: bool,
    ) -> Result<(), StoreError> {
        let r = &self.retention;
        let over = |used: u64, cap: u64| used.saturating_add(growth) > cap;
        let which = if total && over(self.bytes.load(Ordering::Relaxed), r.max_bytes) {
            "the node's task store is full (max_total_mib)"
        } else if over(mine, r.max_owner_bytes) {
            "this caller's tasks at this agent hold their share of bytes (max_per_owner_mib)"
        } else if over(theirs, r.max_source_bytes) {
            "this network block's tasks hold their share of bytes (max_per_source_mib)"
        } else {
            return Ok(());
        };
        Err(StoreError::Refused(format!(
            "{which}; wait for the retention sweep or send smaller messages"
        )))
    }

    /// Write `task` as `how` says, moving its index entries and its charges in one batch.
    fn write_task(&self, scope: &Scope, task: &Task, how: Write<'_>) -> Result<(), StoreError> {
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

    /// Mark every task left `SUBMITTED` or `WORKING` by the previous run `FAILED` (see the
    /// module doc). Returns how many. Call before serving. An unreadable record is
    /// quarantined (see [`TaskDb::quarantined`]), never a reason to fail.
    pub fn recover(&self) -> Result<usize, StoreError> {
        self.recover_sealed(&|_, _, _| {})
    }

    /// [`TaskDb::recover`], passing each task it fails to `seal` (agent, the owner's DID if
    /// it has one, the task) before it is written: the node signs its receipt there, as
    /// [`TaskStore::seal`] does for the engine's writes.
    pub fn recover_sealed(
        &self,
        seal: &dyn Fn(&str, Option<&str>, &mut Task),
    ) -> Result<usize, StoreError> {
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
                        let old = task.status.clone();
                        let mut m = Message::new(Role::Agent, vec![Part::text(RESTART_MESSAGE)]);
                        m.task_id = Some(task.id.clone());
                        m.context_id = Some(task.context_id.clone());
                        task.status.state = TaskState::Failed;
                        task.status.message = Some(m);
                        task.status.timestamp = Some(chrono::Utc::now());
                        let (agent, owner) = scope.describe();
                        seal(&agent, owner.strip_prefix("c:"), &mut task);
                        match self.write_task(&scope, &task, Write::Update(&old)) {
                            Ok(()) => {}
                            // Growth refused (disk low, a byte bound): fail it without the
                            // message rather than leave it working.
                            Err(StoreError::Refused(_)) => {
                                task.status.message = None;
                                self.write_task(&scope, &task, Write::Update(&old))?;
                            }
                            Err(e) => return Err(e),
                        }
                        n += 1;
                    }
                    // A stale entry (or a record just quarantined): drop it.
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
                        let acct = self
                            .index
                            .get(&scope.acct_key(&id))
                            .map_err(backend)?
                            .and_then(|v| Acct::decode(&v));
                        ops.push(FamilyOp::Delete(scope.list_key(t, &id)));
                        ops.push(FamilyOp::Delete(scope.acct_key(&id)));
                        let mut records = vec![FamilyOp::Delete(scope.task_key(&id))];
                        let total =
                            self.uncharge(&scope, &id, acct.as_ref(), &mut records, &mut ops)?;
                        self.write(records, ops)?;
                        self.total.store(total.tasks, Ordering::Relaxed);
                        self.bytes.store(total.bytes, Ordering::Relaxed);
                        deleted += 1;
                        continue;
                    }
                }
                self.index.write(ops).map_err(backend)?;
            }
        }
        Ok(deleted)
    }

    /// Delete every task [`TaskDb::sweep`] would, `batch` at a time with `pause` between
    /// batches, until none is due or `go_on` says stop. Returns how many. Blocks: call it on a
    /// blocking thread.
    ///
    /// One batch a minute is not enough for a busy node: at 815 requests a second a node made
    /// 49 000 tasks a minute, and its store grew by the difference until it refused new tasks
    /// while holding expired ones. Nor is one long sweep: a batch holds the store's count
    /// lock, which every new task needs, and taken back to back the batches kept writers
    /// waiting for seconds (p99 3.9–4.4 s at 1 070 requests a second, against 22 ms before
    /// the first sweep). The pause lets them in.
    pub fn sweep_due(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        batch: usize,
        pause: Duration,
        go_on: impl Fn() -> bool,
    ) -> Result<usize, StoreError> {
        let batch = batch.max(1);
        let mut deleted = 0;
        loop {
            let n = self.sweep(now, batch)?;
            deleted += n;
            if n < batch || !go_on() {
                return Ok(deleted);
            }
            std::thread::sleep(pause);
        }
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

/// Parse a task record cut as `q` says: the top-level fields as raw JSON, then only what is
/// kept.
fn trimmed(raw: &[u8], q: &ListQuery) -> Result<Task, serde_json::Error> {
    use serde_json::value::RawValue;
    let mut top: std::collections::BTreeMap<String, &RawValue> = serde_json::from_slice(raw)?;
    if q.drop_artifacts {
        top.remove("artifacts");
    }
    let history = match (q.history_length, top.get("history")) {
        (Some(n), Some(h)) => {
            let all: Option<Vec<&RawValue>> = serde_json::from_str(h.get())?;
            let all = all.unwrap_or_default();
            let keep = &all[all.len().saturating_sub(n)..];
            Some(serde_json::to_string(keep)?)
        }
        _ => None,
    };
    let mut out = String::with_capacity(raw.len().min(1 << 20));
    out.push('{');
    for (i, (k, v)) in top.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(k)?);
        out.push(':');
        match (k.as_str(), &history) {
            ("history", Some(h)) => out.push_str(h),
            _ => out.push_str(v.get()),
        }
    }
    out.push('}');
    serde_json::from_str(&out)
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
        let mut bytes = 0usize;
        // The last entry the page covers: the cursor of the next page.
        let mut last: Option<&(u64, String)> = None;
        for hit in &hits {
            let Some(raw) = self
                .db
                .tasks
                .get(&scope.task_key(&hit.1))
                .map_err(backend)?
            else {
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
            if let Some(task) = self.db.decode_for_page(&scope, &hit.1, raw, q)? {
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
            Usage::decode(self.db.index.get(&scope.count_key()).map_err(backend)?).tasks as usize
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
        let s = crate::db::open(dir, Limits::default()).unwrap();
        let db = TaskDb::open(&s, r).unwrap();
        (s, db)
    }

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

    #[test]
    fn a_sweep_goes_on_past_one_batch_until_nothing_is_due() {
        let dir = tempfile::tempdir().unwrap();
        let (_s, db) = open(
            dir.path(),
            Retention {
                keep: Duration::from_secs(60),
                ..Default::default()
            },
        );
        let a = db.agent("echo");
        let o = Owner::Caller("did:key:o".into());
        let now = chrono::Utc::now();
        let old = (now - chrono::Duration::seconds(120)).timestamp_micros();
        for i in 0..7 {
            a.put(&o, &task(&format!("old-{i}"), old, TaskState::Completed))
                .unwrap();
        }
        a.put(
            &o,
            &task("fresh", now.timestamp_micros(), TaskState::Completed),
        )
        .unwrap();
        // Asked to stop after the first batch, it deletes one batch.
        assert_eq!(db.sweep_due(now, 2, Duration::ZERO, || false).unwrap(), 2);
        assert_eq!(db.len(), 6);
        // Otherwise it goes on to the last expired task, and no further.
        assert_eq!(db.sweep_due(now, 2, Duration::ZERO, || true).unwrap(), 5);
        assert_eq!(db.len(), 1);
        assert!(a.get(&o, "fresh").unwrap().is_some());
        assert_eq!(db.sweep_due(now, 2, Duration::ZERO, || true).unwrap(), 0);
    }

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

    /// A chain of `n` links, each with `tag` in it (a few hundred bytes a link).
    fn chain(tag: &str, n: usize) -> serde_json::Value {
        (0..n)
            .map(|i| {
                serde_json::json!({
                    "issuer": format!("did:key:z{tag}{i}"),
                    "credentialSubject": {"id": format!("did:key:z{tag}{}", i + 1)},
                    "proof": {"proofValue": format!("z{}{tag}{i}", "5".repeat(80))},
                })
            })
            .collect()
    }

    fn with_chain(mut t: Task, c: &serde_json::Value, also: Option<(&str, i64)>) -> Task {
        let mut m = std::collections::HashMap::new();
        m.insert(CHAIN_MEMBER.to_string(), c.clone());
        if let Some((k, v)) = also {
            m.insert(k.to_string(), serde_json::json!(v));
        }
        t.metadata = Some(m);
        t
    }

    /// The chains the store keeps: digest → (tasks holding it, its JSON).
    fn chains(db: &TaskDb) -> std::collections::BTreeMap<Vec<u8>, (u64, Vec<u8>)> {
        let mut out = std::collections::BTreeMap::new();
        db.index
            .scan(b"h", b"i", 100, |k, v| {
                let n = Usage::decode(Some(v.to_vec())).tasks;
                out.insert(k[1..].to_vec(), (n, Vec::new()));
                true
            })
            .unwrap();
        db.tasks
            .scan(b"h", b"i", 100, |k, v| {
                out.entry(k[1..].to_vec()).or_insert((0, Vec::new())).1 = v.to_vec();
                true
            })
            .unwrap();
        out
    }

    #[test]
    fn a_chain_is_kept_once_read_back_whole_and_goes_with_its_last_task() {
        let dir = tempfile::tempdir().unwrap();
        let alice = Owner::Caller("did:key:alice".into());
        let bob = Owner::Caller("did:key:bob".into());
        let one = chain("one", 3);
        let two = chain("two", 2);
        let now = chrono::Utc::now();
        let at = |secs_ago: i64| (now - chrono::Duration::seconds(secs_ago)).timestamp_micros();
        let written = vec![
            (
                alice.clone(),
                with_chain(task("a1", at(500), TaskState::Completed), &one, None),
            ),
            (
                alice.clone(),
                with_chain(
                    task("a2", at(400), TaskState::Completed),
                    &one,
                    Some(("x", 1)),
                ),
            ),
            (
                bob.clone(),
                with_chain(task("b1", at(300), TaskState::Completed), &one, None),
            ),
            (
                bob.clone(),
                with_chain(task("b2", at(200), TaskState::Completed), &two, None),
            ),
            (bob.clone(), task("b3", at(100), TaskState::Completed)),
        ];
        let minute = Retention {
            keep: Duration::from_secs(60),
            ..Default::default()
        };
        {
            let (s, db) = open(dir.path(), minute);
            let a = db.agent("echo");
            for (o, t) in &written {
                a.put(o, t).unwrap();
            }
            // Each chain once, counted by its holders; the records hold its digest, not it.
            let kept = chains(&db);
            assert_eq!(kept.len(), 2);
            let counts: Vec<u64> = kept.values().map(|(n, _)| *n).collect();
            assert_eq!(counts.iter().sum::<u64>(), 4);
            assert!(counts.contains(&3) && counts.contains(&1));
            for (o, t) in &written {
                let raw = db
                    .tasks
                    .get(&a.scope(o).unwrap().task_key(&t.id))
                    .unwrap()
                    .unwrap();
                let proof = "5".repeat(80);
                assert!(!String::from_utf8_lossy(&raw).contains(&proof), "{}", t.id);
                // Charged as if it held the chain: at least the task's whole JSON.
                let acct = db
                    .index
                    .get(&a.scope(o).unwrap().acct_key(&t.id))
                    .unwrap()
                    .unwrap();
                let whole = serde_json::to_vec(t).unwrap().len() as u64;
                assert!(Acct::decode(&acct).unwrap().size >= whole, "{}", t.id);
            }
            s.flush().unwrap();
        }
        let (_s, db) = open(dir.path(), minute);
        let a = db.agent("echo");
        // Read back whole after a reopen, by get and by a page.
        for (o, t) in &written {
            assert_eq!(&a.get(o, &t.id).unwrap().unwrap(), t);
        }
        let listed = a
            .list(
                &bob,
                &ListQuery {
                    page_size: 10,
                    history_length: Some(0),
                    ..Default::default()
                },
            )
            .unwrap();
        let want: Vec<&Task> = written[2..].iter().rev().map(|(_, t)| t).collect();
        assert_eq!(listed.tasks.iter().collect::<Vec<_>>(), want);
        // An update that keeps the chain keeps its count; one that drops it lets it go.
        let mut b2 = written[3].1.clone();
        b2.status.state = TaskState::Failed;
        a.replace(&bob, &written[3].1.status, &b2).unwrap();
        assert_eq!(chains(&db).len(), 2);
        let mut bare = b2.clone();
        bare.metadata = None;
        a.replace(&bob, &b2.status, &bare).unwrap();
        assert_eq!(
            chains(&db).len(),
            1,
            "the second chain went with its one holder"
        );
        assert_eq!(a.get(&bob, "b2").unwrap().unwrap(), bare);
        // The sweep takes the holders of the first one by one: it stays while one is left.
        assert_eq!(
            db.sweep(now - chrono::Duration::seconds(330), 100).unwrap(),
            2
        );
        let kept = chains(&db);
        assert_eq!(kept.len(), 1);
        let (n, json) = kept.values().next().unwrap();
        assert_eq!(*n, 1);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(json).unwrap(),
            one
        );
        assert_eq!(&a.get(&bob, "b1").unwrap().unwrap(), &written[2].1);
        assert_eq!(db.sweep(now, 100).unwrap(), 3);
        assert!(
            chains(&db).is_empty(),
            "nothing left of it: {:?}",
            chains(&db)
        );
        assert_eq!((db.len(), db.bytes()), (0, 0));
    }

    #[test]
    fn a_record_whose_chain_is_missing_is_quarantined_and_a_whole_one_reads_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let (_s, db) = open(dir.path(), Retention::default());
        let a = db.agent("echo");
        let o = Owner::Caller("did:key:o".into());
        let c = chain("lost", 2);
        a.put(
            &o,
            &with_chain(task("t", 10, TaskState::Completed), &c, None),
        )
        .unwrap();
        let digest = chains(&db).keys().next().unwrap().clone();
        db.tasks
            .write(vec![FamilyOp::Delete([&b"h"[..], &digest].concat())])
            .unwrap();
        assert!(a.get(&o, "t").unwrap().is_none());
        assert_eq!(db.quarantined(), 1);
        assert!(chains(&db).is_empty(), "its count went with it");
        assert_eq!((db.len(), db.bytes()), (0, 0));
        // A record written whole (before chains were kept apart) reads as it is, and is kept
        // apart from its next write on.
        let old = with_chain(task("old", 20, TaskState::Working), &c, None);
        a.put(&o, &task("old", 20, TaskState::Working)).unwrap();
        db.tasks
            .write(vec![FamilyOp::Put(
                a.scope(&o).unwrap().task_key("old"),
                serde_json::to_vec(&old).unwrap(),
            )])
            .unwrap();
        assert_eq!(a.get(&o, "old").unwrap().unwrap(), old);
        let mut done = old.clone();
        done.status.state = TaskState::Completed;
        a.replace(&o, &old.status, &done).unwrap();
        assert_eq!(a.get(&o, "old").unwrap().unwrap(), done);
        assert_eq!(chains(&db).len(), 1);
        // A member that is not an array is not a chain: it stays in the record.
        let odd = {
            let mut t = task("odd", 30, TaskState::Completed);
            t.metadata = Some([(CHAIN_MEMBER.to_string(), serde_json::json!("x"))].into());
            t
        };
        a.put(&o, &odd).unwrap();
        assert_eq!(a.get(&o, "odd").unwrap().unwrap(), odd);
        assert_eq!(chains(&db).len(), 1);
        // Kept apart, a chain still counts in the task's depth: a task that would not read
        // back whole is refused, and nothing of it is kept.
        let mut nested = serde_json::Value::Null;
        for _ in 0..CHAIN_TOO_DEEP {
            nested = serde_json::Value::Array(vec![nested]);
        }
        let too_deep = with_chain(task("deep", 40, TaskState::Completed), &nested, None);
        assert!(matches!(a.put(&o, &too_deep), Err(StoreError::Backend(_))));
        assert!(a.get(&o, "deep").unwrap().is_none());
        assert_eq!(chains(&db).len(), 1);
    }

    /// A chain nested this deep puts its task, two levels (`metadata`, the member) further, past
    /// [`agentnet_a2a::store::MAX_RECORD_DEPTH`].
    const CHAIN_TOO_DEEP: usize = agentnet_a2a::store::MAX_RECORD_DEPTH - 1;

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

    #[test]
    fn bytes_are_bounded_per_owner_per_source_and_in_all() {
        let dir = tempfile::tempdir().unwrap();
        let (_s, db) = open(
            dir.path(),
            Retention {
                max_owner_bytes: 64 << 10,
                max_source_bytes: 96 << 10,
                max_bytes: 160 << 10,
                max_per_source: 5,
                ..Default::default()
            },
        );
        let a = db.agent("echo");
        let from = |did: &str, ip: [u8; 4]| {
            Caller::new(
                Owner::Caller(did.into()),
                Source::of(std::net::IpAddr::from(ip)),
            )
        };
        let big = |id: &str, kib: usize| {
            let mut t = task(id, 1, TaskState::Working);
            t.status.message = Some(Message::new(
                Role::Agent,
                vec![Part::text("x".repeat(kib << 10))],
            ));
            t
        };
        let a1 = from("did:key:a1", [10, 0, 0, 1]);
        // One owner: 40 KiB fits, another 40 KiB passes the owner's 64 KiB.
        a.admit(&a1).unwrap();
        a.insert(&a1, &big("t1", 40)).unwrap();
        assert!(matches!(
            a.put(&a1.owner, &big("t2", 40)),
            Err(StoreError::Refused(_))
        ));
        // Growth of a stored task is charged too: to the owner, and to the creating source.
        assert!(matches!(
            a.replace(&a1.owner, &big("t1", 40).status, &big("t1", 70)),
            Err(StoreError::Refused(_))
        ));
        a.replace(&a1.owner, &big("t1", 40).status, &big("t1", 10))
            .unwrap();
        // A fresh DID from the same address: the source's 96 KiB holds across owners.
        let a2 = from("did:key:a2", [10, 0, 0, 1]);
        a.admit(&a2).unwrap();
        a.insert(&a2, &big("u1", 60)).unwrap();
        let a3 = from("did:key:a3", [10, 0, 0, 1]);
        a.admit(&a3).unwrap();
        a.insert(&a3, &big("v1", 30)).unwrap();
        assert!(
            matches!(a.admit(&from("did:key:a4", [10, 0, 0, 1])), Err(StoreError::Refused(m)) if m.contains("max_per_source_mib")),
            "the block's bytes are used up whatever the DID"
        );
        // Another address still gets in, up to the total.
        let b1 = from("did:key:b1", [10, 0, 0, 2]);
        a.admit(&b1).unwrap();
        a.insert(&b1, &big("w1", 60)).unwrap();
        assert!(matches!(
            a.admit(&from("did:key:b2", [10, 0, 0, 3])),
            Err(StoreError::Refused(m)) if m.contains("max_total_mib")
        ));
        assert!(db.bytes() > 150 << 10);
        let (n, bytes) = db
            .source_usage(&Source::of(std::net::IpAddr::from([10, 0, 0, 1])))
            .unwrap();
        assert_eq!(n, 3);
        // Past the share by the last admitted task at most (admitted at 70 KiB).
        assert!(bytes > 96 << 10 && bytes < 104 << 10, "{bytes}");
        // Shrinking always passes, and the sweep gives the bytes back.
        a.replace(
            &b1.owner,
            &big("w1", 60).status,
            &task("w1", 1, TaskState::Completed),
        )
        .unwrap();
        assert!(db.bytes() < 120 << 10);
    }

    /// Nine addresses, one DID each, filled the store with finished tasks; every new task at
    /// every agent was then refused for the whole retention. A full store now makes room from
    /// the source holding the most: its oldest terminal task goes, a new source is served.
    #[test]
    fn a_full_store_makes_room_from_the_largest_holder_for_a_new_source() {
        let dir = tempfile::tempdir().unwrap();
        let (_s, db) = open(
            dir.path(),
            Retention {
                max_tasks: 9,
                max_per_source: 4,
                ..Default::default()
            },
        );
        let a = db.agent("echo");
        let from = |i: u8| {
            Caller::new(
                Owner::Caller(format!("did:key:z{i}")),
                Source::of(std::net::IpAddr::from([10, 0, 0, i])),
            )
        };
        let fill = |c: &Caller, id: &str, t: i64, state: TaskState| {
            a.admit(c)?;
            a.insert(c, &task(id, t, state))
        };
        // Source 1 holds four finished tasks, 2 and 3 two each (one waiting for input), and the
        // operator's own one: full.
        for t in 0..4 {
            fill(&from(1), &format!("a{t}"), 10 + t, TaskState::Completed).unwrap();
        }
        fill(&from(2), "b0", 1, TaskState::Completed).unwrap();
        fill(&from(2), "b1", 2, TaskState::InputRequired).unwrap();
        fill(&from(3), "c0", 3, TaskState::Working).unwrap();
        fill(&from(3), "c1", 4, TaskState::Working).unwrap();
        let me = Owner::Anonymous(Source::Local);
        a.put(&me, &task("mine", 0, TaskState::Completed)).unwrap();
        assert_eq!(db.len(), 9);
        // A new source is served: the largest holder's oldest finished task made room.
        fill(&from(4), "d0", 20, TaskState::Working).unwrap();
        assert_eq!(db.len(), 9);
        let gone = |c: &Caller, id: &str| a.get(&c.owner, id).unwrap().is_none();
        assert!(
            gone(&from(1), "a0"),
            "the oldest task of the largest holder made room"
        );
        assert!(!gone(&from(1), "a1"));
        let one = Source::of(std::net::IpAddr::from([10, 0, 0, 1]));
        assert_eq!(db.source_usage(&one).unwrap().0, 3);
        // Again and again, each new source with a task still working, until every finished
        // task of a stranger has gone; never one working or waiting for input, never the
        // operator's.
        for i in 5..=8 {
            fill(&from(i), "n", 20 + i64::from(i), TaskState::Working).unwrap();
            assert_eq!(db.len(), 9);
        }
        assert_eq!(db.source_usage(&one).unwrap().0, 0);
        assert!(!gone(&from(2), "b1"), "a task waiting for input stays");
        assert!(
            !gone(&from(3), "c0") && !gone(&from(3), "c1"),
            "working tasks stay"
        );
        assert!(
            a.get(&me, "mine").unwrap().is_some(),
            "the operator's task stays"
        );
        // Nothing left that may go: a new task is refused, nothing evicted.
        assert!(matches!(
            fill(&from(9), "i0", 30, TaskState::Completed),
            Err(StoreError::Full(_) | StoreError::Refused(_))
        ));
        assert_eq!(db.len(), 9);
        assert!(!gone(&from(2), "b1") && !gone(&from(8), "n"));
        assert!(a.get(&me, "mine").unwrap().is_some());
    }

    /// The same with bytes: nine blocks fill the total with an eighth each; a tenth is served
    /// and the largest holder is cut back.
    #[test]
    fn a_store_full_of_bytes_makes_room_from_the_largest_holder() {
        let dir = tempfile::tempdir().unwrap();
        let (_s, db) = open(
            dir.path(),
            Retention {
                max_bytes: 800 << 10,
                max_source_bytes: 100 << 10,
                ..Default::default()
            },
        );
        let a = db.agent("echo");
        let big = |id: &str, t: i64, kib: usize| {
            let mut t = task(id, t, TaskState::Completed);
            t.status.message = Some(Message::new(
                Role::Agent,
                vec![Part::text("x".repeat(kib << 10))],
            ));
            t
        };
        let from = |i: u8| {
            Caller::new(
                Owner::Caller(format!("did:key:z{i}")),
                Source::of(std::net::IpAddr::from([10, 0, 1, i])),
            )
        };
        let mut refused = None;
        'fill: for i in 1..=9u8 {
            for n in 0..4 {
                let c = from(i);
                let r = a
                    .admit(&c)
                    .and_then(|()| a.insert(&c, &big(&format!("t{i}-{n}"), i64::from(n), 30)));
                if let Err(e) = r {
                    if !e.to_string().contains("max_per_source_mib") {
                        refused = Some((i, e));
                        break 'fill;
                    }
                }
            }
        }
        assert!(refused.is_none(), "{refused:?}");
        assert!(db.bytes() > 780 << 10);
        let c = from(10);
        a.admit(&c).unwrap();
        a.insert(&c, &big("new", 100, 30)).unwrap();
        assert!(db.bytes() <= (800 << 10) + (31 << 10), "{}", db.bytes());
        let first = Source::of(std::net::IpAddr::from([10, 0, 1, 1]));
        assert!(
            db.source_usage(&first).unwrap().0 < 4,
            "the oldest holder was cut back"
        );
    }

    #[test]
    fn tasks_are_counted_per_source_whatever_the_did() {
        let dir = tempfile::tempdir().unwrap();
        let (_s, db) = open(
            dir.path(),
            Retention {
                max_per_source: 3,
                ..Default::default()
            },
        );
        let a = db.agent("echo");
        let b = db.agent("ask");
        let ip = std::net::IpAddr::from([192, 0, 2, 7]);
        for (i, agent) in [&a, &b, &a].into_iter().enumerate() {
            let c = Caller::new(Owner::Caller(format!("did:key:fresh{i}")), Source::of(ip));
            agent.admit(&c).unwrap();
            agent
                .insert(&c, &task(&format!("t{i}"), 1, TaskState::Working))
                .unwrap();
        }
        // Three fresh DIDs from one address, at two agents: the block's share is used up.
        let c = Caller::new(Owner::Caller("did:key:fresh9".into()), Source::of(ip));
        assert!(matches!(a.admit(&c), Err(StoreError::Refused(m)) if m.contains("max_per_source")));
        // An IPv6 /64 is one block; another /64 is not.
        let v6 = |s: &str| Source::of(s.parse().unwrap());
        assert_eq!(v6("2001:db8::1"), v6("2001:db8::ffff:1"));
        let other = Caller::new(
            Owner::Caller("did:key:fresh9".into()),
            v6("2001:db8:0:1::1"),
        );
        a.admit(&other).unwrap();
        // The sweep gives the share back.
        let now = chrono::Utc::now();
        for i in 0..3 {
            let agent = if i == 1 { &b } else { &a };
            let owner = Owner::Caller(format!("did:key:fresh{i}"));
            agent
                .replace(
                    &owner,
                    &task(&format!("t{i}"), 1, TaskState::Working).status,
                    &task(&format!("t{i}"), 1, TaskState::Completed),
                )
                .unwrap();
        }
        assert_eq!(db.sweep(now, 100).unwrap(), 3);
        assert_eq!(db.source_usage(&Source::of(ip)).unwrap(), (0, 0));
        a.admit(&c).unwrap();
    }

    #[test]
    fn below_the_disk_watermark_new_tasks_and_growth_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (_s, db) = open(dir.path(), Retention::default());
        let a = db.agent("echo");
        let c = Caller::local("did:key:c");
        a.put(&c.owner, &task("t", 1, TaskState::Working)).unwrap();
        drop(a);
        drop(db);
        // The same store with a watermark above any disk's free space.
        let db = TaskDb::open(
            &_s,
            Retention {
                min_free_bytes: u64::MAX,
                ..Default::default()
            },
        )
        .unwrap();
        let a = db.agent("echo");
        assert!(matches!(a.admit(&c), Err(StoreError::Refused(m)) if m.contains("disk")));
        assert!(matches!(
            a.insert(&c, &task("u", 1, TaskState::Working)),
            Err(StoreError::Refused(_))
        ));
        let mut grown = task("t", 2, TaskState::Working);
        grown.status.message = Some(Message::new(Role::Agent, vec![Part::text("more")]));
        assert!(matches!(
            a.replace(&c.owner, &task("t", 1, TaskState::Working).status, &grown),
            Err(StoreError::Refused(_))
        ));
        // An update that does not grow passes: a task can still end.
        a.replace(
            &c.owner,
            &task("t", 1, TaskState::Working).status,
            &task("t", 3, TaskState::Failed),
        )
        .unwrap();
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

    #[test]
    fn creation_rate_is_per_source_and_refills() {
        let t0 = std::time::Instant::now();
        let mut r = CreationRate::new(2);
        for _ in 0..20 {
            assert!(r.take(b"10.0.0.1", t0));
        }
        assert!(!r.take(b"10.0.0.1", t0), "the burst is ten seconds' worth");
        assert!(r.take(b"10.0.0.2", t0), "another block has its own");
        let later = t0 + Duration::from_millis(500);
        assert!(r.take(b"10.0.0.1", later));
        assert!(!r.take(b"10.0.0.1", later));
        assert!(CreationRate::new(0).take(b"x", t0), "0: no rate bound");
        // Through the store: the refusal names the key.
        let dir = tempfile::tempdir().unwrap();
        let (_s, db) = open(
            dir.path(),
            Retention {
                new_per_second_per_source: 1,
                ..Default::default()
            },
        );
        let a = db.agent("echo");
        let c = Caller::new(
            Owner::Caller("did:key:c".into()),
            Source::of(std::net::IpAddr::from([10, 0, 0, 9])),
        );
        for _ in 0..10 {
            a.admit(&c).unwrap();
        }
        assert!(
            matches!(a.admit(&c), Err(StoreError::Refused(m)) if m.contains("new_per_second_per_source"))
        );
    }
}
