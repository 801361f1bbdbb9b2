//! `agentnet endorse` and `agentnet endorsements`: the node's signed endorsements
//! ([`crate::trust::endorsements`], docs/PROTOCOL.md, "Endorsements").

use std::process::ExitCode;

use agentnet_did::text;
use clap::Args;

use super::args::{admin_client, NodeArg};
use super::delegate;
use super::output::{json_text, print_table};
use crate::admin::EndorseBody;

#[derive(Debug, Args)]
pub(super) struct EndorseArgs {
    /// The DID to vouch for.
    did: String,
    /// A skill tag vouched for; repeat for several (none: every skill).
    #[arg(long = "skill", value_name = "TAG")]
    skills: Vec<String>,
    /// How long: 90s, 30m, 2h, 7d (at most 366d).
    #[arg(long = "for", default_value = "30d", value_parser = delegate::parse_for)]
    valid_for: i64,
    /// Withdraw the node's endorsement of DID instead (gossiped like one).
    #[arg(long, conflicts_with = "skills")]
    revoke: bool,
    #[command(flatten)]
    node: NodeArg,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct EndorsementsArgs {
    /// Show the endorsements of this DID that the node trusts; default: the node's own.
    did: Option<String>,
    #[command(flatten)]
    node: NodeArg,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub(super) async fn endorse_cmd(a: EndorseArgs) -> anyhow::Result<ExitCode> {
    let body = EndorseBody {
        did: a.did.clone(),
        skills: a.skills,
        for_secs: a.valid_for as u64,
        revoke: a.revoke,
    };
    let v = admin_client(&a.node)?.endorse(&body).await?;
    if a.json {
        out!("{}", json_text(&v)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let e = &v.endorsement;
    if e.revoked {
        say!(
            "revoked the node's endorsement of {}; gossiped to the network",
            text::sanitize(&e.sub)
        );
    } else {
        say!(
            "endorsed {} for {} until {}; gossiped to the network",
            text::sanitize(&e.sub),
            skills_text(&e.skills),
            crate::trust::endorsements::rfc3339(e.exp)
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn skills_text(skills: &[String]) -> String {
    if skills.is_empty() {
        "every skill".into()
    } else {
        format!("skills {}", text::sanitize(&skills.join(", ")))
    }
}

pub(super) async fn endorsements_cmd(a: EndorsementsArgs) -> anyhow::Result<ExitCode> {
    let list = admin_client(&a.node)?
        .endorsements(a.did.as_deref())
        .await?;
    if a.json {
        out!("{}", json_text(&list)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        match &a.did {
            Some(d) => say!(
                "no endorser this node trusts vouches for {} ([trust] endorsers, endorse_depth)",
                text::sanitize(d)
            ),
            None => say!("this node endorsed no one: `agentnet endorse DID --skill TAG`"),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<[String; 5]> = list
        .iter()
        .map(|v| {
            let e = &v.endorsement;
            [
                text::sanitize(&e.iss).into_owned(),
                text::sanitize(&e.sub).into_owned(),
                if e.revoked {
                    "revoked".into()
                } else {
                    skills_text(&e.skills)
                },
                crate::trust::endorsements::rfc3339(e.exp),
                if v.counts { "yes" } else { "no" }.into(),
            ]
        })
        .collect();
    print_table(["ISSUER", "SUBJECT", "FOR", "UNTIL", "COUNTS"], &rows)?;
    Ok(ExitCode::SUCCESS)
}
