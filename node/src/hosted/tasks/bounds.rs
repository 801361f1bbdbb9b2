//! What the task store holds at most: [`Retention`] (how long, how many tasks, how many bytes,
//! in all, per owner and per network block) and [`CreationRate`], the per-block rate of new
//! tasks.

use std::time::Duration;

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
    ///
    /// [`Source`]: agentnet_a2a::auth::Source
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosted::tasks::fixtures::open;
    use agentnet_a2a::auth::{Caller, Owner, Source};
    use agentnet_a2a::store::{StoreError, TaskStore};

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
