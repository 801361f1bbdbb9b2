//! Node 1's hosted sample agents ([`hosted_sample`]) and what the last node does with them:
//! finds each by skill and verifies its card, then calls `greeter` over A2A through its
//! INPUT_REQUIRED round ([`call_sample`]), `mcp-echo`'s tool over MCP ([`mcp_sample`]), and the
//! same agent over ANP, after finding it in the last node's ARD registry ([`faces_sample`]).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use agentnet_did::SecretKey;
use anyhow::{bail, Context as _};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::delegation::SUB_TAG;
use super::member::Member;
use super::report::{CallReport, FacesReport, McpReport};
use super::{failure, ms, Progress, DISCOVER_TIMEOUT, RETRY, SAMPLE_TTL};
use crate::admin::{self, PublishRequest};
use crate::data_dir::AgentKeys;

/// The skill tag of the hosted sample agent.
const CALL_TAG: &str = "greeting";
/// The skill tag of the hosted sample agent with an MCP endpoint.
const MCP_TAG: &str = "mcp-echo";
/// Its id on node 1.
const MCP_AGENT: &str = "mcp-echo";

/// Node 1's configuration: one `ask` agent (asks for a name, then greets), DID policy; an
/// echo agent with an MCP endpoint; the sub-agent of the delegation sample.
pub(super) fn hosted_sample(principal: &str) -> anyhow::Result<crate::config::FileConfig> {
    let text = format!(
        r#"
[[agent]]
id = "{SUB_TAG}"
kind = "echo"
policy = "did"
name = "Summaries"
description = "Summarizes (echoes), on a principal's delegation only (an agentnet testnet sample)"
tags = ["{SUB_TAG}"]
publish = false
require_delegation_from = ["{principal}"]

[[agent]]
id = "greeter"
kind = "ask"
policy = "did"
name = "Greeter"
description = "Asks for your name, then greets you (an agentnet testnet sample)"
tags = ["{CALL_TAG}"]
work_ms = 200

[[agent]]
id = "{MCP_AGENT}"
kind = "echo"
policy = "did"
mcp = true
name = "MCP echo"
description = "Echoes your text, over A2A and as the MCP tool echo (an agentnet testnet sample)"
tags = ["{MCP_TAG}"]
"#
    );
    toml::from_str(&text).context("the sample agent's configuration")
}

pub(super) async fn call_sample(
    host_dir: &Path,
    host: &admin::Client,
    caller_admin: &admin::Client,
    caller_key: SecretKey,
    host_node: &Member,
    progress: &Progress,
) -> CallReport {
    let mut r = CallReport {
        tag: CALL_TAG.into(),
        caller: caller_key.did_key().to_string(),
        ..Default::default()
    };
    let done = call_inner(
        host_dir,
        host,
        caller_admin,
        host_node,
        caller_key,
        progress,
        &mut r,
    )
    .await;
    r.error = failure(done, "the A2A call", progress);
    r
}

async fn call_inner(
    host_dir: &Path,
    host: &admin::Client,
    caller_admin: &admin::Client,
    host_node: &Member,
    caller_key: SecretKey,
    progress: &Progress,
    r: &mut CallReport,
) -> anyhow::Result<()> {
    use crate::call::{self, Outcome};
    // Announce the hosted card again, as `agentnet publish` would.
    announce(host_dir, host, host_node.info().http, "greeter").await?;

    let started = Instant::now();
    let (caller, agent) =
        find_by_skill(caller_admin, caller_key, CALL_TAG, "the hosted agent").await?;
    let mut quiet = |_p: call::Progress| {};
    r.find_ms = ms(started.elapsed());
    r.did = Some(agent.did.to_string());
    r.url = Some(agent.endpoint.url.to_string());
    progress.line(format!(
        "last node found {CALL_TAG} → {} and verified its card in {} ms; calling {} with signed requests",
        agent.did, r.find_ms, agent.endpoint.url
    ));
    let started = Instant::now();
    let first = caller
        .send(&agent, "Hello", &mut quiet)
        .await
        .context("sending")?;
    let Outcome::Task(task) = first else {
        bail!("the agent answered with a message, not a task");
    };
    r.task = Some(task.id.clone());
    r.question = call::status_text(&task);
    if !matches!(
        task.status.state,
        agentnet_a2a::types::TaskState::InputRequired
    ) {
        bail!(
            "expected INPUT_REQUIRED, got {}",
            call::state_name(&task.status.state)
        );
    }
    progress.line(format!(
        "task {}: INPUT_REQUIRED ({}); answering",
        task.id,
        r.question.as_deref().unwrap_or("")
    ));
    let done = caller
        .continue_task(&agent, &task.id, "Ada", &mut quiet)
        .await
        .context("continuing the task")?;
    r.call_ms = ms(started.elapsed());
    r.answer = call::texts(&done);
    if let Outcome::Task(t) = &done {
        r.state = Some(call::state_name(&t.status.state));
        if !matches!(t.status.state, agentnet_a2a::types::TaskState::Completed) {
            bail!("the task ended {}", call::state_name(&t.status.state));
        }
    }
    progress.line(format!(
        "task {}: {} in {} ms: {}",
        task.id,
        r.state.as_deref().unwrap_or("?"),
        r.call_ms,
        r.answer.join(" ")
    ));
    Ok(())
}

pub(super) async fn mcp_sample(
    host_dir: &Path,
    host: &admin::Client,
    caller_admin: &admin::Client,
    caller_key: SecretKey,
    host_node: &Member,
    progress: &Progress,
) -> McpReport {
    let mut r = McpReport {
        tag: MCP_TAG.into(),
        caller: caller_key.did_key().to_string(),
        tool: "echo".into(),
        sent: "Hello over MCP".into(),
        ..Default::default()
    };
    let done = mcp_inner(
        host_dir,
        host,
        caller_admin,
        host_node,
        caller_key,
        progress,
        &mut r,
    )
    .await;
    r.error = failure(done, "the MCP call", progress);
    r
}

async fn mcp_inner(
    host_dir: &Path,
    host: &admin::Client,
    caller_admin: &admin::Client,
    host_node: &Member,
    caller_key: SecretKey,
    progress: &Progress,
    r: &mut McpReport,
) -> anyhow::Result<()> {
    use crate::call;
    use crate::call::mcp::Remote;
    announce(host_dir, host, host_node.info().http, MCP_AGENT).await?;
    let started = Instant::now();
    let (caller, agent) =
        find_by_skill(caller_admin, caller_key, MCP_TAG, "the MCP sample agent").await?;
    let mut quiet = |_p: call::Progress| {};
    let remote = Remote::find(
        &caller,
        agent.did.as_str(),
        Some(agent.card.clone()),
        &mut quiet,
    )
    .await
    .context("reading the MCP endpoint of the verified card")?;
    r.find_ms = ms(started.elapsed());
    r.did = Some(remote.did.to_string());
    r.url = Some(remote.endpoint.url.to_string());
    r.versions = remote
        .endpoint
        .versions
        .iter()
        .map(|v| v.to_string())
        .collect();
    progress.line(format!(
        "last node found {MCP_TAG} → {} and verified its card in {} ms; MCP at {} with signed requests",
        remote.did, r.find_ms, remote.endpoint.url
    ));
    let started = Instant::now();
    let tools = remote
        .list_tools(&caller)
        .await
        .context("listing the tools")?;
    r.tools = tools.iter().map(|t| t.name.to_string()).collect();
    let result = remote
        .call_tool(&caller, &r.tool, json!({"text": r.sent}))
        .await
        .context("calling the echo tool")?;
    r.call_ms = ms(started.elapsed());
    r.result = result.structured_content.clone();
    if result.is_error == Some(true) {
        bail!("the echo tool failed: {:?}", result.content);
    }
    if r.result.as_ref().and_then(|v| v.get("text")) != Some(&json!(r.sent)) {
        bail!("the echo tool answered {:?}", r.result);
    }
    progress.line(format!(
        "MCP tools [{}]; echo answered {} in {} ms",
        r.tools.join(", "),
        r.result.as_ref().map(|v| v.to_string()).unwrap_or_default(),
        r.call_ms
    ));
    Ok(())
}

pub(super) async fn faces_sample(
    caller_admin: &admin::Client,
    caller_key: SecretKey,
    search_http: SocketAddr,
    progress: &Progress,
) -> FacesReport {
    let mut r = FacesReport {
        sent: "Hello over ANP".into(),
        ..Default::default()
    };
    let done = faces_inner(caller_admin, caller_key, search_http, progress, &mut r).await;
    r.error = failure(done, "the ANP call or the ARD search", progress);
    r
}

async fn faces_inner(
    caller_admin: &admin::Client,
    caller_key: SecretKey,
    search_http: SocketAddr,
    progress: &Progress,
    r: &mut FacesReport,
) -> anyhow::Result<()> {
    let (caller, agent) =
        find_by_skill(caller_admin, caller_key, MCP_TAG, "the MCP sample agent").await?;
    let did = agent.did.to_string();
    r.did = Some(did.clone());
    // ANP: the description the verified card links (`urn:agentnet:anp:v1`), then one call.
    let started = Instant::now();
    let mut quiet = |_p: crate::call::Progress| {};
    let anp = caller
        .find_anp(&did, Some(&did), &mut quiet)
        .await
        .context("reading the agent's ANP description")?;
    r.ad_url = Some(anp.ad_url.to_string());
    r.rpc_url = Some(anp.rpc_url.to_string());
    r.method = Some(anp.method.clone());
    let answer = caller
        .call_anp(&anp, &r.sent)
        .await
        .context("calling it over ANP")?;
    r.anp_ms = ms(started.elapsed());
    let text = answer
        .get("text")
        .cloned()
        .unwrap_or_else(|| answer.clone());
    if !text.as_str().is_some_and(|t| t.contains(&r.sent)) {
        bail!("the ANP call answered {answer}");
    }
    r.answer = Some(text);
    progress.line(format!(
        "ANP: {} → {}({:?}) answered in {} ms",
        anp.ad_url, anp.method, r.sent, r.anp_ms
    ));
    // ARD: the last node's registry API answers from its P2P index (rebuilt every few
    // seconds: asked until the agent is there).
    let url = format!("http://{search_http}/search");
    r.ard_search = Some(url.clone());
    let started = Instant::now();
    let deadline = started + DISCOVER_TIMEOUT;
    let identifier = loop {
        let answer: Value = agentnet_did::http::client()
            .post(&url)
            .json(&json!({"query": {"text": "echo"}}))
            .send()
            .await
            .and_then(|a| a.error_for_status())
            .with_context(|| format!("POST {url}"))?
            .json()
            .await
            .with_context(|| format!("reading the answer of POST {url}"))?;
        let found = answer["results"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["metadata"]["did"] == did.as_str())
            .and_then(|e| e["identifier"].as_str().map(str::to_owned));
        if let Some(id) = found {
            break id;
        }
        if Instant::now() >= deadline {
            bail!("the ARD search at {url} did not find {did}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    r.ard_ms = ms(started.elapsed());
    progress.line(format!(
        "ARD: POST {url} \"echo\" → {identifier} in {} ms",
        r.ard_ms
    ));
    r.ard_identifier = Some(identifier);
    Ok(())
}

/// Announce node 1's hosted agent `id` again, now that the network is up.
pub(super) async fn announce(
    host_dir: &Path,
    host: &admin::Client,
    http: SocketAddr,
    id: &str,
) -> anyhow::Result<()> {
    let key = SecretKey::load(&crate::hosted::key_path(host_dir, id))
        .with_context(|| format!("the hosted agent {id}'s key"))?;
    let card_url = format!("http://{http}/a2a/{id}/.well-known/agent-card.json");
    let card: Value = agentnet_did::http::get(&card_url)
        .await
        .and_then(|r| r.error_for_status())
        .with_context(|| format!("fetching {card_url}"))?
        .json()
        .await
        .with_context(|| format!("reading {card_url}"))?;
    let agent_did = AgentKeys::new(host_dir)
        .install(&key)
        .context("installing the hosted agent's key")?;
    host.publish(&PublishRequest {
        card,
        ttl_secs: SAMPLE_TTL,
        did: Some(agent_did),
    })
    .await
    .with_context(|| format!("announcing the hosted agent {id}"))?;
    Ok(())
}

/// A caller on the last node signing as `caller_key`, and the agent it finds by `tag` and
/// verifies, retried until [`DISCOVER_TIMEOUT`] while gossip is on its way.
pub(super) async fn find_by_skill(
    caller_admin: &admin::Client,
    caller_key: SecretKey,
    tag: &str,
    what: &str,
) -> anyhow::Result<(crate::call::Caller, crate::call::Agent)> {
    use crate::call::{self, CallOptions, Caller, Target};
    let resolver = agentnet_did::Resolver::new(Default::default())?;
    let signer = std::sync::Arc::new(call::DidSigner::new(crate::identity::Identity::did_key(
        caller_key,
    )));
    let opts = CallOptions {
        allow_private: true,
        timeout: DISCOVER_TIMEOUT,
        ..Default::default()
    };
    let caller = Caller::new(
        Some(std::sync::Arc::new(caller_admin.clone())),
        resolver,
        Some(signer),
        opts,
    );
    let mut quiet = |_p: call::Progress| {};
    let started = Instant::now();
    let target = Target::Skill {
        tags: vec![tag.into()],
        did: None,
    };
    loop {
        match caller.find(&target, &mut quiet).await {
            Ok(a) => return Ok((caller, a)),
            Err(e) if started.elapsed() < DISCOVER_TIMEOUT => {
                tracing::debug!(error = %e, "{what} is not found yet");
                tokio::time::sleep(RETRY).await;
            }
            Err(e) => return Err(e).with_context(|| format!("finding {what} by skill")),
        }
    }
}
