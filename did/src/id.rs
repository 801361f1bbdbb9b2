//! DID and DID URL syntax (W3C DID Core §3.1 and §3.2).
//!
//! Parsing is strict and bounded: an identifier longer than [`MAX_DID_LEN`] is refused before any
//! other work, every character is checked against the grammar, and nothing here allocates more
//! than the input's length.

use std::fmt;
use std::str::FromStr;

/// Longest DID or DID URL we accept, in bytes. Real identifiers are far shorter (a did:key is 56
/// characters); the bound keeps hostile input from costing memory or time downstream.
pub const MAX_DID_LEN: usize = 2048;

/// A DID that failed to parse. Its [`code`](Self::code) is the DID Resolution error name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalidDid: {input:?}: {reason}")]
pub struct InvalidDid {
    /// The offending input, cut to 100 characters.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl InvalidDid {
    pub(crate) fn new(input: &str, reason: &'static str) -> Self {
        let input: String = input.chars().take(100).collect();
        Self { input, reason }
    }

    /// The DID Resolution error code: `invalidDid`.
    pub fn code(&self) -> &'static str {
        "invalidDid"
    }
}

/// The DID methods agentnet knows by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Method {
    /// `did:key`: the key is the identifier; resolved locally.
    Key,
    /// `did:web`: a DID document served over HTTPS.
    Web,
    /// `did:wba`: ANP's web-based agent DID, did:web's mapping plus key-bound paths and a proof.
    Wba,
    /// Any other syntactically valid method name.
    Other(String),
}

impl Method {
    /// The method name as written in the DID.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Key => "key",
            Method::Web => "web",
            Method::Wba => "wba",
            Method::Other(name) => name,
        }
    }
}

/// A parsed DID: `did:<method>:<method-specific-id>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Did {
    text: String,
    method: Method,
    /// Byte offset of the method-specific id in `text`.
    msi_start: usize,
}

impl Did {
    /// Parse a DID (no path, query or fragment).
    pub fn parse(input: &str) -> Result<Self, InvalidDid> {
        if input.len() > MAX_DID_LEN {
            return Err(InvalidDid::new(input, "longer than 2048 bytes"));
        }
        let rest = input
            .strip_prefix("did:")
            .ok_or_else(|| InvalidDid::new(input, "does not start with \"did:\""))?;
        let colon = rest
            .find(':')
            .ok_or_else(|| InvalidDid::new(input, "no method-specific id"))?;
        let name = &rest[..colon];
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            return Err(InvalidDid::new(
                input,
                "method name must be lowercase letters and digits",
            ));
        }
        let msi = &rest[colon + 1..];
        check_method_specific_id(input, msi)?;
        let method = match name {
            "key" => Method::Key,
            "web" => Method::Web,
            "wba" => Method::Wba,
            other => Method::Other(other.to_owned()),
        };
        Ok(Self {
            text: input.to_owned(),
            method,
            msi_start: 4 + colon + 1,
        })
    }

    /// The method.
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The method-specific id, everything after `did:<method>:`.
    pub fn method_specific_id(&self) -> &str {
        &self.text[self.msi_start..]
    }

    /// The DID as a string.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// A DID URL for one of this DID's verification methods: `did#fragment`.
    pub fn with_fragment(&self, fragment: &str) -> DidUrl {
        DidUrl {
            did: self.clone(),
            path: String::new(),
            query: None,
            fragment: Some(fragment.to_owned()),
        }
    }

    /// A short form for logs: the method and the last 8 characters.
    pub fn short(&self) -> String {
        let msi = self.method_specific_id();
        let tail: String = msi
            .chars()
            .rev()
            .take(8)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("did:{}:…{}", self.method.as_str(), tail)
    }
}

fn check_method_specific_id(input: &str, msi: &str) -> Result<(), InvalidDid> {
    if msi.is_empty() {
        return Err(InvalidDid::new(input, "empty method-specific id"));
    }
    if msi.ends_with(':') {
        return Err(InvalidDid::new(
            input,
            "method-specific id must not end with ':'",
        ));
    }
    let bytes = msi.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' | b':' => i += 1,
            b'%' => {
                let ok = bytes.len() > i + 2
                    && bytes[i + 1].is_ascii_hexdigit()
                    && bytes[i + 2].is_ascii_hexdigit();
                if !ok {
                    return Err(InvalidDid::new(input, "bad percent-encoding"));
                }
                i += 3;
            }
            _ => {
                return Err(InvalidDid::new(
                    input,
                    "character not allowed in a method-specific id",
                ))
            }
        }
    }
    Ok(())
}

impl fmt::Display for Did {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for Did {
    type Err = InvalidDid;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl serde::Serialize for Did {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> serde::Deserialize<'de> for Did {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Did::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A DID URL: a DID with an optional path, query and fragment (`did:web:x.org/p?q=1#key-1`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DidUrl {
    did: Did,
    path: String,
    query: Option<String>,
    fragment: Option<String>,
}

impl DidUrl {
    /// Parse a DID URL.
    pub fn parse(input: &str) -> Result<Self, InvalidDid> {
        if input.len() > MAX_DID_LEN {
            return Err(InvalidDid::new(input, "longer than 2048 bytes"));
        }
        let (before_frag, fragment) = match input.split_once('#') {
            Some((a, f)) => (a, Some(f)),
            None => (input, None),
        };
        let (before_query, query) = match before_frag.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (before_frag, None),
        };
        let (did_part, path) = match before_query.find('/') {
            Some(i) => (&before_query[..i], &before_query[i..]),
            None => (before_query, ""),
        };
        let did = Did::parse(did_part).map_err(|e| InvalidDid::new(input, e.reason))?;
        for (part, what) in [
            (Some(path), "path"),
            (query, "query"),
            (fragment, "fragment"),
        ] {
            if let Some(part) = part {
                check_url_part(part).map_err(|_| {
                    InvalidDid::new(
                        input,
                        match what {
                            "path" => "character not allowed in the path",
                            "query" => "character not allowed in the query",
                            _ => "character not allowed in the fragment",
                        },
                    )
                })?;
            }
        }
        Ok(Self {
            did,
            path: path.to_owned(),
            query: query.map(str::to_owned),
            fragment: fragment.map(str::to_owned),
        })
    }

    /// The DID this URL belongs to.
    pub fn did(&self) -> &Did {
        &self.did
    }

    /// The path, `""` when absent (starts with `/` otherwise).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The query, without the `?`.
    pub fn query(&self) -> Option<&str> {
        self.query.as_deref()
    }

    /// The fragment, without the `#`.
    pub fn fragment(&self) -> Option<&str> {
        self.fragment.as_deref()
    }
}

/// RFC 3986 pchar plus `/` and `?`, as DID URL paths, queries and fragments allow.
fn check_url_part(part: &str) -> Result<(), ()> {
    let bytes = part.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'a'..=b'z'
            | b'A'..=b'Z'
            | b'0'..=b'9'
            | b'-'
            | b'.'
            | b'_'
            | b'~'
            | b'!'
            | b'$'
            | b'&'
            | b'\''
            | b'('
            | b')'
            | b'*'
            | b'+'
            | b','
            | b';'
            | b'='
            | b':'
            | b'@'
            | b'/'
            | b'?' => i += 1,
            b'%' if bytes.len() > i + 2
                && bytes[i + 1].is_ascii_hexdigit()
                && bytes[i + 2].is_ascii_hexdigit() =>
            {
                i += 3;
            }
            _ => return Err(()),
        }
    }
    Ok(())
}

impl fmt::Display for DidUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.did.as_str())?;
        f.write_str(&self.path)?;
        if let Some(q) = &self.query {
            write!(f, "?{q}")?;
        }
        if let Some(frag) = &self.fragment {
            write!(f, "#{frag}")?;
        }
        Ok(())
    }
}

impl FromStr for DidUrl {
    type Err = InvalidDid;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_the_three_methods() {
        let d = Did::parse("did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp").unwrap();
        assert_eq!(d.method(), &Method::Key);
        assert_eq!(
            d.method_specific_id(),
            "z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp"
        );
        let w = Did::parse("did:web:example.com%3A8443:user:alice").unwrap();
        assert_eq!(w.method(), &Method::Web);
        assert_eq!(w.method_specific_id(), "example.com%3A8443:user:alice");
        assert_eq!(Did::parse("did:wba:a.b").unwrap().method(), &Method::Wba);
        assert_eq!(
            Did::parse("did:jwk:abc").unwrap().method(),
            &Method::Other("jwk".into())
        );
    }

    #[test]
    fn refuses_bad_dids_with_a_named_reason() {
        for bad in [
            "",
            "did:",
            "did:key",
            "did:key:",
            "did:KEY:abc",
            "did:web:a b",
            "did:web:a:",
            "did:web:a%2",
            "di:key:z",
            "did:web:a/b",
            "did:web:a#x",
        ] {
            let e = Did::parse(bad).unwrap_err();
            assert_eq!(e.code(), "invalidDid");
            assert!(e.to_string().contains("invalidDid"), "{e}");
        }
    }

    #[test]
    fn did_urls_keep_their_parts_and_print_back() {
        let u = DidUrl::parse("did:web:example.com:a/path/x?service=files&v=1#key-1").unwrap();
        assert_eq!(u.did().as_str(), "did:web:example.com:a");
        assert_eq!(u.path(), "/path/x");
        assert_eq!(u.query(), Some("service=files&v=1"));
        assert_eq!(u.fragment(), Some("key-1"));
        assert_eq!(
            u.to_string(),
            "did:web:example.com:a/path/x?service=files&v=1#key-1"
        );
        let k = DidUrl::parse("did:key:z6Mk#z6Mk").unwrap();
        assert_eq!(k.fragment(), Some("z6Mk"));
        assert!(DidUrl::parse("did:key:z6Mk#a b").is_err());
        assert!(DidUrl::parse("did:key:z6Mk#a#b").is_err());
    }

    #[test]
    fn refuses_overlong_input_before_scanning() {
        let long = format!("did:web:{}", "a".repeat(MAX_DID_LEN));
        assert!(Did::parse(&long).is_err());
        assert!(DidUrl::parse(&long).is_err());
    }

    proptest! {
        #[test]
        fn did_parse_never_panics(s in "\\PC{0,200}") {
            let _ = Did::parse(&s);
            let _ = DidUrl::parse(&s);
        }

        #[test]
        fn did_like_inputs_round_trip(
            method in "[a-z0-9]{1,8}",
            msi in "[A-Za-z0-9._-]{1,20}(:[A-Za-z0-9._-]{1,10}){0,3}",
            frag in proptest::option::of("[A-Za-z0-9_-]{1,12}"),
        ) {
            let mut s = format!("did:{method}:{msi}");
            if let Some(f) = &frag { s.push('#'); s.push_str(f); }
            let u = DidUrl::parse(&s).unwrap();
            prop_assert_eq!(u.to_string(), s);
            prop_assert_eq!(u.fragment(), frag.as_deref());
        }
    }
}
