//! `agentnet import ard <url>`: read a domain's ARD manifest and publish, through the running
//! node, the entries whose DID key this data directory holds (docs/ARD.md).
//!
//! The manifest is fetched once (https and public addresses only, unless `--local` or
//! `--allow-private`; no redirects; at most [`MAX_MANIFEST_BYTES`]), and at most
//! [`MAX_ENTRIES`] entries are read. Each entry's `trustManifest` is checked against its DID
//! ([`crate::ard::manifest::verify_entry`]): only an entry that verifies, is an A2A Agent Card,
//! and whose DID's key is in `<data-dir>/agents/` is published, signed by that key. The others
//! are shown (verified but not ours, unsigned, invalid) and never gossiped. Nested catalogs
//! (`application/ai-catalog+json`) are not followed.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde::Serialize;
use serde_json::Value;

use super::args::{admin_client, is_local, resolver_options, NetArgs, NodeArg};
use crate::admin::{self, PublishRequest};
use crate::ard::manifest::{verify_entry, Trust};
use crate::{call, data_dir};
use agentnet_did::Resolver;

/// Largest manifest read, bytes.
pub(super) const MAX_MANIFEST_BYTES: usize = 1024 * 1024;
/// Largest Agent Card read by reference, bytes: an advert's own bound.
pub(super) const MAX_CARD_BYTES: usize = agentnet_discovery::store::MAX_ADVERT_BYTES;
/// Most entries of one manifest read.
pub(super) const MAX_ENTRIES: usize = 256;
/// The media types of an A2A Agent Card entry.
const CARD_TYPES: [&str; 2] = [
    "application/a2a-agent-card+json",
    "application/agent-card+json",
];

/// What `import` reads.
#[derive(Debug, Subcommand)]
pub(super) enum ImportCommand {
    /// Read a domain's ARD manifest (<url>/.well-known/ard.json, else ai-catalog.json, or the
    /// manifest's own URL), verify each entry against its DID, and publish those whose DID key
    /// is in <data-dir>/agents/; the others are listed, not published.
    Ard(ImportArd),
}

#[derive(Debug, Args)]
pub(super) struct ImportArd {
    /// `https://domain/`, or the manifest's URL (ending in `.json`).
    url: String,
    /// Allow the manifest and cards on loopback and private addresses, and plain http
    /// (`--local` implies it).
    #[arg(long)]
    allow_private: bool,
    /// Lifetime of each advertisement, seconds (re-announced at 2/3 of it).
    #[arg(long, default_value_t = admin::DEFAULT_TTL)]
    ttl: u64,
    #[command(flatten)]
    node: NodeArg,
    #[command(flatten)]
    net: NetArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// One entry's outcome.
#[derive(Debug, Serialize)]
struct Row {
    identifier: String,
    #[serde(rename = "displayName")]
    display_name: String,
    /// The DID whose signature verified, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    did: Option<String>,
    /// `published`, `verified_not_ours`, `unsigned`, `invalid`, `not_published`.
    status: &'static str,
    /// Why, or the seq published.
    detail: String,
}

pub(super) async fn import(cmd: ImportCommand) -> anyhow::Result<ExitCode> {
    let ImportCommand::Ard(args) = cmd;
    let dir = data_dir::resolve(args.node.data_dir.as_deref())?;
    let local = is_local(&args.net, &dir);
    let allow_private = args.allow_private || local;
    let timeout = Duration::from_secs(args.net.timeout.max(1));
    let resolver = Resolver::new(resolver_options(&args.net, local)?)?;
    let (manifest_url, manifest) = fetch_manifest(&args.url, allow_private, timeout).await?;
    let entries = manifest
        .get("entries")
        .and_then(Value::as_array)
        .with_context(|| format!("{manifest_url} is not an ARD manifest: no entries array"))?;
    let keys = data_dir::AgentKeys::new(&dir);
    let mut client = None;
    let mut rows = Vec::new();
    for e in entries.iter().take(MAX_ENTRIES) {
        let mut row = Row {
            identifier: str_of(e, "identifier"),
            display_name: str_of(e, "displayName"),
            did: None,
            status: "unsigned",
            detail: String::new(),
        };
        match verify_entry(e, &resolver).await {
            Trust::Unsigned => row.detail = "no DID signature: not published".into(),
            Trust::Invalid(why) => {
                row.status = "invalid";
                row.detail = why;
            }
            Trust::Verified(did) => {
                row.did = Some(did.clone());
                let held = {
                    let (k, d) = (keys.clone(), did.clone());
                    tokio::task::spawn_blocking(move || k.load_identity(&d).is_ok())
                        .await
                        .unwrap_or(false)
                };
                if !held {
                    row.status = "verified_not_ours";
                    row.detail = format!(
                        "its key is not in {}: only its holder publishes it",
                        dir.join("agents").display()
                    );
                } else {
                    match card_of(e, allow_private, timeout).await {
                        Err(why) => {
                            row.status = "not_published";
                            row.detail = why;
                        }
                        Ok(card) => {
                            if client.is_none() {
                                client = Some(admin_client(&args.node)?);
                            }
                            let c = client.as_ref().context("the node's admin client")?;
                            let req = PublishRequest {
                                card,
                                ttl_secs: args.ttl,
                                did: Some(did.clone()),
                            };
                            match c.publish(&req).await {
                                Ok(p) => {
                                    row.status = "published";
                                    row.detail =
                                        format!("seq {}, tags {}", p.seq, p.tags.join(","));
                                    // Registries list it under its DID's identifier: the
                                    // DID vouches for no other publisher.
                                    let own = crate::ard::urn::of_did(&did).unwrap_or_default();
                                    if own != row.identifier {
                                        row.detail += &format!(
                                            "; listed as {own}: the identifier's publisher is \
                                             not vouched for by {did}"
                                        );
                                    }
                                }
                                Err(e) => {
                                    row.status = "not_published";
                                    row.detail = format!("the node refused it: {e}");
                                }
                            }
                        }
                    }
                }
            }
        }
        rows.push(row);
    }
    let skipped = entries.len().saturating_sub(MAX_ENTRIES);
    if args.json {
        out!(
            "{}",
            super::output::json_line(&serde_json::json!({
                "manifest": manifest_url,
                "entries": rows,
                "skipped": skipped,
            }))?
        )?;
    } else {
        out!("manifest {manifest_url}")?;
        for r in &rows {
            let did = r.did.as_deref().unwrap_or("-");
            out!(
                "{:<18} {}  {}  {did}  {}",
                r.status,
                r.identifier,
                r.display_name,
                r.detail
            )?;
        }
        if skipped > 0 {
            out!("{skipped} entries past the first {MAX_ENTRIES} were not read")?;
        }
    }
    Ok(if rows.iter().any(|r| r.status == "invalid") {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn str_of(v: &Value, k: &str) -> String {
    v.get(k)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .chars()
        .take(200)
        .collect()
}

/// The entry's A2A card: inline (`data`) or fetched from `url` under the same policy.
async fn card_of(e: &Value, allow_private: bool, timeout: Duration) -> Result<Value, String> {
    let t = e.get("type").and_then(Value::as_str).unwrap_or_default();
    if !CARD_TYPES.contains(&t) {
        return Err(format!(
            "type {t:?} is not an A2A Agent Card: agentnet adverts carry those only"
        ));
    }
    let card = match (e.get("data"), e.get("url").and_then(Value::as_str)) {
        (Some(d @ Value::Object(_)), None) => d.clone(),
        (None, Some(u)) => {
            let url = url::Url::parse(u).map_err(|err| format!("url {u:?}: {err}"))?;
            get_json(&url, allow_private, timeout, MAX_CARD_BYTES)
                .await
                .map_err(|err| format!("{err:#}"))?
                .ok_or_else(|| format!("{u} answered 404"))?
        }
        _ => return Err("exactly one of url and data is needed".into()),
    };
    crate::network::publisher::check_card(&card).map_err(|err| format!("its card: {err}"))?;
    Ok(card)
}

/// The manifest at `url` (`.json`) or at its well-known paths.
async fn fetch_manifest(
    url: &str,
    allow_private: bool,
    timeout: Duration,
) -> anyhow::Result<(String, Value)> {
    let base = url::Url::parse(url).with_context(|| format!("{url:?} is not a URL"))?;
    let candidates: Vec<url::Url> = if base.path().ends_with(".json") {
        vec![base]
    } else {
        crate::ard::manifest::PATHS
            .iter()
            .map(|p| base.join(p))
            .collect::<Result<_, _>>()?
    };
    for u in &candidates {
        if let Some(v) = get_json(u, allow_private, timeout, MAX_MANIFEST_BYTES).await? {
            return Ok((u.to_string(), v));
        }
    }
    anyhow::bail!(
        "no ARD manifest at {}: the domain serves neither",
        candidates
            .iter()
            .map(|u| u.as_str())
            .collect::<Vec<_>>()
            .join(" nor ")
    )
}

/// GET `url` as JSON, at most `max` bytes; `None` on 404.
async fn get_json(
    url: &url::Url,
    allow_private: bool,
    timeout: Duration,
    max: usize,
) -> anyhow::Result<Option<Value>> {
    let addrs = call::check_url(url, allow_private).await.map_err(|e| {
        let hint = if allow_private {
            ""
        } else {
            "; a server on this machine or a LAN needs --local or --allow-private"
        };
        anyhow::anyhow!("{e}{hint}")
    })?;
    let client = call::pinned(url, &addrs, timeout)
        .timeout(timeout)
        .build()?;
    let resp = client
        .get(url.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .with_context(|| format!("fetching {url}"))?;
    if resp.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !resp.status().is_success() {
        anyhow::bail!("{url} answered {}", resp.status());
    }
    let body = agentnet_did::http::read_limited(resp, max)
        .await
        .map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
    let v = serde_json::from_slice(&body).with_context(|| format!("{url} is not JSON"))?;
    Ok(Some(v))
}
