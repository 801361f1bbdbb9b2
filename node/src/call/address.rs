//! Where a call may go: an address others chose ([`check_url`]: `https`, public addresses only
//! unless private ones are allowed) and an HTTP client pinned to the addresses checked
//! ([`pinned`]), so that DNS cannot swap them afterwards.

use std::net::SocketAddr;
use std::time::Duration;

use agentnet_did::web;

use super::CallError;

/// Where `url` points: `https` (or `http` with `allow_private`), and every address its host
/// resolves to public unless `allow_private`: the addresses to connect to (pin them with
/// [`pinned`], so that DNS cannot swap them afterwards). The check of every outgoing call to an
/// address others chose: agents' interfaces, MCP endpoints, proxy upstreams.
pub async fn check_url(url: &url::Url, allow_private: bool) -> Result<Vec<SocketAddr>, CallError> {
    let refuse = |reason: String| CallError::Address {
        url: url.to_string(),
        reason,
    };
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        s => return Err(refuse(format!("scheme {s} (https only)"))),
    }
    let host = url.host_str().ok_or_else(|| refuse("no host".into()))?;
    let port = url
        .port_or_known_default()
        .ok_or_else(|| refuse("no port".into()))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| refuse(format!("resolving {host}: {e}")))?
        .take(16)
        .collect();
    if addrs.is_empty() {
        return Err(refuse(format!("{host} has no address")));
    }
    if !allow_private {
        if let Some(a) = addrs.iter().find(|a| !web::is_public(a.ip())) {
            return Err(refuse(format!(
                "{host} resolves to {} (not a public address)",
                a.ip()
            )));
        }
    }
    Ok(addrs)
}

/// An HTTP client builder whose connections to `url`'s host go to `addrs` (from
/// [`check_url`]) only: no redirects, no proxy (which would resolve the name again).
pub fn pinned(
    url: &url::Url,
    addrs: &[SocketAddr],
    connect_timeout: Duration,
) -> reqwest::ClientBuilder {
    let mut b = agentnet_did::http::client_builder()
        .connect_timeout(connect_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy();
    if let Some(host) = url.host_str() {
        if host.parse::<std::net::IpAddr>().is_err() {
            b = b.resolve_to_addrs(host, addrs);
        }
    }
    b
}
