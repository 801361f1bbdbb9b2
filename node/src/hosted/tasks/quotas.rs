//! Whether a new task or a growing update fits: an owner's and a source's shares (tasks and
//! bytes), the per-block creation rate, the store's total (made room for first, see
//! [`super::eviction`]) and the free-disk watermark ("Bounds" in [`super`]'s module doc).

use std::sync::atomic::Ordering;

use agentnet_a2a::store::StoreError;

use super::accounting::Usage;
use super::keys::{source_key, Scope};
use super::{backend, TaskDb};

impl TaskDb {
    /// Whether the store's total holds no room for one more task of `size` bytes.
    pub(super) fn total_full(&self, size: u64) -> bool {
        let r = &self.retention;
        self.total.load(Ordering::Relaxed) >= r.max_tasks
            || self
                .bytes
                .load(Ordering::Relaxed)
                .saturating_add(size.max(1))
                > r.max_bytes
    }

    pub(super) fn disk_low(&self, free: Option<u64>) -> Result<(), StoreError> {
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
    pub(super) fn check_room(
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
    pub(super) fn check_bytes(
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosted::tasks::fixtures::{open, task};
    use crate::hosted::tasks::Retention;
    use agentnet_a2a::auth::{Caller, Owner, Source};
    use agentnet_a2a::store::TaskStore;
    use agentnet_a2a::types::{Message, Part, Role, TaskState};

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
}
