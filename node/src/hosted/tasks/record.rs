//! A task's record: written with its delegation chain kept apart ([`Record`], "Chains kept
//! once" in [`super`]'s module doc), read back whole, or cut as a page asks without parsing
//! what the page drops.

use agentnet_a2a::store::{ListQuery, StoreError};
use agentnet_a2a::types::Task;
use agentnet_did::delegation::METADATA_MEMBER as CHAIN_MEMBER;
use sha2::Digest as _;

use super::keys::{chain_key, ChainDigest, Scope};
use super::{backend, TaskDb};

/// The first byte of a record that holds its chain's digest (then 32 bytes) rather than the
/// chain: a JSON record starts with `{`.
const APART: u8 = 0;

/// A task as its record is written: the record's bytes, and the chain kept apart (its digest
/// and JSON) when the task holds one.
pub(super) struct Record {
    pub(super) bytes: Vec<u8>,
    pub(super) chain: Option<(ChainDigest, Vec<u8>)>,
}

impl Record {
    /// `task`'s record. A chain is a JSON array (what the delegation gate admits); any other
    /// value under the member stays in the record.
    pub(super) fn of(task: &Task) -> Result<Record, serde_json::Error> {
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
    pub(super) fn split(raw: &[u8]) -> (Option<ChainDigest>, &[u8]) {
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
    pub(super) fn depth(&self) -> usize {
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

impl TaskDb {
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
    pub(super) fn decode_for_page(
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

    pub(super) fn load(&self, scope: &Scope, id: &str) -> Result<Option<Task>, StoreError> {
        Ok(self.read(scope, id)?.map(|(t, _)| t))
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosted::tasks::accounting::{Acct, Usage};
    use crate::hosted::tasks::fixtures::{open, task};
    use crate::hosted::tasks::Retention;
    use agentnet_a2a::auth::Owner;
    use agentnet_a2a::store::TaskStore;
    use agentnet_a2a::types::TaskState;
    use agentnet_discovery::store::FamilyOp;
    use std::time::Duration;

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
}
