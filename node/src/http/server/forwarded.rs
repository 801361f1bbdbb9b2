//! Who a request is from when it arrives through a reverse proxy (`[http] trusted_proxies`).
//!
//! Every per-source bound of the node (MCP sessions, task quotas and rates, DID fetches, ARD
//! searches) counts the address in the request's `ConnectInfo`. Behind a reverse proxy that is
//! the proxy's address for every caller, so one client would use up everyone's share. The
//! server ([`super::serve`]) therefore resolves the client once per request, here:
//!
//! - A request whose TCP peer is **not** a trusted proxy is from that peer. Its forwarding
//!   headers are not read at all: a client that connects directly cannot choose its source.
//! - A request from a trusted proxy is from the address its forwarding header names, walked
//!   from the right (the end the proxy appended): addresses that are themselves trusted proxies
//!   are skipped, and the first one that is not is the client. Everything left of it was
//!   written by the client (or by proxies nobody vouches for) and is ignored.
//! - A hop that names no address (`unknown`, an obfuscated identifier such as `_hidden`,
//!   garbage, an element longer than [`MAX_ELEMENT`] bytes) ends the walk: the request is
//!   from the last trusted proxy walked, which is the TCP peer when the header is missing or
//!   its last hop is unusable. So is a request whose header holds only trusted proxies.
//! - Only one header is read, the one the proxies write ([`Header`]): `X-Forwarded-For` (what
//!   nginx's `$proxy_add_x_forwarded_for`, Caddy, HAProxy and most load balancers write) by
//!   default, or RFC 7239 `Forwarded` (`for=`). A proxy passes the other one through from the
//!   client unchanged, so believing both would let a client pick its source.
//! - At most [`MAX_HOPS`] hops are walked from the right, so a long header costs one pass over
//!   its bytes and no allocation that grows with it.
//!
//! The address found is bucketed as any other ([`agentnet_a2a::auth::Source::of`]: an IPv4
//! address, an IPv6 /64); an IPv4-mapped IPv6 address is the IPv4 address. Its port is the one
//! the header gives, else 0.

use std::collections::VecDeque;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};

/// Most entries of `[http] trusted_proxies`: a site's proxies are a handful of addresses or
/// blocks, and each request from a proxy is matched against every entry.
pub const MAX_TRUSTED_PROXIES: usize = 64;
/// Most hops of a forwarding header walked from the right: more trusted proxies in a row than
/// any real chain has.
pub const MAX_HOPS: usize = 16;
/// Longest hop (one comma-separated element) read, bytes; a longer one names no address.
pub const MAX_ELEMENT: usize = 256;

/// An address or a CIDR block of trusted proxies, as `[http] trusted_proxies` writes it:
/// `192.0.2.7`, `10.0.0.0/8`, `2001:db8::1`, `2001:db8:1::/48`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// The network address (no bits set past `len`).
    addr: IpAddr,
    /// The prefix length.
    len: u8,
}

/// Why an entry of `[http] trusted_proxies` is not a [`Block`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlockError {
    /// Neither an IP address nor `address/length`.
    #[error(
        "is not an IP address or a CIDR block (such as 192.0.2.7, 10.0.0.0/8 or 2001:db8::/32)"
    )]
    NotAnAddress,
    /// The prefix length is not a number of at most the address's bits.
    #[error("has prefix length {len:?}; an IPv{version} block has 0 to {max}")]
    PrefixLength {
        /// The length as written.
        len: String,
        /// 4 or 6.
        version: u8,
        /// 32 or 128.
        max: u8,
    },
    /// Bits are set past the prefix: most likely a typing error, so refused rather than cut.
    #[error("has bits set past its prefix; the block is {0}")]
    HostBits(String),
}

impl Block {
    /// Whether `ip` is in this block (an IPv4-mapped IPv6 address counts as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => mask32(self.len) & u32::from(ip) == u32::from(net),
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                mask128(self.len) & u128::from(ip) == u128::from(net)
            }
            _ => false,
        }
    }
}

fn mask32(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

fn mask128(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

impl FromStr for Block {
    type Err = BlockError;

    fn from_str(s: &str) -> Result<Block, BlockError> {
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| BlockError::NotAnAddress)?;
        let (version, max) = if addr.is_ipv4() { (4, 32) } else { (6, 128) };
        let len = match len {
            None => max,
            Some(l) => match l.parse::<u8>() {
                Ok(n) if n <= max && !l.starts_with('+') => n,
                _ => {
                    return Err(BlockError::PrefixLength {
                        len: l.chars().take(16).collect(),
                        version,
                        max,
                    })
                }
            },
        };
        // An IPv4-mapped entry is its IPv4 block: peers are compared in that form.
        let (addr, len) = match addr.to_canonical() {
            v4 @ IpAddr::V4(_) if addr.is_ipv6() && len >= 96 => (v4, len - 96),
            _ => (addr, len),
        };
        let net = match addr {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask32(len))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask128(len))),
        };
        let block = Block { addr: net, len };
        if net != addr {
            return Err(BlockError::HostBits(block.to_string()));
        }
        Ok(block)
    }
}

impl fmt::Display for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let full = if self.addr.is_ipv4() { 32 } else { 128 };
        if self.len == full {
            write!(f, "{}", self.addr)
        } else {
            write!(f, "{}/{}", self.addr, self.len)
        }
    }
}

/// The forwarding header the trusted proxies write; the node reads that one only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Header {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for="[2001:db8::1]:4711"`.
    Forwarded,
}

impl Header {
    /// The header's name.
    pub fn name(self) -> &'static str {
        match self {
            Header::XForwardedFor => "x-forwarded-for",
            Header::Forwarded => "forwarded",
        }
    }
}

/// The proxies whose forwarding header a listener believes, and which header that is. The
/// default trusts nobody: every request is from its TCP peer.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies {
    blocks: Arc<[Block]>,
    header: Header,
}

impl TrustedProxies {
    /// Believe `header` from peers in `blocks` (at most [`MAX_TRUSTED_PROXIES`] are kept;
    /// `[http]`'s check refuses more).
    pub fn new(mut blocks: Vec<Block>, header: Header) -> TrustedProxies {
        blocks.truncate(MAX_TRUSTED_PROXIES);
        TrustedProxies {
            blocks: blocks.into(),
            header,
        }
    }

    /// Whether `ip` is a trusted proxy.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.blocks.iter().any(|b| b.contains(ip))
    }

    /// Whether no proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Who a request that arrived from `peer` with `headers` is from (the module's rules).
    pub fn client(&self, peer: SocketAddr, headers: &HeaderMap) -> SocketAddr {
        if !self.trusts(peer.ip()) {
            return peer;
        }
        let lines = headers.get_all(self.header.name());
        let mut hops = 0;
        let mut from = peer;
        // Lines from the last one (the nearest proxy's), each from its right.
        for line in lines.iter().rev() {
            let Ok(line) = line.to_str() else {
                tracing::debug!(%peer, header = self.header.name(), "forwarding header is not ASCII; the request is from the proxy");
                return from;
            };
            let elements: Box<dyn Iterator<Item = Option<SocketAddr>>> = match self.header {
                Header::XForwardedFor => Box::new(line.rsplit(',').map(x_forwarded_for_hop)),
                Header::Forwarded => Box::new(forwarded_hops(line).into_iter().rev()),
            };
            for hop in elements {
                hops += 1;
                match hop {
                    Some(a) if self.trusts(a.ip()) && hops < MAX_HOPS => from = a,
                    Some(a) if self.trusts(a.ip()) => {
                        tracing::debug!(%peer, "more than {MAX_HOPS} trusted hops; the request is from the last one walked");
                        return a;
                    }
                    Some(a) => return a,
                    None => {
                        tracing::debug!(%peer, %from, header = self.header.name(), "a forwarding hop names no address; the request is from the proxy that wrote it");
                        return from;
                    }
                }
            }
        }
        if hops == 0 {
            tracing::debug!(%peer, header = self.header.name(), "a trusted proxy sent no forwarding header; the request is from the proxy");
        }
        from
    }
}

/// One `X-Forwarded-For` element: `192.0.2.1`, `2001:db8::1`, `192.0.2.1:4711`,
/// `[2001:db8::1]`, `[2001:db8::1]:4711`; anything else (`unknown`, garbage) names no address.
fn x_forwarded_for_hop(element: &str) -> Option<SocketAddr> {
    let e = element.trim_matches([' ', '\t']);
    if e.len() > MAX_ELEMENT {
        return None;
    }
    node(e, true)
}

/// An address, `[IPv6]`, or either with `:port`, IPv4-mapped addresses as IPv4; with `bare6`
/// an unbracketed IPv6 address too. An RFC 7239 obfuscated port (`_abc`) counts as no port.
fn node(s: &str, bare6: bool) -> Option<SocketAddr> {
    let canonical = |ip: IpAddr, port: u16| Some(SocketAddr::new(ip.to_canonical(), port));
    let port = |p: &str| -> Option<u16> {
        if p.starts_with('_') && p.len() > 1 && p[1..].bytes().all(obfuscated) {
            Some(0)
        } else if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) {
            p.parse().ok()
        } else {
            None
        }
    };
    if let Some(rest) = s.strip_prefix('[') {
        let (ip, after) = rest.split_once(']')?;
        let ip: Ipv6Addr = ip.parse().ok()?;
        let p = match after {
            "" => 0,
            _ => port(after.strip_prefix(':')?)?,
        };
        return canonical(IpAddr::V6(ip), p);
    }
    if let Ok(ip) = s.parse::<Ipv4Addr>() {
        return canonical(IpAddr::V4(ip), 0);
    }
    if bare6 {
        if let Ok(ip) = s.parse::<Ipv6Addr>() {
            return canonical(IpAddr::V6(ip), 0);
        }
    }
    let (ip, p) = s.split_once(':')?;
    canonical(IpAddr::V4(ip.parse().ok()?), port(p)?)
}

/// RFC 7239 `obfnode`/`obfport` characters after the `_`.
fn obfuscated(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// The `for=` of each element of one `Forwarded` line, left to right, the last [`MAX_HOPS`]
/// only: `None` for an element without a usable `for=` (none, twice, `unknown`, obfuscated,
/// not an address, a syntax error).
fn forwarded_hops(line: &str) -> VecDeque<Option<SocketAddr>> {
    let mut out = VecDeque::with_capacity(MAX_HOPS);
    for element in split_unquoted(line, b',') {
        if out.len() == MAX_HOPS {
            out.pop_front();
        }
        out.push_back(if element.len() > MAX_ELEMENT {
            None
        } else {
            forwarded_for(element)
        });
    }
    out
}

/// The `for=` node of one `Forwarded` element.
fn forwarded_for(element: &str) -> Option<SocketAddr> {
    let mut found = None;
    for pair in split_unquoted(element, b';') {
        let pair = pair.trim_matches([' ', '\t']);
        if pair.is_empty() {
            continue;
        }
        let (name, value) = pair.split_once('=')?;
        if !name.eq_ignore_ascii_case("for") {
            continue;
        }
        if found.is_some() {
            // "MUST NOT occur more than once per forwarded-element".
            return None;
        }
        found = Some(unquote(value)?);
    }
    // RFC 7239 requires IPv6 in brackets; a bare one is read too, as proxies write it so.
    node(&found?, true)
}

/// A token as it is, a quoted-string without its quotes and escapes; `None` when a quote is
/// left open.
fn unquote(value: &str) -> Option<String> {
    let Some(inner) = value.strip_prefix('"') else {
        return (!value.contains('"')).then(|| value.to_owned());
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return chars.as_str().is_empty().then_some(out),
            c => out.push(c),
        }
    }
    None
}

/// `s` split at each `sep` outside a quoted-string (a `\` escapes the next character inside
/// one); an unterminated quoted-string runs to the end.
fn split_unquoted(s: &str, sep: u8) -> impl Iterator<Item = &str> {
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        let (mut quoted, mut escaped) = (false, false);
        for i in start..bytes.len() {
            let b = bytes[i];
            if escaped {
                escaped = false;
            } else if quoted && b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                quoted = !quoted;
            } else if !quoted && b == sep {
                let piece = &s[start..i];
                start = i + 1;
                return Some(piece);
            }
        }
        done = true;
        Some(&s[start..])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn block(s: &str) -> Block {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn proxies(blocks: &[&str], header: Header) -> TrustedProxies {
        TrustedProxies::new(blocks.iter().map(|b| block(b)).collect(), header)
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// The client of a request from `peer` carrying each of `lines` as one line of `header`.
    fn client(t: &TrustedProxies, peer: &str, lines: &[&str]) -> SocketAddr {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append(t.header.name(), HeaderValue::from_str(l).unwrap());
        }
        t.client(addr(peer), &h)
    }

    const PROXY: &str = "127.0.0.1:40000";

    #[test]
    fn blocks_parse_and_match() {
        let b = block("10.0.0.0/8");
        assert!(b.contains("10.255.1.2".parse().unwrap()));
        assert!(!b.contains("11.0.0.1".parse().unwrap()));
        assert!(
            b.contains("::ffff:10.1.2.3".parse().unwrap()),
            "IPv4-mapped"
        );
        assert!(!b.contains("::a01:203".parse().unwrap()));
        let one = block("192.0.2.7");
        assert_eq!(one.to_string(), "192.0.2.7");
        assert!(one.contains("192.0.2.7".parse().unwrap()));
        assert!(!one.contains("192.0.2.8".parse().unwrap()));
        let six = block("2001:db8:1::/48");
        assert_eq!(six.to_string(), "2001:db8:1::/48");
        assert!(six.contains("2001:db8:1:ffff::9".parse().unwrap()));
        assert!(!six.contains("2001:db8:2::1".parse().unwrap()));
        assert!(!six.contains("10.0.0.1".parse().unwrap()));
        assert!(block("0.0.0.0/0").contains("203.0.113.9".parse().unwrap()));
        assert!(block("::/0").contains("2001:db8::1".parse().unwrap()));
        assert!(block("::1").contains("::1".parse().unwrap()));
        assert_eq!(
            block("::ffff:10.0.0.1"),
            block("10.0.0.1"),
            "IPv4-mapped entry"
        );
    }

    #[test]
    fn bad_blocks_are_refused_with_the_reason() {
        for bad in [
            "",
            "localhost",
            "10.0.0",
            "/8",
            "1.2.3.4 ",
            "[::1]",
            "10.0.0.1:80",
        ] {
            assert_eq!(
                bad.parse::<Block>(),
                Err(BlockError::NotAnAddress),
                "{bad:?}"
            );
        }
        for bad in [
            "10.0.0.0/33",
            "10.0.0.0/-1",
            "10.0.0.0/+8",
            "::/129",
            "10.0.0.0/x",
            "10.0.0.0/",
            "10.0.0.0/8/8",
        ] {
            assert!(
                matches!(bad.parse::<Block>(), Err(BlockError::PrefixLength { .. })),
                "{bad:?}"
            );
        }
        assert_eq!(
            "10.1.2.3/8".parse::<Block>(),
            Err(BlockError::HostBits("10.0.0.0/8".into()))
        );
        assert_eq!(
            "2001:db8::1/32".parse::<Block>(),
            Err(BlockError::HostBits("2001:db8::/32".into()))
        );
    }

    /// A peer that is not a trusted proxy is the source, whatever it sends.
    #[test]
    fn headers_from_an_untrusted_peer_are_ignored() {
        for header in [Header::XForwardedFor, Header::Forwarded] {
            let none = TrustedProxies::default();
            let line = match header {
                Header::XForwardedFor => "198.51.100.1",
                Header::Forwarded => "for=198.51.100.1",
            };
            let t = TrustedProxies::new(vec![], header);
            assert_eq!(client(&t, PROXY, &[line]), addr(PROXY));
            assert_eq!(none.client(addr(PROXY), &HeaderMap::new()), addr(PROXY));
            let t = proxies(&["127.0.0.1"], header);
            assert_eq!(client(&t, "127.0.0.2:1", &[line]), addr("127.0.0.2:1"));
        }
    }

    #[test]
    fn x_forwarded_for_is_walked_from_the_right() {
        let t = proxies(&["127.0.0.1", "10.0.0.0/8"], Header::XForwardedFor);
        let c = |lines: &[&str]| client(&t, PROXY, lines);
        assert_eq!(c(&["198.51.100.1"]), addr("198.51.100.1:0"));
        // The client's own claim on the left is not believed.
        assert_eq!(c(&["203.0.113.66, 198.51.100.1"]), addr("198.51.100.1:0"));
        // Trusted hops are skipped.
        assert_eq!(
            c(&["203.0.113.66, 198.51.100.1, 10.1.1.1,10.2.2.2"]),
            addr("198.51.100.1:0")
        );
        // Several lines are one list, in order.
        assert_eq!(
            c(&["203.0.113.66", "198.51.100.1, 10.1.1.1"]),
            addr("198.51.100.1:0")
        );
        // Ports and brackets.
        assert_eq!(c(&["198.51.100.1:4711"]), addr("198.51.100.1:4711"));
        assert_eq!(c(&["[2001:db8::7]:4711"]), addr("[2001:db8::7]:4711"));
        assert_eq!(c(&["[2001:db8::7]"]), addr("[2001:db8::7]:0"));
        assert_eq!(c(&["2001:db8::7"]), addr("[2001:db8::7]:0"));
        assert_eq!(c(&["::ffff:198.51.100.1"]), addr("198.51.100.1:0"));
        // Only trusted proxies: the leftmost of them.
        assert_eq!(c(&["10.1.1.1, 10.2.2.2"]), addr("10.1.1.1:0"));
    }

    #[test]
    fn an_unusable_hop_makes_the_proxy_that_wrote_it_the_source() {
        let t = proxies(&["127.0.0.1", "10.0.0.0/8"], Header::XForwardedFor);
        let c = |lines: &[&str]| client(&t, PROXY, lines);
        let garbage = [
            "",
            "unknown",
            "_hidden",
            "not an address",
            "198.51.100.1:99999",
            "198.51.100.1:",
            "[2001:db8::1",
            "[2001:db8::1]x",
            "300.1.1.1",
            "198.51.100.1 198.51.100.2",
        ];
        for g in garbage {
            assert_eq!(c(&[g]), addr(PROXY), "{g:?}");
            assert_eq!(c(&[&format!("198.51.100.9, {g}")]), addr(PROXY), "{g:?}");
            assert_eq!(
                c(&[&format!("198.51.100.9, {g}, 10.1.1.1")]),
                addr("10.1.1.1:0"),
                "{g:?} behind a second proxy"
            );
        }
        // No header at all.
        assert_eq!(c(&[]), addr(PROXY));
        // Not ASCII.
        let mut h = HeaderMap::new();
        h.append(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"198.51.100.1\xff").unwrap(),
        );
        assert_eq!(t.client(addr(PROXY), &h), addr(PROXY));
        // Another header than the configured one is not read.
        let mut h = HeaderMap::new();
        h.append("forwarded", HeaderValue::from_static("for=198.51.100.1"));
        assert_eq!(t.client(addr(PROXY), &h), addr(PROXY));
    }

    #[test]
    fn oversized_headers_cost_one_pass_and_keep_their_right_end() {
        let t = proxies(&["127.0.0.1", "10.0.0.0/8"], Header::XForwardedFor);
        let junk = "203.0.113.66, ".repeat(20_000);
        assert_eq!(
            client(&t, PROXY, &[&format!("{junk}198.51.100.1")]),
            addr("198.51.100.1:0")
        );
        let long = "1".repeat(MAX_ELEMENT + 1);
        assert_eq!(
            client(&t, PROXY, &[&format!("198.51.100.1, {long}")]),
            addr(PROXY)
        );
        // A chain of trusted hops longer than walked: the last one walked.
        let mut chain: Vec<String> = (0..40).map(|i| format!("10.0.0.{i}")).collect();
        chain.insert(0, "198.51.100.1".into());
        let walked = client(&t, PROXY, &[&chain.join(", ")]);
        assert_eq!(walked, addr(&format!("10.0.0.{}:0", 40 - MAX_HOPS)));
        let f = proxies(&["127.0.0.1"], Header::Forwarded);
        let junk = "for=203.0.113.66;proto=https, ".repeat(20_000);
        assert_eq!(
            client(&f, PROXY, &[&format!("{junk}for=198.51.100.1")]),
            addr("198.51.100.1:0")
        );
    }

    #[test]
    fn forwarded_follows_rfc_7239() {
        let t = proxies(&["127.0.0.1", "10.0.0.0/8"], Header::Forwarded);
        let c = |lines: &[&str]| client(&t, PROXY, lines);
        // RFC 7239 section 4's examples.
        assert_eq!(c(&[r#"for="_gazonk""#]), addr(PROXY));
        assert_eq!(
            c(&[r#"For="[2001:db8:cafe::17]:4711""#]),
            addr("[2001:db8:cafe::17]:4711")
        );
        assert_eq!(
            c(&["for=192.0.2.60;proto=http;by=203.0.113.43"]),
            addr("192.0.2.60:0")
        );
        assert_eq!(
            c(&["for=192.0.2.43, for=198.51.100.17"]),
            addr("198.51.100.17:0")
        );
        // Walked from the right, trusted hops skipped, across lines.
        assert_eq!(
            c(&[
                "for=203.0.113.66",
                "for=198.51.100.1;proto=https, for=10.1.1.1"
            ]),
            addr("198.51.100.1:0")
        );
        // Quoting: escapes, separators inside quotes, a quoted IPv4 with a port.
        assert_eq!(c(&[r#"for="192.0.2.60:80""#]), addr("192.0.2.60:80"));
        assert_eq!(c(&[r#"for="\192.0.2.60""#]), addr("192.0.2.60:0"));
        assert_eq!(
            c(&[r#"for=198.51.100.1;by="a,b;c=d", for=10.1.1.1"#]),
            addr("198.51.100.1:0")
        );
        assert_eq!(
            c(&[r#"for=198.51.100.1;ext="x\"y,z""#]),
            addr("198.51.100.1:0")
        );
        // An obfuscated port is no port.
        assert_eq!(c(&[r#"for="[2001:db8::1]:_p1""#]), addr("[2001:db8::1]:0"));
        // Bare IPv6 (proxies write it so), and brackets without quotes.
        assert_eq!(c(&[r#"for="2001:db8::1""#]), addr("[2001:db8::1]:0"));
        assert_eq!(c(&["for=[2001:db8::1]"]), addr("[2001:db8::1]:0"));
        // Unusable elements: the proxy that wrote them.
        for bad in [
            "for=unknown",
            "for=_hidden",
            "proto=https",
            "for=198.51.100.1;for=198.51.100.2",
            r#"for="198.51.100.1"#,
            r#"for=198.51.100.1"x""#,
            "for",
            "garbage",
            "",
        ] {
            assert_eq!(c(&[bad]), addr(PROXY), "{bad:?}");
            assert_eq!(
                c(&[&format!("for=198.51.100.9, {bad}")]),
                addr(PROXY),
                "{bad:?}"
            );
        }
        // An open quote swallows the rest of its own line only.
        assert_eq!(
            c(&[r#"for="203.0.113.66"#, "for=198.51.100.1"]),
            addr("198.51.100.1:0")
        );
        // X-Forwarded-For is not read when the proxies write Forwarded.
        let mut h = HeaderMap::new();
        h.append("x-forwarded-for", HeaderValue::from_static("198.51.100.1"));
        assert_eq!(t.client(addr(PROXY), &h), addr(PROXY));
    }

    #[test]
    fn a_trusted_ipv6_proxy_and_mapped_peers() {
        let t = proxies(&["2001:db8:ffff::/48"], Header::XForwardedFor);
        assert_eq!(
            client(&t, "[2001:db8:ffff::1]:443", &["2001:db8:1::5"]),
            addr("[2001:db8:1::5]:0")
        );
        let t = proxies(&["127.0.0.1"], Header::XForwardedFor);
        assert_eq!(
            client(&t, "[::ffff:127.0.0.1]:5", &["198.51.100.1"]),
            addr("198.51.100.1:0"),
            "a dual-stack listener's mapped peer"
        );
    }
}
