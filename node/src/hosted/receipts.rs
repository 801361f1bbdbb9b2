//! Signed receipts of the hosted agents' tasks ([`agentnet_did::receipt`]): each task that
//! reaches a terminal state, and whose caller asked for a receipt ([`asked`]), is signed by its
//! agent's key as it is written ([`Sealer`], a [`crate::hosted::tasks::Seal`]), whatever the
//! path: a turn's outcome, a handler failure, a cancel, the restart that fails tasks left
//! working.

use std::collections::HashMap;
use std::sync::Mutex;

use agentnet_a2a::types::Task;
use agentnet_did::receipt::{self, Receipt};
use agentnet_did::{DidUrl, SecretKey};
use serde_json::Value;

/// `Task.metadata` member with the time the task was first written (RFC 3339): the receipt's
/// `created`.
pub const CREATED_KEY: &str = "agentnet.created";
/// `Task.metadata` member with the sub-receipt digests gathered so far (a `proxy`'s upstream
/// receipts), which the receipt's `subReceipts` lists.
pub const SUBS_KEY: &str = "agentnet.subReceipts";
/// Most tasks with sub-receipt digests waiting to be written at once ([`SubReceipts`]).
pub const MAX_PENDING: usize = 4096;

/// Sub-receipt digests a handler learned during a turn, until the engine writes the task.
#[derive(Debug, Default)]
pub struct SubReceipts(Mutex<HashMap<String, Vec<String>>>);

impl SubReceipts {
    /// Note `digest` for task `task_id`; `false` when [`MAX_PENDING`] tasks wait already or
    /// the task has [`receipt::MAX_SUB_RECEIPTS`] (the digest is then not listed).
    pub fn add(&self, task_id: &str, digest: String) -> bool {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !m.contains_key(task_id) && m.len() >= MAX_PENDING {
            return false;
        }
        let v = m.entry(task_id.to_string()).or_default();
        if v.len() >= receipt::MAX_SUB_RECEIPTS {
            return false;
        }
        v.push(digest);
        true
    }

    fn take(&self, task_id: &str) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(task_id)
            .unwrap_or_default()
    }
}

/// Signs the receipts of one hosted agent.
#[derive(Debug)]
pub struct Sealer {
    key: SecretKey,
    did: String,
    kid: DidUrl,
    subs: std::sync::Arc<SubReceipts>,
    chains: std::sync::Arc<agentnet_did::delegation::Memo>,
}

impl Sealer {
    /// The sealer of the agent with `key` (its did:key; `kid` the verification method its
    /// card is signed with).
    pub fn new(key: &SecretKey, subs: std::sync::Arc<SubReceipts>) -> Self {
        let did = key.did_key();
        Sealer {
            key: SecretKey::from_seed(&key.seed()),
            kid: did.with_fragment(did.method_specific_id()),
            did: did.to_string(),
            subs,
            chains: Default::default(),
        }
    }

    /// Digest delegation chains from the links the agents' gates parsed (`memo`): the same
    /// digest, without the chain's RFC 8785 bytes written again for every receipt.
    pub fn with_chains(mut self, memo: std::sync::Arc<agentnet_did::delegation::Memo>) -> Self {
        self.chains = memo;
        self
    }

    /// Stamp `created`, gather the sub-receipts, and sign the receipt of a terminal task
    /// that has none yet and whose caller [`asked`] for one.
    pub fn seal(&self, caller: Option<&str>, task: &mut Task) {
        let now = || chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let pending = self.subs.take(&task.id);
        let asked = asked(task);
        let meta = task.metadata.get_or_insert_with(Default::default);
        meta.entry(CREATED_KEY.to_string())
            .or_insert_with(|| Value::String(now()));
        if !pending.is_empty() {
            let list = meta
                .entry(SUBS_KEY.to_string())
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(a) = list {
                let room = receipt::MAX_SUB_RECEIPTS.saturating_sub(a.len());
                a.extend(pending.into_iter().take(room).map(Value::String));
            }
        }
        if !task.status.state.is_terminal() || meta.contains_key(receipt::METADATA_KEY) || !asked {
            return;
        }
        let created = meta
            .get(CREATED_KEY)
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(now);
        let subs = meta
            .get(SUBS_KEY)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|d| d.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        // The facts read in place: a task as a whole JSON value would copy its delegation
        // chain and every message (docs/BENCHMARKS.md, "The chain kept once").
        let messages: Result<Vec<Value>, _> = task
            .history
            .iter()
            .flatten()
            .filter(|m| m.role == agentnet_a2a::types::Role::User)
            .take(receipt::MAX_DIGESTS)
            .map(serde_json::to_value)
            .collect();
        let artifacts: Result<Vec<Value>, _> = task
            .artifacts
            .iter()
            .flatten()
            .take(receipt::MAX_DIGESTS)
            .map(serde_json::to_value)
            .collect();
        let (Ok(messages), Ok(artifacts), Ok(Value::String(state))) = (
            messages,
            artifacts,
            serde_json::to_value(&task.status.state),
        ) else {
            return;
        };
        let ended = task
            .status
            .timestamp
            .and_then(|t| serde_json::to_value(t).ok());
        let chain = task
            .metadata
            .as_ref()
            .and_then(|m| m.get(agentnet_did::delegation::METADATA_MEMBER))
            .filter(|c| !c.is_null());
        let facts = receipt::Facts {
            task_id: &task.id,
            context_id: &task.context_id,
            messages: messages.iter(),
            artifacts: artifacts.iter(),
            // The chain's digest is put in below, from the memo.
            delegation: None,
            state: &state,
            ended: ended.as_ref().and_then(Value::as_str),
        };
        let mut r = Receipt::of(facts, &self.did, caller, &created, subs);
        if let Some(chain) = chain {
            // The receipt names digests as bare hex; the chain's carries its algorithm.
            let d = self.chains.digest(chain);
            r.delegation = Some(d.strip_prefix("sha256:").unwrap_or(&d).to_string());
        }
        let jws = receipt::sign(&r, &self.key, &self.kid);
        task.metadata
            .get_or_insert_with(Default::default)
            .insert(receipt::METADATA_KEY.to_string(), Value::String(jws));
    }
}

/// Whether the caller asked for a receipt: one of its messages in the task lists
/// [`receipt::EXTENSION`] in its `extensions` (A2A's way for a message to name an extension it
/// uses). A caller that does not (an SDK that knows nothing of receipts, a load generator) is
/// not made to wait for a signature it would not read: a receipt costs one Ed25519 signature
/// and the JCS and SHA-256 of every message and artifact, about a fifth of an open agent's
/// request (docs/BENCHMARKS.md, "A2A"). `agentnet call`, the MCP tools and a `proxy` ask
/// whenever the card declares the extension (`crate::call`).
pub fn asked(task: &Task) -> bool {
    task.history.iter().flatten().any(|m| {
        m.role == agentnet_a2a::types::Role::User
            && m.extensions
                .iter()
                .flatten()
                .any(|e| e == receipt::EXTENSION)
    })
}

/// The card extension that says the agent signs receipts.
pub fn extension() -> Value {
    serde_json::json!({
        "uri": receipt::EXTENSION,
        "description": "When a task ends (COMPLETED, FAILED, CANCELED, REJECTED), and a message of the caller's in it listed this URI in its extensions, the agent signs a receipt with its DID key: a compact JWS (EdDSA, kid a DID URL of the agent) over the RFC 8785 bytes of {v, taskId, contextId, agent, caller, delegation, messages, artifacts, state, created, ended, subReceipts}, in Task.metadata[\"signed-receipts/v1\"].",
        "required": false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentnet_a2a::types::{Message, TaskState, TaskStatus};

    /// A user message with `extensions`.
    fn message(id: &str, extensions: Option<Vec<&str>>) -> Message {
        serde_json::from_value(serde_json::json!({
            "messageId": id, "role": "ROLE_USER", "parts": [{"text": "hi"}],
            "extensions": extensions,
        }))
        .unwrap()
    }

    /// A history whose one message asks for a receipt.
    fn asking() -> Option<Vec<Message>> {
        Some(vec![message("m0", Some(vec![receipt::EXTENSION]))])
    }

    /// A receipt is signed for a caller who asks for one (a message of its task lists the
    /// extension), and only then: a task whose messages name no extension, or another one,
    /// ends without one (its `created` still stamped); a later message that asks gets it.
    #[test]
    fn a_receipt_is_signed_only_for_a_caller_who_asks() {
        let key = SecretKey::from_seed(&[8; 32]);
        let s = Sealer::new(&key, Default::default());
        let mut t = Task {
            id: "t2".into(),
            context_id: "c2".into(),
            status: TaskStatus {
                state: TaskState::Completed,
                message: None,
                timestamp: Some(chrono::Utc::now()),
            },
            artifacts: None,
            history: Some(vec![
                message("m1", None),
                message("m2", Some(vec!["urn:example:other"])),
            ]),
            metadata: None,
        };
        s.seal(None, &mut t);
        let meta = t.metadata.clone().unwrap();
        assert!(meta.contains_key(CREATED_KEY));
        assert!(!meta.contains_key(receipt::METADATA_KEY), "{meta:?}");
        let mut agent_asks = message("m3", Some(vec![receipt::EXTENSION]));
        agent_asks.role = agentnet_a2a::types::Role::Agent;
        t.history.as_mut().unwrap().push(agent_asks);
        s.seal(None, &mut t);
        assert!(
            !t.metadata
                .as_ref()
                .unwrap()
                .contains_key(receipt::METADATA_KEY),
            "only the caller's own messages ask"
        );
        t.history.as_mut().unwrap().push(message(
            "m4",
            Some(vec!["urn:example:other", receipt::EXTENSION]),
        ));
        s.seal(None, &mut t);
        let r = sealed_for(&key, &t, None);
        assert_eq!(r.messages.len(), 3);
    }

    /// A task the last run left working is failed at start, and signed by its agent then.
    #[test]
    fn the_restart_signs_the_tasks_it_fails() {
        use agentnet_a2a::auth::Owner;
        use agentnet_a2a::store::TaskStore as _;
        let dir = tempfile::tempdir().unwrap();
        let (_store, db) = crate::hosted::tasks::open_dir(dir.path(), Default::default()).unwrap();
        let key = SecretKey::from_seed(&[6; 32]);
        let sealer = std::sync::Arc::new(Sealer::new(&key, Default::default()));
        let owner = Owner::Caller("did:key:zCaller".into());
        let mut t = Task {
            id: "t1".into(),
            context_id: "c1".into(),
            status: TaskStatus {
                state: TaskState::Working,
                message: None,
                timestamp: None,
            },
            artifacts: None,
            history: asking(),
            metadata: None,
        };
        sealer.seal(owner.caller(), &mut t);
        db.agent("a").put(&owner, &t).unwrap();
        assert_eq!(
            crate::hosted::recover(&db, &[("a".into(), sealer)]).unwrap(),
            1
        );
        let t = db.agent("a").get(&owner, "t1").unwrap().unwrap();
        assert_eq!(t.status.state, TaskState::Failed);
        let jws = t.metadata.as_ref().unwrap()[receipt::METADATA_KEY]
            .as_str()
            .expect("the failed task carries a receipt");
        let did = key.did_key().to_string();
        let expect = receipt::Expected {
            task_id: "t1",
            agent: &did,
            caller: Some("did:key:zCaller"),
            message: None,
        };
        let pk = agentnet_did::PublicKey::Ed25519(key.public());
        let r = receipt::verify_with_key(jws, &pk, &expect).unwrap();
        assert_eq!(r.state, "TASK_STATE_FAILED");
    }

    /// The receipt `t` carries, verified as signed by `key` for `did:key:zCaller`.
    fn sealed_for_caller(key: &SecretKey, t: &Task) -> Receipt {
        sealed_for(key, t, Some("did:key:zCaller"))
    }

    /// The receipt `t` carries, verified as signed by `key` for `caller`.
    fn sealed_for(key: &SecretKey, t: &Task, caller: Option<&str>) -> Receipt {
        let jws = t.metadata.as_ref().unwrap()[receipt::METADATA_KEY]
            .as_str()
            .expect("the task carries a receipt");
        let did = key.did_key().to_string();
        let expect = receipt::Expected {
            task_id: &t.id,
            agent: &did,
            caller,
            message: None,
        };
        let pk = agentnet_did::PublicKey::Ed25519(key.public());
        receipt::verify_with_key(jws, &pk, &expect).unwrap()
    }

    /// The sealer reads the typed task in place; what it signs is what the receipt of the
    /// same task as JSON says (`Receipt::for_task`, the definition the verifiers follow).
    #[test]
    fn the_receipt_read_in_place_is_the_receipt_of_the_task_as_json() {
        use agentnet_a2a::types::{Artifact, Role};
        let key = SecretKey::from_seed(&[4; 32]);
        let s = Sealer::new(&key, Default::default());
        let msg = |id: &str, role: Role, text: &str| {
            let mut m: Message = serde_json::from_value(serde_json::json!({
                "messageId": id, "role": "ROLE_USER", "parts": [{"text": text}],
                "metadata": {"k": [1, "é", {"b": 2, "a": 1}]},
                "extensions": [receipt::EXTENSION],
            }))
            .unwrap();
            m.role = role;
            m
        };
        let art: Artifact = serde_json::from_value(serde_json::json!({
            "artifactId": "a1", "parts": [{"text": "out"}]
        }))
        .unwrap();
        let mut t = Task {
            id: "t9".into(),
            context_id: "c9".into(),
            status: TaskStatus {
                state: TaskState::Completed,
                message: None,
                timestamp: Some(chrono::Utc::now()),
            },
            artifacts: Some(vec![art.clone(), art]),
            history: Some(vec![
                msg("m1", Role::User, "one"),
                msg("m2", Role::Agent, "two"),
                msg("m3", Role::User, "three"),
            ]),
            metadata: Some(HashMap::from([(
                agentnet_did::delegation::METADATA_MEMBER.to_string(),
                serde_json::json!([{"issuer": "did:key:z1", "n": 1.5}]),
            )])),
        };
        s.seal(Some("did:key:zCaller"), &mut t);
        let got = sealed_for_caller(&key, &t);
        let did = key.did_key().to_string();
        let created = t.metadata.as_ref().unwrap()[CREATED_KEY]
            .as_str()
            .unwrap()
            .to_string();
        let json = serde_json::to_value(&t).unwrap();
        let want = Receipt::for_task(&json, &did, Some("did:key:zCaller"), &created, vec![]);
        assert_eq!(got, want);
        assert_eq!((got.messages.len(), got.artifacts.len()), (2, 2));
        assert!(got.delegation.is_some());
    }

    /// With the gate's memo, the receipt names the chain by the digest a verifier computes
    /// from the task (RFC 8785 of `Task.metadata.actorChain`), for a chain the memo holds and
    /// for one that only looks like it (a link changed, its proof value kept).
    #[test]
    fn the_chain_digest_from_the_memo_is_the_chain_s_own() {
        use agentnet_did::delegation::{self, Capability, Chain, Grant, Memo};
        let key = SecretKey::from_seed(&[4; 32]);
        let memo = std::sync::Arc::new(Memo::default());
        let s = Sealer::new(&key, Default::default()).with_chains(memo.clone());
        let p = SecretKey::from_seed(&[8; 32]);
        let (pd, ad) = (p.did_key(), SecretKey::from_seed(&[9; 32]).did_key());
        let cap = Capability {
            ops: vec!["send".into()],
            depth: 0,
            ..Default::default()
        };
        let now = delegation::now();
        let grant = Grant {
            audience: &ad,
            capability: &cap,
            valid_from: now,
            valid_until: now + 60,
        };
        let chain = delegation::issue(&p, &pd.with_fragment(pd.method_specific_id()), &grant, None)
            .unwrap();
        Chain::parse_with(&chain, Some(&memo)).unwrap();
        assert_eq!(memo.len(), 1);
        let mut altered = chain.clone();
        altered[0]["validUntil"] = serde_json::json!(delegation::rfc3339(now + 6000));
        for c in [&chain, &altered] {
            let mut t = Task {
                id: "t7".into(),
                context_id: "c7".into(),
                status: TaskStatus {
                    state: TaskState::Completed,
                    message: None,
                    timestamp: Some(chrono::Utc::now()),
                },
                artifacts: None,
                history: asking(),
                metadata: Some(HashMap::from([(
                    delegation::METADATA_MEMBER.to_string(),
                    c.clone(),
                )])),
            };
            s.seal(Some("did:key:zCaller"), &mut t);
            let got = sealed_for_caller(&key, &t);
            assert_eq!(got.delegation, Some(receipt::digest_json(c)));
        }
    }

    #[test]
    fn only_a_terminal_task_gets_a_receipt_and_it_names_its_sub_receipts() {
        let key = SecretKey::from_seed(&[5; 32]);
        let subs = std::sync::Arc::new(SubReceipts::default());
        let s = Sealer::new(&key, subs.clone());
        let mut t = Task {
            id: "t1".into(),
            context_id: "c1".into(),
            status: TaskStatus {
                state: TaskState::Working,
                message: None,
                timestamp: None,
            },
            artifacts: None,
            history: asking(),
            metadata: None,
        };
        s.seal(Some("did:key:zCaller"), &mut t);
        let meta = t.metadata.clone().unwrap();
        assert!(meta.contains_key(CREATED_KEY) && !meta.contains_key(receipt::METADATA_KEY));
        assert!(subs.add("t1", "ab".repeat(32)));
        t.status.state = TaskState::Completed;
        s.seal(Some("did:key:zCaller"), &mut t);
        let r = sealed_for_caller(&key, &t);
        assert_eq!(r.sub_receipts, vec!["ab".repeat(32)]);
        assert_eq!(r.state, "TASK_STATE_COMPLETED");
    }
}
