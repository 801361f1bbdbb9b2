//! A2A 1.0 Agent Card signatures: JWS (RFC 7515, flattened, detached payload) over the card as
//! [`crate::a2a::canonical_bytes`] makes it, exactly as the official SDKs compute them.
//!
//! Signing uses `alg: EdDSA`, `typ: JOSE`, `kid` = the DID URL of the verification method.
//! Verification accepts EdDSA and ES256; the key comes from the `kid` DID URL (resolved, and the
//! method must be listed under `assertionMethod`) or from a JWK the caller supplies. A `jku` is
//! never fetched or trusted.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine as _;
use serde_json::{json, Value};

use crate::a2a::{self, CardError};
use crate::document::Relationship;
use crate::key::{Jwk, PublicKey, SecretKey};
use crate::{Did, DidUrl, Document, ResolveError, Resolver};

/// Largest protected header or signature we decode.
const MAX_PART: usize = 4096;
/// Most signatures on one card we check.
pub const MAX_SIGNATURES: usize = 16;

/// Why a card could not be signed, or a signature did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CardSignatureError {
    /// The card does not fit the A2A model.
    #[error(transparent)]
    Card(#[from] CardError),
    /// The card has no `signatures`.
    #[error("the card has no signatures")]
    Unsigned,
    /// More signatures than we check.
    #[error("the card has more than {MAX_SIGNATURES} signatures")]
    TooManySignatures,
    /// A signature entry is malformed (bad base64, bad header JSON, ...).
    #[error("signature {index}: malformed: {reason}")]
    Malformed {
        /// Which signature.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// An algorithm we do not accept (`none`, `HS256`, ...), or one that does not fit the key.
    #[error("signature {index}: algorithm {alg:?} not accepted{detail}")]
    Algorithm {
        /// Which signature.
        index: usize,
        /// The header's `alg`.
        alg: String,
        /// More.
        detail: String,
    },
    /// No key to verify with: no `kid` DID URL and no JWK given (a `jku` alone is not trusted).
    #[error("signature {index}: no key: {reason}")]
    NoKey {
        /// Which signature.
        index: usize,
        /// Why.
        reason: String,
    },
    /// The `kid` DID did not resolve.
    #[error("signature {index}: {source}")]
    Resolve {
        /// Which signature.
        index: usize,
        /// The resolution error.
        source: ResolveError,
    },
    /// The `kid` is not authorized for assertions in its DID document.
    #[error("signature {index}: {reason}")]
    NotAuthorized {
        /// Which signature.
        index: usize,
        /// Why.
        reason: String,
    },
    /// The signature does not verify: the card was changed, or signed by another key.
    #[error("signature {index} (kid {kid}) does not verify: the card was modified or signed with another key")]
    Invalid {
        /// Which signature.
        index: usize,
        /// Its `kid`.
        kid: String,
    },
}

/// One signature that verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedSignature {
    /// The `kid` (a DID URL when the key came from a DID document).
    pub kid: String,
    /// `EdDSA` or `ES256`.
    pub alg: String,
}

/// Sign `card` with `key` as the verification method `kid`. Any earlier signature by the same
/// `kid` is replaced; signatures by others are kept (they cover the same bytes).
pub fn sign(card: &Value, key: &SecretKey, kid: &DidUrl) -> Result<Value, CardSignatureError> {
    let payload = a2a::canonical_bytes(card)?;
    // Member order as @a2a-js/sdk writes it; any order verifies, since the bytes are signed.
    let header = format!(
        r#"{{"alg":"EdDSA","typ":"JOSE","kid":{}}}"#,
        Value::String(kid.to_string())
    );
    let protected = B64URL.encode(header.as_bytes());
    let input = format!("{protected}.{}", B64URL.encode(&payload));
    let signature = B64URL.encode(key.sign(input.as_bytes()));
    let mut out = card.clone();
    let obj = out.as_object_mut().ok_or_else(|| CardError {
        path: "$".into(),
        reason: "AgentCard must be an object".into(),
    })?;
    let kid_s = kid.to_string();
    let mut sigs: Vec<Value> = match obj.remove("signatures") {
        Some(Value::Array(a)) => a
            .into_iter()
            .filter(|s| {
                header_of(s).and_then(|h| h.get("kid").cloned())
                    != Some(Value::String(kid_s.clone()))
            })
            .collect(),
        _ => Vec::new(),
    };
    sigs.push(json!({"protected": protected, "signature": signature}));
    obj.insert("signatures".into(), Value::Array(sigs));
    Ok(out)
}

fn header_of(sig: &Value) -> Option<Value> {
    let p = sig.get("protected")?.as_str()?;
    if p.len() > MAX_PART {
        return None;
    }
    crate::json::from_slice(&B64URL.decode(p).ok()?, crate::json::JWS_HEADER).ok()
}

/// Where verification keys come from.
#[derive(Debug, Clone, Copy)]
pub enum KeySource<'a> {
    /// Resolve the `kid` DID URL; the method must be under `assertionMethod`.
    Did(&'a Resolver),
    /// Use this JWK for every signature.
    Jwk(&'a Jwk),
}

/// Verify every signature on `card`. All must verify; the list of signers is returned.
pub async fn verify(
    card: &Value,
    keys: KeySource<'_>,
) -> Result<Vec<VerifiedSignature>, CardSignatureError> {
    match keys {
        KeySource::Jwk(jwk) => verify_each(card, |index, _| {
            PublicKey::from_jwk(jwk).map_err(|e| CardSignatureError::NoKey {
                index,
                reason: e.to_string(),
            })
        }),
        KeySource::Did(resolver) => {
            // Resolve every kid's DID first (the async part), then check synchronously.
            let parsed = parse_all(card)?;
            let mut docs = Vec::with_capacity(parsed.len());
            for p in &parsed {
                let url = kid_url(p)?;
                let doc = resolver.resolve(url.did()).await.map_err(|source| {
                    CardSignatureError::Resolve {
                        index: p.index,
                        source,
                    }
                })?;
                docs.push(doc);
            }
            verify_parsed(card, parsed, |index, p| {
                docs[index]
                    .key_for(
                        p.kid.as_deref().unwrap_or_default(),
                        Relationship::AssertionMethod,
                    )
                    .map_err(|e| CardSignatureError::NotAuthorized {
                        index,
                        reason: e.to_string(),
                    })
            })
        }
    }
}

/// Verify every signature with keys from an already resolved DID document: each `kid` must be a
/// method of `doc` listed under `assertionMethod`. No I/O: safe on a blocking thread.
pub fn verify_with_document(
    card: &Value,
    doc: &Document,
) -> Result<Vec<VerifiedSignature>, CardSignatureError> {
    verify_each(card, |index, p| {
        kid_url(p)?;
        doc.key_for(
            p.kid.as_deref().unwrap_or_default(),
            Relationship::AssertionMethod,
        )
        .map_err(|e| CardSignatureError::NotAuthorized {
            index,
            reason: e.to_string(),
        })
    })
}

/// Verify every signature with `key`, which must be a key of `did`: each `kid` must be a DID URL
/// of `did` (for identifiers that carry or bind their key, such as did:key and did:wba `e1_`).
pub fn verify_with_key(
    card: &Value,
    did: &Did,
    key: &PublicKey,
) -> Result<Vec<VerifiedSignature>, CardSignatureError> {
    verify_each(card, |index, p| {
        let url = kid_url(p)?;
        if url.did() != did {
            return Err(CardSignatureError::NotAuthorized {
                index,
                reason: format!("kid {url} is not a key of {did}"),
            });
        }
        Ok(key.clone())
    })
}

/// One signature entry, decoded.
struct ParsedSig {
    index: usize,
    protected: String,
    header: Value,
    sig: Vec<u8>,
    alg: String,
    kid: Option<String>,
}

fn kid_url(p: &ParsedSig) -> Result<DidUrl, CardSignatureError> {
    let kid = p.kid.as_deref().ok_or_else(|| CardSignatureError::NoKey {
        index: p.index,
        reason: if p.header.get("jku").is_some() {
            "only a jku, which is never trusted by itself; a kid DID URL is needed".into()
        } else {
            "no kid".into()
        },
    })?;
    DidUrl::parse(kid).map_err(|e| CardSignatureError::NoKey {
        index: p.index,
        reason: format!("kid is not a DID URL: {e}"),
    })
}

fn parse_all(card: &Value) -> Result<Vec<ParsedSig>, CardSignatureError> {
    let sigs = match card.get("signatures") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        _ => return Err(CardSignatureError::Unsigned),
    };
    if sigs.len() > MAX_SIGNATURES {
        return Err(CardSignatureError::TooManySignatures);
    }
    sigs.iter()
        .enumerate()
        .map(|(i, s)| parse_sig(i, s))
        .collect()
}

fn verify_each(
    card: &Value,
    key_for: impl FnMut(usize, &ParsedSig) -> Result<PublicKey, CardSignatureError>,
) -> Result<Vec<VerifiedSignature>, CardSignatureError> {
    verify_parsed(card, parse_all(card)?, key_for)
}

fn verify_parsed(
    card: &Value,
    parsed: Vec<ParsedSig>,
    mut key_for: impl FnMut(usize, &ParsedSig) -> Result<PublicKey, CardSignatureError>,
) -> Result<Vec<VerifiedSignature>, CardSignatureError> {
    let payload = B64URL.encode(a2a::canonical_bytes(card)?);
    let mut out = Vec::with_capacity(parsed.len());
    for p in parsed {
        let key = key_for(p.index, &p)?;
        if key.jws_alg() != p.alg {
            return Err(CardSignatureError::Algorithm {
                index: p.index,
                alg: p.alg,
                detail: format!(" for a key that signs {}", key.jws_alg()),
            });
        }
        let input = format!("{}.{payload}", p.protected);
        if !key.verify(input.as_bytes(), &p.sig) {
            return Err(CardSignatureError::Invalid {
                index: p.index,
                kid: p.kid.unwrap_or_default(),
            });
        }
        out.push(VerifiedSignature {
            kid: p.kid.unwrap_or_default(),
            alg: p.alg,
        });
    }
    Ok(out)
}

fn parse_sig(index: usize, sig: &Value) -> Result<ParsedSig, CardSignatureError> {
    let malformed = |reason: &str| CardSignatureError::Malformed {
        index,
        reason: reason.to_owned(),
    };
    let protected = sig
        .get("protected")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("no \"protected\" header"))?;
    let signature = sig
        .get("signature")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("no \"signature\""))?;
    if protected.len() > MAX_PART || signature.len() > MAX_PART {
        return Err(malformed("oversized"));
    }
    let header_bytes = B64URL
        .decode(protected)
        .map_err(|_| malformed("protected header is not base64url"))?;
    // Strict: a header naming `alg` or `kid` twice means different things to different parsers.
    let header: Value = crate::json::from_slice(&header_bytes, crate::json::JWS_HEADER)
        .map_err(|e| malformed(&format!("protected header: {e}")))?;
    let sig = B64URL
        .decode(signature)
        .map_err(|_| malformed("signature is not base64url"))?;
    let alg = header
        .get("alg")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if alg != "EdDSA" && alg != "ES256" {
        return Err(CardSignatureError::Algorithm {
            index,
            alg,
            detail: String::new(),
        });
    }
    if header.get("crit").is_some() {
        return Err(malformed("critical header extensions are not supported"));
    }
    let kid = header.get("kid").and_then(Value::as_str).map(str::to_owned);
    Ok(ParsedSig {
        index,
        protected: protected.to_owned(),
        header,
        sig,
        alg,
        kid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card() -> Value {
        json!({
            "name": "Echo", "description": "Echoes", "version": "1.0.0",
            "supportedInterfaces": [{"url": "https://a.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {"streaming": false},
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "echo", "name": "Echo", "description": "d", "tags": ["echo"]}]
        })
    }

    fn resolver() -> Resolver {
        Resolver::new(Default::default()).unwrap()
    }

    #[tokio::test]
    async fn signed_card_verifies_through_its_did_key() {
        let key = SecretKey::from_seed(&[1; 32]);
        let did = key.did_key();
        let kid = did.with_fragment(did.method_specific_id());
        let signed = sign(&card(), &key, &kid).unwrap();
        let r = resolver();
        let ok = verify(&signed, KeySource::Did(&r)).await.unwrap();
        assert_eq!(
            ok,
            vec![VerifiedSignature {
                kid: kid.to_string(),
                alg: "EdDSA".into()
            }]
        );
        // Re-signing by the same kid replaces, a second signer adds.
        let again = sign(&signed, &key, &kid).unwrap();
        assert_eq!(again["signatures"].as_array().unwrap().len(), 1);
        let other = SecretKey::from_seed(&[2; 32]);
        let od = other.did_key();
        let two = sign(&again, &other, &od.with_fragment(od.method_specific_id())).unwrap();
        assert_eq!(verify(&two, KeySource::Did(&r)).await.unwrap().len(), 2);
    }

    #[tokio::test]
    async fn tampering_and_wrong_keys_fail() {
        let key = SecretKey::from_seed(&[1; 32]);
        let did = key.did_key();
        let kid = did.with_fragment(did.method_specific_id());
        let signed = sign(&card(), &key, &kid).unwrap();
        let r = resolver();
        let mut t = signed.clone();
        t["description"] = json!("Echoes, and steals");
        assert!(matches!(
            verify(&t, KeySource::Did(&r)).await,
            Err(CardSignatureError::Invalid { .. })
        ));
        // A field outside the model is not signed, so adding one does not break the signature
        // (the same as in the official SDKs).
        let mut extra = signed.clone();
        extra["x-note"] = json!("unsigned");
        verify(&extra, KeySource::Did(&r)).await.unwrap();
        // A kid naming a method not in the document.
        let other = SecretKey::from_seed(&[2; 32]).did_key();
        let bad_kid = other.with_fragment(did.method_specific_id());
        let forged = sign(&card(), &key, &bad_kid).unwrap();
        assert!(matches!(
            verify(&forged, KeySource::Did(&r)).await,
            Err(CardSignatureError::NotAuthorized { .. })
        ));
        // The right fragment on another DID: the key there does not match.
        let wrong = sign(
            &card(),
            &key,
            &other.with_fragment(other.method_specific_id()),
        )
        .unwrap();
        assert!(matches!(
            verify(&wrong, KeySource::Did(&r)).await,
            Err(CardSignatureError::Invalid { .. })
        ));
        assert!(matches!(
            verify(&card(), KeySource::Did(&r)).await,
            Err(CardSignatureError::Unsigned)
        ));
    }

    #[tokio::test]
    async fn refuses_none_hmac_and_bare_jku() {
        let r = resolver();
        for header in [
            json!({"alg": "none", "kid": "did:key:z6Mk#z6Mk"}),
            json!({"alg": "HS256", "kid": "did:key:z6Mk#z6Mk"}),
            json!({"alg": "EdDSA", "jku": "https://evil.example/keys"}),
        ] {
            let mut c = card();
            c["signatures"] = json!([{"protected": B64URL.encode(header.to_string()), "signature": B64URL.encode([0u8; 64])}]);
            let e = verify(&c, KeySource::Did(&r)).await.unwrap_err();
            assert!(
                matches!(
                    e,
                    CardSignatureError::Algorithm { .. } | CardSignatureError::NoKey { .. }
                ),
                "{e}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn verify_never_panics_on_arbitrary_signature_entries(
            protected in "[A-Za-z0-9_=-]{0,120}",
            signature in "[A-Za-z0-9_=-]{0,120}",
            header in "\\PC{0,80}",
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let r = resolver();
            for p in [protected.clone(), B64URL.encode(&header)] {
                let mut c = card();
                c["signatures"] = json!([{"protected": p, "signature": signature}]);
                proptest::prop_assert!(rt.block_on(verify(&c, KeySource::Did(&r))).is_err());
            }
        }
    }

    #[tokio::test]
    async fn es256_with_a_supplied_jwk() {
        use p256::ecdsa::signature::Signer as _;
        let sk = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).unwrap();
        let point = sk.verifying_key().to_encoded_point(false);
        let jwk = Jwk {
            kty: "EC".into(),
            crv: "P-256".into(),
            x: B64URL.encode(point.x().unwrap()),
            y: Some(B64URL.encode(point.y().unwrap())),
            d: None,
        };
        let protected = B64URL.encode(r#"{"alg":"ES256","typ":"JOSE","kid":"test-key-1"}"#);
        let input = format!(
            "{protected}.{}",
            B64URL.encode(a2a::canonical_bytes(&card()).unwrap())
        );
        let sig: p256::ecdsa::Signature = sk.sign(input.as_bytes());
        let mut c = card();
        c["signatures"] =
            json!([{"protected": protected, "signature": B64URL.encode(sig.to_bytes())}]);
        let ok = verify(&c, KeySource::Jwk(&jwk)).await.unwrap();
        assert_eq!(ok[0].alg, "ES256");
        c["name"] = json!("Other");
        assert!(verify(&c, KeySource::Jwk(&jwk)).await.is_err());
    }
}
