//! did:key for Ed25519 (w3c-ccg did-method-key): encoding, decoding, and the document, resolved
//! locally with no network.

use serde_json::json;

use crate::document::{Document, MethodRef, VerificationMethod};
use crate::key::{self, MULTICODEC_ED25519_PUB, MULTICODEC_X25519_PUB};
use crate::resolution::ResolveError;
use crate::{Did, Method};

/// Which verification method type the document uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyFormat {
    /// `Multikey` (did:key v0.7 default; contexts did/v1 + multikey/v1).
    #[default]
    Multikey,
    /// `Ed25519VerificationKey2020` with `X25519KeyAgreementKey2020` key agreement.
    Ed25519VerificationKey2020,
}

/// Options for building a did:key document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    /// The verification method type.
    pub format: KeyFormat,
    /// Add an X25519 `keyAgreement` key derived from the Ed25519 key.
    pub key_agreement: bool,
}

/// The did:key of an Ed25519 public key.
pub fn did_for(key: &ed25519_dalek::VerifyingKey) -> Did {
    key::did_key_of(key)
}

/// The Ed25519 key inside a did:key.
pub fn decode(did: &Did) -> Result<ed25519_dalek::VerifyingKey, ResolveError> {
    if did.method() != &Method::Key {
        return Err(ResolveError::MethodNotSupported {
            did: did.to_string(),
            method: did.method().as_str().to_owned(),
        });
    }
    let msi = did.method_specific_id();
    let invalid = |reason: String| ResolveError::InvalidDid {
        did: did.to_string(),
        reason,
    };
    // did:key v0.7: the method-specific id is `z` + base58btc(multicodec || key), one key only.
    if msi.contains(':') {
        return Err(invalid(
            "did:key has a single method-specific id segment".into(),
        ));
    }
    let bytes = key::decode_base58btc_multibase(msi).map_err(|e| match e {
        key::KeyError::InvalidPublicKey(m) => invalid(m),
        other => invalid(other.to_string()),
    })?;
    let raw = bytes.strip_prefix(&MULTICODEC_ED25519_PUB).ok_or_else(|| {
        invalid(format!(
            "not an Ed25519 did:key: multicodec prefix {:02x?}, expected [ed, 01]",
            &bytes[..bytes.len().min(2)]
        ))
    })?;
    match key::ed25519_from_bytes(raw) {
        Ok(key::PublicKey::Ed25519(k)) => Ok(k),
        Ok(_) => unreachable!("ed25519_from_bytes returns Ed25519 keys"),
        Err(key::KeyError::InvalidPublicKeyLength { got, .. }) => {
            Err(ResolveError::InvalidPublicKeyLength {
                did: did.to_string(),
                len: got,
            })
        }
        Err(e) => Err(ResolveError::InvalidPublicKey {
            did: did.to_string(),
            reason: e.to_string(),
        }),
    }
}

/// The X25519 key-agreement key derived from an Ed25519 key (birational map to Montgomery form).
pub fn x25519_multikey(key: &ed25519_dalek::VerifyingKey) -> String {
    let mut bytes = Vec::with_capacity(34);
    bytes.extend_from_slice(&MULTICODEC_X25519_PUB);
    bytes.extend_from_slice(&key.to_montgomery().to_bytes());
    multibase::encode(multibase::Base::Base58Btc, bytes)
}

/// Resolve a did:key to its document.
pub fn resolve(did: &Did, opts: Options) -> Result<Document, ResolveError> {
    let key = decode(did)?;
    Ok(document(&key, opts))
}

/// The did:key document of `key`.
pub fn document(key: &ed25519_dalek::VerifyingKey, opts: Options) -> Document {
    let did = did_for(key);
    let fp = key::encode_multikey(key);
    let vm_id = format!("{did}#{fp}");
    let (vm_type, context) = match opts.format {
        KeyFormat::Multikey => (
            "Multikey",
            json!([
                "https://www.w3.org/ns/did/v1",
                "https://w3id.org/security/multikey/v1"
            ]),
        ),
        KeyFormat::Ed25519VerificationKey2020 => {
            let mut ctx = vec![
                "https://www.w3.org/ns/did/v1",
                "https://w3id.org/security/suites/ed25519-2020/v1",
            ];
            if opts.key_agreement {
                ctx.push("https://w3id.org/security/suites/x25519-2020/v1");
            }
            ("Ed25519VerificationKey2020", json!(ctx))
        }
    };
    let vm = VerificationMethod {
        id: vm_id.clone(),
        kind: vm_type.into(),
        controller: did.to_string(),
        public_key_multibase: Some(fp),
        public_key_jwk: None,
        public_key_base58: None,
        extra: Default::default(),
    };
    let key_agreement = if opts.key_agreement {
        let x = x25519_multikey(key);
        vec![MethodRef::Embedded(Box::new(VerificationMethod {
            id: format!("{did}#{x}"),
            kind: match opts.format {
                KeyFormat::Multikey => "Multikey",
                KeyFormat::Ed25519VerificationKey2020 => "X25519KeyAgreementKey2020",
            }
            .into(),
            controller: did.to_string(),
            public_key_multibase: Some(x),
            public_key_jwk: None,
            public_key_base58: None,
            extra: Default::default(),
        }))]
    } else {
        Vec::new()
    };
    let r = || vec![MethodRef::Reference(vm_id.clone())];
    Document {
        context,
        id: did.to_string(),
        also_known_as: Vec::new(),
        controller: None,
        verification_method: vec![vm],
        authentication: r(),
        assertion_method: r(),
        key_agreement,
        capability_invocation: r(),
        capability_delegation: r(),
        service: Vec::new(),
        proof: None,
        extra: Default::default(),
        source: None,
        key_cache: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::Relationship;
    use proptest::prelude::*;

    fn vectors() -> serde_json::Value {
        serde_json::from_str(include_str!("../tests/vectors/did-key-ed25519.json")).unwrap()
    }

    fn hex32(s: &str) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    }

    #[test]
    fn reproduces_the_spec_test_vectors() {
        let v = vectors();
        for case in v["valid"].as_array().unwrap() {
            let did = Did::parse(case["did"].as_str().unwrap()).unwrap();
            let key = decode(&did).unwrap();
            assert_eq!(did_for(&key), did);
            if let Some(seed) = case["seed_hex"].as_str() {
                let sk = crate::SecretKey::from_seed(&hex32(seed));
                assert_eq!(sk.did_key(), did, "seed {seed}");
            }
            if let Some(b58) = case["publicKeyBase58"].as_str() {
                assert_eq!(multibase::Base::Base58Btc.encode(key.as_bytes()), b58);
            }
            if let Some(x) = case["publicKeyJwk_x"].as_str() {
                assert_eq!(key::ed25519_public_jwk(&key).x, x);
            }
            if let Some(ka) = case["keyAgreement_multibase"].as_str() {
                assert_eq!(x25519_multikey(&key), ka, "{did}");
                let doc = resolve(
                    &did,
                    Options {
                        key_agreement: true,
                        ..Default::default()
                    },
                )
                .unwrap();
                let MethodRef::Embedded(vm) = &doc.key_agreement[0] else {
                    panic!()
                };
                assert_eq!(vm.public_key_multibase.as_deref(), Some(ka));
                assert_eq!(vm.id, format!("{did}#{ka}"));
            }
            if let Some(kx) = case["keyAgreement_jwk_x"].as_str() {
                use base64::Engine as _;
                let x = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .encode(key.to_montgomery().to_bytes());
                assert_eq!(x, kx);
            }
        }
    }

    #[test]
    fn refuses_the_spec_invalid_cases_with_their_error_names() {
        let v = vectors();
        let bad_prefix = &v["invalid"][0];
        let did = Did::parse(bad_prefix["did"].as_str().unwrap()).unwrap();
        assert_eq!(decode(&did).unwrap_err().code(), "invalidDid");

        let mut short = vec![0xed, 0x01];
        short.extend_from_slice(&[1u8; 31]);
        let did = Did::parse(&format!(
            "did:key:{}",
            multibase::encode(multibase::Base::Base58Btc, short)
        ))
        .unwrap();
        assert_eq!(decode(&did).unwrap_err().code(), "invalidPublicKeyLength");

        // 0xed alone is an unfinished varint; what follows is read as its continuation. (A key
        // whose first byte is 0x01 would make it a complete 0xed01 prefix with 31 key bytes:
        // that case is `invalidPublicKeyLength`, as above.)
        for first in [0u8, 2, 0x7f, 0x80] {
            let mut bare = vec![0xed, first];
            bare.extend_from_slice(&[1u8; 31]);
            let did = Did::parse(&format!(
                "did:key:{}",
                multibase::encode(multibase::Base::Base58Btc, bare)
            ))
            .unwrap();
            assert_eq!(decode(&did).unwrap_err().code(), "invalidDid");
        }
        let mut bare = vec![0xed];
        bare.extend_from_slice(&[2u8; 32]);
        let did = Did::parse(&format!(
            "did:key:{}",
            multibase::encode(multibase::Base::Base58Btc, bare)
        ))
        .unwrap();
        assert_eq!(decode(&did).unwrap_err().code(), "invalidDid");
    }

    #[test]
    fn document_authorizes_the_key_for_all_four_relationships() {
        let sk = crate::SecretKey::from_seed(&[3; 32]);
        let did = sk.did_key();
        let doc = resolve(&did, Options::default()).unwrap();
        doc.check_belongs_to(&did).unwrap();
        let vm = format!("{did}#{}", did.method_specific_id());
        for rel in [
            Relationship::Authentication,
            Relationship::AssertionMethod,
            Relationship::CapabilityInvocation,
            Relationship::CapabilityDelegation,
        ] {
            assert_eq!(
                doc.key_for(&vm, rel).unwrap(),
                key::PublicKey::Ed25519(sk.public())
            );
        }
        assert!(doc.key_agreement.is_empty());
        let doc2020 = resolve(
            &did,
            Options {
                format: KeyFormat::Ed25519VerificationKey2020,
                key_agreement: true,
            },
        )
        .unwrap();
        assert_eq!(
            doc2020.verification_method[0].kind,
            "Ed25519VerificationKey2020"
        );
        assert_eq!(
            doc2020.key_for(&vm, Relationship::AssertionMethod).unwrap(),
            key::PublicKey::Ed25519(sk.public())
        );
    }

    proptest! {
        #[test]
        fn decode_never_panics(msi in "[1-9A-HJ-NP-Za-km-z]{1,80}") {
            if let Ok(did) = Did::parse(&format!("did:key:z{msi}")) {
                let _ = decode(&did);
            }
        }
    }
}
