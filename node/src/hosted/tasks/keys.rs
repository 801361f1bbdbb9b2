//! The keys of the task store (the table in [`super`]'s module doc): `lp` fields, a task's
//! [`Scope`] and the keys made from it, the counters' keys, and what a key or an index value
//! takes from a task (its status time, its state).

use agentnet_a2a::store::StoreError;
use agentnet_a2a::types::{TaskState, TaskStatus};

pub(super) const TOTAL_KEY: &[u8] = b"C";

/// Present once the rank entries (`w`) of every source are written.
pub(super) const RANKED_KEY: &[u8] = b"W";

pub(super) const QUARANTINE_KEY: &[u8] = b"Q";

/// The SHA-256 of a chain's JSON as the store keeps it.
pub(super) type ChainDigest = [u8; 32];

pub(super) fn chain_key(d: &ChainDigest) -> Vec<u8> {
    [&b"h"[..], d].concat()
}

pub(super) fn source_key(source: &[u8]) -> Vec<u8> {
    [&b"s"[..], source].concat()
}

/// The rank entry of a source holding `bytes`: `w ‖ (u64::MAX − bytes) ‖ source`, so that a
/// forward scan meets the largest holders first.
pub(super) fn rank_key(source: &[u8], bytes: u64) -> Vec<u8> {
    crate::db::rank_key(b"w", bytes, source)
}

/// The prefix of a source's terminal tasks, oldest first: `v ‖ lp(source)`.
pub(super) fn terminal_prefix(source: &[u8]) -> Vec<u8> {
    let mut k = vec![b'v'];
    lp(&mut k, source);
    k
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
pub(super) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xff; 16]
}

pub(super) fn micros(status: &TaskStatus) -> u64 {
    status
        .timestamp
        .map(|t| t.timestamp_micros())
        .unwrap_or(0)
        .max(0) as u64
}

pub(super) fn is_running(s: &TaskState) -> bool {
    matches!(s, TaskState::Submitted | TaskState::Working)
}

/// Finished for good: the only tasks taken to make room in a full store.
pub(super) fn is_terminal(s: &TaskState) -> bool {
    matches!(
        s,
        TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected
    )
}

pub(super) fn state_name(s: &TaskState) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The `(agent, owner)` prefix of a task's keys: `A ‖ O`.
#[derive(Debug, Clone)]
pub(super) struct Scope(Vec<u8>);

impl Scope {
    pub(super) fn new(agent: &str, owner: &[u8]) -> Result<Scope, StoreError> {
        if agent.len() > 1024 || owner.len() > 4096 {
            return Err(StoreError::Backend("agent name or owner too long".into()));
        }
        let mut v = Vec::with_capacity(4 + agent.len() + owner.len());
        lp(&mut v, agent.as_bytes());
        lp(&mut v, owner);
        Ok(Scope(v))
    }

    pub(super) fn task_key(&self, id: &str) -> Vec<u8> {
        [&self.0[..], id.as_bytes()].concat()
    }

    pub(super) fn list_prefix(&self) -> Vec<u8> {
        [&b"i"[..], &self.0].concat()
    }

    pub(super) fn list_key(&self, t: u64, id: &str) -> Vec<u8> {
        [
            &b"i"[..],
            &self.0,
            &(u64::MAX - t).to_be_bytes(),
            id.as_bytes(),
        ]
        .concat()
    }

    pub(super) fn expiry_key(&self, t: u64, id: &str) -> Vec<u8> {
        [&b"e"[..], &t.to_be_bytes(), &self.0, id.as_bytes()].concat()
    }

    pub(super) fn live_key(&self, id: &str) -> Vec<u8> {
        [&b"l"[..], &self.0, id.as_bytes()].concat()
    }

    pub(super) fn count_key(&self) -> Vec<u8> {
        [&b"c"[..], &self.0].concat()
    }

    pub(super) fn acct_key(&self, id: &str) -> Vec<u8> {
        [&b"b"[..], &self.0, id.as_bytes()].concat()
    }

    /// `v ‖ lp(source) ‖ t ‖ A ‖ O ‖ id`: a terminal task of `source`.
    pub(super) fn terminal_key(&self, source: &[u8], t: u64, id: &str) -> Vec<u8> {
        [
            &terminal_prefix(source)[..],
            &t.to_be_bytes(),
            &self.0,
            id.as_bytes(),
        ]
        .concat()
    }

    pub(super) fn quarantine_key(&self, id: &str) -> Vec<u8> {
        [&b"q"[..], &self.0, id.as_bytes()].concat()
    }

    /// Agent and owner key, for logs.
    pub(super) fn describe(&self) -> (String, String) {
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
    pub(super) fn split(b: &[u8]) -> Option<(Scope, String)> {
        let (_, rest) = read_lp(b)?;
        let (_, rest) = read_lp(rest)?;
        let scope_len = b.len() - rest.len();
        Some((
            Scope(b[..scope_len].to_vec()),
            String::from_utf8(rest.to_vec()).ok()?,
        ))
    }
}
