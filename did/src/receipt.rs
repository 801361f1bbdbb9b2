//! Signed task receipts (issue 18): what an agent attests when one of its A2A tasks ends.
//!
//! A receipt is a compact JWS (RFC 7515) with `alg: EdDSA` and `kid` = the DID URL of the
//! agent's verification method; its payload is the RFC 8785 ([`crate::jcs`]) bytes of a
//! [`Receipt`]. It travels in `Task.metadata` under [`METADATA_KEY`] (A2A proposal #2152's
//! `signed-receipts/v1`), and a card that produces them lists [`EXTENSION`] in
//! `capabilities.extensions`. Every digest is the lowercase hex SHA-256 of the JCS bytes of
//! the JSON value it names ([`digest_json`]); a receipt's own digest ([`receipt_digest`]) is
//! the SHA-256 of its compact serialization's ASCII bytes. `docs/PROTOCOL.md`, "Receipts and
//! the audit log", is the specification.
//!
//! ```
//! use agentnet_did::{receipt, SecretKey};
//! use serde_json::json;
//!
//! let key = SecretKey::from_seed(&[7; 32]);
//! let did = key.did_key();
//! let kid = did.with_fragment(did.method_specific_id());
//! let task = json!({"id": "t1", "contextId": "c1",
//!     "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-01-01T00:00:01Z"}});
//! let r = receipt::Receipt::for_task(&task, did.as_str(), None, "2026-01-01T00:00:00Z", vec![]);
//! let jws = receipt::sign(&r, &key, &kid);
//! let expect = receipt::Expected { task_id: "t1", agent: did.as_str(), caller: None, message: None };
//! let got = receipt::verify_with_key(&jws, &agentnet_did::PublicKey::Ed25519(key.public()), &expect).unwrap();
//! assert_eq!(got.state, "TASK_STATE_COMPLETED");
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::document::Relationship;
use crate::key::{PublicKey, SecretKey};
use crate::{Did, DidUrl, Document, ResolveError, Resolver};

/// The `Task.metadata` member that holds the receipt (a compact JWS string).
pub const METADATA_KEY: &str = "signed-receipts/v1";
/// The extension URI a card lists in `capabilities.extensions` (`required: false`).
pub const EXTENSION: &str = "urn:agentnet:a2a:signed-receipts:v1";
/// The payload version, member `v`.
pub const VERSION: u64 = 1;
/// Largest compact JWS accepted (256 KiB): the payload holds one digest per message and
/// artifact, each bounded below.
pub const MAX_RECEIPT_BYTES: usize = 256 << 10;
/// Most message or artifact digests in one receipt: 1,024 (the engine keeps fewer).
pub const MAX_DIGESTS: usize = 1024;
/// Most sub-receipt digests in one receipt: 256.
pub const MAX_SUB_RECEIPTS: usize = 256;

const PAYLOAD_LIMITS: crate::json::Limits = crate::json::Limits {
    max_depth: 4,
    max_values: 4 * MAX_DIGESTS,
};

/// The signed statement. Members are camelCase on the wire; unknown members are kept out
/// (a later version may add some: verifiers ignore them, the JWS covers them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    /// Payload version, [`VERSION`].
    pub v: u64,
    /// The task id.
    pub task_id: String,
    /// The task's context id.
    pub context_id: String,
    /// The agent's DID (the signer; the `kid` is a DID URL of it).
    pub agent: String,
    /// The caller's DID (the task's owner), `null` when the caller did not sign.
    pub caller: Option<String>,
    /// Digest of the delegation chain used (`Task.metadata.actorChain`), `null` when absent.
    pub delegation: Option<String>,
    /// Digests of the caller's messages (`history` entries with `role: ROLE_USER`), in order.
    pub messages: Vec<String>,
    /// Digests of the task's artifacts, in order.
    pub artifacts: Vec<String>,
    /// The final state (`TASK_STATE_COMPLETED`, `_FAILED`, `_CANCELED`, `_REJECTED`).
    pub state: String,
    /// When the task was created (RFC 3339).
    pub created: String,
    /// When it ended: its final status timestamp (RFC 3339).
    pub ended: String,
    /// Receipt digests ([`receipt_digest`]) of the sub-tasks the agent had done by others.
    pub sub_receipts: Vec<String>,
}

/// Why a receipt does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiptError {
    /// Not a compact JWS we read (parts, base64, header JSON, size, payload not JCS).
    #[error("malformed receipt: {0}")]
    Malformed(String),
    /// `alg` is not `EdDSA`.
    #[error("receipt algorithm {0:?} not accepted (EdDSA only)")]
    Algorithm(String),
    /// The `kid` DID did not resolve.
    #[error("resolving the receipt's signer: {0}")]
    Resolve(#[from] ResolveError),
    /// The `kid` is not an `assertionMethod` of its DID, or not a key of the agent.
    #[error("receipt signer not authorized: {0}")]
    NotAuthorized(String),
    /// The signature does not verify: changed, or signed by another key.
    #[error("receipt signature does not verify (kid {0}): the receipt was modified or signed with another key")]
    Invalid(String),
    /// It verifies but is not the receipt expected: another task, agent or caller (a receipt
    /// replayed from another task is refused here).
    #[error("receipt is for {what} {got:?}, expected {expected:?}")]
    Mismatch {
        /// `task id`, `agent`, `caller`.
        what: &'static str,
        /// What the receipt says.
        got: String,
        /// What was expected.
        expected: String,
    },
    /// It verifies and names the task, agent and caller expected, but its `messages` do not
    /// list the digest of the request the caller sent: it attests other work than the
    /// caller's (an agent that answers one request and signs for another).
    #[error("receipt for task {task_id:?} does not cover the request: its messages do not list the digest {digest} of the message sent (it attests other work)")]
    NotCovered {
        /// The receipt's task id.
        task_id: String,
        /// The digest of the request ([`digest_json`] of the message as the agent holds it).
        digest: String,
    },
}

/// What the verifier expects the receipt to be about.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// The task it followed.
    pub task_id: &'a str,
    /// The agent it called (a DID).
    pub agent: &'a str,
    /// The DID it signed its requests with, `None` when it did not sign.
    pub caller: Option<&'a str>,
    /// The digest of the request the receipt must cover: [`digest_json`] of the caller's
    /// message as the agent holds it (`docs/PROTOCOL.md`, "Kept once"), which must be one of
    /// the receipt's `messages` ([`Receipt::covers`]). `None` checks no message: a caller
    /// that logs a receipt always gives one.
    pub message: Option<&'a str>,
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Lowercase hex SHA-256 of the RFC 8785 bytes of `v`.
pub fn digest_json(v: &Value) -> String {
    digest(&crate::jcs::canonicalize(v))
}

/// The digest that names a receipt: SHA-256 of the compact JWS's ASCII bytes.
pub fn receipt_digest(jws: &str) -> String {
    digest(jws.as_bytes())
}

fn is_terminal(state: &str) -> bool {
    matches!(
        state,
        "TASK_STATE_COMPLETED"
            | "TASK_STATE_FAILED"
            | "TASK_STATE_CANCELED"
            | "TASK_STATE_REJECTED"
    )
}

/// What a receipt says of its task, borrowed from wherever the task is held
/// ([`Receipt::for_task`] reads it from a task's JSON; a server holding typed tasks gives
/// each message and artifact as JSON, and copies nothing else).
#[derive(Debug, Clone)]
pub struct Facts<'a, M, A> {
    /// The task id.
    pub task_id: &'a str,
    /// Its context id.
    pub context_id: &'a str,
    /// The caller's messages (`history` entries of role `ROLE_USER`) as JSON, in order: the
    /// first [`MAX_DIGESTS`] are read.
    pub messages: M,
    /// Its artifacts as JSON: the first [`MAX_DIGESTS`] are read.
    pub artifacts: A,
    /// The delegation chain used (`Task.metadata.actorChain`).
    pub delegation: Option<&'a Value>,
    /// Its state (`TASK_STATE_…`).
    pub state: &'a str,
    /// Its status timestamp, if any.
    pub ended: Option<&'a str>,
}

impl Receipt {
    /// The receipt of `task` (an A2A `Task` as JSON) by `agent` for `caller`: messages are the
    /// `history` entries of role `ROLE_USER`, `ended` the status timestamp (else `created`).
    /// Digests past [`MAX_DIGESTS`] / [`MAX_SUB_RECEIPTS`] are not listed (the engine stores
    /// fewer messages and artifacts than that).
    pub fn for_task(
        task: &Value,
        agent: &str,
        caller: Option<&str>,
        created: &str,
        sub_receipts: Vec<String>,
    ) -> Receipt {
        fn s(v: Option<&Value>) -> &str {
            v.and_then(Value::as_str).unwrap_or_default()
        }
        fn list(v: Option<&Value>) -> &[Value] {
            v.and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
        }
        let status = task.get("status");
        let facts = Facts {
            task_id: s(task.get("id")),
            context_id: s(task.get("contextId")),
            messages: list(task.get("history"))
                .iter()
                .filter(|m| m.get("role").and_then(Value::as_str) == Some("ROLE_USER")),
            artifacts: list(task.get("artifacts")).iter(),
            delegation: task.get("metadata").and_then(|m| m.get("actorChain")),
            state: s(status.and_then(|st| st.get("state"))),
            ended: status
                .and_then(|st| st.get("timestamp"))
                .and_then(Value::as_str),
        };
        Receipt::of(facts, agent, caller, created, sub_receipts)
    }

    /// The receipt of the task `facts` describe (see [`Receipt::for_task`]).
    pub fn of<M, A>(
        facts: Facts<'_, M, A>,
        agent: &str,
        caller: Option<&str>,
        created: &str,
        mut sub_receipts: Vec<String>,
    ) -> Receipt
    where
        M: Iterator,
        M::Item: std::borrow::Borrow<Value>,
        A: Iterator,
        A::Item: std::borrow::Borrow<Value>,
    {
        use std::borrow::Borrow as _;
        sub_receipts.truncate(MAX_SUB_RECEIPTS);
        Receipt {
            v: VERSION,
            task_id: facts.task_id.to_string(),
            context_id: facts.context_id.to_string(),
            agent: agent.to_string(),
            caller: caller.map(str::to_string),
            delegation: facts.delegation.filter(|c| !c.is_null()).map(digest_json),
            messages: facts
                .messages
                .take(MAX_DIGESTS)
                .map(|m| digest_json(m.borrow()))
                .collect(),
            artifacts: facts
                .artifacts
                .take(MAX_DIGESTS)
                .map(|a| digest_json(a.borrow()))
                .collect(),
            state: facts.state.to_string(),
            created: created.to_string(),
            ended: facts.ended.unwrap_or(created).to_string(),
            sub_receipts,
        }
    }

    /// Whether the receipt covers the request whose digest is `message_digest`
    /// ([`digest_json`] of the message as the agent holds it): its `messages` list it.
    pub fn covers(&self, message_digest: &str) -> bool {
        self.messages.iter().any(|m| m == message_digest)
    }

    /// `Ok` when the receipt covers the request `message_digest`
    /// ([`Receipt::covers`]), else [`ReceiptError::NotCovered`] naming the task and digest.
    pub fn check_covers(&self, message_digest: &str) -> Result<(), ReceiptError> {
        if self.covers(message_digest) {
            return Ok(());
        }
        Err(ReceiptError::NotCovered {
            task_id: self.task_id.clone(),
            digest: message_digest.to_string(),
        })
    }

    /// The payload bytes: RFC 8785 of the receipt as JSON.
    pub fn payload(&self) -> Vec<u8> {
        // A struct of strings and lists always serializes.
        let v = serde_json::to_value(self).unwrap_or(Value::Null);
        crate::jcs::canonicalize(&v)
    }
}

/// Sign `receipt` with `key` as the verification method `kid`: the compact JWS.
pub fn sign(receipt: &Receipt, key: &SecretKey, kid: &DidUrl) -> String {
    let header = serde_json::json!({"alg": "EdDSA", "kid": kid.to_string(), "typ": "JOSE"});
    crate::jws::sign(&header, &receipt.payload(), key)
}

/// A compact JWS taken apart, not yet verified.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// The `kid`.
    pub kid: DidUrl,
    /// The payload, decoded.
    pub receipt: Receipt,
    input_len: usize,
    sig: Vec<u8>,
}

/// Take a receipt apart: three base64url parts, `alg: EdDSA`, a DID URL `kid`, a payload that
/// is a [`Receipt`] in its RFC 8785 form (canonical bytes, so that its digest is stable) of
/// version [`VERSION`] whose `agent` is the `kid`'s DID.
pub fn parse(jws: &str) -> Result<Parsed, ReceiptError> {
    let c = crate::jws::parse(jws, MAX_RECEIPT_BYTES, PAYLOAD_LIMITS).map_err(|e| match e {
        crate::jws::JwsError::Malformed(m) => ReceiptError::Malformed(m),
        crate::jws::JwsError::Algorithm(a) => ReceiptError::Algorithm(a),
    })?;
    let (kid, value) = (c.kid, c.payload);
    let receipt: Receipt = serde_json::from_value(value)
        .map_err(|e| ReceiptError::Malformed(format!("payload: {e}")))?;
    if receipt.v != VERSION {
        return Err(ReceiptError::Malformed(format!(
            "version {} (this node reads {VERSION})",
            receipt.v
        )));
    }
    if !is_terminal(&receipt.state) {
        return Err(ReceiptError::Malformed(format!(
            "state {} is not terminal",
            receipt.state
        )));
    }
    if receipt.agent != kid.did().as_str() {
        return Err(ReceiptError::NotAuthorized(format!(
            "kid {kid} is not a key of the receipt's agent {}",
            receipt.agent
        )));
    }
    Ok(Parsed {
        kid,
        receipt,
        input_len: c.input_len,
        sig: c.sig,
    })
}

fn check(
    jws: &str,
    parsed: Parsed,
    key: &PublicKey,
    expect: &Expected<'_>,
) -> Result<Receipt, ReceiptError> {
    if key.jws_alg() != "EdDSA" {
        return Err(ReceiptError::Algorithm(key.jws_alg().to_string()));
    }
    if !key.verify(&jws.as_bytes()[..parsed.input_len], &parsed.sig) {
        return Err(ReceiptError::Invalid(parsed.kid.to_string()));
    }
    let r = parsed.receipt;
    let mismatch = |what, got: &str, expected: &str| ReceiptError::Mismatch {
        what,
        got: got.to_string(),
        expected: expected.to_string(),
    };
    if r.task_id != expect.task_id {
        return Err(mismatch("task id", &r.task_id, expect.task_id));
    }
    if r.agent != expect.agent {
        return Err(mismatch("agent", &r.agent, expect.agent));
    }
    if r.caller.as_deref() != expect.caller {
        return Err(mismatch(
            "caller",
            r.caller.as_deref().unwrap_or("nobody"),
            expect.caller.unwrap_or("nobody"),
        ));
    }
    if let Some(m) = expect.message {
        r.check_covers(m)?;
    }
    Ok(r)
}

/// Verify with a key the caller already has (a did:key's own key, a pinned key).
pub fn verify_with_key(
    jws: &str,
    key: &PublicKey,
    expect: &Expected<'_>,
) -> Result<Receipt, ReceiptError> {
    let parsed = parse(jws)?;
    check(jws, parsed, key, expect)
}

/// Verify with the `kid`'s DID document, already resolved: the `kid` must be listed under
/// `assertionMethod`. No I/O.
pub fn verify_with_document(
    jws: &str,
    doc: &Document,
    expect: &Expected<'_>,
) -> Result<Receipt, ReceiptError> {
    let parsed = parse(jws)?;
    let key = doc
        .key_for(&parsed.kid.to_string(), Relationship::AssertionMethod)
        .map_err(|e| ReceiptError::NotAuthorized(e.to_string()))?;
    check(jws, parsed, &key, expect)
}

/// Verify: resolve the `kid`'s DID (a did:key needs no fetch), check the method is an
/// `assertionMethod`, the signature, and that the receipt is the one `expect` names (its
/// task, agent and caller, and that it covers the request `expect.message`).
pub async fn verify(
    jws: &str,
    resolver: &Resolver,
    expect: &Expected<'_>,
) -> Result<Receipt, ReceiptError> {
    let parsed = parse(jws)?;
    let did: Did = parsed.kid.did().clone();
    let doc = resolver.resolve(&did).await?;
    let key = doc
        .key_for(&parsed.kid.to_string(), Relationship::AssertionMethod)
        .map_err(|e| ReceiptError::NotAuthorized(e.to_string()))?;
    check(jws, parsed, &key, expect)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
    use base64::Engine as _;
    use serde_json::json;

    fn task() -> Value {
        json!({
            "id": "task-1", "contextId": "ctx-1",
            "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-01-01T00:00:02Z"},
            "history": [
                {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
                {"messageId": "m2", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}
            ],
            "artifacts": [{"artifactId": "a1", "parts": [{"text": "hi"}]}],
            "metadata": {"actorChain": [{"iss": "did:key:z1"}]}
        })
    }

    fn signed(key: &SecretKey) -> (String, String) {
        let did = key.did_key();
        let r = Receipt::for_task(
            &task(),
            did.as_str(),
            Some("did:key:zCaller"),
            "2026-01-01T00:00:00Z",
            vec!["ab".into()],
        );
        (
            sign(&r, key, &did.with_fragment(did.method_specific_id())),
            did.to_string(),
        )
    }

    async fn verify_str(jws: &str, agent: &str, task: &str) -> Result<Receipt, ReceiptError> {
        let resolver = Resolver::new(Default::default()).unwrap();
        let expect = Expected {
            task_id: task,
            agent,
            caller: Some("did:key:zCaller"),
            message: None,
        };
        verify(jws, &resolver, &expect).await
    }

    #[tokio::test]
    async fn a_receipt_signed_by_its_agent_verifies_with_every_member() {
        let key = SecretKey::from_seed(&[1; 32]);
        let (jws, did) = signed(&key);
        let r = verify_str(&jws, &did, "task-1").await.unwrap();
        assert_eq!(
            (r.task_id.as_str(), r.context_id.as_str()),
            ("task-1", "ctx-1")
        );
        assert_eq!(r.caller.as_deref(), Some("did:key:zCaller"));
        assert_eq!(r.messages.len(), 1, "only the caller's messages");
        assert_eq!(r.messages[0], digest_json(&task()["history"][0]));
        assert_eq!(r.artifacts, vec![digest_json(&task()["artifacts"][0])]);
        assert_eq!(
            r.delegation,
            Some(digest_json(&json!([{"iss": "did:key:z1"}])))
        );
        assert_eq!(
            (r.created.as_str(), r.ended.as_str()),
            ("2026-01-01T00:00:00Z", "2026-01-01T00:00:02Z")
        );
        assert_eq!(r.sub_receipts, vec!["ab".to_string()]);
        // The payload is canonical and names null members.
        let p = String::from_utf8(r.payload()).unwrap();
        assert!(p.starts_with(r#"{"agent":"#), "{p}");
    }

    #[tokio::test]
    async fn one_flipped_payload_byte_is_refused() {
        let key = SecretKey::from_seed(&[1; 32]);
        let (jws, did) = signed(&key);
        let parts: Vec<&str> = jws.split('.').collect();
        let mut payload = B64URL.decode(parts[1]).unwrap();
        // "task-1" -> "task-2": still canonical JSON, so the signature is what refuses it.
        let at = payload.windows(6).position(|w| w == b"task-1").unwrap() + 5;
        payload[at] ^= 0x03;
        let forged = format!("{}.{}.{}", parts[0], B64URL.encode(&payload), parts[2]);
        let e = verify_str(&forged, &did, "task-2").await.unwrap_err();
        assert!(matches!(e, ReceiptError::Invalid(_)), "{e}");
    }

    #[tokio::test]
    async fn a_receipt_signed_by_another_key_is_refused() {
        let key = SecretKey::from_seed(&[1; 32]);
        let other = SecretKey::from_seed(&[2; 32]);
        let did = key.did_key();
        let r = Receipt::for_task(
            &task(),
            did.as_str(),
            Some("did:key:zCaller"),
            "2026-01-01T00:00:00Z",
            vec![],
        );
        // Claims the agent's kid, signed by another key.
        let jws = sign(&r, &other, &did.with_fragment(did.method_specific_id()));
        let e = verify_str(&jws, did.as_str(), "task-1").await.unwrap_err();
        assert!(matches!(e, ReceiptError::Invalid(_)), "{e}");
        // Signed by the other key as itself: it is not the agent's receipt.
        let odid = other.did_key();
        let r = Receipt::for_task(
            &task(),
            odid.as_str(),
            Some("did:key:zCaller"),
            "2026-01-01T00:00:00Z",
            vec![],
        );
        let jws = sign(&r, &other, &odid.with_fragment(odid.method_specific_id()));
        let e = verify_str(&jws, did.as_str(), "task-1").await.unwrap_err();
        assert!(
            matches!(e, ReceiptError::Mismatch { what: "agent", .. }),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_receipt_for_another_task_is_refused() {
        let key = SecretKey::from_seed(&[1; 32]);
        let (jws, did) = signed(&key);
        // A receipt replayed from an older task: it verifies, but names task-1.
        let e = verify_str(&jws, &did, "task-9").await.unwrap_err();
        assert!(
            matches!(
                e,
                ReceiptError::Mismatch {
                    what: "task id",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("task-9"), "{e}");
    }

    /// The agent answers the caller's request but signs a receipt for another message (same
    /// task, agent and caller, a valid signature): it does not cover the request, and is
    /// refused by name; the receipt of the message sent is accepted.
    #[tokio::test]
    async fn a_receipt_for_another_message_does_not_cover_the_request() {
        let key = SecretKey::from_seed(&[1; 32]);
        let did = key.did_key();
        let kid = did.with_fragment(did.method_specific_id());
        let asked = task()["history"][0].clone();
        let mut other = task();
        other["history"][0]["parts"][0]["text"] = json!("transfer everything");
        let r = Receipt::for_task(
            &other,
            did.as_str(),
            Some("did:key:zCaller"),
            "2026-01-01T00:00:00Z",
            vec![],
        );
        let jws = sign(&r, &key, &kid);
        let sent = digest_json(&asked);
        assert!(!r.covers(&sent));
        let resolver = Resolver::new(Default::default()).unwrap();
        let expect = Expected {
            task_id: "task-1",
            agent: did.as_str(),
            caller: Some("did:key:zCaller"),
            message: Some(&sent),
        };
        let e = verify(&jws, &resolver, &expect).await.unwrap_err();
        assert!(
            matches!(&e, ReceiptError::NotCovered { task_id, digest } if task_id == "task-1" && digest == &sent),
            "{e}"
        );
        assert!(e.to_string().contains("does not cover the request"), "{e}");
        let pk = PublicKey::Ed25519(key.public());
        assert!(matches!(
            verify_with_key(&jws, &pk, &expect),
            Err(ReceiptError::NotCovered { .. })
        ));
        // The receipt of the task that holds the message sent covers it.
        let (good, _) = signed(&key);
        let r = verify(&good, &resolver, &expect).await.expect("covers");
        assert!(r.covers(&sent));
        // A receipt that lists no message covers none.
        let mut none = task();
        none["history"] = json!([]);
        let r = Receipt::for_task(&none, did.as_str(), Some("did:key:zCaller"), "x", vec![]);
        assert!(r.check_covers(&sent).is_err());
    }

    #[tokio::test]
    async fn a_receipt_for_another_caller_or_with_a_foreign_kid_is_refused() {
        let key = SecretKey::from_seed(&[1; 32]);
        let (jws, did) = signed(&key);
        let resolver = Resolver::new(Default::default()).unwrap();
        let expect = Expected {
            task_id: "task-1",
            agent: &did,
            caller: Some("did:key:zOther"),
            message: None,
        };
        let e = verify(&jws, &resolver, &expect).await.unwrap_err();
        assert!(
            matches!(e, ReceiptError::Mismatch { what: "caller", .. }),
            "{e}"
        );
        // A payload that names another agent than the kid's DID.
        let r = Receipt::for_task(&task(), "did:key:zSomeoneElse", None, "x", vec![]);
        let jws = sign(
            &r,
            &key,
            &key.did_key()
                .with_fragment(key.did_key().method_specific_id()),
        );
        assert!(matches!(parse(&jws), Err(ReceiptError::NotAuthorized(_))));
    }

    #[test]
    fn non_canonical_or_unsigned_receipts_are_malformed() {
        let key = SecretKey::from_seed(&[1; 32]);
        let (jws, _) = signed(&key);
        let parts: Vec<&str> = jws.split('.').collect();
        let payload = B64URL.decode(parts[1]).unwrap();
        let pretty =
            serde_json::to_vec_pretty(&serde_json::from_slice::<Value>(&payload).unwrap()).unwrap();
        let forged = format!("{}.{}.{}", parts[0], B64URL.encode(pretty), parts[2]);
        assert!(matches!(parse(&forged), Err(ReceiptError::Malformed(_))));
        let none = format!(
            "{}.{}.",
            B64URL.encode(br#"{"alg":"none","kid":"did:key:z"}"#),
            parts[1]
        );
        assert!(matches!(parse(&none), Err(ReceiptError::Algorithm(_))));
        assert!(matches!(parse("a.b"), Err(ReceiptError::Malformed(_))));
    }
}
