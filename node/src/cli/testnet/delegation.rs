//! Authority across hops ([`delegation_sample`]): a principal delegates to the last node, which
//! calls node 2's `specialist` (a proxy, [`specialist_config`]), which hands the chain on to node
//! 1's `summaries`; the receipts are logged on both; a narrower delegation is refused one hop on.

use std::path::PathBuf;

use agentnet_a2a::types::Task;
use agentnet_did::delegation::{self, Capability, Grant};
use agentnet_did::SecretKey;
use anyhow::{bail, Context as _};
use serde_json::Value;
use tokio::time::Instant;

use super::calls::{announce, find_by_skill};
use super::member::Member;
use super::report::DelegationReport;
use super::{failure, ms, Progress};
use crate::admin;
use crate::call::{self, Agent, Caller, Outcome};
use crate::identity::Identity;

/// The sub-agent's and the specialist's skill tags.
pub(super) const SUB_TAG: &str = "summaries";
const SPECIALIST_TAG: &str = "research";

/// Node 2's configuration: the specialist, forwarding to node 1's sub-agent at `sub_url`.
pub(super) fn specialist_config(
    sub_url: &str,
    principal: &str,
) -> anyhow::Result<crate::config::FileConfig> {
    let text = format!(
        r#"
[[agent]]
id = "specialist"
kind = "proxy"
policy = "did"
name = "Specialist"
description = "Researches by asking a sub-agent, on a principal's delegation only (an agentnet testnet sample)"
tags = ["{SPECIALIST_TAG}"]
upstream = "{sub_url}"
allow_private = true
require_delegation_from = ["{principal}"]
"#
    );
    toml::from_str(&text).context("the specialist's configuration")
}

pub(super) async fn delegation_sample(
    dirs: &[PathBuf],
    clients: &[admin::Client],
    nodes: &[Member],
    principal: &SecretKey,
    orchestrator: SecretKey,
    progress: &Progress,
) -> DelegationReport {
    let mut r = DelegationReport {
        principal: principal.did_key().to_string(),
        orchestrator: orchestrator.did_key().to_string(),
        sent: "Summarize what the principal allowed".into(),
        ..Default::default()
    };
    let done = delegation_inner(
        dirs,
        clients,
        nodes,
        principal,
        orchestrator,
        progress,
        &mut r,
    )
    .await;
    r.error = failure(done, "the delegated call", progress);
    r
}

async fn delegation_inner(
    dirs: &[PathBuf],
    clients: &[admin::Client],
    nodes: &[Member],
    principal: &SecretKey,
    orchestrator: SecretKey,
    progress: &Progress,
    r: &mut DelegationReport,
) -> anyhow::Result<()> {
    let n = nodes.len();
    announce(&dirs[1], &clients[1], nodes[1].info().http, "specialist").await?;
    let sub_did = SecretKey::load(&crate::hosted::key_path(&dirs[0], SUB_TAG))
        .context("the sub-agent's key")?
        .did_key();
    r.sub_agent = Some(sub_did.to_string());
    let p_did = principal.did_key();
    let holder = Identity::did_key(SecretKey::from_seed(&orchestrator.seed()));
    // What the principal allows: research and summaries, two levels on.
    let wide = grant(
        principal,
        &holder,
        &Capability {
            ops: vec!["send".into(), "get".into()],
            skills: Some(vec![SPECIALIST_TAG.into(), SUB_TAG.into()]),
            depth: 2,
            ..Default::default()
        },
    )?;
    let (mut caller, agent) = find_by_skill(
        &clients[n - 1],
        SecretKey::from_seed(&orchestrator.seed()),
        SPECIALIST_TAG,
        "the specialist",
    )
    .await?;
    r.specialist = Some(agent.did.to_string());
    caller.set_delegation(Some(std::sync::Arc::new(call::Delegation::new(
        wide,
        Some(holder.clone()),
    )?)));
    progress.line(format!(
        "principal {} delegated to node {n} ({}): research and summaries, depth 2; calling the specialist {} on node 2",
        p_did.short(),
        holder.did().short(),
        agent.did.short()
    ));
    let task = call_specialist(&caller, &agent, r).await?;
    log_receipt(clients, &agent, &holder, &task, progress, r).await?;
    progress.line(format!(
        "node {n} → specialist (node 2) → summaries (node 1): {} in {} ms, every hop checking the chain ({} links at the specialist, one more handed on)",
        r.answer.join(" "),
        r.call_ms,
        r.links_at_specialist
    ));
    narrower_refused(principal, holder, &mut caller, &agent, progress, r).await
}

/// `principal`'s delegation of `capability` to `holder`, from a minute ago for ten minutes.
fn grant(
    principal: &SecretKey,
    holder: &Identity,
    capability: &Capability,
) -> anyhow::Result<Value> {
    let p_did = principal.did_key();
    let p_kid = p_did.with_fragment(p_did.method_specific_id());
    let now = delegation::now();
    delegation::issue(
        principal,
        &p_kid,
        &Grant {
            audience: holder.did(),
            capability,
            valid_from: now - 60,
            valid_until: now + 600,
        },
        None,
    )
    .context("issuing the principal's delegation")
}

/// Send the request through the specialist under the wide delegation: the task it answered,
/// with the chain it saw, and the sub-agent's answer checked.
async fn call_specialist(
    caller: &Caller,
    agent: &Agent,
    r: &mut DelegationReport,
) -> anyhow::Result<Box<Task>> {
    let started = Instant::now();
    let mut quiet = |_p: call::Progress| {};
    let done = caller
        .send(agent, &r.sent, &mut quiet)
        .await
        .context("the call through the specialist")?;
    r.call_ms = ms(started.elapsed());
    r.answer = call::texts(&done);
    let Outcome::Task(task) = done else {
        bail!("the specialist answered with a message, not a task");
    };
    if let Some(chain) = task
        .metadata
        .as_ref()
        .and_then(|m| m.get(delegation::METADATA_MEMBER))
    {
        let parsed = delegation::Chain::parse(chain)?;
        r.links_at_specialist = parsed.links().len();
        r.chain_digest = Some(parsed.digest().to_string());
    }
    if r.answer.join(" ") != r.sent {
        bail!("the sub-agent answered {:?}", r.answer);
    }
    Ok(task)
}

/// The orchestrator verifies the specialist's receipt and logs it, as `agentnet call` does;
/// the receipt names the sub-agent's, which node 2's proxy verified and logged.
async fn log_receipt(
    clients: &[admin::Client],
    agent: &Agent,
    holder: &Identity,
    task: &Task,
    progress: &Progress,
    r: &mut DelegationReport,
) -> anyhow::Result<()> {
    let n = clients.len();
    let recorder = crate::audit::Recorder::Remote(
        std::sync::Arc::new(clients[n - 1].clone()),
        agentnet_did::Resolver::new(Default::default())?,
    );
    match recorder
        .record(
            "call",
            agent.did.as_str(),
            Some(holder.did().as_str()),
            task,
            crate::audit::request_of(task),
            Some(&[agentnet_a2a::types::Part::text(r.sent.as_str())]),
            None,
        )
        .await
    {
        crate::audit::Recorded::Logged { seq, digest } => {
            r.audit_entry = Some(seq);
            r.receipt = Some(digest);
        }
        other => bail!("the specialist's receipt was not logged: {other:?}"),
    }
    // A page holds each entry as its stored bytes.
    let entries = |page: &Value| -> Vec<Value> {
        page["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| serde_json::from_str(e["raw"].as_str()?).ok())
            .collect()
    };
    let page = entries(&clients[n - 1].audit_page(0).await?);
    r.sub_receipts = page
        .iter()
        .filter(|e| e["receiptDigest"].as_str() == r.receipt.as_deref())
        .flat_map(|e| e["subReceipts"].as_array().cloned().unwrap_or_default())
        .filter_map(|d| d.as_str().map(str::to_string))
        .collect();
    let specialist_log = entries(&clients[1].audit_page(0).await?);
    let logged: Vec<&str> = specialist_log
        .iter()
        .filter_map(|e| e["receiptDigest"].as_str())
        .collect();
    r.sub_receipts_logged =
        !r.sub_receipts.is_empty() && r.sub_receipts.iter().all(|d| logged.contains(&d.as_str()));
    if !r.sub_receipts_logged {
        bail!(
            "the specialist's receipt names sub-receipts {:?}, node 2 logged {logged:?}",
            r.sub_receipts
        );
    }
    progress.line(format!(
        "node {n}'s audit log: entry {} holds the specialist's verified receipt, naming the sub-agent's receipt, which node 2 logged",
        r.audit_entry.unwrap_or(0)
    ));
    Ok(())
}

/// A narrower delegation: the specialist only. The specialist may call on, but summaries is
/// not among the agents the principal allowed: refused there.
async fn narrower_refused(
    principal: &SecretKey,
    holder: Identity,
    caller: &mut Caller,
    agent: &Agent,
    progress: &Progress,
    r: &mut DelegationReport,
) -> anyhow::Result<()> {
    let narrow = grant(
        principal,
        &holder,
        &Capability {
            ops: vec!["send".into(), "get".into()],
            agents: Some(vec![agent.did.to_string()]),
            depth: 1,
            ..Default::default()
        },
    )?;
    caller.set_delegation(Some(std::sync::Arc::new(call::Delegation::new(
        narrow,
        Some(holder),
    )?)));
    let mut quiet = |_p: call::Progress| {};
    let refused = caller.send(agent, "and this too", &mut quiet).await;
    let task = match refused {
        Ok(Outcome::Task(t)) => t,
        Err(call::CallError::NoArtifacts(t)) => t,
        Ok(Outcome::Message(_)) => bail!("the narrower call was answered with a message"),
        Err(e) => return Err(e).context("the narrower call"),
    };
    r.refused_state = Some(call::state_name(&task.status.state));
    r.refused_reason = call::status_text(&task);
    let reason = r.refused_reason.clone().unwrap_or_default();
    if task.status.state != agentnet_a2a::types::TaskState::Failed
        || !reason.contains("not among the agents granted")
    {
        bail!(
            "the narrower delegation was not refused by the sub-agent: {} {reason}",
            call::state_name(&task.status.state)
        );
    }
    progress.line(format!(
        "a delegation for the specialist only: refused one hop on, by summaries: {reason}"
    ));
    Ok(())
}
