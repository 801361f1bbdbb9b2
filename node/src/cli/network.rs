//! The commands that ask the running node: `publish`, `unpublish`, `discover`, `peers`.

use anyhow::Context as _;

use std::path::Path;
use std::process::ExitCode;

use agentnet_did::{text, SecretKey};
use anyhow::bail;
use clap::Subcommand;

use super::args::{admin_client, NodeArg};
use super::input::read_json;
use super::output::{expires_in, json_line, json_text, print_table, unix_time};
use crate::admin::{self, PublishRequest};
use crate::data_dir;
use crate::trust::pins::PinState;

#[derive(Debug, Subcommand)]
pub(super) enum TrustCommand {
    /// Accept DID's card as the running node has it now: `discover` shows it `pinned`, not
    /// `CHANGED`, until its name, description, skills, interfaces or security change again.
    Accept {
        /// The agent's DID.
        did: String,
        #[command(flatten)]
        node: NodeArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub(super) async fn publish(
    card_path: &Path,
    ttl: u64,
    key: Option<&Path>,
    as_did: Option<String>,
    node: &NodeArg,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let card = read_json(card_path)?;
    // The node checks all of this too; checking here first names the file.
    crate::network::publisher::check_card(&card)
        .map_err(|e| anyhow::anyhow!("{}: {e}", card_path.display()))?;
    let client = admin_client(node)?;
    // The key stays on this machine: it goes into the node's data directory, and the request
    // names the agent's DID.
    let did = match key {
        Some(p) => {
            let key = SecretKey::load(p)
                .with_context(|| format!("loading the agent key {}", p.display()))?;
            let dir = data_dir::resolve(node.data_dir.as_deref())?;
            Some(data_dir::AgentKeys::new(&dir).install(&key)?)
        }
        None => match as_did {
            Some(did) => {
                // Checked here first (key and document present and matching) to name the
                // problem; the node loads the same files.
                let dir = data_dir::resolve(node.data_dir.as_deref())?;
                data_dir::AgentKeys::new(&dir).load_identity(&did)?;
                Some(did)
            }
            None => None,
        },
    };
    let req = PublishRequest {
        card,
        ttl_secs: ttl,
        did,
    };
    let published = client.publish(&req).await.map_err(|e| match &e {
        admin::ClientError::Refused { reason, .. } if !reason.is_empty() => {
            anyhow::anyhow!("the node refused {} ({reason}): {e}", card_path.display())
        }
        _ => e.into(),
    })?;
    if json_out {
        out!("{}", json_line(&published)?)?;
    } else {
        let replaces = match &published.replaced {
            Some(r) => format!("; replaces {} (seq {})", r.name, r.seq),
            None => String::new(),
        };
        let now = agentnet_discovery::net::unix_now();
        out!(
            "published {} (seq {}, tags {}, expires {}, at {}){replaces}",
            published.did,
            published.seq,
            published.tags.join(","),
            expires_in(published.expires_at, now),
            unix_time(published.expires_at)
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn unpublish(
    did: &str,
    node: &NodeArg,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let client = admin_client(node)?;
    let done = client.unpublish(did).await.map_err(|e| match &e {
        admin::ClientError::Refused { status: 404, .. } => {
            anyhow::anyhow!("{did} is not published by this node")
        }
        _ => e.into(),
    })?;
    if json_out {
        out!("{}", json_line(&done)?)?;
    } else {
        let copies = match done.expires_at {
            Some(t) => format!(
                "copies other nodes hold expire at their TTL, {}, at {}",
                expires_in(t, agentnet_discovery::net::unix_now()),
                unix_time(t)
            ),
            None => "copies other nodes hold expire at their TTL".to_owned(),
        };
        out!("unpublished {} ({copies})", done.did)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Longest agent name `discover` shows in its table, in characters (`--json` has it whole).
const MAX_NAME_SHOWN: usize = 32;

pub(super) async fn discover(
    skills: &[String],
    limit: usize,
    node: &NodeArg,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    if !(1..=admin::MAX_LIMIT).contains(&limit) {
        bail!("--limit must be between 1 and {}", admin::MAX_LIMIT);
    }
    let found = admin_client(node)?.discover(skills, limit).await?;
    if json_out {
        out!("{}", json_text(&found)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if found.is_empty() {
        say!("no agent found with skill {}", skills.join(" + "));
        return Ok(ExitCode::SUCCESS);
    }
    let now = agentnet_discovery::net::unix_now();
    let rows: Vec<[String; 7]> = found
        .iter()
        .map(|f| {
            // A domain named but not asked (did:wba e1_); a did:key names none.
            let did = if f.domain.is_some() && !f.domain_verified {
                format!("{} (domain not verified)", f.did)
            } else {
                f.did.clone()
            };
            let name = f.card["name"].as_str().unwrap_or("?");
            let name = match name.char_indices().nth(MAX_NAME_SHOWN) {
                Some((cut, _)) => format!("{}…", &name[..cut]),
                None => name.to_owned(),
            };
            [
                name,
                did,
                f.tags.join(","),
                f.level.map_or("-".into(), |l| l.to_string()),
                f.pin.as_ref().map_or("-", PinState::word).into(),
                expires_in(f.expires_at, now),
                f.peer_id.clone(),
            ]
        })
        .collect();
    print_table(
        ["NAME", "DID", "TAGS", "LEVEL", "CARD", "EXPIRES", "PEER"],
        &rows,
    )?;
    // What changed, under the table: a changed card is shown, not approved.
    for f in &found {
        match &f.pin {
            Some(PinState::Changed { diff, .. }) => {
                say!(
                    "{}: its card CHANGED since it was accepted:",
                    text::sanitize(&f.did)
                );
                for line in diff {
                    say!("  - {}", text::sanitize(line));
                }
                say!(
                    "  check it, then `agentnet trust accept {}` to accept it",
                    text::sanitize(&f.did)
                );
            }
            Some(PinState::Unpinned { why }) => {
                say!(
                    "{}: not pinned: {}",
                    text::sanitize(&f.did),
                    text::sanitize(why)
                );
            }
            _ => {}
        }
        say_flags(&f.did, &f.flags);
    }
    Ok(ExitCode::SUCCESS)
}

/// The flags of what `who` names, a line each, on standard error.
pub(super) fn say_flags(who: &str, flags: &[crate::trust::flags::Flag]) {
    for f in flags {
        say!(
            "{}: FLAG {} ({}) at {}: {}",
            text::sanitize(who),
            text::sanitize(&f.rule),
            text::sanitize(&f.reason),
            text::sanitize(&f.at),
            f.excerpt
        );
    }
}

pub(super) async fn trust_accept(
    did: &str,
    node: &NodeArg,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let state = admin_client(node)?.trust_accept(did).await?;
    if json_out {
        out!("{}", json_text(&state)?)?;
    } else {
        say!("accepted the card of {} as it is now", text::sanitize(did));
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn peers(node: &NodeArg, json_out: bool) -> anyhow::Result<ExitCode> {
    let p = admin_client(node)?.peers().await?;
    if json_out {
        out!("{}", json_text(&p)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    out!("peer id: {}", p.peer_id)?;
    for a in &p.listen {
        out!("listening on {a}")?;
    }
    out!("{} connected peer(s)", p.peers.len())?;
    let rows: Vec<[String; 2]> = p
        .peers
        .iter()
        .map(|x| [x.peer_id.clone(), x.addrs.join(" ")])
        .collect();
    if !rows.is_empty() {
        print_table(["PEER", "ADDRESSES"], &rows)?;
    }
    let rejected: u64 = p.stats.rejected_by_reason.values().sum();
    out!(
        "advertisements: {} accepted, {} ignored, {} rejected, {} throttled; peers muted {} \
         time(s) for using their gossip budget",
        p.stats.accepted,
        p.stats.ignored,
        rejected,
        p.stats.throttled,
        p.stats.muted
    )?;
    for (reason, n) in &p.stats.rejected_by_reason {
        out!("  rejected {reason}: {n}")?;
    }
    let [a, i, r] = p.stats.endorsements;
    out!("endorsements: {a} accepted, {i} ignored, {r} rejected")?;
    Ok(ExitCode::SUCCESS)
}
