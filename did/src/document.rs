//! DID documents: the data model we read and write, the checks every resolved document must pass,
//! and key lookup through a verification relationship.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::key::{KeyError, PublicKey};
use crate::{Did, DidUrl};

/// Moved to [`crate::json`], which [`check`](crate::json::check) uses; kept here for old paths.
pub use crate::json::check_json_depth;

/// Largest nesting depth we accept in a DID document's JSON.
pub const MAX_JSON_DEPTH: usize = 32;
/// Most JSON values (scalars, arrays, objects) in a DID document. A real document has a few
/// dozen to a few hundred; the bound keeps a 256 KiB body of one-digit numbers from parsing into
/// megabytes (every value is 32 bytes parsed, and the document is held twice: as typed fields
/// and as its source JSON).
pub const MAX_JSON_VALUES: usize = 4096;
/// Most verification methods (embedded or referenced, all relationships together) we look at.
pub const MAX_VERIFICATION_METHODS: usize = 64;

/// A verification relationship (DID Core §5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relationship {
    /// Proving control of the DID (logins, signed HTTP requests).
    Authentication,
    /// Issuing statements (signed cards, advertisements, document proofs).
    AssertionMethod,
    /// Key agreement (encryption).
    KeyAgreement,
    /// Invoking capabilities.
    CapabilityInvocation,
    /// Delegating capabilities.
    CapabilityDelegation,
}

impl Relationship {
    /// The property name in a DID document.
    pub fn as_str(self) -> &'static str {
        match self {
            Relationship::Authentication => "authentication",
            Relationship::AssertionMethod => "assertionMethod",
            Relationship::KeyAgreement => "keyAgreement",
            Relationship::CapabilityInvocation => "capabilityInvocation",
            Relationship::CapabilityDelegation => "capabilityDelegation",
        }
    }
}

/// A verification method.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerificationMethod {
    /// Its id, a DID URL (possibly relative, `#key-1`).
    pub id: String,
    /// Its type: `Multikey`, `Ed25519VerificationKey2020`, `JsonWebKey2020`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The DID that controls it.
    pub controller: String,
    /// Multibase-encoded key (Multikey, Ed25519VerificationKey2020, X25519KeyAgreementKey2020).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key_multibase: Option<String>,
    /// JWK-encoded key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key_jwk: Option<crate::key::Jwk>,
    /// Raw base58btc key (Ed25519VerificationKey2018).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key_base58: Option<String>,
    /// Any other properties, kept as they were.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl VerificationMethod {
    /// The public key this method carries.
    pub fn public_key(&self) -> Result<PublicKey, KeyError> {
        if let Some(jwk) = &self.public_key_jwk {
            return PublicKey::from_jwk(jwk);
        }
        if let Some(mb) = &self.public_key_multibase {
            return match self.kind.as_str() {
                "Multikey" | "Ed25519VerificationKey2020" => PublicKey::from_multikey(mb),
                other => Err(KeyError::UnsupportedType(format!(
                    "{other} with publicKeyMultibase"
                ))),
            };
        }
        if let Some(b58) = &self.public_key_base58 {
            if self.kind != "Ed25519VerificationKey2018" {
                return Err(KeyError::UnsupportedType(format!(
                    "{} with publicKeyBase58",
                    self.kind
                )));
            }
            if b58.len() > 128 {
                return Err(KeyError::InvalidPublicKey(
                    "publicKeyBase58 too long".into(),
                ));
            }
            let raw = multibase::Base::Base58Btc
                .decode(b58)
                .map_err(|e| KeyError::InvalidPublicKey(format!("publicKeyBase58: {e}")))?;
            return crate::key::ed25519_from_bytes(&raw);
        }
        Err(KeyError::InvalidPublicKey(format!(
            "verification method {} has no key material",
            self.id
        )))
    }
}

/// An entry of a verification relationship: a reference to a method, or a method embedded there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MethodRef {
    /// A DID URL naming a method in `verificationMethod`.
    Reference(String),
    /// A method defined in place (boxed: a method is large, a reference is one string).
    Embedded(Box<VerificationMethod>),
}

impl MethodRef {
    fn id(&self) -> &str {
        match self {
            MethodRef::Reference(id) => id,
            MethodRef::Embedded(vm) => &vm.id,
        }
    }
}

/// A DID document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Document {
    /// JSON-LD contexts.
    #[serde(rename = "@context", default, skip_serializing_if = "Value::is_null")]
    pub context: Value,
    /// The DID this document describes.
    pub id: String,
    /// Other identifiers for the subject.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_known_as: Vec<String>,
    /// Controllers of the DID (a string or a list, kept as written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<Value>,
    /// Verification methods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verification_method: Vec<VerificationMethod>,
    /// Keys for authentication.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub authentication: Vec<MethodRef>,
    /// Keys for assertions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub assertion_method: Vec<MethodRef>,
    /// Keys for key agreement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_agreement: Vec<MethodRef>,
    /// Keys for capability invocation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capability_invocation: Vec<MethodRef>,
    /// Keys for capability delegation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capability_delegation: Vec<MethodRef>,
    /// Services (kept as written).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service: Vec<Value>,
    /// A Data Integrity proof over the document (did:wba).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<Value>,
    /// Any other properties, kept as they were.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// The JSON this document was parsed from, when it was: proofs are checked over exactly
    /// that, not over our re-serialization (which would drop empty members, for one).
    #[serde(skip)]
    pub source: Option<Value>,
    /// Keys already decoded by [`Document::key_for`]: a cached document verifies many
    /// signatures, and decoding (base58, point decompression) costs as much as a tenth of a
    /// verification each time. Filled on first use; change the document's fields and you must
    /// build a new `Document` (or call [`Document::clear_key_cache`]).
    #[serde(skip)]
    pub key_cache: KeyCache,
}

/// Decoded public keys by (method id, relationship). Never compared, cloned with its contents.
#[derive(Default)]
pub struct KeyCache(std::sync::Mutex<Vec<(String, Relationship, PublicKey)>>);

impl KeyCache {
    const MAX: usize = MAX_VERIFICATION_METHODS;

    fn get(&self, id: &str, rel: Relationship) -> Option<PublicKey> {
        let v = self.0.lock().ok()?;
        v.iter()
            .find(|(i, r, _)| i == id && *r == rel)
            .map(|(_, _, k)| k.clone())
    }

    fn put(&self, id: String, rel: Relationship, key: PublicKey) {
        if let Ok(mut v) = self.0.lock() {
            if v.len() < Self::MAX {
                v.push((id, rel, key));
            }
        }
    }
}

impl Clone for KeyCache {
    fn clone(&self) -> Self {
        Self(std::sync::Mutex::new(
            self.0.lock().map(|v| v.clone()).unwrap_or_default(),
        ))
    }
}

impl PartialEq for KeyCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for KeyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyCache")
    }
}

/// Why a document was refused, or a key could not be found in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DocumentError {
    /// The JSON is not a DID document.
    #[error("invalidDidDocument: {0}")]
    Invalid(String),
    /// The document's `id` is not the DID that was resolved.
    #[error("invalidDidDocument: document id {found:?} does not match {expected}")]
    IdMismatch {
        /// The DID we resolved.
        expected: String,
        /// The `id` the document claims.
        found: String,
    },
    /// The verification method is not in the document under the needed relationship.
    #[error("notFound: verification method {id} is not listed under {relationship} of {did}")]
    MethodNotAuthorized {
        /// The method.
        id: String,
        /// The relationship that was needed.
        relationship: &'static str,
        /// The document's DID.
        did: String,
    },
    /// The method exists but its key cannot be used.
    #[error("{id}: {reason}")]
    BadKey {
        /// The method.
        id: String,
        /// Why (a [`KeyError`] message).
        reason: String,
    },
}

impl Document {
    /// Parse a document from JSON bytes, with the depth bound applied first.
    /// Refused too: more than [`MAX_JSON_VALUES`] values, and a member name repeated in one
    /// object (see [`crate::json`]).
    pub fn from_json(bytes: &[u8]) -> Result<Self, DocumentError> {
        Self::from_json_weighed(bytes).map(|(doc, _)| doc)
    }

    /// [`from_json`](Self::from_json), with the estimated heap bytes the parsed document holds
    /// (its source JSON and its typed fields), for caches that budget memory.
    pub fn from_json_weighed(bytes: &[u8]) -> Result<(Self, usize), DocumentError> {
        let limits = crate::json::Limits {
            max_depth: MAX_JSON_DEPTH,
            max_values: MAX_JSON_VALUES,
        };
        let stats = crate::json::check(bytes, limits).map_err(|e| match e {
            crate::json::JsonError::Syntax(e) => DocumentError::Invalid(format!("not JSON: {e}")),
            e => DocumentError::Invalid(e.to_string()),
        })?;
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| DocumentError::Invalid(format!("not JSON: {e}")))?;
        let mut doc: Document = serde_json::from_value(value.clone())
            .map_err(|e| DocumentError::Invalid(format!("not a DID document: {e}")))?;
        doc.source = Some(value);
        // The source `Value` and the typed fields, which hold about as much again.
        let weight = stats.estimated_heap().saturating_mul(2);
        Ok((doc, weight))
    }

    /// The document as JSON: the source it was parsed from if any, else its serialization.
    pub fn to_json(&self) -> Value {
        match &self.source {
            Some(v) => v.clone(),
            None => serde_json::to_value(self).expect("a Document always serializes"),
        }
    }

    /// Check that this document describes `did`: the `id` matches, every verification method's
    /// id and controller belong to it, and there are not absurdly many methods.
    pub fn check_belongs_to(&self, did: &Did) -> Result<(), DocumentError> {
        if self.id != did.as_str() {
            return Err(DocumentError::IdMismatch {
                expected: did.to_string(),
                found: self.id.chars().take(200).collect(),
            });
        }
        let embedded = [
            &self.authentication,
            &self.assertion_method,
            &self.key_agreement,
            &self.capability_invocation,
            &self.capability_delegation,
        ]
        .into_iter()
        .flatten();
        let total = self.verification_method.len() + embedded.clone().count();
        if total > MAX_VERIFICATION_METHODS {
            return Err(DocumentError::Invalid(format!(
                "{total} verification methods, more than {MAX_VERIFICATION_METHODS}"
            )));
        }
        let all = self
            .verification_method
            .iter()
            .map(|vm| (vm.id.as_str(), Some(vm)))
            .chain(embedded.map(|r| match r {
                MethodRef::Reference(id) => (id.as_str(), None),
                MethodRef::Embedded(vm) => (vm.id.as_str(), Some(&**vm)),
            }));
        for (id, vm) in all {
            let abs = self.absolute(id);
            let url = DidUrl::parse(&abs).map_err(|e| {
                DocumentError::Invalid(format!("verification method id {id:?}: {e}"))
            })?;
            if url.did() != did || url.fragment().is_none() {
                return Err(DocumentError::Invalid(format!(
                    "verification method {id} does not belong to {did}"
                )));
            }
            if let Some(vm) = vm {
                if self.absolute(&vm.controller) != did.as_str() {
                    return Err(DocumentError::Invalid(format!(
                        "verification method {id} is controlled by {}, not {did}",
                        vm.controller
                    )));
                }
            }
        }
        Ok(())
    }

    /// Turn a relative DID URL (`#key-1`) into an absolute one.
    fn absolute(&self, id: &str) -> String {
        if id.starts_with('#') || id.starts_with('?') || id.starts_with('/') {
            format!("{}{}", self.id, id)
        } else {
            id.to_owned()
        }
    }

    fn relationship(&self, rel: Relationship) -> &[MethodRef] {
        match rel {
            Relationship::Authentication => &self.authentication,
            Relationship::AssertionMethod => &self.assertion_method,
            Relationship::KeyAgreement => &self.key_agreement,
            Relationship::CapabilityInvocation => &self.capability_invocation,
            Relationship::CapabilityDelegation => &self.capability_delegation,
        }
    }

    /// Find the verification method `method_id` (a DID URL, absolute or relative) among the
    /// methods this document authorizes for `rel`.
    pub fn method_for(
        &self,
        method_id: &str,
        rel: Relationship,
    ) -> Result<&VerificationMethod, DocumentError> {
        let wanted = self.absolute(method_id);
        let not_authorized = || DocumentError::MethodNotAuthorized {
            id: wanted.clone(),
            relationship: rel.as_str(),
            did: self.id.clone(),
        };
        let entry = self
            .relationship(rel)
            .iter()
            .find(|r| self.absolute(r.id()) == wanted)
            .ok_or_else(not_authorized)?;
        match entry {
            MethodRef::Embedded(vm) => Ok(&**vm),
            MethodRef::Reference(_) => self
                .verification_method
                .iter()
                .find(|vm| self.absolute(&vm.id) == wanted)
                .ok_or_else(not_authorized),
        }
    }

    /// The public key of `method_id`, which must be authorized for `rel`.
    pub fn key_for(&self, method_id: &str, rel: Relationship) -> Result<PublicKey, DocumentError> {
        if let Some(k) = self.key_cache.get(method_id, rel) {
            return Ok(k);
        }
        let vm = self.method_for(method_id, rel)?;
        let key = vm.public_key().map_err(|e| DocumentError::BadKey {
            id: vm.id.clone(),
            reason: e.to_string(),
        })?;
        self.key_cache.put(method_id.to_owned(), rel, key.clone());
        Ok(key)
    }

    /// Forget the decoded keys (after changing the document's methods in place).
    pub fn clear_key_cache(&self) {
        if let Ok(mut v) = self.key_cache.0.lock() {
            v.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn doc_json(id: &str, vm_id: &str, controller: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "@context": ["https://www.w3.org/ns/did/v1"],
            "id": id,
            "verificationMethod": [{
                "id": vm_id, "type": "Multikey", "controller": controller,
                "publicKeyMultibase": "z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp"
            }],
            "authentication": [vm_id],
            "assertionMethod": ["#other"]
        }))
        .unwrap()
    }

    #[test]
    fn document_must_describe_the_did_it_was_resolved_for() {
        let did = Did::parse("did:web:example.com").unwrap();
        let good = Document::from_json(&doc_json(
            "did:web:example.com",
            "did:web:example.com#k1",
            "did:web:example.com",
        ))
        .unwrap();
        good.check_belongs_to(&did).unwrap();
        let relative = Document::from_json(&doc_json(
            "did:web:example.com",
            "#k1",
            "did:web:example.com",
        ))
        .unwrap();
        relative.check_belongs_to(&did).unwrap();

        let other_id = Document::from_json(&doc_json(
            "did:web:evil.com",
            "did:web:evil.com#k1",
            "did:web:evil.com",
        ))
        .unwrap();
        assert!(matches!(
            other_id.check_belongs_to(&did),
            Err(DocumentError::IdMismatch { .. })
        ));
        let foreign_vm = Document::from_json(&doc_json(
            "did:web:example.com",
            "did:web:evil.com#k1",
            "did:web:example.com",
        ))
        .unwrap();
        assert!(foreign_vm.check_belongs_to(&did).is_err());
        let foreign_controller =
            Document::from_json(&doc_json("did:web:example.com", "#k1", "did:web:evil.com"))
                .unwrap();
        assert!(foreign_controller.check_belongs_to(&did).is_err());
    }

    #[test]
    fn keys_are_found_only_under_their_relationship() {
        let doc = Document::from_json(&doc_json(
            "did:web:example.com",
            "#k1",
            "did:web:example.com",
        ))
        .unwrap();
        assert!(doc
            .key_for("did:web:example.com#k1", Relationship::Authentication)
            .is_ok());
        assert!(doc.key_for("#k1", Relationship::Authentication).is_ok());
        let e = doc
            .key_for("#k1", Relationship::AssertionMethod)
            .unwrap_err();
        assert!(e.to_string().contains("assertionMethod"), "{e}");
        // Listed under assertionMethod but not defined anywhere.
        assert!(doc
            .key_for("#other", Relationship::AssertionMethod)
            .is_err());
    }

    #[test]
    fn deep_json_is_refused_before_parsing() {
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(Document::from_json(deep.as_bytes()).is_err());
        assert!(check_json_depth(br#"{"a":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}"#, 4).is_ok());
    }

    proptest! {
        #[test]
        fn document_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(doc) = Document::from_json(&bytes) {
                let did = Did::parse("did:web:example.com").unwrap();
                let _ = doc.check_belongs_to(&did);
                let _ = doc.key_for("#k", Relationship::Authentication);
            }
        }

        #[test]
        fn document_like_json_never_panics(
            id in "did:web:[a-z]{1,5}",
            vm in "#?[a-z0-9:#]{0,12}",
            mb in "z[1-9A-HJ-NP-Za-km-z]{0,60}",
        ) {
            let json = serde_json::json!({
                "id": id, "verificationMethod": [{"id": vm, "type": "Multikey", "controller": id, "publicKeyMultibase": mb}],
                "authentication": [vm]
            });
            let doc = Document::from_json(&serde_json::to_vec(&json).unwrap()).unwrap();
            let _ = doc.check_belongs_to(&Did::parse(&id).unwrap());
            let _ = doc.key_for(&vm, Relationship::Authentication);
        }
    }
}
