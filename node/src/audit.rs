//! The caller's audit log (issue 18): every verified task receipt, hash-chained, in the node's
//! RocksDB.
//!
//! [`AuditLog`] keeps two column families of the node's [`Store`]: the entries in [`CF_AUDIT`],
//! the head, receipt index and counters in [`CF_AUDIT_INDEX`]. Entries are
//! appended, never changed or deleted. Each is a JSON object ([`Entry`]) stored as its RFC 8785
//! bytes; its digest is the lowercase hex SHA-256 of those bytes, and the next entry's `prev`
//! is that digest (the first entry's `prev` is [`GENESIS`]). `docs/PROTOCOL.md`, "Receipts and
//! the audit log", specifies the entry and the checks.
//!
//! # Layout
//!
//! | CF | key | value |
//! |---|---|---|
//! | `audit_log` | `e ‖ seq (u64 BE)` | the entry's JCS bytes, `seq` from 1 |
//! | `audit_index` | `H` | the head: `{"seq": n, "digest": "<hex>", "bytes": b, "checkpoint": "<JWS>"}` |
//! | `audit_index` | `r ‖ receipt digest (hex)` | the seq of the entry holding that receipt: a receipt is logged once |
//! | `audit_index` | `R` | entries on behalf of remote callers (u64 BE) |
//! | `audit_index` | `o ‖ owner key` | entries on behalf of that remote caller (u64 BE) |
//! | `audit_index` | `B` | bytes of the entries on behalf of remote callers (u64 BE) |
//! | `audit_index` | `b ‖ owner key` | bytes of the entries on behalf of that remote caller (u64 BE) |
//! | `audit_index` | `s ‖ source` | bytes of the entries on behalf of callers from that network block (u64 BE) |
//!
//! The entries have a family of their own because they are only ever appended, in key order:
//! RocksDB moves such files down its levels without rewriting them. Kept beside keys written at
//! every append (the head, the counters) and at random places (receipt digests), every
//! compaction's key range spanned the whole log and rewrote it, so that the cost of an append
//! grew with the log (docs/BENCHMARKS.md, "A node under an hour of mixed load"). A log written
//! with the index in `audit_log` has it moved at open ([`AuditLog::open`]).
//!
//! # Checkpoints
//!
//! A log opened with the node's key ([`AuditLog::open`]) signs its head after every append:
//! a [`checkpoint`] (entries, last digest, bytes, time) by the node's DID, stored with the head
//! in the same write and put in the export's header. `agentnet audit verify --file F --did D`
//! then refuses an export whose chain does not end where D signed that it ended
//! ([`verify_export`]): whoever edits the file can recompute every `prev` and the head, not the
//! signature. An export without a checkpoint (an older node's) verifies as before and is
//! reported unsigned.
//!
//! # Writers
//!
//! The daemon owns the database: in-process writers (the hosted `proxy` agent, the MCP server
//! of `/mcp`) append with [`AuditLog::append`]; CLI processes (`agentnet call`, `agentnet mcp`)
//! go through the admin API (`POST /admin/v1/audit`, [`router`]), which verifies the receipt
//! again before it appends. With no node running, a CLI verifies the receipt and says it was
//! not logged ([`Recorded::NotLogged`]): it does not open the database behind a node's back.
//! `agentnet audit` reads through the admin API, or, with no node running, opens the store
//! itself ([`open_dir`]).
//!
//! # Bounds
//!
//! [`Limits`]: entries in all, bytes in all, bytes of one entry. Entries a `proxy` appends on
//! behalf of remote callers (strangers) have their own share: entries in all (half the log)
//! and per caller; bytes in all (a quarter of the log), per caller (the calling DID, or the
//! network block of an anonymous caller) and per source (the network block the call came
//! from). A stranger's entry past its share is refused ([`AuditError::StrangersFull`], counted
//! by [`AuditLog::strangers_refused`]); the node's own entries are held to the totals only, so
//! strangers can take at most their share and the node keeps the rest whatever they do. An
//! append past a bound is refused and the writer says so; nothing is dropped or overwritten.
//! The request message is kept when its JCS bytes fit [`Limits::max_message_bytes`] (16 KiB),
//! else its digest only (`request.message` is `null`, `request.omitted` says why).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agentnet_did::checkpoint::{self, Checkpoint};
use agentnet_did::receipt::{self, Receipt, ReceiptError};
use agentnet_did::{DidUrl, Resolver, SecretKey};
use agentnet_discovery::store::{Family, FamilyOp, Store};
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod recorder;
mod routes;
mod verify;

/// The column family.
pub const CF_AUDIT: &str = crate::db::AUDIT;
/// The column family of the head, the receipt index and the counters.
pub const CF_AUDIT_INDEX: &str = crate::db::AUDIT_INDEX;
/// Keys moved per batch when a log of the one-family layout is opened.
const MOVE_BATCH: usize = 1024;
/// The `prev` of the first entry: 64 zeros.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// The first line's `format` in an export file.
pub const EXPORT_FORMAT: &str = "agentnet-audit/v1";
/// Most entries one admin page returns.
pub const MAX_PAGE: usize = 500;
/// Most bytes of entries one admin page returns (under the admin client's 8 MiB).
pub const MAX_PAGE_BYTES: usize = 4 << 20;

/// Bytes no entry is smaller than (a receipt's JWS alone is larger): what
/// [`AuditLog::room_for_stranger`] asks a share to hold before a stranger's work is done.
pub const MIN_ENTRY_BYTES: u64 = 1024;
const HEAD_KEY: &[u8] = b"H";
const REMOTE_KEY: &[u8] = b"R";
const REMOTE_BYTES_KEY: &[u8] = b"B";

/// The log's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most entries: 1,000,000.
    pub max_entries: u64,
    /// Most bytes of entries: 1 GiB.
    pub max_bytes: u64,
    /// Most bytes of one entry: 1 MiB (a receipt is at most 256 KiB).
    pub max_entry_bytes: usize,
    /// A request message larger than this (JCS bytes) is kept as its digest alone: 16 KiB.
    /// The receipt covers the message's digest, which is all a verifier needs; the bytes are
    /// kept for reading the log. 16 KiB holds an ordinary turn's text, and keeps a stranger's
    /// entry (message and receipt) a few KiB, not the 256 KiB a message may be.
    pub max_message_bytes: usize,
    /// Most entries appended on behalf of remote callers (a `proxy` agent's upstream
    /// receipts): 500,000, half the log, so that strangers calling a proxy cannot take the room
    /// of the node's own calls.
    pub max_remote_entries: u64,
    /// Most entries on behalf of one remote caller (a DID; anonymous callers by network
    /// block): 10,000.
    pub max_per_owner: u64,
    /// Most bytes of the entries on behalf of remote callers, all together: a quarter of
    /// [`Limits::max_bytes`] (256 MiB); the rest is the node's own whatever strangers do.
    pub max_remote_bytes: u64,
    /// Most bytes of them on behalf of one remote caller: a 64th of the strangers' share.
    pub max_remote_owner_bytes: u64,
    /// Most bytes of them from callers of one network block (IPv4 address, IPv6 /64): a 16th
    /// of the strangers' share.
    pub max_remote_source_bytes: u64,
}

impl Limits {
    /// The default bounds for a log of at most `max_bytes` bytes: the strangers' shares scale
    /// with it (a quarter in all, a 16th of that per source, a 64th per caller).
    pub fn with_total_bytes(max_bytes: u64) -> Self {
        let strangers = max_bytes / 4;
        Limits {
            max_bytes,
            max_remote_bytes: strangers,
            max_remote_owner_bytes: strangers / 64,
            max_remote_source_bytes: strangers / 16,
            ..Limits::default()
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_entries: 1_000_000,
            max_bytes: 1 << 30,
            max_entry_bytes: 1 << 20,
            max_message_bytes: 16 << 10,
            max_remote_entries: 500_000,
            max_per_owner: 10_000,
            max_remote_bytes: (1 << 30) / 4,
            max_remote_owner_bytes: (1 << 30) / 4 / 64,
            max_remote_source_bytes: (1 << 30) / 4 / 16,
        }
    }
}

/// An audit operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// The receipt did not verify; nothing was appended.
    #[error("receipt not verified, not logged: {0}")]
    Receipt(#[from] ReceiptError),
    /// The writer has no request to hold the receipt against (the task's history holds no
    /// message of the caller's), so the receipt cannot be shown to cover one; nothing was
    /// appended.
    #[error("receipt not logged: no request to hold it against (the task's history holds no message of the caller's), so it cannot be shown to cover what was sent")]
    NoRequest,
    /// The task's history holds a message of the caller's other than the one it sent: the
    /// receipt, which covers the history, is for other work; nothing was appended.
    #[error("receipt not logged: the task's history holds {held:?} as the caller's message, which is not the message sent: the receipt is for other work")]
    NotSent {
        /// The history's copy (its text, cut at 80 characters).
        held: String,
    },
    /// A bound refused the entry; nothing was appended (see [`Limits`]).
    #[error("audit log full: {0}; export it (`agentnet audit export FILE`) and keep the export; a new data directory starts a new log")]
    Full(String),
    /// A remote caller's entry (a `proxy`'s, `onBehalf`) past the strangers' share, or its
    /// caller's or network block's part of it; nothing was appended, and the node's own
    /// entries are not affected.
    #[error("audit entry on behalf of a remote caller refused: {0}; the node's own entries still have their room (raise [audit] strangers_kib, or its per-owner and per-source shares, to keep more)")]
    StrangersFull(String),
    /// The store failed.
    #[error("audit log: {0}")]
    Backend(String),
}

/// The request the caller sent: the message (unless too large) and its digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// Digest of the message's JCS bytes; `null` when the writer had no message.
    pub message_digest: Option<String>,
    /// The message as sent; `null` when omitted.
    pub message: Option<Value>,
    /// Why the message is not kept (`too large`), if it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omitted: Option<String>,
}

/// One log entry, as stored (its JCS bytes) and exported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// Position, from 1.
    pub seq: u64,
    /// Digest of the previous entry's bytes ([`GENESIS`] for the first).
    pub prev: String,
    /// When it was appended (RFC 3339).
    pub at: String,
    /// Who appended it: `call`, `mcp`, `proxy`.
    pub writer: String,
    /// The receipt's task id.
    pub task_id: String,
    /// The agent (the receipt's signer).
    pub agent: String,
    /// The DID the caller signed as, `null` when it did not sign.
    pub caller: Option<String>,
    /// The receipt, the compact JWS as received.
    pub receipt: String,
    /// Its digest ([`receipt::receipt_digest`]).
    pub receipt_digest: String,
    /// The sub-receipt digests the receipt names (copied from it, for the tree).
    pub sub_receipts: Vec<String>,
    /// The final state the receipt states.
    pub state: String,
    /// The request.
    pub request: Request,
    /// The remote caller the writer worked for (a `proxy`'s caller: `c:<did>`, or
    /// `a:<network block>` when anonymous); absent for the node's own calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_behalf: Option<String>,
}

impl Entry {
    /// The entry's bytes: RFC 8785.
    pub fn bytes(&self) -> Vec<u8> {
        agentnet_did::jcs::canonicalize(&serde_json::to_value(self).unwrap_or(Value::Null))
    }
}

/// What to append: a receipt, who was called, as whom, with what.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewEntry {
    /// `call`, `mcp`, `proxy`.
    pub writer: String,
    /// The task followed.
    pub task_id: String,
    /// The agent called (its DID).
    pub agent: String,
    /// The DID the caller signed as.
    pub caller: Option<String>,
    /// The receipt from `Task.metadata`.
    pub receipt: String,
    /// The message sent.
    pub message: Option<Value>,
    /// The remote caller the writer worked for ([`Entry::on_behalf`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_behalf: Option<String>,
    /// The network block that remote caller called from (`Source`'s key): what the per-source
    /// share counts. Not stored in the entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_behalf_source: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Head {
    seq: u64,
    digest: String,
    bytes: u64,
    /// The node's signed [`Checkpoint`] of this head (absent in logs of older nodes, and in
    /// logs opened without a key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checkpoint: Option<String>,
}

/// The key that signs checkpoints: the node's.
struct Signer {
    key: SecretKey,
    kid: DidUrl,
}

impl Signer {
    fn sign(&self, head: &Head) -> String {
        let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let c = Checkpoint::new(
            self.kid.did().as_str(),
            head.seq,
            &head.digest,
            head.bytes,
            &at,
        );
        checkpoint::sign(&c, &self.key, &self.kid)
    }
}

/// The audit log in the node's store.
pub struct AuditLog {
    /// The entries ([`CF_AUDIT`]).
    family: Family,
    /// The head, the receipt index, the counters ([`CF_AUDIT_INDEX`]).
    index: Family,
    limits: Limits,
    head: Mutex<Head>,
    signer: Option<Signer>,
    /// Remote callers' entries refused because their share was full, since the node started.
    strangers_refused: AtomicU64,
    /// The largest entry on behalf of a remote caller tried since the node started (logged or
    /// refused), at least [`MIN_ENTRY_BYTES`]: the room [`AuditLog::room_for_stranger`] asks for.
    stranger_entry: AtomicU64,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("AuditLog")
            .field("limits", &self.limits)
            .field("signer", &self.signer.as_ref().map(|s| s.kid.to_string()))
            .finish_non_exhaustive()
    }
}

fn backend(e: impl std::fmt::Display) -> AuditError {
    AuditError::Backend(e.to_string())
}

fn receipt_key(digest: &str) -> Vec<u8> {
    [&b"r"[..], digest.as_bytes()].concat()
}

fn entry_key(seq: u64) -> Vec<u8> {
    [&b"e"[..], &seq.to_be_bytes()].concat()
}

/// Move every key of `entries` that is not an entry (`e ‖ seq`) to `index`, in batches that
/// each put and delete atomically, so that a move cut short goes on at the next open. The
/// keys moved: the one-family layout kept the head, the receipt index and the counters beside
/// the entries.
fn move_index(entries: &Family, index: &Family) -> Result<u64, AuditError> {
    let mut moved = 0;
    for (start, end) in [(&b""[..], &b"e"[..]), (&b"f"[..], &[0xff_u8; 2][..])] {
        // Each batch goes on after the last key moved (not over the deletes just made).
        let mut from = start.to_vec();
        loop {
            let mut batch = Vec::new();
            entries
                .scan(&from, end, MOVE_BATCH, |k, v| {
                    batch.push((k.to_vec(), v.to_vec()));
                    true
                })
                .map_err(backend)?;
            if batch.is_empty() {
                break;
            }
            moved += batch.len() as u64;
            from = batch
                .last()
                .map(|(k, _)| [&k[..], &[0]].concat())
                .unwrap_or_default();
            let ops = batch.into_iter().flat_map(|(k, v)| {
                [
                    (index, FamilyOp::Put(k.clone(), v)),
                    (entries, FamilyOp::Delete(k)),
                ]
            });
            Family::write_all(ops).map_err(backend)?;
        }
    }
    Ok(moved)
}

impl AuditLog {
    /// The log in `store`, opened with [`CF_AUDIT`]. With `key` (the node's), every append
    /// signs a [`Checkpoint`] of the new head as the key's did:key; a head that carries no
    /// checkpoint by that key (a log an older node kept) is signed now. Without a key (a CLI
    /// reading a stopped node's store) the log is read-only in practice: nothing is signed.
    pub fn open(
        store: &Store,
        limits: Limits,
        key: Option<SecretKey>,
    ) -> Result<Arc<AuditLog>, AuditError> {
        let family = store.family(CF_AUDIT).map_err(backend)?;
        let index = store.family(CF_AUDIT_INDEX).map_err(backend)?;
        let moved = move_index(&family, &index)?;
        if moved > 0 {
            tracing::info!(
                moved,
                "audit log: head, receipt index and counters moved to {CF_AUDIT_INDEX}"
            );
        }
        let mut head = match index.get(HEAD_KEY).map_err(backend)? {
            Some(b) => serde_json::from_slice(&b)
                .map_err(|e| AuditError::Backend(format!("reading the log's head: {e}")))?,
            None => Head {
                seq: 0,
                digest: GENESIS.into(),
                bytes: 0,
                checkpoint: None,
            },
        };
        let signer = key.map(|key| {
            let did = key.did_key();
            let kid = did.with_fragment(did.method_specific_id());
            Signer { key, kid }
        });
        if let Some(s) = &signer {
            let current = head.checkpoint.as_deref().is_some_and(|jws| {
                let key = agentnet_did::PublicKey::Ed25519(s.key.public());
                checkpoint::verify_with_key(jws, &key, Some(s.kid.did().as_str())).is_ok_and(|c| {
                    c.seq == head.seq && c.digest == head.digest && c.bytes == head.bytes
                })
            });
            if !current {
                head.checkpoint = Some(s.sign(&head));
                let bytes = serde_json::to_vec(&head).map_err(backend)?;
                index
                    .write(vec![FamilyOp::Put(HEAD_KEY.to_vec(), bytes)])
                    .map_err(backend)?;
            }
        }
        Ok(Arc::new(AuditLog {
            family,
            index,
            limits,
            head: Mutex::new(head),
            signer,
            strangers_refused: AtomicU64::new(0),
            stranger_entry: AtomicU64::new(MIN_ENTRY_BYTES),
        }))
    }

    /// The head (last seq, its digest) and the node's signed checkpoint of it, if the log
    /// keeps them, read together.
    pub fn signed_head(&self) -> (u64, String, Option<String>) {
        let h = self.head.lock().unwrap_or_else(|p| p.into_inner());
        (h.seq, h.digest.clone(), h.checkpoint.clone())
    }

    /// Entries on behalf of remote callers refused since the log was opened because their
    /// share was full ([`AuditError::StrangersFull`]).
    pub fn strangers_refused(&self) -> u64 {
        self.strangers_refused.load(Ordering::Relaxed)
    }

    /// How many entries.
    pub fn len(&self) -> u64 {
        self.head.lock().unwrap_or_else(|p| p.into_inner()).seq
    }

    /// No entries yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The head: last seq and its digest.
    pub fn head(&self) -> (u64, String) {
        let h = self.head.lock().unwrap_or_else(|p| p.into_inner());
        (h.seq, h.digest.clone())
    }

    /// Append `new`, whose receipt `verified` the caller has verified. Blocking (RocksDB).
    pub fn append(&self, new: NewEntry, verified: &Receipt) -> Result<Entry, AuditError> {
        let mut request = Request {
            message_digest: new.message.as_ref().map(receipt::digest_json),
            message: None,
            omitted: None,
        };
        if let Some(m) = new.message {
            if agentnet_did::jcs::canonicalize(&m).len() <= self.limits.max_message_bytes {
                request.message = Some(m);
            } else {
                request.omitted = Some("too large".into());
            }
        }
        let mut head = self.head.lock().unwrap_or_else(|p| p.into_inner());
        let digest = receipt::receipt_digest(&new.receipt);
        // A receipt already logged (a task read again) is not appended twice.
        if let Some(seq) = self.index.get(&receipt_key(&digest)).map_err(backend)? {
            let seq = seq.try_into().map(u64::from_be_bytes).unwrap_or(0);
            if let Some(b) = self.family.get(&entry_key(seq)).map_err(backend)? {
                if let Ok(e) = serde_json::from_slice::<Entry>(&b) {
                    return Ok(e);
                }
            }
        }
        let entry = Entry {
            seq: head.seq + 1,
            prev: head.digest.clone(),
            at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            writer: new.writer,
            task_id: new.task_id,
            agent: new.agent,
            caller: new.caller,
            receipt_digest: receipt::receipt_digest(&new.receipt),
            receipt: new.receipt,
            sub_receipts: verified.sub_receipts.clone(),
            state: verified.state.clone(),
            request,
            on_behalf: new.on_behalf,
        };
        let bytes = entry.bytes();
        if bytes.len() > self.limits.max_entry_bytes {
            return Err(AuditError::Full(format!(
                "an entry of {} bytes is over the {}-byte bound",
                bytes.len(),
                self.limits.max_entry_bytes
            )));
        }
        if head.seq >= self.limits.max_entries {
            return Err(AuditError::Full(format!(
                "{} entries, the bound",
                self.limits.max_entries
            )));
        }
        if head.bytes + bytes.len() as u64 > self.limits.max_bytes {
            return Err(AuditError::Full(format!(
                "{} bytes of {}",
                head.bytes, self.limits.max_bytes
            )));
        }
        // Remote callers' entries: their share of the log, and each caller's and source's.
        let counters = match &entry.on_behalf {
            Some(o) => match self.stranger_room(o, new.on_behalf_source.as_deref(), &bytes)? {
                Ok(c) => c,
                Err(why) => {
                    self.strangers_refused.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        on_behalf = %o,
                        source = new.on_behalf_source.as_deref().unwrap_or("-"),
                        task = %entry.task_id,
                        refused = self.strangers_refused(),
                        "audit entry on behalf of a remote caller refused: {why}"
                    );
                    return Err(AuditError::StrangersFull(why));
                }
            },
            None => Vec::new(),
        };
        let mut next = Head {
            seq: entry.seq,
            digest: receipt::digest(&bytes),
            bytes: head.bytes + bytes.len() as u64,
            checkpoint: None,
        };
        next.checkpoint = self.signer.as_ref().map(|s| s.sign(&next));
        let head_bytes = serde_json::to_vec(&next).map_err(backend)?;
        let mut ops = vec![
            (&self.family, FamilyOp::Put(entry_key(entry.seq), bytes)),
            (&self.index, FamilyOp::Put(HEAD_KEY.to_vec(), head_bytes)),
            (
                &self.index,
                FamilyOp::Put(
                    receipt_key(&entry.receipt_digest),
                    entry.seq.to_be_bytes().to_vec(),
                ),
            ),
        ];
        ops.extend(counters.into_iter().map(|op| (&self.index, op)));
        Family::write_all(ops).map_err(backend)?;
        *head = next;
        Ok(entry)
    }

    /// Whether an entry on behalf of the remote caller `owner` from `source` could still be
    /// logged: its shares hold room for an entry as large as the largest a stranger's was since
    /// the node started (at least [`MIN_ENTRY_BYTES`]), so that once one was refused, the next
    /// like it is refused here, before its work. A writer asks before
    /// it does a stranger's work (a `proxy` before its upstream call), so that a full share
    /// costs the node no work it could not log; refused, it is counted and logged as a refused
    /// entry is. Blocking (RocksDB reads).
    pub fn room_for_stranger(&self, owner: &str, source: Option<&str>) -> Result<(), AuditError> {
        let room = self.stranger_entry.load(Ordering::Relaxed);
        match self.strangers_room(owner, source, room)? {
            Ok(_) => Ok(()),
            Err(why) => {
                self.strangers_refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    on_behalf = %owner,
                    source = source.unwrap_or("-"),
                    refused = self.strangers_refused(),
                    "audit entry on behalf of a remote caller refused before its work: {why}"
                );
                Err(AuditError::StrangersFull(why))
            }
        }
    }

    /// [`Self::strangers_room`] for a stranger's entry of `bytes`, whose size the next
    /// [`Self::room_for_stranger`] asks room for if it is the largest yet.
    fn stranger_room(
        &self,
        owner: &str,
        source: Option<&str>,
        bytes: &[u8],
    ) -> Result<Result<Vec<FamilyOp>, String>, AuditError> {
        let n = bytes.len() as u64;
        self.stranger_entry.fetch_max(n, Ordering::Relaxed);
        self.strangers_room(owner, source, n)
    }

    /// The counters to write for a remote caller's entry of `n` bytes on behalf of `owner`
    /// from `source`, or why its share has no room for it (the outer error: the store failed).
    fn strangers_room(
        &self,
        owner: &str,
        source: Option<&str>,
        n: u64,
    ) -> Result<Result<Vec<FamilyOp>, String>, AuditError> {
        let read = |k: &[u8]| crate::db::read_counter(&self.index, k).map_err(backend);
        let l = &self.limits;
        let okey = [&b"o"[..], owner.as_bytes()].concat();
        let obkey = [&b"b"[..], owner.as_bytes()].concat();
        // An entry whose writer gave no source is counted under its owner's key.
        let skey = [&b"s"[..], source.unwrap_or(owner).as_bytes()].concat();
        let (count, mine) = (read(REMOTE_KEY)?, read(&okey)?);
        let (all_bytes, owner_bytes, source_bytes) =
            (read(REMOTE_BYTES_KEY)?, read(&obkey)?, read(&skey)?);
        if count >= l.max_remote_entries {
            return Ok(Err(format!(
                "{count} entries on behalf of remote callers, their share"
            )));
        }
        if mine >= l.max_per_owner {
            return Ok(Err(format!(
                "{mine} entries on behalf of {owner}, the bound per caller"
            )));
        }
        if all_bytes + n > l.max_remote_bytes {
            return Ok(Err(format!(
                "remote callers' entries hold {all_bytes} bytes of their {}-byte share",
                l.max_remote_bytes
            )));
        }
        if owner_bytes + n > l.max_remote_owner_bytes {
            return Ok(Err(format!(
                "entries on behalf of {owner} hold {owner_bytes} bytes of the {}-byte share per caller",
                l.max_remote_owner_bytes
            )));
        }
        if source_bytes + n > l.max_remote_source_bytes {
            return Ok(Err(format!(
                "entries on behalf of callers from {} hold {source_bytes} bytes of the {}-byte share per source",
                source.unwrap_or(owner),
                l.max_remote_source_bytes
            )));
        }
        let put = |k: Vec<u8>, v: u64| FamilyOp::Put(k, v.to_be_bytes().to_vec());
        Ok(Ok(vec![
            put(REMOTE_KEY.to_vec(), count + 1),
            put(okey, mine + 1),
            put(REMOTE_BYTES_KEY.to_vec(), all_bytes + n),
            put(obkey, owner_bytes + n),
            put(skey, source_bytes + n),
        ]))
    }

    /// Up to `limit` raw entries after `after` (seq), at most [`MAX_PAGE_BYTES`] (at least
    /// one): `(seq from the key, bytes)`.
    pub fn raw_page(&self, after: u64, limit: usize) -> Result<Vec<(u64, Vec<u8>)>, AuditError> {
        let mut out = Vec::new();
        let mut bytes = 0;
        self.family
            .scan(&entry_key(after.saturating_add(1)), b"f", limit, |k, v| {
                let seq = k
                    .get(1..9)
                    .and_then(|s| s.try_into().ok())
                    .map(u64::from_be_bytes)
                    .unwrap_or(0);
                bytes += v.len();
                out.push((seq, v.to_vec()));
                bytes < MAX_PAGE_BYTES
            })
            .map_err(backend)?;
        Ok(out)
    }

    /// Write raw bytes at entry `seq` (`None`: delete it), bypassing every check: for tests
    /// that play an attacker with access to the disk.
    #[doc(hidden)]
    pub fn tamper(&self, seq: u64, bytes: Option<Vec<u8>>) -> Result<(), AuditError> {
        let op = match bytes {
            Some(b) => FamilyOp::Put(entry_key(seq), b),
            None => FamilyOp::Delete(entry_key(seq)),
        };
        self.family.write(vec![op]).map_err(backend)
    }

    /// Re-check every entry (see [`Verifier`]), the head, and the head's checkpoint (signed by
    /// this log's key, when it has one).
    pub async fn verify(self: &Arc<Self>, resolver: &Resolver) -> Report {
        let mut v = Verifier::new();
        let mut after = 0;
        loop {
            let log = self.clone();
            let page = tokio::task::spawn_blocking(move || log.raw_page(after, MAX_PAGE)).await;
            let page = match page {
                Ok(Ok(p)) => p,
                Ok(Err(e)) => return v.fail(after + 1, e.to_string()),
                Err(e) => return v.fail(after + 1, e.to_string()),
            };
            let Some(last) = page.last().map(|p| p.0) else {
                break;
            };
            for (seq, bytes) in page {
                v.check(seq, &bytes, resolver).await;
            }
            if v.bad.is_some() {
                break;
            }
            after = last;
        }
        let (seq, digest, signed) = self.signed_head();
        let did = self.signer.as_ref().map(|s| s.kid.did().to_string());
        let trust = match &did {
            Some(d) => Trust::Given(d),
            None => Trust::FromFile,
        };
        v.finish_signed((seq, &digest), signed.as_deref(), trust, resolver)
            .await
    }
}

/// Open the audit log of a stopped node's store directory (`<data-dir>/store`).
pub fn open_dir(path: &std::path::Path) -> Result<(Store, Arc<AuditLog>), AuditError> {
    let store =
        crate::db::open(path, agentnet_discovery::store::Limits::default()).map_err(backend)?;
    let log = AuditLog::open(&store, Limits::default(), None)?;
    Ok((store, log))
}

pub use recorder::{receipt_of, request_of, ReceiptSink, Recorded, Recorder, SinkError};
pub use routes::router;
pub use verify::{
    export_header, verify_and_append, verify_entry, verify_export, Report, Trust, Verifier,
};

#[cfg(test)]
mod tests {
    use super::*;
    use agentnet_did::SecretKey;
    use serde_json::json;

    /// The caller's message of task `task`, as the agent holds it.
    fn hi(task: &str) -> Value {
        json!({"messageId": format!("m-{task}"), "role": "ROLE_USER", "taskId": task,
            "contextId": "c", "parts": [{"text": "hi"}]})
    }

    /// A receipt by `key` for task `task`, whose history holds [`hi`].
    fn receipt_for(key: &SecretKey, task: &str) -> (String, Receipt) {
        let did = key.did_key();
        let t = json!({"id": task, "contextId": "c", "history": [hi(task)],
            "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-01-01T00:00:01Z"}});
        let r = Receipt::for_task(
            &t,
            did.as_str(),
            Some("did:key:zMe"),
            "2026-01-01T00:00:00Z",
            vec![],
        );
        (
            receipt::sign(&r, key, &did.with_fragment(did.method_specific_id())),
            r,
        )
    }

    fn log_with(n: usize) -> (tempfile::TempDir, Store, Arc<AuditLog>) {
        let dir = tempfile::tempdir().unwrap();
        let (store, log) = open_dir(dir.path()).unwrap();
        let key = SecretKey::from_seed(&[3; 32]);
        for i in 0..n {
            let task = format!("task-{i}");
            let (jws, r) = receipt_for(&key, &task);
            let new = NewEntry {
                writer: "call".into(),
                task_id: task,
                agent: key.did_key().to_string(),
                caller: Some("did:key:zMe".into()),
                receipt: jws,
                on_behalf: None,
                on_behalf_source: None,
                message: Some(hi(&format!("task-{i}"))),
            };
            log.append(new, &r).unwrap();
        }
        (dir, store, log)
    }

    fn resolver() -> Resolver {
        Resolver::new(Default::default()).unwrap()
    }

    #[tokio::test]
    async fn a_log_of_the_one_family_layout_is_moved_at_open_and_reads_as_before() {
        let (dir, store, log) = log_with(3);
        let head = log.signed_head();
        drop(log);
        // The layout before the split: the index keys beside the entries.
        let (entries, index) = (
            store.family(CF_AUDIT).unwrap(),
            store.family(CF_AUDIT_INDEX).unwrap(),
        );
        let mut old = Vec::new();
        index
            .scan(b"", &[0xff; 2], 100, |k, v| {
                old.push((k.to_vec(), v.to_vec()));
                true
            })
            .unwrap();
        assert!(old.len() >= 4, "the head and three receipt keys: {old:?}");
        Family::write_all(old.iter().flat_map(|(k, v)| {
            [
                (&entries, FamilyOp::Put(k.clone(), v.clone())),
                (&index, FamilyOp::Delete(k.clone())),
            ]
        }))
        .unwrap();
        drop((entries, index, store));

        let (store, log) = open_dir(dir.path()).unwrap();
        assert_eq!(log.signed_head(), head);
        let r = log.verify(&resolver()).await;
        assert!(r.ok && r.entries == 3, "{r:?}");
        let mut keys = Vec::new();
        store
            .family(CF_AUDIT)
            .unwrap()
            .scan(b"", &[0xff; 2], 100, |k, _| {
                keys.push(k.to_vec());
                true
            })
            .unwrap();
        assert_eq!(keys, (1..=3u64).map(entry_key).collect::<Vec<_>>());
        // The receipt index came along: the same receipt is not logged twice.
        let key = SecretKey::from_seed(&[3; 32]);
        let (jws, rc) = receipt_for(&key, "task-1");
        let again = NewEntry {
            writer: "mcp".into(),
            task_id: "task-1".into(),
            agent: key.did_key().to_string(),
            caller: Some("did:key:zMe".into()),
            receipt: jws,
            on_behalf: None,
            on_behalf_source: None,
            message: Some(hi("task-1")),
        };
        assert_eq!(log.append(again, &rc).unwrap().seq, 2);
        assert_eq!(log.len(), 3);
    }

    #[tokio::test]
    async fn a_clean_log_verifies_and_a_receipt_is_logged_once() {
        let (_d, _s, log) = log_with(3);
        let r = log.verify(&resolver()).await;
        assert!(r.ok, "{r:?}");
        assert_eq!(r.entries, 3);
        // The same receipt again (a task read twice): the entry it has, nothing appended.
        let key = SecretKey::from_seed(&[3; 32]);
        let (jws, rc) = receipt_for(&key, "task-1");
        let again = NewEntry {
            writer: "mcp".into(),
            task_id: "task-1".into(),
            agent: key.did_key().to_string(),
            caller: Some("did:key:zMe".into()),
            receipt: jws,
            message: None,
            on_behalf: None,
            on_behalf_source: None,
        };
        assert_eq!(log.append(again, &rc).unwrap().seq, 2);
        assert_eq!(log.len(), 3);
    }

    #[tokio::test]
    async fn one_flipped_stored_byte_names_its_entry() {
        let (_d, _s, log) = log_with(3);
        let (_, mut bytes) = log.raw_page(1, 1).unwrap().remove(0);
        // A byte inside the receipt's payload part (still a string: the JSON parses).
        let at = bytes.windows(9).position(|w| w == b"\"receipt\"").unwrap() + 40;
        bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
        log.tamper(2, Some(bytes)).unwrap();
        let r = log.verify(&resolver()).await;
        assert!(!r.ok);
        assert_eq!(r.bad_entry, Some(2), "{r:?}");
    }

    #[tokio::test]
    async fn a_changed_request_breaks_the_next_link() {
        let (_d, _s, log) = log_with(3);
        let (_, bytes) = log.raw_page(0, 1).unwrap().remove(0);
        let s = String::from_utf8(bytes)
            .unwrap()
            .replace("\"hi\"", "\"ho\"");
        log.tamper(1, Some(s.into_bytes())).unwrap();
        let r = log.verify(&resolver()).await;
        assert_eq!(r.bad_entry, Some(1), "{r:?}");
    }

    #[tokio::test]
    async fn a_removed_entry_breaks_the_chain_and_is_named() {
        let (_d, _s, log) = log_with(4);
        log.tamper(2, None).unwrap();
        let r = log.verify(&resolver()).await;
        assert_eq!(r.bad_entry, Some(2), "{r:?}");
        assert!(r.reason.unwrap().contains("missing"));
        // The last one removed: the head still counts it.
        let (_d, _s, log) = log_with(2);
        log.tamper(2, None).unwrap();
        let r = log.verify(&resolver()).await;
        assert_eq!(r.bad_entry, Some(2), "{r:?}");
    }

    #[test]
    fn appends_past_the_bound_are_refused_and_nothing_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            crate::db::open(dir.path(), agentnet_discovery::store::Limits::default()).unwrap();
        let log = AuditLog::open(
            &store,
            Limits {
                max_entries: 2,
                ..Limits::default()
            },
            None,
        )
        .unwrap();
        let key = SecretKey::from_seed(&[3; 32]);
        for i in 0..3 {
            let (jws, r) = receipt_for(&key, &format!("t{i}"));
            let new = NewEntry {
                writer: "call".into(),
                task_id: format!("t{i}"),
                agent: key.did_key().to_string(),
                caller: Some("did:key:zMe".into()),
                receipt: jws,
                message: None,
                on_behalf: None,
                on_behalf_source: None,
            };
            let got = log.append(new, &r);
            if i < 2 {
                got.unwrap();
            } else {
                assert!(matches!(got, Err(AuditError::Full(_))), "{got:?}");
            }
        }
        assert_eq!(log.len(), 2);
        assert_eq!(log.raw_page(0, 10).unwrap().len(), 2);
    }

    /// Strangers calling a proxy: each caller's entries are bounded, and all of them together
    /// take at most their share; the node's own entries still go in.
    #[test]
    fn remote_callers_have_a_share_of_the_log_and_each_a_bound() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            crate::db::open(dir.path(), agentnet_discovery::store::Limits::default()).unwrap();
        let log = AuditLog::open(
            &store,
            Limits {
                max_remote_entries: 3,
                max_per_owner: 2,
                ..Limits::default()
            },
            None,
        )
        .unwrap();
        let key = SecretKey::from_seed(&[3; 32]);
        let mut n = 0;
        let mut append = |on_behalf: Option<&str>| {
            n += 1;
            let (jws, r) = receipt_for(&key, &format!("t{n}"));
            let new = NewEntry {
                writer: "proxy".into(),
                task_id: format!("t{n}"),
                agent: key.did_key().to_string(),
                caller: Some("did:key:zMe".into()),
                receipt: jws,
                message: None,
                on_behalf: on_behalf.map(str::to_string),
                on_behalf_source: None,
            };
            log.append(new, &r)
        };
        append(Some("c:did:key:zA")).unwrap();
        append(Some("c:did:key:zA")).unwrap();
        let e = append(Some("c:did:key:zA")).unwrap_err();
        assert!(e.to_string().contains("per caller"), "{e}");
        append(Some("c:did:key:zB")).unwrap();
        let e = append(Some("c:did:key:zC")).unwrap_err();
        assert!(e.to_string().contains("share"), "{e}");
        append(None).expect("the node's own calls still have room");
        assert_eq!(log.len(), 4);
    }

    /// Strangers' bytes: an entry on behalf of a remote caller is counted per caller, per
    /// network block and in total, and refused (and counted) past any of them; a large
    /// message is kept as its digest only; the node's own entries still go in afterwards.
    #[test]
    fn strangers_bytes_have_their_share_per_source_per_owner_and_in_total() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            crate::db::open(dir.path(), agentnet_discovery::store::Limits::default()).unwrap();
        let mut limits = Limits::with_total_bytes(1 << 20);
        limits.max_remote_bytes = 12_000;
        limits.max_remote_owner_bytes = 5_000;
        limits.max_remote_source_bytes = 8_000;
        let log = AuditLog::open(&store, limits, None).unwrap();
        let key = SecretKey::from_seed(&[3; 32]);
        let mut n = 0;
        let mut append = |on_behalf: Option<(&str, &str)>, text: &str| {
            n += 1;
            let task = format!("t{n}");
            let mut m = hi(&task);
            m["parts"][0]["text"] = json!(text);
            let t = json!({"id": task, "contextId": "c", "history": [m.clone()],
                "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-01-01T00:00:01Z"}});
            let did = key.did_key();
            let r = Receipt::for_task(
                &t,
                did.as_str(),
                Some("did:key:zMe"),
                "2026-01-01T00:00:00Z",
                vec![],
            );
            let jws = receipt::sign(&r, &key, &did.with_fragment(did.method_specific_id()));
            let new = NewEntry {
                writer: "proxy".into(),
                task_id: task,
                agent: did.to_string(),
                caller: Some("did:key:zMe".into()),
                receipt: jws,
                message: Some(m),
                on_behalf: on_behalf.map(|o| o.0.to_string()),
                on_behalf_source: on_behalf.map(|o| o.1.to_string()),
            };
            log.append(new, &r)
        };
        // A 100 KiB message from a stranger: kept as its digest, the entry a few KiB.
        let big = "x".repeat(100 << 10);
        let e = append(Some(("c:did:key:zA", "192.0.2.1")), &big).unwrap();
        assert_eq!(e.request.message, None);
        assert_eq!(e.request.omitted.as_deref(), Some("too large"));
        assert!(e.bytes().len() < 4_000, "{}", e.bytes().len());
        // One caller's share (5 000 bytes) fills; another caller of the same block goes on.
        let mut refused = None;
        for _ in 0..4 {
            if let Err(e) = append(Some(("c:did:key:zA", "192.0.2.1")), "hi") {
                refused = Some(e);
                break;
            }
        }
        let e = refused.expect("the per-caller share refused an entry");
        assert!(matches!(e, AuditError::StrangersFull(_)), "{e}");
        assert!(e.to_string().contains("per caller"), "{e}");
        // The block's share (8 000 bytes) fills with fresh DIDs.
        let mut refused = None;
        for i in 0..8 {
            if let Err(e) = append(Some((&format!("c:did:key:zB{i}"), "192.0.2.1")), "hi") {
                refused = Some(e);
                break;
            }
        }
        let e = refused.expect("the per-source share refused an entry");
        assert!(e.to_string().contains("per source"), "{e}");
        // Strangers from other blocks fill the total (12 000 bytes).
        let mut refused = None;
        for i in 0..12 {
            let src = format!("198.51.100.{i}");
            if let Err(e) = append(Some((&format!("c:did:key:zC{i}"), &src)), "hi") {
                refused = Some(e);
                break;
            }
        }
        let e = refused.expect("the strangers' share refused an entry");
        assert!(e.to_string().contains("their 12000-byte share"), "{e}");
        assert_eq!(log.strangers_refused(), 3);
        // The node's own entries are not affected.
        let before = log.len();
        for _ in 0..3 {
            append(None, "mine").expect("the node's own entry is logged");
        }
        assert_eq!(log.len(), before + 3);
    }

    /// Before a stranger's work a writer asks whether its entry could be logged: yes while
    /// every share holds an entry of the smallest size, no (counted) once one does not; no
    /// entry is smaller than that size.
    #[test]
    fn a_stranger_s_room_is_known_before_the_work() {
        let key = SecretKey::from_seed(&[4; 32]);
        let did = key.did_key();
        let entry = |n: u32, owner: &str| {
            let task = format!("t{n}");
            let m = hi(&task);
            let t = json!({"id": task, "contextId": "c", "history": [m.clone()],
                "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-01-01T00:00:01Z"}});
            let r = Receipt::for_task(&t, did.as_str(), None, "2026-01-01T00:00:00Z", vec![]);
            let jws = receipt::sign(&r, &key, &did.with_fragment(did.method_specific_id()));
            let new = NewEntry {
                writer: "proxy".into(),
                task_id: task,
                agent: did.to_string(),
                caller: None,
                receipt: jws,
                message: Some(m),
                on_behalf: Some(owner.into()),
                on_behalf_source: Some("192.0.2.1".into()),
            };
            (new, r)
        };
        let open = |dir: &std::path::Path, owner_bytes: u64| {
            let store = crate::db::open(dir, agentnet_discovery::store::Limits::default()).unwrap();
            let mut limits = Limits::with_total_bytes(1 << 20);
            limits.max_remote_owner_bytes = owner_bytes;
            AuditLog::open(&store, limits, None).unwrap()
        };
        // The size of an entry: no smaller than what the check asks room for.
        let dir = tempfile::tempdir().unwrap();
        let (new, r) = entry(1, "c:did:key:zA");
        let size = open(dir.path(), 1 << 20)
            .append(new, &r)
            .unwrap()
            .bytes()
            .len() as u64;
        assert!(size > MIN_ENTRY_BYTES, "an entry of {size} bytes");
        // A caller's share of two entries and a little: room for two, then none.
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), 2 * size + 10);
        for n in 1..=2 {
            log.room_for_stranger("c:did:key:zA", Some("192.0.2.1"))
                .expect("the share has room");
            let (new, r) = entry(n, "c:did:key:zA");
            log.append(new, &r).unwrap();
        }
        let e = log
            .room_for_stranger("c:did:key:zA", Some("192.0.2.1"))
            .expect_err("a full share has no room");
        assert!(e.to_string().contains("per caller"), "{e}");
        assert_eq!(log.strangers_refused(), 1);
        // Another caller still has room.
        log.room_for_stranger("c:did:key:zB", Some("198.51.100.1"))
            .expect("another caller has room");
    }

    /// The user message `text` as an agent's history holds it (task `t1`, context `c`).
    fn asked(text: &str) -> Value {
        json!({"messageId": "m1", "role": "ROLE_USER", "taskId": "t1", "contextId": "c",
            "parts": [{"text": text}]})
    }

    /// Task `t1` whose history holds `held`, with a receipt by `key` for caller `did:key:zMe`
    /// whose `messages` are those of a task that held `signed_for` instead: a valid signature,
    /// the right task, agent and caller, and other work.
    fn task_signed_for(key: &SecretKey, held: &Value, signed_for: &Value) -> Value {
        let did = key.did_key();
        let mut t = json!({"id": "t1", "contextId": "c",
            "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-01-01T00:00:01Z"},
            "history": [signed_for]});
        let r = Receipt::for_task(
            &t,
            did.as_str(),
            Some("did:key:zMe"),
            "2026-01-01T00:00:00Z",
            vec![],
        );
        let jws = receipt::sign(&r, key, &did.with_fragment(did.method_specific_id()));
        t["history"] = json!([held]);
        t["metadata"] = json!({(receipt::METADATA_KEY): jws});
        t
    }

    /// The writer: a receipt whose `messages` do not list the digest of the request the
    /// task's history holds is refused, by name, and not logged; the same task with the
    /// receipt of its own message is logged.
    #[tokio::test]
    async fn a_receipt_for_another_message_is_refused_and_not_logged() {
        let (_d, _s, log) = log_with(0);
        let key = SecretKey::from_seed(&[3; 32]);
        let agent = key.did_key().to_string();
        let forged: agentnet_a2a::types::Task = serde_json::from_value(task_signed_for(
            &key,
            &asked("what I asked"),
            &asked("transfer everything"),
        ))
        .unwrap();
        let rec = Recorder::Local(log.clone(), resolver());
        let held = request_of(&forged);
        let got = rec
            .record(
                "call",
                &agent,
                Some("did:key:zMe"),
                &forged,
                held,
                None,
                None,
            )
            .await;
        let Recorded::Refused { reason } = &got else {
            panic!("a receipt for another message was accepted: {got:?}");
        };
        assert!(reason.contains("does not cover the request"), "{reason}");
        assert_eq!(log.len(), 0, "nothing is logged");
        // The admin API's writer refuses it too.
        let new = NewEntry {
            writer: "call".into(),
            task_id: "t1".into(),
            agent: agent.clone(),
            caller: Some("did:key:zMe".into()),
            receipt: receipt_of(&forged).unwrap(),
            message: Some(asked("what I asked")),
            on_behalf: None,
            on_behalf_source: None,
        };
        let e = verify_and_append(&log, &resolver(), new.clone())
            .await
            .unwrap_err();
        assert!(e.to_string().contains("does not cover the request"), "{e}");
        // Without a request there is nothing the receipt can be shown to cover.
        let bare = NewEntry {
            message: None,
            ..new
        };
        let e = verify_and_append(&log, &resolver(), bare)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("no request"), "{e}");
        assert_eq!(log.len(), 0);
        // The receipt of the message sent is logged.
        let honest: agentnet_a2a::types::Task = serde_json::from_value(task_signed_for(
            &key,
            &asked("what I asked"),
            &asked("what I asked"),
        ))
        .unwrap();
        let got = rec
            .record(
                "call",
                &agent,
                Some("did:key:zMe"),
                &honest,
                request_of(&honest),
                Some(&request_of(&honest).unwrap().parts),
                None,
            )
            .await;
        assert!(matches!(got, Recorded::Logged { seq: 1, .. }), "{got:?}");
    }

    /// `lines` (entries as JSON) as an export whose chain is whole: each `prev`, and the head,
    /// recomputed, as whoever edits an export can do.
    fn rechained(lines: Vec<Value>) -> String {
        rechained_with(lines, None)
    }

    /// [`rechained`], each `seq` renumbered from 1, the header carrying `checkpoint`.
    fn rechained_with(lines: Vec<Value>, checkpoint: Option<&str>) -> String {
        let mut prev = GENESIS.to_string();
        let mut body = String::new();
        for (i, mut e) in lines.into_iter().enumerate() {
            e["seq"] = json!(i as u64 + 1);
            e["prev"] = json!(prev);
            let bytes = agentnet_did::jcs::canonicalize(&e);
            prev = receipt::digest(&bytes);
            body.push('\n');
            body.push_str(std::str::from_utf8(&bytes).unwrap());
        }
        let n = body.lines().filter(|l| !l.is_empty()).count() as u64;
        format!("{}{body}", export_header(n, &prev, checkpoint))
    }

    fn entry_json(key: &SecretKey, seq: u64, request: &Value, receipt: &str) -> Value {
        json!({
            "seq": seq, "prev": "", "at": "2026-01-01T00:00:02Z", "writer": "call",
            "taskId": "t1", "agent": key.did_key().to_string(), "caller": "did:key:zMe",
            "receipt": receipt, "receiptDigest": receipt::receipt_digest(receipt),
            "subReceipts": [], "state": "TASK_STATE_COMPLETED",
            "request": {"messageDigest": receipt::digest_json(request), "message": request},
        })
    }

    /// The verifier: an export (chain recomputed) holding an entry whose receipt does not
    /// list its request's digest is refused, naming the entry and why; so is one that records
    /// no request. The same export with the covering receipt verifies.
    #[tokio::test]
    async fn an_export_entry_whose_receipt_does_not_cover_its_request_is_named() {
        let key = SecretKey::from_seed(&[3; 32]);
        let mine = asked("what I asked");
        let honest = task_signed_for(&key, &mine, &mine);
        let good = honest["metadata"][receipt::METADATA_KEY].as_str().unwrap();
        let forged = task_signed_for(&key, &mine, &asked("transfer everything"));
        let bad = forged["metadata"][receipt::METADATA_KEY].as_str().unwrap();

        let ok = rechained(vec![entry_json(&key, 1, &mine, good)]);
        let r = verify_export(&ok, &resolver(), Trust::FromFile)
            .await
            .unwrap();
        assert!(r.ok, "{r:?}");

        let text = rechained(vec![
            entry_json(&key, 1, &mine, good),
            entry_json(&key, 2, &mine, bad),
        ]);
        let r = verify_export(&text, &resolver(), Trust::FromFile)
            .await
            .unwrap();
        assert!(!r.ok, "an entry whose receipt covers other work verified");
        assert_eq!(r.bad_entry, Some(2), "{r:?}");
        let why = r.reason.unwrap_or_default();
        assert!(why.contains("does not cover"), "{why}");

        let mut none = entry_json(&key, 1, &mine, good);
        none["request"] = json!({"messageDigest": null, "message": null});
        let r = verify_export(&rechained(vec![none]), &resolver(), Trust::FromFile)
            .await
            .unwrap();
        assert_eq!(r.bad_entry, Some(1), "{r:?}");
        assert!(
            r.reason
                .as_deref()
                .unwrap_or_default()
                .contains("no request"),
            "{r:?}"
        );
    }

    #[tokio::test]
    async fn an_export_verifies_offline_and_a_changed_line_is_named() {
        let (_d, _s, log) = log_with(3);
        let (seq, digest) = log.head();
        let mut text = export_header(seq, &digest, None);
        for (_, b) in log.raw_page(0, 10).unwrap() {
            text.push('\n');
            text.push_str(std::str::from_utf8(&b).unwrap());
        }
        let r = verify_export(&text, &resolver(), Trust::FromFile)
            .await
            .unwrap();
        assert!(r.ok, "{r:?}");
        let bad = text.replace("task-2", "task-7");
        let r = verify_export(&bad, &resolver(), Trust::FromFile)
            .await
            .unwrap();
        assert_eq!(r.bad_entry, Some(3), "{r:?}");
    }

    /// The node's key in the signed-log tests.
    fn node_key() -> SecretKey {
        SecretKey::from_seed(&[9; 32])
    }

    /// A log of `n` entries kept with the node's key: it signs a checkpoint at every append.
    fn signed_log(n: usize) -> (tempfile::TempDir, Store, Arc<AuditLog>) {
        let dir = tempfile::tempdir().unwrap();
        let store =
            crate::db::open(dir.path(), agentnet_discovery::store::Limits::default()).unwrap();
        let log = AuditLog::open(&store, Limits::default(), Some(node_key())).unwrap();
        let key = SecretKey::from_seed(&[3; 32]);
        for i in 0..n {
            let task = format!("task-{i}");
            let (jws, r) = receipt_for(&key, &task);
            let new = NewEntry {
                writer: "call".into(),
                task_id: task.clone(),
                agent: key.did_key().to_string(),
                caller: Some("did:key:zMe".into()),
                receipt: jws,
                on_behalf: None,
                on_behalf_source: None,
                message: Some(hi(&task)),
            };
            log.append(new, &r).unwrap();
        }
        (dir, store, log)
    }

    /// The export `agentnet audit export` writes of `log`.
    fn export_of(log: &AuditLog) -> String {
        let (seq, digest, checkpoint) = log.signed_head();
        let mut text = export_header(seq, &digest, checkpoint.as_deref());
        for (_, b) in log.raw_page(0, MAX_PAGE).unwrap() {
            text.push('\n');
            text.push_str(std::str::from_utf8(&b).unwrap());
        }
        text
    }

    /// An export's header (as JSON) and entries (as JSON values).
    fn parts_of(text: &str) -> (Value, Vec<Value>) {
        let mut lines = text.lines();
        let header = serde_json::from_str(lines.next().unwrap()).unwrap();
        let entries = lines.map(|l| serde_json::from_str(l).unwrap()).collect();
        (header, entries)
    }

    /// A well-formed entry for a task the log never held, with a valid receipt by the agent.
    fn stranger_entry(task: &str) -> Value {
        let key = SecretKey::from_seed(&[3; 32]);
        let (jws, _) = receipt_for(&key, task);
        let m = hi(task);
        json!({
            "seq": 0, "prev": "", "at": "2026-01-01T00:00:02Z", "writer": "call",
            "taskId": task, "agent": key.did_key().to_string(), "caller": "did:key:zMe",
            "receipt": jws, "receiptDigest": receipt::receipt_digest(&jws),
            "subReceipts": [], "state": "TASK_STATE_COMPLETED",
            "request": {"messageDigest": receipt::digest_json(&m), "message": m},
        })
    }

    /// The attacker holds an export of the node's signed log and edits it: cuts the last
    /// entry, removes one, reorders two, replaces one, forges one, and recomputes every `prev`
    /// and the head each time. Without a checkpoint each edit verifies (what every export did
    /// before checkpoints); with the node's checkpoint, each is refused, checked against the
    /// node's DID and against the DID the file names.
    #[tokio::test]
    async fn recomputed_chains_are_refused_by_the_signed_checkpoint() {
        let (_d, _s, log) = signed_log(4);
        let node = node_key().did_key().to_string();
        let text = export_of(&log);
        let r = verify_export(&text, &resolver(), Trust::Given(&node))
            .await
            .unwrap();
        assert!(r.ok, "{r:?}");
        assert_eq!(r.signed_by.as_deref(), Some(node.as_str()));
        assert_eq!(r.note, None);
        let (header, entries) = parts_of(&text);
        let checkpoint = header["checkpoint"].as_str().unwrap();
        let attacks: Vec<(&str, Vec<Value>)> = vec![
            ("cut", entries[..3].to_vec()),
            (
                "removed",
                vec![entries[0].clone(), entries[2].clone(), entries[3].clone()],
            ),
            (
                "reordered",
                vec![
                    entries[0].clone(),
                    entries[2].clone(),
                    entries[1].clone(),
                    entries[3].clone(),
                ],
            ),
            (
                "replaced",
                vec![
                    entries[0].clone(),
                    stranger_entry("task-x"),
                    entries[2].clone(),
                    entries[3].clone(),
                ],
            ),
            ("forged", {
                let mut e = entries.clone();
                e.push(stranger_entry("task-x"));
                e
            }),
        ];
        for (what, lines) in attacks {
            // The chain alone is whole: the old verifier accepts the edit.
            let bare = rechained_with(lines.clone(), None);
            let r = verify_export(&bare, &resolver(), Trust::FromFile)
                .await
                .unwrap();
            assert!(r.ok, "{what}: the recomputed chain itself is whole: {r:?}");
            assert!(r.note.unwrap().starts_with("unsigned"), "{what}");
            // With the node's checkpoint kept, it is refused.
            let edited = rechained_with(lines, Some(checkpoint));
            for trust in [Trust::Given(&node), Trust::FromFile] {
                let r = verify_export(&edited, &resolver(), trust).await.unwrap();
                assert!(!r.ok, "{what} ({trust:?}) verified: {r:?}");
                let why = r.reason.unwrap_or_default();
                assert!(why.contains("does not end where"), "{what}: {why}");
            }
            // Stripped of its checkpoint, it is refused by whoever knows the node's DID.
            let r = verify_export(&bare, &resolver(), Trust::Given(&node))
                .await
                .unwrap();
            assert!(!r.ok, "{what}: an unsigned export verified against {node}");
            assert!(r.reason.unwrap().contains("no signed checkpoint"), "{what}");
        }
    }

    /// The attacker removes an entry, recomputes the chain and signs a checkpoint of it with
    /// a key of its own: refused against the node's DID; against the DID in the file it is
    /// only self-consistent, and the report says so.
    #[tokio::test]
    async fn a_checkpoint_re_signed_by_another_key_is_refused() {
        let (_d, _s, log) = signed_log(3);
        let node = node_key().did_key().to_string();
        let (_, entries) = parts_of(&export_of(&log));
        let lines = vec![entries[0].clone(), entries[2].clone()];
        let bare = rechained_with(lines.clone(), None);
        let (h, _) = parts_of(&bare);
        let bytes: u64 = bare.lines().skip(1).map(|l| l.len() as u64).sum();
        let mallory = SecretKey::from_seed(&[66; 32]);
        let did = mallory.did_key();
        let forged = checkpoint::sign(
            &Checkpoint::new(
                did.as_str(),
                2,
                h["head"]["digest"].as_str().unwrap(),
                bytes,
                "2026-01-01T00:00:03Z",
            ),
            &mallory,
            &did.with_fragment(did.method_specific_id()),
        );
        let edited = rechained_with(lines, Some(&forged));
        let r = verify_export(&edited, &resolver(), Trust::Given(&node))
            .await
            .unwrap();
        assert!(!r.ok, "a checkpoint by another key verified: {r:?}");
        assert!(
            r.reason
                .as_deref()
                .unwrap_or_default()
                .contains("another key"),
            "{r:?}"
        );
        let r = verify_export(&edited, &resolver(), Trust::FromFile)
            .await
            .unwrap();
        assert!(r.ok, "{r:?}");
        assert_eq!(r.signed_by.as_deref(), Some(did.as_str()));
        assert!(r.note.unwrap().contains("self-consistent"));
    }

    /// A log an older node kept (no checkpoint) is signed when the node opens it with its key,
    /// and its stored checkpoint verifies; an export without one still verifies, as unsigned.
    #[tokio::test]
    async fn an_older_log_is_signed_on_open_and_older_exports_read_as_unsigned() {
        let (dir, store, log) = log_with(2);
        let old = export_of(&log);
        assert!(!old.lines().next().unwrap().contains("checkpoint"));
        let r = verify_export(&old, &resolver(), Trust::FromFile)
            .await
            .unwrap();
        assert!(r.ok && r.signed_by.is_none(), "{r:?}");
        assert!(r.note.unwrap().starts_with("unsigned"));
        drop(log);
        let log = AuditLog::open(&store, Limits::default(), Some(node_key())).unwrap();
        let node = node_key().did_key().to_string();
        let r = verify_export(&export_of(&log), &resolver(), Trust::Given(&node))
            .await
            .unwrap();
        assert!(r.ok, "{r:?}");
        let r = log.verify(&resolver()).await;
        assert!(
            r.ok && r.signed_by.as_deref() == Some(node.as_str()),
            "{r:?}"
        );
        drop((store, dir));
    }
}
