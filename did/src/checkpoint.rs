//! Signed checkpoints of a hash-chained log (issue 43): a node states, under its own key, how
//! long its audit log is and what its last entry's digest is.
//!
//! A checkpoint is a compact JWS with `alg: EdDSA` and `kid` = a DID URL of the node's DID;
//! its payload is the RFC 8785 bytes of a [`Checkpoint`]. Whoever knows the node's DID can
//! check that a copy of the log (an export) ends where the node said it ended: an export whose
//! chain was recomputed after an entry was cut, removed, reordered, replaced or forged no
//! longer ends at the signed digest. `docs/PROTOCOL.md`, "Receipts and the audit log", says
//! what a checkpoint proves and what it does not.
//!
//! ```
//! use agentnet_did::{checkpoint, SecretKey};
//!
//! let key = SecretKey::from_seed(&[7; 32]);
//! let did = key.did_key();
//! let kid = did.with_fragment(did.method_specific_id());
//! let c = checkpoint::Checkpoint::new(did.as_str(), 3, &"ab".repeat(32), 900, "2026-01-01T00:00:00Z");
//! let jws = checkpoint::sign(&c, &key, &kid);
//! let key = agentnet_did::PublicKey::Ed25519(key.public());
//! let got = checkpoint::verify_with_key(&jws, &key, Some(did.as_str())).unwrap();
//! assert_eq!(got.seq, 3);
//! ```

use serde::{Deserialize, Serialize};

use crate::document::Relationship;
use crate::key::{PublicKey, SecretKey};
use crate::{Did, DidUrl, ResolveError, Resolver};

/// The payload's `type`.
pub const TYPE: &str = "agentnet-audit-checkpoint";
/// The payload version, member `v`.
pub const VERSION: u64 = 1;
/// Largest compact JWS accepted (4 KiB: a checkpoint is a few short members).
pub const MAX_CHECKPOINT_BYTES: usize = 4 << 10;

const PAYLOAD_LIMITS: crate::json::Limits = crate::json::Limits {
    max_depth: 2,
    max_values: 16,
};

/// The signed statement: the log of `node` held `seq` entries, `bytes` bytes of them, and the
/// last one's digest was `digest`, at `at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// Payload version, [`VERSION`].
    pub v: u64,
    /// [`TYPE`]: a checkpoint cannot be taken for another kind of signed statement.
    #[serde(rename = "type")]
    pub kind: String,
    /// The node's DID (the signer; the `kid` is a DID URL of it).
    pub node: String,
    /// Entries in the log.
    pub seq: u64,
    /// The last entry's digest (the log's genesis value when it is empty).
    pub digest: String,
    /// Bytes of all entries.
    pub bytes: u64,
    /// When the node signed it (RFC 3339).
    pub at: String,
}

impl Checkpoint {
    /// The checkpoint of `node`'s log at `(seq, digest, bytes)`, signed at `at`.
    pub fn new(node: &str, seq: u64, digest: &str, bytes: u64, at: &str) -> Self {
        Checkpoint {
            v: VERSION,
            kind: TYPE.into(),
            node: node.into(),
            seq,
            digest: digest.into(),
            bytes,
            at: at.into(),
        }
    }

    /// The payload bytes: RFC 8785 of the checkpoint as JSON.
    pub fn payload(&self) -> Vec<u8> {
        // A struct of strings and numbers always serializes.
        let v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        crate::jcs::canonicalize(&v)
    }
}

/// Why a checkpoint does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// Not a compact JWS we read, or its payload is not a [`Checkpoint`].
    #[error("malformed checkpoint: {0}")]
    Malformed(String),
    /// `alg` is not `EdDSA`.
    #[error("checkpoint algorithm {0:?} not accepted (EdDSA only)")]
    Algorithm(String),
    /// The `kid` DID did not resolve.
    #[error("resolving the checkpoint's signer: {0}")]
    Resolve(#[from] ResolveError),
    /// The `kid` is not an `assertionMethod` of its DID, or not a key of the payload's node.
    #[error("checkpoint signer not authorized: {0}")]
    NotAuthorized(String),
    /// Signed by another node than the one expected.
    #[error("the checkpoint is signed by {got}, not by {expected}: the log was re-signed by another key")]
    OtherSigner {
        /// The checkpoint's node.
        got: String,
        /// The DID the verifier was given.
        expected: String,
    },
    /// The signature does not verify: changed, or signed with another key.
    #[error(
        "checkpoint signature does not verify (kid {0}): it was changed or signed with another key"
    )]
    Invalid(String),
}

/// Sign `c` with `key` as the verification method `kid`: the compact JWS.
pub fn sign(c: &Checkpoint, key: &SecretKey, kid: &DidUrl) -> String {
    let header = serde_json::json!({"alg": "EdDSA", "kid": kid.to_string(), "typ": "JOSE"});
    crate::jws::sign(&header, &c.payload(), key)
}

struct Parsed {
    kid: DidUrl,
    checkpoint: Checkpoint,
    input_len: usize,
    sig: Vec<u8>,
}

/// Take a checkpoint apart and check who it claims to be from: `expected`, when given, must be
/// its node's DID, and the `kid` must be a DID URL of that DID.
fn parse(jws: &str, expected: Option<&str>) -> Result<Parsed, CheckpointError> {
    let c = crate::jws::parse(jws, MAX_CHECKPOINT_BYTES, PAYLOAD_LIMITS).map_err(|e| match e {
        crate::jws::JwsError::Malformed(m) => CheckpointError::Malformed(m),
        crate::jws::JwsError::Algorithm(a) => CheckpointError::Algorithm(a),
    })?;
    let checkpoint: Checkpoint = serde_json::from_value(c.payload)
        .map_err(|e| CheckpointError::Malformed(format!("payload: {e}")))?;
    if checkpoint.v != VERSION || checkpoint.kind != TYPE {
        return Err(CheckpointError::Malformed(format!(
            "not a {TYPE} of version {VERSION}"
        )));
    }
    if let Some(want) = expected {
        if checkpoint.node != want || c.kid.did().as_str() != want {
            return Err(CheckpointError::OtherSigner {
                got: c.kid.did().to_string(),
                expected: want.to_string(),
            });
        }
    }
    if checkpoint.node != c.kid.did().as_str() {
        return Err(CheckpointError::NotAuthorized(format!(
            "kid {} is not a key of the checkpoint's node {}",
            c.kid, checkpoint.node
        )));
    }
    Ok(Parsed {
        kid: c.kid,
        checkpoint,
        input_len: c.input_len,
        sig: c.sig,
    })
}

fn check(jws: &str, p: Parsed, key: &PublicKey) -> Result<Checkpoint, CheckpointError> {
    if key.jws_alg() != "EdDSA" {
        return Err(CheckpointError::Algorithm(key.jws_alg().to_string()));
    }
    if !key.verify(&jws.as_bytes()[..p.input_len], &p.sig) {
        return Err(CheckpointError::Invalid(p.kid.to_string()));
    }
    Ok(p.checkpoint)
}

/// Verify with a key the caller already has; `expected`, when given, is the node's DID.
pub fn verify_with_key(
    jws: &str,
    key: &PublicKey,
    expected: Option<&str>,
) -> Result<Checkpoint, CheckpointError> {
    let p = parse(jws, expected)?;
    check(jws, p, key)
}

/// Verify: the checkpoint is by `expected` (when given; else by whichever DID it names),
/// resolve that DID (a did:key needs no fetch), check the `kid` is an `assertionMethod` and
/// the signature.
pub async fn verify(
    jws: &str,
    resolver: &Resolver,
    expected: Option<&str>,
) -> Result<Checkpoint, CheckpointError> {
    let p = parse(jws, expected)?;
    let did: Did = p.kid.did().clone();
    let doc = resolver.resolve(&did).await?;
    let key = doc
        .key_for(&p.kid.to_string(), Relationship::AssertionMethod)
        .map_err(|e| CheckpointError::NotAuthorized(e.to_string()))?;
    check(jws, p, &key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(seed: u8) -> (String, String) {
        let key = SecretKey::from_seed(&[seed; 32]);
        let did = key.did_key();
        let c = Checkpoint::new(did.as_str(), 2, "ab", 10, "2026-01-01T00:00:00Z");
        (
            sign(&c, &key, &did.with_fragment(did.method_specific_id())),
            did.to_string(),
        )
    }

    #[tokio::test]
    async fn a_checkpoint_verifies_for_its_node_and_not_for_another() {
        let resolver = Resolver::new(Default::default()).unwrap();
        let (jws, did) = signed(1);
        let (_, other) = signed(2);
        assert_eq!(verify(&jws, &resolver, Some(&did)).await.unwrap().seq, 2);
        assert!(matches!(
            verify(&jws, &resolver, Some(&other)).await,
            Err(CheckpointError::OtherSigner { .. })
        ));
        // A changed payload under the same signature.
        let mut parts: Vec<String> = jws.split('.').map(str::to_string).collect();
        let c = Checkpoint::new(&did, 3, "ab", 10, "2026-01-01T00:00:00Z");
        use base64::Engine as _;
        parts[1] = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(c.payload());
        assert!(matches!(
            verify(&parts.join("."), &resolver, Some(&did)).await,
            Err(CheckpointError::Invalid(_))
        ));
    }
}
