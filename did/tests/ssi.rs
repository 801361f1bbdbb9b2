//! The DID methods that go through spruceid's `ssi` (feature `ssi`), resolved by our resolver with
//! our checks (here rather than in `ssi_bridge`, which sits below the resolver).
#![cfg(feature = "ssi")]

use agentnet_did::{Relationship, Resolver};

#[tokio::test]
async fn did_jwk_resolves_through_ssi_with_our_checks() {
    // did:jwk of an Ed25519 JWK (the did:jwk spec's example key shape).
    let jwk = r#"{"crv":"Ed25519","kty":"OKP","x":"O2onvM62pC1io6jQKm8Nc2UyFXcd4kOmOsBIoYtZ2ik"}"#;
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
    let expected = agentnet_did::SecretKey::from_seed(&[0; 32]).public();
    assert_eq!(key, agentnet_did::PublicKey::Ed25519(expected));
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
