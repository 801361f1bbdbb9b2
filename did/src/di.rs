//! W3C Data Integrity proofs with the `eddsa-jcs-2022` cryptosuite (W3C "Data Integrity EdDSA
//! Cryptosuites v1.0", section 3.3): the proof agentnet's delegation links carry
//! ([`crate::delegation`]).
//!
//! Written here rather than taken from `ssi`: `ssi` is opt-in (a 14-minute build) and this
//! suite is four steps over what the crate already has (RFC 8785 in [`crate::jcs`], Ed25519,
//! multibase). What it signs:
//!
//! 1. the proof options: the `proof` object without `proofValue` (when signing, the document's
//!    `@context` is copied into it, and stays in the proof);
//! 2. the document without `proof`;
//! 3. `SHA-256(JCS(options)) ‖ SHA-256(JCS(document))`, signed with Ed25519; `proofValue` is
//!    the signature in multibase base58-btc (`z…`).
//!
//! Interoperability is tested against digitalbazaar's `@digitalbazaar/eddsa-jcs-2022-cryptosuite`
//! with `@digitalbazaar/vc` (tests/e2e/delegation.rs).

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::document::Relationship;
use crate::key::{PublicKey, SecretKey};
use crate::{DidUrl, Document};

/// The proof `type`.
pub const PROOF_TYPE: &str = "DataIntegrityProof";
/// The cryptosuite.
pub const CRYPTOSUITE: &str = "eddsa-jcs-2022";

/// Why a proof could not be made or did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProofError {
    /// The document or its proof is not what the suite signs.
    #[error("malformed proof: {0}")]
    Malformed(String),
    /// The verification method is not the issuer's, or not an assertion key of its document.
    #[error("proof key not accepted: {0}")]
    Key(String),
    /// The signature does not verify: the document was changed or signed with another key.
    #[error("the proof does not verify: the document was modified or signed with another key")]
    Invalid,
}

/// The parts of a proof that verification needs, read without checking the signature.
#[derive(Debug, Clone)]
pub struct ProofParts {
    /// `verificationMethod`.
    pub method: DidUrl,
    /// `created`, as written.
    pub created: Option<String>,
}

/// Add an `eddsa-jcs-2022` proof to `doc` (an object without `proof`), made with `key` as the
/// verification method `method`, `proofPurpose: assertionMethod`.
pub fn sign(
    doc: &Value,
    key: &SecretKey,
    method: &DidUrl,
    created: &str,
) -> Result<Value, ProofError> {
    let obj = doc
        .as_object()
        .ok_or_else(|| ProofError::Malformed("the document must be a JSON object".into()))?;
    if obj.contains_key("proof") {
        return Err(ProofError::Malformed(
            "the document already has a proof".into(),
        ));
    }
    let mut options = Map::new();
    options.insert("type".into(), PROOF_TYPE.into());
    options.insert("cryptosuite".into(), CRYPTOSUITE.into());
    options.insert("created".into(), created.into());
    options.insert("verificationMethod".into(), method.to_string().into());
    options.insert("proofPurpose".into(), "assertionMethod".into());
    // Section 3.3.1, step 2: the proof takes the document's context (and keeps it).
    if let Some(ctx) = obj.get("@context") {
        options.insert("@context".into(), ctx.clone());
    }
    let data = hash_data(obj, &options)?;
    let signature = key.sign(&data);
    options.insert(
        "proofValue".into(),
        multibase::encode(multibase::Base::Base58Btc, signature).into(),
    );
    let mut out = obj.clone();
    out.insert("proof".into(), Value::Object(options));
    Ok(Value::Object(out))
}

/// Read the proof's verification method and creation time (no signature check).
pub fn parts(doc: &Value) -> Result<ProofParts, ProofError> {
    let proof = proof_of(doc)?;
    let method = proof
        .get("verificationMethod")
        .and_then(Value::as_str)
        .ok_or_else(|| ProofError::Malformed("proof.verificationMethod is missing".into()))?;
    let method = DidUrl::parse(method).map_err(|e| {
        ProofError::Malformed(format!("proof.verificationMethod is not a DID URL: {e}"))
    })?;
    Ok(ProofParts {
        method,
        created: proof
            .get("created")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

/// Verify the proof on `doc` with the key `doc_of_issuer` lists for its verification method
/// under `assertionMethod`. The method's DID must be the document's DID.
pub fn verify(doc: &Value, doc_of_issuer: &Document) -> Result<DidUrl, ProofError> {
    let p = parts(doc)?;
    if p.method.did().as_str() != doc_of_issuer.id.as_str() {
        return Err(ProofError::Key(format!(
            "verification method {} is not a key of {}",
            p.method, doc_of_issuer.id
        )));
    }
    let key = doc_of_issuer
        .key_for(&p.method.to_string(), Relationship::AssertionMethod)
        .map_err(|e| ProofError::Key(e.to_string()))?;
    verify_with_key(doc, &key)?;
    Ok(p.method)
}

/// Verify the proof on `doc` with `key` (the caller has checked the key belongs to the
/// proof's verification method).
pub fn verify_with_key(doc: &Value, key: &PublicKey) -> Result<(), ProofError> {
    let obj = doc
        .as_object()
        .ok_or_else(|| ProofError::Malformed("the document must be a JSON object".into()))?;
    let proof = proof_of(doc)?;
    for (name, want) in [
        ("type", PROOF_TYPE),
        ("cryptosuite", CRYPTOSUITE),
        ("proofPurpose", "assertionMethod"),
    ] {
        if proof.get(name).and_then(Value::as_str) != Some(want) {
            return Err(ProofError::Malformed(format!(
                "proof.{name} must be {want:?}"
            )));
        }
    }
    let value = proof
        .get("proofValue")
        .and_then(Value::as_str)
        .ok_or_else(|| ProofError::Malformed("proof.proofValue is missing".into()))?;
    if value.len() > 128 {
        return Err(ProofError::Malformed("proof.proofValue is too long".into()));
    }
    let sig = match multibase::decode(value) {
        Ok((multibase::Base::Base58Btc, bytes)) if bytes.len() == 64 => bytes,
        _ => {
            return Err(ProofError::Malformed(
                "proof.proofValue must be a base58-btc multibase Ed25519 signature".into(),
            ))
        }
    };
    if !matches!(key, PublicKey::Ed25519(_)) {
        return Err(ProofError::Key(
            "eddsa-jcs-2022 needs an Ed25519 key".into(),
        ));
    }
    let mut options = proof.clone();
    options.remove("proofValue");
    let mut unsecured = obj.clone();
    unsecured.remove("proof");
    if let Some(ctx) = options.get("@context") {
        // The document's context must start with the proof's (section 3.3.2, step 4).
        let prefix_ok = match (ctx, unsecured.get("@context")) {
            (Value::Array(p), Some(Value::Array(d))) => d.starts_with(p),
            (p, Some(d)) => p == d,
            _ => false,
        };
        if !prefix_ok {
            return Err(ProofError::Malformed(
                "proof.@context does not match the document's @context".into(),
            ));
        }
        unsecured.insert("@context".into(), ctx.clone());
    }
    let data = hash_data(&unsecured, &options)?;
    if key.verify(&data, &sig) {
        Ok(())
    } else {
        Err(ProofError::Invalid)
    }
}

fn proof_of(doc: &Value) -> Result<&Map<String, Value>, ProofError> {
    match doc.get("proof") {
        Some(Value::Object(p)) => Ok(p),
        Some(Value::Array(_)) => Err(ProofError::Malformed(
            "one proof expected, not a set of proofs".into(),
        )),
        _ => Err(ProofError::Malformed("no proof".into())),
    }
}

/// `SHA-256(JCS(options)) ‖ SHA-256(JCS(document))`.
fn hash_data(
    doc: &Map<String, Value>,
    options: &Map<String, Value>,
) -> Result<Vec<u8>, ProofError> {
    let mut out =
        Sha256::digest(crate::jcs::canonicalize(&Value::Object(options.clone()))).to_vec();
    out.extend_from_slice(&Sha256::digest(crate::jcs::canonicalize(&Value::Object(
        doc.clone(),
    ))));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key_and_doc() -> (SecretKey, DidUrl, Document) {
        let key = SecretKey::from_seed(&[7; 32]);
        let did = key.did_key();
        let vm = did.with_fragment(did.method_specific_id());
        let doc = crate::didkey::document(&key.public(), Default::default());
        (key, vm, doc)
    }

    #[test]
    fn signs_and_verifies_and_any_change_breaks_it() {
        let (key, vm, doc) = key_and_doc();
        let cred = json!({"@context": ["https://www.w3.org/ns/credentials/v2"], "a": 1});
        let signed = sign(&cred, &key, &vm, "2026-12-01T00:00:00Z").unwrap();
        assert_eq!(verify(&signed, &doc).unwrap(), vm);
        let mut changed = signed.clone();
        changed["a"] = json!(2);
        assert_eq!(verify(&changed, &doc), Err(ProofError::Invalid));
        let mut changed = signed.clone();
        changed["proof"]["created"] = json!("2026-12-02T00:00:00Z");
        assert_eq!(verify(&changed, &doc), Err(ProofError::Invalid));
        let mut changed = signed.clone();
        changed["proof"]["cryptosuite"] = json!("eddsa-rdfc-2022");
        assert!(matches!(
            verify(&changed, &doc),
            Err(ProofError::Malformed(_))
        ));
        let other = SecretKey::from_seed(&[8; 32]);
        let other_doc = crate::didkey::document(&other.public(), Default::default());
        assert!(matches!(
            verify(&signed, &other_doc),
            Err(ProofError::Key(_))
        ));
    }
}
