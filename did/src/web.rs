//! did:web and did:wba over HTTPS, fetched so that a DID cannot turn the resolver into a weapon:
//! HTTPS only (plain http only to loopback, when the caller allows it), addresses checked after
//! DNS (no private, loopback, link-local, CGNAT or metadata addresses unless allowed), the same on
//! every redirect and no redirect to another host, a timeout, a body cap, a JSON depth cap.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OnceCell;

use crate::document::Document;
use crate::resolution::ResolveError;
use crate::{Did, Method};

/// How the HTTP side of resolution behaves.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Whole-request timeout, connect to last body byte.
    pub timeout: Duration,
    /// Largest DID document body accepted.
    pub max_body: usize,
    /// Allow loopback addresses (127.0.0.0/8, ::1, `localhost`), for local testnets and tests.
    pub allow_loopback: bool,
    /// Allow plain `http://` to loopback hosts. Implies nothing for any other host.
    pub allow_http_loopback: bool,
    /// Extra trusted root certificates (PEM), e.g. a test CA.
    pub extra_root_pems: Vec<Vec<u8>>,
    /// How many redirects (to the same host) to follow.
    pub max_redirects: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            max_body: 256 * 1024,
            allow_loopback: false,
            allow_http_loopback: false,
            extra_root_pems: Vec::new(),
            max_redirects: 3,
        }
    }
}

/// The HTTPS URL of a did:web or did:wba document.
pub fn document_url(did: &Did) -> Result<url::Url, ResolveError> {
    let invalid = |reason: String| ResolveError::InvalidDid {
        did: did.to_string(),
        reason,
    };
    if !matches!(did.method(), Method::Web | Method::Wba) {
        return Err(ResolveError::MethodNotSupported {
            did: did.to_string(),
            method: did.method().as_str().to_owned(),
        });
    }
    let mut segments = did.method_specific_id().split(':');
    let host_enc = segments.next().unwrap_or_default();
    let host = percent_decode(host_enc).map_err(invalid)?;
    // The host part may carry a port as %3A and nothing else that needs encoding.
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) => {
            let port: u16 = port
                .parse()
                .map_err(|_| invalid(format!("bad port {port:?}")))?;
            (name.to_owned(), Some(port))
        }
        None => (host.clone(), None),
    };
    if name.is_empty()
        || name.len() > 253
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        || name.starts_with('.')
        || name.ends_with('.')
        || name.contains("..")
    {
        return Err(invalid(format!("{name:?} is not a domain name")));
    }
    let mut path = String::new();
    let mut any = false;
    for seg in segments {
        let dec = percent_decode(seg).map_err(invalid)?;
        if dec.is_empty()
            || dec == "."
            || dec == ".."
            || dec.contains(['/', '?', '#', '\\', '%'])
            || dec.chars().any(char::is_control)
        {
            return Err(invalid(format!("path segment {seg:?} is not allowed")));
        }
        path.push('/');
        path.push_str(seg);
        any = true;
    }
    if !any {
        path.push_str("/.well-known");
    }
    path.push_str("/did.json");
    let authority = match port {
        Some(p) => format!("{name}:{p}"),
        None => name,
    };
    url::Url::parse(&format!("https://{authority}{path}"))
        .map_err(|e| invalid(format!("does not map to a URL: {e}")))
}

fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent-encoding in {s:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} decodes to invalid UTF-8"))
}

/// Whether `ip` is a public unicast address we may connect to.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return is_public_v4(v4);
            }
            let s = v6.segments();
            !(v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local, incl. fd00:ec2::254 (metadata)
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || (s[0] == 0x0100 && s[1] == 0 && s[2] == 0 && s[3] == 0)) // discard-only
        }
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local() // 169.254/16: cloud metadata 169.254.169.254 lives here
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || o[0] == 0
        || (o[0] == 100 && (o[1] & 0xc0) == 64) // CGNAT 100.64/10
        || (o[0] == 192 && o[1] == 0 && o[2] == 0) // IETF protocol assignments
        || (o[0] == 198 && (o[1] & 0xfe) == 18) // benchmarking 198.18/15
        || o[0] >= 240) // reserved
}

/// An IPv4 address carried inside an IPv6 one (mapped, compatible, NAT64), if any.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let mapped = s[..5].iter().all(|&x| x == 0) && s[5] == 0xffff;
    let compat = s[..6].iter().all(|&x| x == 0) && !v6.is_loopback() && !v6.is_unspecified();
    let nat64 = s[0] == 0x64 && s[1] == 0xff9b && s[2..6].iter().all(|&x| x == 0);
    (mapped || compat || nat64).then_some(tail)
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || embedded_v4(v6).is_some_and(|v4| v4.is_loopback()),
    }
}

/// The address policy, shared by the DNS resolver and the literal-IP check.
#[derive(Debug, Clone, Copy)]
struct AddressPolicy {
    allow_loopback: bool,
}

impl AddressPolicy {
    fn allows(&self, ip: IpAddr) -> bool {
        is_public(ip) || (self.allow_loopback && is_loopback(ip))
    }
}

/// A refusal by our address or redirect policy, told apart from network failures by type.
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// DNS through hickory-resolver, with every answer filtered by the address policy, so that the
/// check happens on the addresses we actually connect to (no DNS rebinding window between a check
/// and the connect).
struct FilteringResolver {
    policy: AddressPolicy,
    /// Built on first use, so loopback-only work never needs a DNS configuration.
    dns: OnceCell<hickory_resolver::TokioResolver>,
}

impl FilteringResolver {
    async fn dns(&self) -> &hickory_resolver::TokioResolver {
        self.dns
            .get_or_init(|| async {
                match hickory_resolver::TokioResolver::builder_tokio() {
                    Ok(b) => b.build(),
                    Err(error) => {
                        tracing::warn!(%error, "no system DNS configuration; using hickory defaults");
                        hickory_resolver::TokioResolver::builder_with_config(
                            hickory_resolver::config::ResolverConfig::default(),
                            hickory_resolver::name_server::TokioConnectionProvider::default(),
                        )
                        .build()
                    }
                }
            })
            .await
    }
}

/// The resolver as reqwest holds it; the future it returns owns a clone of the `Arc`.
struct ResolverRef(Arc<FilteringResolver>);

impl reqwest::dns::Resolve for ResolverRef {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let this = self.0.clone();
        let host = name.as_str().to_ascii_lowercase();
        Box::pin(async move {
            let policy = this.policy;
            let candidates: Vec<IpAddr> = if host == "localhost" || host.ends_with(".localhost") {
                // RFC 6761: localhost is loopback, never sent to DNS.
                vec![
                    IpAddr::V4(Ipv4Addr::LOCALHOST),
                    IpAddr::V6(Ipv6Addr::LOCALHOST),
                ]
            } else {
                this.dns()
                    .await
                    .lookup_ip(host.as_str())
                    .await?
                    .iter()
                    .collect()
            };
            let allowed: Vec<SocketAddr> = candidates
                .iter()
                .copied()
                .filter(|ip| policy.allows(*ip))
                .map(|ip| SocketAddr::new(ip, 0))
                .collect();
            if allowed.is_empty() {
                return Err(Box::new(Refused(format!(
                    "refusing to connect to {host}: it resolves only to non-public addresses {candidates:?}"
                ))) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Fetches DID documents over HTTPS under the rules above.
#[derive(Clone)]
pub struct HttpFetcher {
    client: reqwest::Client,
    opts: HttpOptions,
    policy: AddressPolicy,
}

impl std::fmt::Debug for HttpFetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpFetcher")
            .field("opts", &self.opts)
            .finish()
    }
}

/// Why an HTTP client for DID documents could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// An extra root certificate (`HttpOptions::extra_root_pems`) is not a PEM certificate.
    #[error("extra root certificate {index}: {reason}")]
    RootCertificate {
        /// Its position in `extra_root_pems`.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The TLS backend could not be set up.
    #[error("building the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

impl HttpFetcher {
    /// Build a fetcher. Fails only on a bad extra root certificate or a TLS backend that
    /// cannot start.
    pub fn new(opts: HttpOptions) -> Result<Self, BuildError> {
        let policy = AddressPolicy {
            allow_loopback: opts.allow_loopback || opts.allow_http_loopback,
        };
        let resolver = Arc::new(FilteringResolver {
            policy,
            dns: OnceCell::new(),
        });
        let max_redirects = opts.max_redirects;
        let redirect = reqwest::redirect::Policy::custom(move |attempt| {
            let Some(first) = attempt.previous().first() else {
                return attempt.stop();
            };
            if attempt.previous().len() > max_redirects {
                return attempt.error(Refused(format!("more than {max_redirects} redirects")));
            }
            let next = attempt.url();
            if next.host_str() != first.host_str()
                || next.port_or_known_default() != first.port_or_known_default()
            {
                let msg = format!("redirect to another host refused: {next}");
                return attempt.error(Refused(msg));
            }
            if next.scheme() != first.scheme() {
                let msg = format!("redirect to another scheme refused: {next}");
                return attempt.error(Refused(msg));
            }
            attempt.follow()
        });
        let builder =
            crate::http::client_builder_with_roots(&opts.extra_root_pems).map_err(|e| match e {
                crate::http::TlsError::RootCertificate { index, reason } => {
                    BuildError::RootCertificate { index, reason }
                }
            })?;
        let builder = builder
            .timeout(opts.timeout)
            .connect_timeout(opts.timeout)
            .redirect(redirect)
            .dns_resolver(Arc::new(ResolverRef(resolver)))
            .user_agent(concat!("agentnet/", env!("CARGO_PKG_VERSION")))
            .no_proxy();
        let client = builder.build().map_err(BuildError::Client)?;
        Ok(Self {
            client,
            opts,
            policy,
        })
    }

    /// The options in force.
    pub fn options(&self) -> &HttpOptions {
        &self.opts
    }

    /// Fetch and check the document of a did:web or did:wba DID; with the estimated heap bytes
    /// the parsed document holds.
    pub async fn fetch(&self, did: &Did) -> Result<(Document, usize), ResolveError> {
        let mut url = document_url(did)?;
        let http_err = |reason: String| ResolveError::Http {
            did: did.to_string(),
            reason,
        };
        let host = url.host_str().unwrap_or_default().to_owned();
        let loopback_host = host == "localhost"
            || host.ends_with(".localhost")
            || host.parse::<IpAddr>().is_ok_and(is_loopback);
        if self.opts.allow_http_loopback && loopback_host {
            url.set_scheme("http")
                .expect("https -> http is a valid change");
        }
        // IP literals never reach the DNS resolver, so check them here.
        if let Ok(ip) = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            if !self.policy.allows(ip) {
                return Err(ResolveError::NotAllowed {
                    did: did.to_string(),
                    reason: format!("{ip} is not a public address"),
                });
            }
        }
        tracing::debug!(%did, %url, "fetching DID document");
        let resp = self
            .client
            .get(url.clone())
            .header(
                reqwest::header::ACCEPT,
                "application/did+json, application/json",
            )
            .send()
            .await
            .map_err(|e| classify(did, &url, e))?;
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND || status == reqwest::StatusCode::GONE {
            return Err(ResolveError::NotFound {
                did: did.to_string(),
                reason: format!("{url}: HTTP {}", status.as_u16()),
            });
        }
        if !status.is_success() {
            return Err(http_err(format!("{url}: HTTP {}", status.as_u16())));
        }
        let cap = self.opts.max_body;
        if resp.content_length().is_some_and(|n| n > cap as u64) {
            return Err(ResolveError::TooLarge {
                did: did.to_string(),
                limit: cap,
            });
        }
        let mut body = Vec::new();
        let mut resp = resp;
        while let Some(chunk) = resp.chunk().await.map_err(|e| classify(did, &url, e))? {
            if body.len() + chunk.len() > cap {
                return Err(ResolveError::TooLarge {
                    did: did.to_string(),
                    limit: cap,
                });
            }
            body.extend_from_slice(&chunk);
        }
        crate::resolution::checked_document(did, &body)
    }
}

fn classify(did: &Did, url: &url::Url, e: reqwest::Error) -> ResolveError {
    use std::error::Error as _;
    let mut chain = e.to_string();
    let mut refused = false;
    let mut src = e.source();
    while let Some(s) = src {
        chain.push_str(": ");
        chain.push_str(&s.to_string());
        refused |= s.downcast_ref::<Refused>().is_some();
        src = s.source();
    }
    if refused {
        return ResolveError::NotAllowed {
            did: did.to_string(),
            reason: format!("{url}: {chain}"),
        };
    }
    if e.is_timeout() {
        return ResolveError::Http {
            did: did.to_string(),
            reason: format!("{url}: timed out: {chain}"),
        };
    }
    ResolveError::Http {
        did: did.to_string(),
        reason: format!("{url}: {chain}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn url(s: &str) -> Result<String, ResolveError> {
        document_url(&Did::parse(s).unwrap()).map(|u| u.to_string())
    }

    #[test]
    fn maps_did_web_to_urls_as_the_spec_says() {
        assert_eq!(
            url("did:web:w3c-ccg.github.io").unwrap(),
            "https://w3c-ccg.github.io/.well-known/did.json"
        );
        assert_eq!(
            url("did:web:w3c-ccg.github.io:user:alice").unwrap(),
            "https://w3c-ccg.github.io/user/alice/did.json"
        );
        assert_eq!(
            url("did:web:example.com%3A3000:user:alice").unwrap(),
            "https://example.com:3000/user/alice/did.json"
        );
        assert_eq!(
            url("did:wba:example.com:user:alice").unwrap(),
            "https://example.com/user/alice/did.json"
        );
    }

    #[test]
    fn refuses_traversal_and_smuggled_characters() {
        for bad in [
            "did:web:example.com:..",
            "did:web:example.com:.",
            "did:web:example.com:a%2Fb",
            "did:web:example.com:a%3Fb",
            "did:web:example.com:a%23b",
            "did:web:example.com:%2E%2E",
            "did:web:example.com%2Fevil.com",
            "did:web:example.com%40evil.com",
            "did:web:example.com%3Ahttp",
            "did:web:exa_mple.com",
        ] {
            let e = url(bad).unwrap_err();
            assert_eq!(e.code(), "invalidDid", "{bad}: {e}");
        }
    }

    #[test]
    fn address_policy_refuses_every_non_public_range() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a00:1",
            "2001:db8::1",
            "198.18.0.1",
            "192.0.0.170",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "1.1.1.1", "2606:4700::1111"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
        let p = AddressPolicy {
            allow_loopback: true,
        };
        assert!(p.allows("127.0.0.1".parse().unwrap()));
        assert!(!p.allows("10.0.0.1".parse().unwrap()));
    }

    proptest! {
        #[test]
        fn url_mapping_never_panics(msi in "[A-Za-z0-9.%:_-]{1,60}") {
            if let Ok(did) = Did::parse(&format!("did:web:{msi}")) {
                if let Ok(u) = document_url(&did) {
                    prop_assert_eq!(u.scheme(), "https");
                    prop_assert!(u.path().ends_with("/did.json"));
                    // No dot segment survives (a segment like "..A" is a plain name).
                    prop_assert!(u.path_segments().unwrap().all(|s| s != ".." && s != "."));
                    prop_assert_eq!(u.path_segments().unwrap().count(), did.method_specific_id().split(':').count().max(2));
                }
            }
        }
    }
}
