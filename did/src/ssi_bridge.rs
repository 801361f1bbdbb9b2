//! Other DID methods through spruceid's `ssi` (feature `ssi`), with our checks around it.
//!
//! Only methods that resolve offline, from the identifier alone, go through `ssi`: `did:jwk`,
//! `did:pkh` and `did:ethr`. Network methods (`did:ion`, `did:tz`, ...) would fetch without our
//! address policy, body cap and redirect rules, so they are refused; did:key, did:web and did:wba
//! never reach here (ours are stricter: see the identity issue's notes in `docs/IDENTITY.md`).
//! Whatever `ssi` returns is parsed with our depth and size bounds and must describe the DID.

use ssi::dids::{AnyDidMethod, DIDResolver, DID};

use crate::{Did, Document, ResolveError};

/// The methods we let `ssi` resolve.
pub const METHODS: &[&str] = &["jwk", "pkh", "ethr"];

/// Largest document we accept from `ssi`.
const MAX_DOC: usize = 256 * 1024;

pub(crate) async fn resolve(did: &Did, method: &str) -> Result<(Document, usize), ResolveError> {
    if !METHODS.contains(&method) {
        return Err(ResolveError::MethodNotSupported {
            did: did.to_string(),
            method: method.to_owned(),
        });
    }
    let ssi_did = DID::new(did.as_str()).map_err(|e| ResolveError::InvalidDid {
        did: did.to_string(),
        reason: format!("ssi: {e}"),
    })?;
    let out = AnyDidMethod::default()
        .resolve_representation(ssi_did, Default::default())
        .await
        .map_err(|e| match e {
            ssi::dids::resolution::Error::NotFound => ResolveError::NotFound {
                did: did.to_string(),
                reason: "ssi: not found".into(),
            },
            ssi::dids::resolution::Error::MethodNotSupported(m) => {
                ResolveError::MethodNotSupported {
                    did: did.to_string(),
                    method: m,
                }
            }
            other => ResolveError::InvalidDid {
                did: did.to_string(),
                reason: format!("ssi: {other}"),
            },
        })?;
    if out.document.len() > MAX_DOC {
        return Err(ResolveError::TooLarge {
            did: did.to_string(),
            limit: MAX_DOC,
        });
    }
    crate::resolver::checked_document(did, &out.document)
}

#[cfg(test)]
mod tests {
    use crate::{Relationship, Resolver};

    #[tokio::test]
    async fn did_jwk_resolves_through_ssi_with_our_checks() {
        // did:jwk of an Ed25519 JWK (the did:jwk spec's example key shape).
        let jwk =
            r#"{"crv":"Ed25519","kty":"OKP","x":"O2onvM62pC1io6jQKm8Nc2UyFXcd4kOmOsBIoYtZ2ik"}"#;
        use base64::Engine as _;
        let did = format!(
            "did:jwk:{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(jwk)
        );
        let r = Resolver::new(Default::default()).unwrap();
        let doc = r.resolve_str(&did).await.unwrap();
        assert_eq!(doc.id, did);
        let key = doc
            .key_for(&format!("{did}#0"), Relationship::AssertionMethod)
            .unwrap();
        // The all-zero-seed key of the did:key test vectors.
        let expected = crate::SecretKey::from_seed(&[0; 32]).public();
        assert_eq!(key, crate::PublicKey::Ed25519(expected));
    }

    #[tokio::test]
    async fn did_pkh_resolves_and_network_methods_are_refused() {
        let r = Resolver::new(Default::default()).unwrap();
        let pkh = "did:pkh:eip155:1:0xb9c5714089478a327f09197987f16f9e5d936e8a";
        let doc = r.resolve_str(pkh).await.unwrap();
        assert_eq!(doc.id, pkh);
        assert!(!doc.verification_method.is_empty());
        let e = r
            .resolve_str("did:ion:EiClkZMDxPKqC9c-umQfTkR8vvZ9JPhl_xLDI9Nfk38w5w")
            .await
            .unwrap_err();
        assert_eq!(e.code(), "methodNotSupported");
        let e = r.resolve_str("did:jwk:notbase64!").await.unwrap_err();
        assert_ne!(e.code(), "methodNotSupported");
    }
}
