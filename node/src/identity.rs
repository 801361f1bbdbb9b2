//! Agent identities: a DID, the verification method that signs for it, and its Ed25519 key.
//!
//! An identity is a did:key (the key is the identifier), or an identity under a domain the
//! operator controls: `did:web:<host>[:path…]` or `did:wba:<host>:<path…>:e1_<fingerprint>`
//! (the ANP `e1_` rule: the last segment is the key's RFC 7638 thumbprint, and the document
//! carries an `eddsa-jcs-2022` proof by that key, so that the web server cannot forge it).
//! [`create`] makes the DID document of a new domain identity; the operator serves it at
//! [`agentnet_did::web::document_url`] (HTTPS). Keys and documents live in the data
//! directory (`data_dir::AgentKeys`); the CLI writes them, the node loads them.
//!
//! One identity signs three things: the Agent Card (JWS `kid` = [`Identity::kid`], listed under
//! `assertionMethod`), the network advertisement, and A2A requests (RFC 9421, `keyid` = the same
//! DID URL, listed under `authentication`). The documents we make list `#key-1` under both.

pub mod signer;

use agentnet_did::document::{DocumentError, Relationship};
use agentnet_did::key::PublicKey;
use agentnet_did::{wba, web, Did, DidUrl, Document, Method, SecretKey};

/// The fragment of the one verification method of the documents we make.
pub const KEY_FRAGMENT: &str = "key-1";

/// A DID with the key that signs for it.
pub struct Identity {
    did: Did,
    kid: DidUrl,
    key: SecretKey,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Identity {
            did: self.did.clone(),
            kid: self.kid.clone(),
            key: SecretKey::from_seed(&self.key.seed()),
        }
    }
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Identity")
            .field("did", &self.did.as_str())
            .field("kid", &self.kid.to_string())
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// The did:key identity of `key` (`kid` = `did:key:z…#z…`).
    pub fn did_key(key: SecretKey) -> Self {
        let did = key.did_key();
        let kid = did.with_fragment(did.method_specific_id());
        Identity { did, kid, key }
    }

    /// The identity described by `doc`, signing with `key`: `doc` must be `did`'s, and list
    /// a method with `key`'s public key under both `authentication` and `assertionMethod`.
    pub fn from_document(did: Did, doc: &Document, key: SecretKey) -> Result<Self, IdentityError> {
        doc.check_belongs_to(&did)
            .map_err(|e| IdentityError::Document(did.to_string(), e))?;
        let want = PublicKey::Ed25519(key.public());
        for vm in &doc.verification_method {
            let both = [Relationship::Authentication, Relationship::AssertionMethod]
                .into_iter()
                .all(|rel| doc.key_for(&vm.id, rel).is_ok_and(|k| k == want));
            if both {
                let kid = DidUrl::parse(&vm.id)
                    .map_err(|e| IdentityError::Invalid(format!("{}: {e}", vm.id)))?;
                return Ok(Identity { did, kid, key });
            }
        }
        Err(IdentityError::KeyNotInDocument(did.to_string()))
    }

    /// The DID.
    pub fn did(&self) -> &Did {
        &self.did
    }

    /// The verification method that signs (a DID URL of [`Identity::did`]).
    pub fn kid(&self) -> &DidUrl {
        &self.kid
    }

    /// The secret key.
    pub fn key(&self) -> &SecretKey {
        &self.key
    }
}

/// Why an identity could not be made or loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// The name given does not make a usable DID.
    #[error("{0}")]
    Invalid(String),
    /// The document does not describe the DID.
    #[error("the document of {0}: {1}")]
    Document(String, DocumentError),
    /// The document does not list the key under authentication and assertionMethod.
    #[error("the document of {0} does not list our key under authentication and assertionMethod")]
    KeyNotInDocument(String),
}

/// Which kind of domain identity to make.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DomainSpec {
    /// `did:web:<this>`: `host[%3Aport][:segment…]` (a leading `did:web:` is accepted).
    Web(String),
    /// `did:wba:<this>:e1_<fingerprint>`: `host[%3Aport]:segment[:segment…]` (a leading
    /// `did:wba:` is accepted); the key-bound last segment is appended.
    Wba(String),
}

/// `host:18080:path`: a port written with a colon reads as a first path segment of digits
/// (`https://host/18080/path`); refused with the `%3A` form to write instead.
fn refuse_colon_port(spec: &DomainSpec) -> Result<(), IdentityError> {
    let (DomainSpec::Web(id) | DomainSpec::Wba(id)) = spec;
    let bare = id
        .strip_prefix("did:web:")
        .or_else(|| id.strip_prefix("did:wba:"))
        .unwrap_or(id);
    let mut parts = bare.splitn(3, ':');
    let (Some(host), Some(port)) = (parts.next(), parts.next()) else {
        return Ok(());
    };
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(());
    }
    let rest = parts.next().map(|r| format!(":{r}")).unwrap_or_default();
    Err(IdentityError::Invalid(format!(
        "`{id}`: a port is written `%3A`: `{host}%3A{port}{rest}`"
    )))
}

/// The DID and the DID document of a new identity under a domain for `key`. `created` is the
/// proof's XML Schema dateTime (did:wba only).
pub fn create(
    spec: &DomainSpec,
    key: &SecretKey,
    created: &str,
) -> Result<(Did, Document), IdentityError> {
    let invalid = |m: String| IdentityError::Invalid(m);
    refuse_colon_port(spec)?;
    let did = match spec {
        DomainSpec::Web(id) => {
            let id = id.strip_prefix("did:web:").unwrap_or(id);
            Did::parse(&format!("did:web:{id}"))
                .map_err(|e| invalid(format!("did:web:{id} is not a DID: {e}")))?
        }
        DomainSpec::Wba(id) => {
            let id = id.strip_prefix("did:wba:").unwrap_or(id);
            let mut parts = id.split(':');
            let host_enc = parts.next().unwrap_or_default();
            let segments: Vec<&str> = parts.collect();
            if segments.iter().any(|s| s.starts_with("e1_")) {
                return Err(invalid(
                    "give the did:wba without its e1_ segment: it is made from the new key".into(),
                ));
            }
            let (host, port) = match host_enc.split_once("%3A").or(host_enc.split_once("%3a")) {
                Some((h, p)) => (
                    h,
                    Some(
                        p.parse::<u16>()
                            .map_err(|_| invalid(format!("bad port in {host_enc:?}")))?,
                    ),
                ),
                None => (host_enc, None),
            };
            wba::did_for(host, port, &segments, &key.public())
                .map_err(|e| invalid(format!("did:wba:{id}: {e}")))?
        }
    };
    if !matches!(did.method(), Method::Web | Method::Wba) {
        return Err(invalid(format!("{did} is not did:web or did:wba")));
    }
    // The name must map to an HTTPS URL the resolvers will fetch (host, port, path rules).
    web::document_url(&did).map_err(|e| invalid(e.to_string()))?;
    let mut doc = wba::document_for(&did, key, created);
    if did.method() == &Method::Web {
        // did:web has no proof rule; the document stands on the domain's TLS.
        doc.proof = None;
        doc.context = serde_json::json!([
            "https://www.w3.org/ns/did/v1",
            "https://w3id.org/security/multikey/v1"
        ]);
    }
    // Read back the way a resolver would, checks included.
    let bytes = serde_json::to_vec(&doc.to_json())
        .map_err(|e| invalid(format!("serializing the document: {e}")))?;
    let doc =
        Document::from_json(&bytes).map_err(|e| IdentityError::Document(did.to_string(), e))?;
    if did.method() == &Method::Wba {
        wba::check_document(&did, &doc).map_err(|e| IdentityError::Document(did.to_string(), e))?;
    }
    Identity::from_document(did.clone(), &doc, SecretKey::from_seed(&key.seed()))?;
    Ok((did, doc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_and_wba_identities() {
        let key = SecretKey::from_seed(&[3; 32]);
        let (did, doc) = create(
            &DomainSpec::Web("example.com:agents:x".into()),
            &key,
            "2026-01-01T00:00:00Z",
        )
        .unwrap();
        assert_eq!(did.as_str(), "did:web:example.com:agents:x");
        assert_eq!(
            web::document_url(&did).unwrap().as_str(),
            "https://example.com/agents/x/did.json"
        );
        let id =
            Identity::from_document(did.clone(), &doc, SecretKey::from_seed(&[3; 32])).unwrap();
        assert_eq!(id.kid().to_string(), format!("{did}#key-1"));
        assert!(doc.proof.is_none());

        let (did, doc) = create(
            &DomainSpec::Wba("did:wba:example.com%3A8443:agents".into()),
            &key,
            "2026-01-01T00:00:00Z",
        )
        .unwrap();
        let fp = wba::ed25519_thumbprint(&key.public());
        assert_eq!(
            did.as_str(),
            format!("did:wba:example.com%3A8443:agents:e1_{fp}")
        );
        wba::check_document(&did, &doc).unwrap();
        // Another key does not sign for it.
        assert!(matches!(
            Identity::from_document(did, &doc, SecretKey::from_seed(&[4; 32])),
            Err(IdentityError::KeyNotInDocument(_))
        ));
    }

    #[test]
    fn bad_names_are_refused() {
        let key = SecretKey::from_seed(&[3; 32]);
        for spec in [
            DomainSpec::Web("".into()),
            DomainSpec::Web("exa mple.com".into()),
            DomainSpec::Web("example.com:..:x".into()),
            DomainSpec::Web("127.0.0.1%3Abad".into()),
            DomainSpec::Web("localhost:18080:agents:y".into()),
            DomainSpec::Wba("did:wba:localhost:18080:agents".into()),
            DomainSpec::Wba("example.com".into()),
            DomainSpec::Wba("example.com:agents:e1_abc".into()),
            DomainSpec::Wba("example.com%3A99999:a".into()),
        ] {
            assert!(
                create(&spec, &key, "2026-01-01T00:00:00Z").is_err(),
                "{spec:?}"
            );
        }
    }
}
