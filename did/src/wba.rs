//! did:wba (ANP): the `e1_` key-fingerprint path rule and the `eddsa-jcs-2022`
//! DataIntegrityProof over the document.
//!
//! A did:wba whose last path segment is `e1_<fp>` binds the document to an Ed25519 key: `fp` is
//! the RFC 7638 JWK thumbprint of that key (base64url of SHA-256 over
//! `{"crv":"Ed25519","kty":"OKP","x":…}`), and the document must carry an `eddsa-jcs-2022` proof
//! made with it for `assertionMethod`. Such a DID verifies without trusting the web server: the
//! server can withhold the document but cannot forge one.
//!
//! The proof value comes in two encodings in the wild: the W3C Data Integrity form (`z` +
//! base58btc, the document's `@context` included in the hashed proof options) and the ANP SDK's
//! form (base64url without padding, no `@context`). We accept both and produce the W3C form,
//! which the ANP SDK also accepts.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine as _;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::document::{Document, DocumentError, Relationship};
use crate::key::{PublicKey, SecretKey};
use crate::{jcs, Did};

/// The RFC 7638 thumbprint of an Ed25519 key, base64url without padding (43 characters).
pub fn ed25519_thumbprint(key: &ed25519_dalek::VerifyingKey) -> String {
    let x = B64URL.encode(key.as_bytes());
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
    B64URL.encode(Sha256::digest(canonical.as_bytes()))
}

/// A did:wba bound to `key`: `did:wba:<host>[%3A<port>]:<segments…>:e1_<thumbprint>`.
/// At least one path segment is needed (the ANP rule); segments must be DID-safe.
pub fn did_for(
    host: &str,
    port: Option<u16>,
    segments: &[&str],
    key: &ed25519_dalek::VerifyingKey,
) -> Result<Did, crate::InvalidDid> {
    let mut s = format!("did:wba:{host}");
    if let Some(p) = port {
        s.push_str(&format!("%3A{p}"));
    }
    if segments.is_empty() {
        return Err(crate::InvalidDid::new(
            &s,
            "an e1_ did:wba needs a path segment",
        ));
    }
    for seg in segments {
        s.push(':');
        s.push_str(seg);
    }
    s.push_str(":e1_");
    s.push_str(&ed25519_thumbprint(key));
    Did::parse(&s)
}

/// A did:wba document for `key` (Multikey `#key-1` for authentication and assertions), with an
/// `eddsa-jcs-2022` proof. `created` is an XML Schema dateTime (`2026-01-01T00:00:00Z`).
pub fn document_for(did: &Did, key: &SecretKey, created: &str) -> Document {
    let vm = format!("{did}#key-1");
    let unsigned = json!({
        "@context": [
            "https://www.w3.org/ns/did/v1",
            "https://w3id.org/security/data-integrity/v2",
            "https://w3id.org/security/multikey/v1"
        ],
        "id": did.as_str(),
        "verificationMethod": [{
            "id": vm, "type": "Multikey", "controller": did.as_str(),
            "publicKeyMultibase": crate::key::encode_multikey(&key.public()),
        }],
        "authentication": [vm],
        "assertionMethod": [vm],
    });
    let mut doc: Document =
        serde_json::from_value(unsigned).expect("the literal above is a DID document");
    sign_document(&mut doc, key, &vm, created);
    doc
}

/// Add an `eddsa-jcs-2022` proof (W3C encoding) to `doc`, replacing any proof it had.
pub fn sign_document(doc: &mut Document, key: &SecretKey, vm: &str, created: &str) {
    doc.proof = None;
    doc.source = None;
    doc.clear_key_cache();
    let mut options = json!({
        "type": "DataIntegrityProof",
        "cryptosuite": "eddsa-jcs-2022",
        "created": created,
        "verificationMethod": vm,
        "proofPurpose": "assertionMethod",
    });
    options["@context"] = doc.context.clone();
    let input = hash_data(&options, doc);
    let sig = key.sign(&input);
    options["proofValue"] = Value::String(multibase::encode(multibase::Base::Base58Btc, sig));
    doc.proof = Some(options);
}

/// SHA-256(JCS(proof options)) || SHA-256(JCS(document without proof)).
fn hash_data(options: &Value, doc: &Document) -> Vec<u8> {
    let mut unsecured = doc.to_json();
    if let Some(map) = unsecured.as_object_mut() {
        map.remove("proof");
    }
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&Sha256::digest(jcs::canonicalize(options)));
    out.extend_from_slice(&Sha256::digest(jcs::canonicalize(&unsecured)));
    out
}

/// Verify the document's `eddsa-jcs-2022` proof; returns the key that made it.
pub fn verify_proof(doc: &Document) -> Result<ed25519_dalek::VerifyingKey, DocumentError> {
    let bad = |m: &str| DocumentError::Invalid(format!("did:wba proof: {m}"));
    let proof = doc.proof.as_ref().ok_or_else(|| bad("missing"))?;
    let field = |name: &str| proof.get(name).and_then(Value::as_str);
    if field("type") != Some("DataIntegrityProof") {
        return Err(bad("type is not DataIntegrityProof"));
    }
    if field("cryptosuite") != Some("eddsa-jcs-2022") {
        return Err(bad("cryptosuite is not eddsa-jcs-2022"));
    }
    if field("proofPurpose") != Some("assertionMethod") {
        return Err(bad("proofPurpose is not assertionMethod"));
    }
    let vm = field("verificationMethod").ok_or_else(|| bad("no verificationMethod"))?;
    let PublicKey::Ed25519(key) = doc.key_for(vm, Relationship::AssertionMethod)? else {
        return Err(bad("the proof key is not Ed25519"));
    };
    let value = field("proofValue").ok_or_else(|| bad("no proofValue"))?;
    if value.len() > 200 {
        return Err(bad("proofValue too long"));
    }
    let mut options = proof.clone();
    if let Some(map) = options.as_object_mut() {
        map.remove("proofValue");
    }
    let pk = PublicKey::Ed25519(key);
    // W3C form: multibase base58btc, with the document's @context in the proof options.
    if let Some(sig) = value
        .strip_prefix('z')
        .and_then(|v| multibase::Base::Base58Btc.decode(v).ok())
    {
        let mut with_ctx = options.clone();
        if with_ctx.get("@context").is_none() && !doc.context.is_null() {
            with_ctx["@context"] = doc.context.clone();
        }
        if pk.verify(&hash_data(&with_ctx, doc), &sig) {
            return Ok(key);
        }
    }
    // ANP SDK form: base64url without padding, proof options as they are.
    if let Ok(sig) = B64URL.decode(value.trim_end_matches('=')) {
        if pk.verify(&hash_data(&options, doc), &sig) {
            return Ok(key);
        }
    }
    Err(bad("signature does not verify"))
}

/// Check the did:wba rules on a fetched document (its `id` was already checked).
pub fn check_document(did: &Did, doc: &Document) -> Result<(), DocumentError> {
    let last = did
        .method_specific_id()
        .rsplit(':')
        .next()
        .unwrap_or_default();
    if let Some(fp) = last.strip_prefix("e1_") {
        let key = verify_proof(doc)?;
        if ed25519_thumbprint(&key) != fp {
            return Err(DocumentError::Invalid(format!(
                "did:wba e1_ fingerprint {fp} does not match the key that signed the document"
            )));
        }
        return Ok(());
    }
    if last.starts_with("k1_") {
        return Err(DocumentError::Invalid(
            "did:wba k1_ (secp256k1) key binding is not supported".into(),
        ));
    }
    // No key binding in the identifier: a proof, if there is one of ours, must still verify.
    let ours = doc
        .proof
        .as_ref()
        .and_then(|p| p.get("cryptosuite"))
        .and_then(Value::as_str)
        == Some("eddsa-jcs-2022");
    if ours {
        verify_proof(doc)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> (Did, Document, SecretKey) {
        let doc = Document::from_json(include_bytes!("../tests/fixtures/did_wba_e1.json")).unwrap();
        let jwk: crate::key::Jwk =
            serde_json::from_slice(include_bytes!("../tests/fixtures/did_wba_e1.key.json"))
                .unwrap();
        (
            Did::parse(&doc.id).unwrap(),
            doc,
            SecretKey::from_jwk(&jwk).unwrap(),
        )
    }

    #[test]
    fn accepts_a_document_made_by_the_anp_sdk() {
        let (did, doc, key) = fixture();
        doc.check_belongs_to(&did).unwrap();
        check_document(&did, &doc).unwrap();
        assert!(did
            .as_str()
            .ends_with(&format!("e1_{}", ed25519_thumbprint(&key.public()))));
    }

    #[test]
    fn refuses_a_tampered_or_rebound_document() {
        let (did, doc, _) = fixture();
        let mut tampered = doc.clone();
        tampered.source = None;
        tampered
            .service
            .push(json!({"id": "#evil", "type": "X", "serviceEndpoint": "https://evil.example"}));
        assert!(check_document(&did, &tampered).is_err());

        // A server replacing key and proof with its own: the proof verifies, the fingerprint not.
        let mallory = SecretKey::from_seed(&[9; 32]);
        let forged = document_for(&did, &mallory, "2026-01-01T00:00:00Z");
        let e = check_document(&did, &forged).unwrap_err().to_string();
        assert!(e.contains("fingerprint"), "{e}");

        let mut no_proof = doc.clone();
        no_proof.proof = None;
        assert!(check_document(&did, &no_proof).is_err());
    }

    #[test]
    fn documents_we_make_verify_and_bind() {
        let key = SecretKey::from_seed(&[4; 32]);
        let did = did_for("agents.example", Some(8443), &["u", "bob"], &key.public()).unwrap();
        assert!(did
            .as_str()
            .starts_with("did:wba:agents.example%3A8443:u:bob:e1_"));
        let doc = document_for(&did, &key, "2026-01-01T00:00:00Z");
        doc.check_belongs_to(&did).unwrap();
        check_document(&did, &doc).unwrap();
        let proof = doc.proof.as_ref().unwrap();
        assert!(proof["proofValue"].as_str().unwrap().starts_with('z'));
        assert!(did_for("a.example", None, &[], &key.public()).is_err());
    }

    #[test]
    fn unbound_did_wba_needs_no_proof_but_a_bad_one_fails() {
        let key = SecretKey::from_seed(&[5; 32]);
        let did = Did::parse("did:wba:agents.example:alice").unwrap();
        let mut doc = document_for(&did, &key, "2026-01-01T00:00:00Z");
        check_document(&did, &doc).unwrap();
        doc.also_known_as.push("https://evil.example".into());
        doc.source = None;
        assert!(check_document(&did, &doc).is_err());
        doc.proof = None;
        check_document(&did, &doc).unwrap();
    }
}
