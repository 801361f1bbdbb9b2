//! Making room in a full store: the source holding the most bytes loses its oldest terminal
//! task, again until the new task fits ("Bounds" in [`super`]'s module doc); the rank entries
//! (`w`) that find the largest holders.

use std::sync::atomic::Ordering;

use agentnet_a2a::store::StoreError;
use agentnet_discovery::store::FamilyOp;

use super::accounting::{Acct, Usage};
use super::keys::{prefix_end, rank_key, source_key, terminal_prefix, Scope, RANKED_KEY};
use super::{backend, TaskDb, LOCAL_SOURCE};

/// Most tasks one new task takes to make room in a full store (a large new task may need a
/// few small ones to go).
const MAX_EVICTIONS: usize = 64;

/// Most holders, largest first, looked at for a finished task to take; past them a full
/// store refuses (their tasks are all working or waiting for their callers).
const RANK_SCAN: usize = 64;

/// A source whose tasks are never taken to make room: the node's own writes and its
/// operator's in-process calls ([`Source::Local`]), and tasks charged to no source.
///
/// [`Source::Local`]: agentnet_a2a::auth::Source::Local
pub(super) fn evictable(source: &[u8]) -> bool {
    !source.is_empty() && source != LOCAL_SOURCE.as_bytes()
}

impl TaskDb {
    /// Write the rank entries (`w`) of a store written before they were kept, once.
    pub(super) fn rank_sources(&self) -> Result<(), StoreError> {
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

    /// Make room in a full store for a new task of `size` bytes from `newcomer`, taking the
    /// oldest terminal task of the source holding the most bytes, again until there is room.
    /// A source is taken from only while it holds at least what the newcomer will (so a
    /// newcomer that holds the most takes from itself); a source whose tasks are all working
    /// or waiting for their caller is passed over; the node's own tasks are never taken.
    /// Whether there is room now. Called under the counts lock.
    pub(super) fn make_room(&self, newcomer: &[u8], size: u64) -> Result<bool, StoreError> {
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
}

#[cfg(test)]
mod tests {
    use crate::hosted::tasks::fixtures::{open, task};
    use crate::hosted::tasks::Retention;
    use agentnet_a2a::auth::{Caller, Owner, Source};
    use agentnet_a2a::store::{StoreError, TaskStore};
    use agentnet_a2a::types::{Message, Part, Role, TaskState};

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
}
