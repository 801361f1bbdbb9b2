//! Calling ANP agents through their Agent Description (`agentnet call --ad URL`).
//!
//! In this order, stopping at the first refusal, before anything is sent to the agent:
//!
//! 1. **Fetch** the description (`ad.json`; given a DID instead, the `AgentDescription`
//!    service of its resolved document names it, else the card extension
//!    [`EXTENSION`] of its card in the node's index, and the description
//!    must be that DID's): [`check_url`] (https and public addresses unless
//!    `allow_private`), connections pinned to the checked addresses, no redirects, at most
//!    [`MAX_DOCUMENT`] bytes, JSON.
//! 2. **Verify** that it is its DID's: the description names a `did`; a did:wba or did:web DID
//!    must be of the description's origin (its host and port are the URL's: whoever holds the
//!    DID holds that origin); a did:key description must link an A2A card on the same origin
//!    whose signatures verify as that DID's (as agentnet's hosted agents do), and lie under one
//!    of that card's interface URLs (a signed card copied elsewhere verifies just as well). With `--did`, the
//!    description's DID must be that one.
//! 3. **Choose** the interface: the first `StructuredInterface` of protocol `openrpc`, embedded
//!    (`content`) or fetched from its `url` (same origin, same checks), and in it the method:
//!    `send` if there is one, else the only method whose one required parameter is a string;
//!    the endpoint is the method's (or the document's) first server, which must be on the
//!    description's origin too.
//! 4. **Call**: JSON-RPC 2.0 `POST`, the message text as that parameter, signed by the caller's
//!    identity (RFC 9421 as the ANP SDK verifies it), the answer read within [`MAX_ANSWER`]
//!    bytes; a JSON-RPC error or an HTTP error is the call's error.
//!
//! The whole call has [`CallOptions::timeout`](super::CallOptions) as its deadline.

use std::net::SocketAddr;

use agentnet_a2a::client::SignRequest;
use agentnet_did::{Did, Method as DidMethod};
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use serde_json::{json, Value};

use super::{check_url, pinned, CallError, Caller, Progress, MAX_TEXT};

/// The extension URI by which an agent's A2A card links its Agent Description
/// (`params.url`), so that its advert, and the gossip index, carry it (agentnet's hosted agents,
/// `crate::hosted::anp`).
pub const EXTENSION: &str = "urn:agentnet:anp:v1";
/// Longest description or interface document read: 256 KiB.
pub const MAX_DOCUMENT: usize = 256 * 1024;
/// Longest JSON-RPC answer read: 4 MiB.
pub const MAX_ANSWER: usize = 4 << 20;

/// An ANP agent, found and verified, ready to call.
#[derive(Debug, Clone)]
pub struct AnpAgent {
    /// Its DID, as its description names it.
    pub did: String,
    /// Its name.
    pub name: String,
    /// The description's URL.
    pub ad_url: url::Url,
    /// The JSON-RPC endpoint.
    pub rpc_url: url::Url,
    /// The method called.
    pub method: String,
    /// The parameter the message text goes in.
    pub param: String,
    addrs: Vec<SocketAddr>,
}

fn refuse(m: impl Into<String>) -> CallError {
    CallError::Anp(m.into())
}

/// `scheme://host:port` of `u`, the port always written.
/// `u` on the description's origin `home`, else the refusal: the description's DID vouches for
/// that origin only.
fn same_origin(home: &str, u: &url::Url, what: &str) -> Result<(), CallError> {
    if origin(u) == home {
        Ok(())
    } else {
        Err(refuse(format!(
            "the {what} {u} is not on the description's origin {home}: refused (the \
             description's DID vouches for that origin only)"
        )))
    }
}

fn origin(u: &url::Url) -> String {
    format!(
        "{}://{}:{}",
        u.scheme(),
        u.host_str().unwrap_or(""),
        u.port_or_known_default().unwrap_or(0)
    )
}

/// The host and port a did:wba or did:web DID names (`host[%3Aport]`, 443 by default).
fn did_authority(did: &Did) -> Option<(String, u16)> {
    let first = did.method_specific_id().split(':').next()?;
    let decoded = first.replace("%3A", ":").replace("%3a", ":");
    let (host, port) = match decoded.rsplit_once(':') {
        Some((h, p)) => (h.to_string(), p.parse().ok()?),
        None => (decoded.clone(), 443),
    };
    Some((host.to_ascii_lowercase(), port))
}

/// The endpoint of the first `AgentDescription` service among a DID document's `services`.
fn description_service(services: &[Value]) -> Option<String> {
    services.iter().find_map(|s| {
        let t = &s["type"];
        let is_ad = t == "AgentDescription"
            || t.as_array()
                .is_some_and(|a| a.iter().any(|x| x == "AgentDescription"));
        is_ad
            .then(|| s["serviceEndpoint"].as_str().map(str::to_owned))
            .flatten()
    })
}

/// The description an A2A card links ([`EXTENSION`]).
fn card_description(card: &Value) -> Option<String> {
    card.pointer("/capabilities/extensions")?
        .as_array()?
        .iter()
        .find(|e| e["uri"] == EXTENSION)?["params"]["url"]
        .as_str()
        .map(str::to_owned)
}

/// `u`'s first server URL among `servers` (an OpenRPC `servers` list).
fn first_server(servers: &Value) -> Option<&str> {
    servers.as_array()?.first()?.get("url")?.as_str()
}

/// The method to call in `doc` (an OpenRPC document) and the parameter the text goes in.
fn choose_method(doc: &Value) -> Result<(Value, String), CallError> {
    let methods = doc["methods"]
        .as_array()
        .ok_or_else(|| refuse("the interface has no methods list"))?;
    let string_param = |m: &Value, required_only: bool| -> Option<String> {
        let params = m["params"].as_array()?;
        let required: Vec<&Value> = params
            .iter()
            .filter(|p| p["required"] == json!(true))
            .collect();
        let pool: Vec<&Value> = if required_only || !required.is_empty() {
            required
        } else {
            params.iter().collect()
        };
        match pool.as_slice() {
            [p] if p["schema"]["type"] == "string" => p["name"].as_str().map(str::to_owned),
            _ => None,
        }
    };
    if let Some(m) = methods.iter().find(|m| m["name"] == "send") {
        let p = string_param(m, false).unwrap_or_else(|| "text".into());
        return Ok((m.clone(), p));
    }
    let fits: Vec<(&Value, String)> = methods
        .iter()
        .filter_map(|m| string_param(m, true).map(|p| (m, p)))
        .collect();
    match fits.as_slice() {
        [(m, p)] => Ok(((*m).clone(), p.clone())),
        _ => Err(refuse(format!(
            "no method to send a message to: the interface has {:?}, and not exactly one whose \
             one required parameter is a string",
            methods
                .iter()
                .filter_map(|m| m["name"].as_str())
                .take(20)
                .collect::<Vec<_>>()
        ))),
    }
}

/// Read at most `max` bytes of `r`'s body.
async fn bounded(r: reqwest::Response, max: usize) -> Result<Vec<u8>, CallError> {
    agentnet_did::http::read_limited(r, max)
        .await
        .map_err(|e| match e {
            agentnet_did::http::ReadError::TooLarge(_) => {
                refuse(format!("the answer is over {max} bytes"))
            }
            e => refuse(format!("reading the answer: {e}")),
        })
}

impl Caller {
    /// A client whose connections to `url` go to its checked addresses.
    async fn anp_client(
        &self,
        url: &url::Url,
    ) -> Result<(reqwest::Client, Vec<SocketAddr>), CallError> {
        let addrs = check_url(url, self.opts.allow_private).await?;
        let c = pinned(url, &addrs, self.opts.connect_timeout)
            .build()
            .map_err(|e| CallError::Http(e.to_string()))?;
        Ok((c, addrs))
    }

    /// GET a JSON document from `url`, within [`MAX_DOCUMENT`].
    async fn anp_document(&self, url: &url::Url) -> Result<Value, CallError> {
        let (c, _) = self.anp_client(url).await?;
        let r = c
            .get(url.clone())
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| refuse(format!("fetching {url}: {e}")))?;
        if r.status() != reqwest::StatusCode::OK {
            return Err(refuse(format!("fetching {url}: HTTP {}", r.status())));
        }
        let bytes = bounded(r, MAX_DOCUMENT).await?;
        serde_json::from_slice(&bytes).map_err(|e| refuse(format!("{url} is not JSON: {e}")))
    }

    /// Fetch, verify and choose the interface of the ANP agent described at `ad_url` (whose
    /// DID must be `did`, if given). Nothing is sent to its endpoint.
    pub async fn find_anp(
        &self,
        ad_url: &str,
        did: Option<&str>,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<AnpAgent, CallError> {
        // A DID: its document's `AgentDescription` service names the description (as the ANP
        // SDK writes it), which must then be that DID's.
        let (ad_url, did) = if ad_url.starts_with("did:") {
            if did.is_some_and(|d| d != ad_url) {
                return Err(refuse("--did and --ad name two DIDs"));
            }
            (self.description_of(ad_url).await?, Some(ad_url))
        } else {
            (ad_url.to_owned(), did)
        };
        let ad_url = url::Url::parse(&ad_url)
            .map_err(|e| refuse(format!("{ad_url:?} is not a URL: {e}")))?;
        let ad = self.anp_document(&ad_url).await?;
        let home = origin(&ad_url);
        let did_str = ad["did"]
            .as_str()
            .ok_or_else(|| refuse("the description names no did: it cannot be verified"))?;
        let parsed = Did::parse(did_str)
            .map_err(|_| CallError::BadDid(did_str.chars().take(200).collect()))?;
        if let Some(want) = did {
            if want != did_str {
                return Err(refuse(format!(
                    "the description is {did_str}'s, not {want}'s"
                )));
            }
        }
        self.check_binding(&ad_url, &ad, &parsed, progress).await?;
        let doc = self.openrpc_of(&ad_url, &ad).await?;
        let (method, param) = choose_method(&doc)?;
        let server = first_server(&method["servers"])
            .or_else(|| first_server(&doc["servers"]))
            .or_else(|| first_server(&ad["servers"]))
            .ok_or_else(|| refuse("the interface names no server to call"))?;
        let rpc_url = ad_url
            .join(server)
            .map_err(|e| refuse(format!("the server URL {server:?}: {e}")))?;
        same_origin(&home, &rpc_url, "endpoint")?;
        let addrs = check_url(&rpc_url, self.opts.allow_private).await?;
        progress(Progress::Interface {
            url: rpc_url.to_string(),
            binding: "ANP JSON-RPC",
        });
        Ok(AnpAgent {
            did: did_str.to_owned(),
            name: ad["name"]
                .as_str()
                .unwrap_or("")
                .chars()
                .take(200)
                .collect(),
            ad_url,
            rpc_url,
            method: method["name"].as_str().unwrap_or("").to_owned(),
            param,
            addrs,
        })
    }

    /// The URL of the Agent Description `did` names: its DID document's `AgentDescription`
    /// service, else the one the card the node's index holds for it links (agentnet's hosted
    /// agents do, [`EXTENSION`]).
    async fn description_of(&self, did: &str) -> Result<String, CallError> {
        let doc = self
            .resolver
            .resolve_str(did)
            .await
            .map_err(|e| refuse(format!("resolving {did}: {e}")))?;
        if let Some(e) = description_service(&doc.service) {
            return Ok(e);
        }
        let card = self.card_of(did).await.map_err(|e| {
            refuse(format!(
                "the DID document of {did} has no AgentDescription service, and no card of it \
                 links one ({e}): give the description's URL"
            ))
        })?;
        card_description(&card).ok_or_else(|| {
            refuse(format!(
                "neither the DID document nor the card of {did} links an Agent Description: \
                 give the description's URL"
            ))
        })
    }

    /// That the description at `ad_url` is `did`'s to vouch for: a did:wba or did:web of the
    /// description's own origin, or a did:key whose signed card (on that origin) lists an
    /// interface the description sits under.
    async fn check_binding(
        &self,
        ad_url: &url::Url,
        ad: &Value,
        parsed: &Did,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<(), CallError> {
        let did_str = parsed.as_str();
        let home = origin(ad_url);
        match parsed.method() {
            DidMethod::Wba | DidMethod::Web => {
                let (host, port) = did_authority(&parsed)
                    .ok_or_else(|| CallError::BadDid(did_str.chars().take(200).collect()))?;
                let url_host = ad_url.host_str().unwrap_or("").to_ascii_lowercase();
                if (host.as_str(), Some(port))
                    != (url_host.as_str(), ad_url.port_or_known_default())
                {
                    return Err(refuse(format!(
                        "the description at {ad_url} names {did_str}, whose domain is {host}:{port}: \
                         a DID of another origin does not vouch for it"
                    )));
                }
            }
            DidMethod::Key => {
                let card_url = ad["interfaces"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|i| i["protocol"] == "A2A")
                    .find_map(|i| i["url"].as_str())
                    .ok_or_else(|| {
                        refuse(format!(
                            "the description names {did_str} (a did:key) but links no A2A card \
                             signed by it: nothing binds the key to {home}"
                        ))
                    })?;
                let card_url = url::Url::parse(card_url)
                    .map_err(|e| refuse(format!("the card URL {card_url:?}: {e}")))?;
                same_origin(&home, &card_url, "card")?;
                let card = self.anp_document(&card_url).await?;
                let verified = self.verify(did_str, card, progress).await?;
                // The signed card vouches for its own URLs only: a copy served elsewhere
                // verifies just as well, so the description must be under one of them.
                let urls: Vec<&str> = verified.card["supportedInterfaces"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|i| i["url"].as_str())
                    .take(16)
                    .collect();
                let under = urls.iter().any(|u| {
                    ad_url
                        .as_str()
                        .starts_with(&format!("{}/", u.trim_end_matches('/')))
                });
                if !under {
                    return Err(refuse(format!(
                        "the description at {ad_url} is not under the card's interfaces \
                         ({urls:?}): a card signed by {did_str} vouches for its own URLs only"
                    )));
                }
            }
            _ => {
                return Err(refuse(format!(
                    "cannot verify a description of {did_str}: did:wba, did:web or did:key only"
                )))
            }
        }
        Ok(())
    }

    /// The OpenRPC document of the description's structured interface: inline, or fetched from
    /// the description's origin.
    async fn openrpc_of(&self, ad_url: &url::Url, ad: &Value) -> Result<Value, CallError> {
        let iface = ad["interfaces"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| {
                i["type"] == "StructuredInterface"
                    && i["protocol"]
                        .as_str()
                        .is_some_and(|p| p.eq_ignore_ascii_case("openrpc"))
            })
            .ok_or_else(|| refuse("the description has no OpenRPC interface (StructuredInterface, protocol openrpc)"))?;
        match &iface["content"] {
            c @ Value::Object(_) => Ok(c.clone()),
            _ => {
                let u = iface["url"]
                    .as_str()
                    .ok_or_else(|| refuse("the OpenRPC interface has neither content nor url"))?;
                let u = ad_url
                    .join(u)
                    .map_err(|e| refuse(format!("the interface URL {u:?}: {e}")))?;
                same_origin(&origin(ad_url), &u, "interface")?;
                self.anp_document(&u).await
            }
        }
    }

    /// Send `text` to `agent` (one JSON-RPC call, signed) and answer its result.
    pub async fn call_anp(&self, agent: &AnpAgent, text: &str) -> Result<Value, CallError> {
        if text.is_empty() || text.len() > MAX_TEXT {
            return Err(CallError::BadText);
        }
        let body = serde_json::to_vec(&json!({
            "jsonrpc": "2.0",
            "id": uuid::Uuid::new_v4().to_string(),
            "method": agent.method,
            "params": {agent.param.as_str(): text},
        }))
        .map_err(|e| refuse(e.to_string()))?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(s) = &self.signer {
            let signed = s
                .sign(SignRequest {
                    method: &reqwest::Method::POST,
                    url: &agent.rpc_url,
                    headers: &headers,
                    body: &body,
                })
                .await
                .map_err(|e| refuse(format!("signing the request: {e}")))?;
            headers.extend(signed);
        }
        let http = pinned(&agent.rpc_url, &agent.addrs, self.opts.connect_timeout)
            .build()
            .map_err(|e| CallError::Http(e.to_string()))?;
        let send = async {
            let r = http
                .post(agent.rpc_url.clone())
                .headers(headers)
                .body(body)
                .send()
                .await
                .map_err(|e| {
                    refuse(format!(
                        "sending the call failed (it is not sent again): {e}"
                    ))
                })?;
            let status = r.status();
            let bytes = bounded(r, MAX_ANSWER).await?;
            let v: Value = serde_json::from_slice(&bytes).map_err(|_| {
                refuse(format!(
                    "the agent answered HTTP {status}, not JSON: {}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
                ))
            })?;
            if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
                return Err(refuse(format!(
                    "the agent answered HTTP {status}, error {}: {}",
                    e["code"],
                    e["message"]
                        .as_str()
                        .or_else(|| v["detail"].as_str())
                        .unwrap_or("")
                        .chars()
                        .take(500)
                        .collect::<String>()
                )));
            }
            if !status.is_success() {
                return Err(refuse(format!(
                    "the agent answered HTTP {status}: {}",
                    v.to_string().chars().take(500).collect::<String>()
                )));
            }
            v.get("result")
                .cloned()
                .ok_or_else(|| refuse("the agent's answer has no result"))
        };
        tokio::time::timeout(self.opts.timeout, send)
            .await
            .map_err(|_| CallError::Timeout(self.opts.timeout))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_did_names_its_origin() {
        let d = Did::parse("did:wba:localhost%3A8080:agents:echo").unwrap();
        assert_eq!(did_authority(&d), Some(("localhost".into(), 8080)));
        let d = Did::parse("did:wba:Example.com:user:alice").unwrap();
        assert_eq!(did_authority(&d), Some(("example.com".into(), 443)));
        let u = url::Url::parse("https://example.com/ad.json").unwrap();
        assert_eq!(origin(&u), "https://example.com:443");
    }

    #[test]
    fn a_card_links_its_description() {
        let card = json!({"capabilities": {"extensions": [
            {"uri": "urn:agentnet:a2a:did-auth:v1"},
            {"uri": EXTENSION, "params": {"url": "https://a/ad.json"}},
        ]}});
        assert_eq!(
            card_description(&card).as_deref(),
            Some("https://a/ad.json")
        );
        assert_eq!(card_description(&json!({})), None);
    }

    #[test]
    fn a_did_document_names_its_description() {
        let s = vec![
            json!({"id": "#x", "type": "Other", "serviceEndpoint": "https://a/x"}),
            json!({"id": "#ad", "type": "AgentDescription", "serviceEndpoint": "https://a/ad.json"}),
        ];
        assert_eq!(
            description_service(&s).as_deref(),
            Some("https://a/ad.json")
        );
        let s = vec![json!({"type": ["AgentDescription"], "serviceEndpoint": "https://b/ad.json"})];
        assert_eq!(
            description_service(&s).as_deref(),
            Some("https://b/ad.json")
        );
        assert_eq!(description_service(&[]), None);
    }

    #[test]
    fn the_method_is_send_or_the_only_one_taking_one_string() {
        let doc = json!({"methods": [
            {"name": "echo", "params": [{"name": "text", "required": true, "schema": {"type": "string"}}]},
            {"name": "add", "params": [{"name": "a", "required": true, "schema": {"type": "number"}}]},
        ]});
        let (m, p) = choose_method(&doc).unwrap();
        assert_eq!((m["name"].as_str(), p.as_str()), (Some("echo"), "text"));
        let two = json!({"methods": [
            {"name": "a", "params": [{"name": "x", "required": true, "schema": {"type": "string"}}]},
            {"name": "b", "params": [{"name": "y", "required": true, "schema": {"type": "string"}}]},
        ]});
        assert!(choose_method(&two).is_err());
        let with_send = json!({"methods": [{"name": "send", "params": [{"name": "text", "required": true, "schema": {"type": "string"}}]}, two["methods"][0]]});
        assert_eq!(choose_method(&with_send).unwrap().0["name"], "send");
    }
}
