//! The message ids callers have sent, with the task each started, so that a repeated
//! `SendMessage` (a retry after a lost answer) is answered with that task instead of starting a
//! second one: exactly-once sends for a caller that retries with the same `messageId`.
//!
//! Bounded per owner, per source (an IPv4 address or IPv6 /64: owners are free to mint) and in
//! total; past a bound the oldest entry of that owner, that source, or of all is forgotten
//! first. A forgotten message sent again starts a new task, as before this existed. Kept in
//! memory: after a restart a retry starts a new task. A follow-up message on an existing task
//! needs none of this: the task's own history tells whether it was received.

use std::collections::{HashMap, VecDeque};

use crate::auth::{Caller, Owner, Source};

/// The bounds of [`Seen`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub(crate) per_owner: usize,
    pub(crate) per_source: usize,
    pub(crate) total: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    owner: Owner,
    message_id: String,
}

#[derive(Debug)]
struct Entry {
    key: Key,
    source: Source,
}

/// Message id → task id, per owner, oldest first.
#[derive(Debug)]
pub(crate) struct Seen {
    bounds: Bounds,
    tasks: HashMap<Key, String>,
    order: VecDeque<Entry>,
    per_owner: HashMap<Owner, usize>,
    per_source: HashMap<Source, usize>,
}

impl Seen {
    pub(crate) fn new(bounds: Bounds) -> Self {
        Seen {
            bounds,
            tasks: HashMap::new(),
            order: VecDeque::new(),
            per_owner: HashMap::new(),
            per_source: HashMap::new(),
        }
    }

    /// The task `message_id` of `owner` started, if it is remembered.
    pub(crate) fn task(&self, owner: &Owner, message_id: &str) -> Option<&str> {
        self.tasks
            .get(&Key {
                owner: owner.clone(),
                message_id: message_id.to_owned(),
            })
            .map(String::as_str)
    }

    /// Remember that `message_id` of `caller` started `task_id` (a message already remembered
    /// keeps its first task).
    pub(crate) fn insert(&mut self, caller: &Caller, message_id: &str, task_id: &str) {
        if self.bounds.total == 0 {
            return;
        }
        let key = Key {
            owner: caller.owner.clone(),
            message_id: message_id.to_owned(),
        };
        if self.tasks.contains_key(&key) {
            return;
        }
        let owner = caller.owner.clone();
        let source = caller.source;
        if self.per_owner.get(&owner).copied().unwrap_or(0) >= self.bounds.per_owner {
            self.forget_first(|e| e.key.owner == owner);
        }
        if self.per_source.get(&source).copied().unwrap_or(0) >= self.bounds.per_source {
            self.forget_first(|e| e.source == source);
        }
        if self.tasks.len() >= self.bounds.total {
            self.forget_first(|_| true);
        }
        *self.per_owner.entry(owner).or_default() += 1;
        *self.per_source.entry(source).or_default() += 1;
        self.tasks.insert(key.clone(), task_id.to_owned());
        self.order.push_back(Entry { key, source });
    }

    /// Forget the oldest entry that `which` picks.
    fn forget_first(&mut self, which: impl Fn(&Entry) -> bool) {
        let Some(i) = self.order.iter().position(which) else {
            return;
        };
        let Some(e) = self.order.remove(i) else {
            return;
        };
        self.tasks.remove(&e.key);
        decrement(&mut self.per_owner, &e.key.owner);
        decrement(&mut self.per_source, &e.source);
    }

    /// Entries remembered (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.tasks.len()
    }
}

fn decrement<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, k: &K) {
    if let Some(n) = map.get_mut(k) {
        *n -= 1;
        if *n == 0 {
            map.remove(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(did: &str, ip: [u8; 4]) -> Caller {
        Caller::new(
            Owner::Caller(did.into()),
            Source::of(std::net::IpAddr::from(ip)),
        )
    }

    #[test]
    fn a_message_keeps_its_first_task_and_owners_do_not_share_ids() {
        let mut s = Seen::new(Bounds {
            per_owner: 4,
            per_source: 8,
            total: 16,
        });
        let a = caller("did:key:a", [10, 0, 0, 1]);
        let b = caller("did:key:b", [10, 0, 0, 1]);
        s.insert(&a, "m1", "t1");
        s.insert(&a, "m1", "t2");
        assert_eq!(s.task(&a.owner, "m1"), Some("t1"));
        assert_eq!(s.task(&b.owner, "m1"), None, "another owner's message id");
        s.insert(&b, "m1", "t3");
        assert_eq!(s.task(&b.owner, "m1"), Some("t3"));
    }

    #[test]
    fn each_bound_forgets_the_oldest_of_its_own() {
        let mut s = Seen::new(Bounds {
            per_owner: 2,
            per_source: 3,
            total: 4,
        });
        let a = caller("did:key:a", [10, 0, 0, 1]);
        for i in 0..3 {
            s.insert(&a, &format!("m{i}"), &format!("t{i}"));
        }
        // Per owner: the owner's oldest goes.
        assert_eq!(s.task(&a.owner, "m0"), None);
        assert_eq!(s.task(&a.owner, "m2"), Some("t2"));
        // Per source: strangers minting DIDs on one address push out that address's oldest,
        // not another address's entries.
        let far = caller("did:key:far", [192, 0, 2, 1]);
        s.insert(&far, "f", "tf");
        for i in 0..3 {
            let minted = caller(&format!("did:key:x{i}"), [10, 0, 0, 1]);
            s.insert(&minted, "m", &format!("x{i}"));
        }
        assert_eq!(s.task(&far.owner, "f"), Some("tf"), "another source kept");
        assert!(s.len() <= 4);
        // In total: the oldest of all.
        let mut t = Seen::new(Bounds {
            per_owner: 10,
            per_source: 10,
            total: 2,
        });
        let c = caller("did:key:c", [10, 0, 0, 2]);
        for i in 0..3 {
            t.insert(&c, &format!("m{i}"), &format!("t{i}"));
        }
        assert_eq!(t.len(), 2);
        assert_eq!(t.task(&c.owner, "m0"), None);
        assert_eq!(t.task(&c.owner, "m1"), Some("t1"));
    }
}
