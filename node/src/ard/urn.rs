//! The `urn:air:` identifier of a DID (ARD spec section 4.2.1, `urn:air:<publisher>:<namespace>:
//! <agent-name>`), decided in docs/ARD.md: `urn:air:<publisher>:` followed by the DID itself,
//! so that the identifier names the DID exactly and reads back without a table.
//!
//! - `did:web:acme.com:agents:x` → `urn:air:acme.com:did:web:acme.com:agents:x`: the publisher
//!   is the domain the DID document was fetched from (lower case, port dropped), the domain that
//!   vouched for the key.
//! - `did:wba:…` likewise, except an `e1_` DID (its domain was never asked): `wba.did.invalid`.
//! - `did:key:z6Mk…` → `urn:air:key.did.invalid:did:key:z6Mk…`: no domain vouches for a did:key,
//!   so its publisher is under `.invalid` (RFC 2606), which no one owns and nothing resolves.
//!
//! A DID's characters are all allowed in a URN's NSS (RFC 8141: `:` and percent-encodings
//! included), so every DID has one.

use agentnet_did::Did;

/// The publisher of DIDs that name no domain that vouched for their key: `<method>.did.invalid`.
fn placeholder(method: &str) -> String {
    format!("{method}.did.invalid")
}

/// The publisher segment for `did`, `None` if it is not a DID.
fn publisher_of(did: &str) -> Option<String> {
    let d = Did::parse(did).ok()?;
    let method = did.split(':').nth(1)?;
    let msid = d.method_specific_id();
    let domain =
        matches!(method, "web" | "wba") && agentnet_discovery::advert::domain_verified(did);
    if !domain {
        return Some(placeholder(method));
    }
    let host = msid.split(':').next()?;
    let host = host.split("%3A").next()?.split("%3a").next()?;
    let host = host.to_ascii_lowercase();
    let ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
    Some(if ok { host } else { placeholder(method) })
}

/// The identifier of `did`.
pub fn of_did(did: &str) -> Option<String> {
    Some(format!("urn:air:{}:{did}", publisher_of(did)?))
}

/// The publisher segment of an identifier.
pub fn publisher(identifier: &str) -> Option<&str> {
    identifier.strip_prefix("urn:air:")?.split(':').next()
}

/// The DID an identifier names, if it is one of ours ([`of_did`] of that DID gives it back).
pub fn to_did(identifier: &str) -> Option<String> {
    let rest = identifier.strip_prefix("urn:air:")?;
    let (_, did) = rest.split_once(':')?;
    (of_did(did)?.as_str() == identifier).then(|| did.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dids_map_to_urns_and_back() {
        let key = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
        let u = of_did(key).unwrap();
        assert_eq!(u, format!("urn:air:key.did.invalid:{key}"));
        assert_eq!(to_did(&u).as_deref(), Some(key));
        assert_eq!(
            of_did("did:web:Acme.com%3A8443:agents:x").unwrap(),
            "urn:air:acme.com:did:web:Acme.com%3A8443:agents:x"
        );
        assert_eq!(
            of_did("did:web:acme.com").unwrap(),
            "urn:air:acme.com:did:web:acme.com"
        );
        // A publisher that does not match the DID is not ours: no one claims another's domain.
        assert_eq!(to_did("urn:air:evil.com:did:web:acme.com"), None);
        assert_eq!(to_did("urn:air:acme.com:assistant"), None);
        assert_eq!(to_did("urn:air:acme.com"), None);
        assert_eq!(of_did("not a did"), None);
    }
}
