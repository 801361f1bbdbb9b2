//! Calling agents: `call` (A2A), `tools` and `tool` (their MCP endpoints).

use anyhow::Context as _;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use agentnet_did::{text, Resolver, SecretKey};
use anyhow::bail;
use clap::Args;
use serde_json::{json, Value};

use super::args::{admin_client, is_local, resolver_options, Reach};
use super::one_line;
use super::output::{json_line, print_table, shell_word};
use crate::trust::pins::PinState;
use crate::{call, data_dir};

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").args(["did", "skill", "ad"]).required(true).multiple(true)))]
pub(super) struct CallArgs {
    /// The message.
    pub(super) text: String,
    /// The agent's DID (looked up in the node's index; with --skill, only this agent).
    #[arg(long)]
    pub(super) did: Option<String>,
    /// A skill tag the agent must have (repeat to require several); the first agent found
    /// whose card verifies and offers an interface we speak is called.
    #[arg(long = "skill")]
    pub(super) skill: Vec<String>,
    /// Or: an ANP agent, by the URL of its Agent Description (`ad.json`), or by a DID whose
    /// document (an `AgentDescription` service) or card in the node's index links one; verified
    /// as its DID's (with --did, that one); the call goes to its OpenRPC interface, signed.
    #[arg(long, value_name = "URL|DID", conflicts_with_all = ["skill", "task", "stream"])]
    pub(super) ad: Option<String>,
    /// Continue this task (waiting for input) instead of starting one.
    #[arg(long, value_name = "ID")]
    pub(super) task: Option<String>,
    /// Follow the task over SSE instead of polling.
    #[arg(long)]
    pub(super) stream: bool,
    /// Print the result as one JSON line.
    #[arg(long)]
    pub(super) json: bool,
    /// Sign requests as this identity (its key in <data-dir>/agents/); default: the node's
    /// did:key.
    #[arg(long = "as", value_name = "DID", conflicts_with = "anonymous")]
    pub(super) as_did: Option<String>,
    /// Send unsigned requests.
    #[arg(long)]
    pub(super) anonymous: bool,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub(super) timeout_secs: u64,
    /// Present this delegation chain (written by `agentnet delegate`; its last link must be to
    /// the DID this call signs as) in the message's metadata.
    #[arg(long, value_name = "FILE", conflicts_with = "anonymous")]
    pub(super) delegation: Option<PathBuf>,
    /// Present the chain as it is: do not hand the agent called a link to act on it onward.
    #[arg(long, requires = "delegation")]
    pub(super) no_hand_off: bool,
    #[command(flatten)]
    pub(super) reach: Reach,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").args(["did", "skill"]).required(true)))]
pub(super) struct RemoteMcpArgs {
    /// The agent's DID (its card is looked up in the node's index).
    #[arg(long)]
    pub(super) did: Option<String>,
    /// Or: the first agent with this skill tag (repeatable: all of them) whose verified card
    /// advertises an MCP endpoint.
    #[arg(long, value_name = "TAG")]
    pub(super) skill: Vec<String>,
    /// Print the result as one JSON line.
    #[arg(long)]
    pub(super) json: bool,
    /// Sign requests as this identity (its key in <data-dir>/agents/); default: the node's
    /// did:key.
    #[arg(long = "as", value_name = "DID")]
    pub(super) as_did: Option<String>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 60)]
    pub(super) timeout_secs: u64,
    /// Present this delegation chain in the tool call's `_meta.actorChain` (handed off to the
    /// agent when the chain allows; see `agentnet delegate`).
    #[arg(long, value_name = "FILE")]
    pub(super) delegation: Option<PathBuf>,
    #[command(flatten)]
    pub(super) reach: Reach,
}

#[derive(Debug, Args)]
pub(super) struct ToolsArgs {
    #[command(flatten)]
    pub(super) remote: RemoteMcpArgs,
    /// Accept the tools as listed now: `tool` calls a tool only while it is the one accepted
    /// (the node pins each tool object when first listed).
    #[arg(long)]
    pub(super) accept: bool,
}

#[derive(Debug, Args)]
pub(super) struct ToolArgs {
    /// The tool's name.
    pub(super) name: String,
    /// Its arguments, a JSON object.
    #[arg(long, default_value = "{}")]
    pub(super) args: String,
    #[command(flatten)]
    pub(super) remote: RemoteMcpArgs,
}

/// `error` with what to do when it is an agent interface or MCP endpoint refused for being on
/// plain http or a private address, and the command did not allow those.
fn private_hint(error: anyhow::Error, allowed: bool) -> anyhow::Error {
    // The MCP client's `Error::Call` names the `CallError` as its source, so the chain shows
    // it for `tools` and `tool` as for `call`.
    let refused = error
        .chain()
        .any(|c| matches!(c.downcast_ref(), Some(call::CallError::Address { .. })));
    if refused && !allowed {
        anyhow::anyhow!(
            "{}; an agent on this machine or a LAN needs --local (or a node started with \
             `agentnet up --local`)",
            one_line(&error)
        )
    } else {
        error
    }
}

/// The identity requests are signed as: `--as DID` (its key in the data directory), else the
/// node's did:key.
fn signer(
    dir: &Path,
    as_did: Option<&str>,
    flags: &str,
) -> anyhow::Result<Arc<dyn agentnet_a2a::client::Signer>> {
    let id = super::delegate::identity_of(dir, as_did, flags)?;
    Ok(Arc::new(call::DidSigner::new(id)))
}

/// A caller through the node of `reach`, on a local network if `--local` or the node says so
/// (then agents on loopback and private addresses are allowed, as `--allow-private` does).
fn caller(
    reach: &Reach,
    signer: Option<Arc<dyn agentnet_a2a::client::Signer>>,
    mut opts: call::CallOptions,
) -> anyhow::Result<call::Caller> {
    let dir = data_dir::resolve(reach.node.data_dir.as_deref())?;
    let local = is_local(&reach.net, &dir);
    let resolver =
        Resolver::new(resolver_options(&reach.net, local)?).map_err(anyhow::Error::msg)?;
    opts.allow_private = reach.allow_private || local;
    Ok(call::Caller::new(
        Some(Arc::new(admin_client(&reach.node)?)),
        resolver,
        signer,
        opts,
    ))
}

/// The caller and the verified MCP endpoint of `agentnet tools` and `agentnet tool`.
async fn remote_mcp(a: &RemoteMcpArgs) -> anyhow::Result<(call::Caller, crate::call::mcp::Remote)> {
    let dir = data_dir::resolve(a.reach.node.data_dir.as_deref())?;
    let signer = signer(&dir, a.as_did.as_deref(), "--as")?;
    let delegation = match &a.delegation {
        None => None,
        Some(file) => {
            let holder = super::delegate::identity_of(&dir, a.as_did.as_deref(), "--as")?;
            super::delegate::delegation_for(Some(file), Some(holder), false)?
        }
    };
    let opts = call::CallOptions {
        timeout: std::time::Duration::from_secs(a.timeout_secs.max(1)),
        delegation,
        ..Default::default()
    };
    let caller = caller(&a.reach, Some(signer), opts)?;
    let allow_private = caller.options().allow_private;
    let mut progress = progress_lines();
    let remote = match &a.did {
        Some(did) => crate::call::mcp::Remote::find(&caller, did, None, &mut progress).await,
        None => crate::call::mcp::Remote::find_by_skill(&caller, &a.skill, &mut progress).await,
    }
    .map_err(|e| private_hint(e.into(), allow_private))?;
    say!(
        "MCP endpoint {} ({})",
        text::sanitize(remote.endpoint.url.as_str()),
        remote.endpoint.versions.join(", ")
    );
    Ok((caller, remote))
}

/// The tools of `remote` as `tools/list` gave them, with their pins and the list's (`None`: no
/// node keeps pins for this process).
async fn pinned_tools(
    caller: &call::Caller,
    remote: &crate::call::mcp::Remote,
    accept: bool,
) -> anyhow::Result<(Vec<Value>, Option<crate::trust::pins::ToolPins>)> {
    let tools: Vec<Value> = remote
        .list_tools(caller)
        .await?
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    let pins = match caller.directory() {
        Some(d) => d.pin_tools(remote.did.as_str(), &tools, accept).await?,
        None => None,
    };
    Ok((tools, pins))
}

pub(super) async fn tools_cmd(args: ToolsArgs) -> anyhow::Result<ExitCode> {
    let (caller, remote) = remote_mcp(&args.remote).await?;
    let (tools, pins) = pinned_tools(&caller, &remote, args.accept).await?;
    let pin = |i: usize| pins.as_ref().and_then(|p| p.tools.get(i));
    let list = pins.as_ref().map(|p| &p.list);
    let rules = crate::trust::flags::builtin();
    let flags: Vec<Vec<crate::trust::flags::Flag>> = tools.iter().map(|t| rules.tool(t)).collect();
    if args.remote.json {
        let listed: Vec<Value> = tools
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut t = t.clone();
                if let Some(o) = t.as_object_mut() {
                    if let Some(p) = pin(i) {
                        o.insert("pin".into(), serde_json::to_value(p).unwrap_or(Value::Null));
                    }
                    if !flags[i].is_empty() {
                        o.insert(
                            "flags".into(),
                            serde_json::to_value(&flags[i]).unwrap_or(Value::Null),
                        );
                    }
                }
                t
            })
            .collect();
        let mut out = json!({
            "did": remote.did.as_str(),
            "url": remote.endpoint.url.as_str(),
            "tools": listed,
        });
        if let Some(l) = list {
            out["list"] = serde_json::to_value(l).unwrap_or(Value::Null);
        }
        out!("{}", json_line(&out)?)?;
    } else {
        let rows: Vec<[String; 3]> = tools
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let d = t["description"].as_str().unwrap_or("");
                [
                    t["name"].as_str().unwrap_or_default().to_owned(),
                    pin(i).map_or("-", PinState::word).to_owned(),
                    d.chars().take(300).collect(),
                ]
            })
            .collect();
        print_table(["TOOL", "PIN", "DESCRIPTION"], &rows)?;
    }
    for (i, t) in tools.iter().enumerate() {
        let name = format!("tool {}", t["name"].as_str().unwrap_or_default());
        super::network::say_flags(&name, &flags[i]);
    }
    let mut changed = false;
    for (i, t) in tools.iter().enumerate() {
        if let Some(PinState::Changed { diff, .. }) = pin(i) {
            changed = true;
            say!(
                "tool {} CHANGED since it was accepted:",
                text::sanitize(t["name"].as_str().unwrap_or_default())
            );
            for line in diff {
                say!("  - {}", text::sanitize(line));
            }
        }
    }
    match list {
        Some(PinState::Changed { diff, .. }) => {
            changed = true;
            say!("the tool list CHANGED since it was accepted:");
            for line in diff {
                say!("  - {}", text::sanitize(line));
            }
        }
        Some(PinState::Unpinned { why }) => {
            say!("the tool list is not pinned: {}", text::sanitize(why))
        }
        _ => {}
    }
    if changed {
        say!(
            "`agentnet tool` refuses a changed tool, and every tool while the list is changed; check them, then accept with `agentnet tools --did {} --accept`",
            text::sanitize(remote.did.as_str())
        );
    }
    if args.accept {
        say!("accepted the {} tools as listed", tools.len());
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn tool_cmd(args: ToolArgs) -> anyhow::Result<ExitCode> {
    let tool_args: Value = serde_json::from_str(&args.args).context("--args is not JSON")?;
    if !tool_args.is_object() {
        bail!("--args must be a JSON object");
    }
    let (caller, remote) = remote_mcp(&args.remote).await?;
    // The tool is called only while it is the one accepted (pinned when first listed).
    let (tools, pins) = pinned_tools(&caller, &remote, false).await?;
    let at = tools.iter().position(|t| t["name"] == args.name.as_str());
    match (at, pins.as_ref()) {
        (None, _) => bail!(
            "the agent lists no tool {:?}; `agentnet tools --did {}` lists them",
            text::sanitize(&args.name),
            remote.did.as_str()
        ),
        (Some(i), Some(p)) => {
            // A tool the accepted list did not have (a renamed one reads as new by its name)
            // is not called while the list differs from the accepted one.
            if let PinState::Changed { diff, .. } = &p.list {
                bail!(
                    "the tool list of {did} CHANGED since it was accepted ({}): tool {} not called; check it with `agentnet tools --did {did}`, then accept with `agentnet tools --did {did} --accept`",
                    text::sanitize(&diff.join("; ")),
                    text::sanitize(&args.name),
                    did = remote.did.as_str()
                );
            }
            if let Some(PinState::Changed { diff, .. }) = p.tools.get(i) {
                bail!(
                    "tool {} CHANGED since it was accepted ({}): not called; check it with `agentnet tools --did {did}`, then accept with `agentnet tools --did {did} --accept`",
                    text::sanitize(&args.name),
                    text::sanitize(&diff.join("; ")),
                    did = remote.did.as_str()
                );
            }
        }
        (Some(_), None) => {
            say!("warning: no node keeps pins for this call: the tool is not checked against the one accepted")
        }
    }
    // A tool whose definition hides characters (Unicode tags, bidi controls, zero-width) is
    // refused as a card that does is refused by every node: listed, with its flag, not called.
    if let Some(i) = at {
        if let Some(f) = crate::trust::flags::builtin()
            .tool(&tools[i])
            .into_iter()
            .find(|f| f.rule == "hidden-characters")
        {
            bail!(
                "tool {} holds hidden characters at {} ({}): not called; nodes refuse cards that hide text, and tools alike",
                text::sanitize(&args.name),
                text::sanitize(&f.at),
                f.excerpt
            );
        }
    }
    let result = remote.call_tool(&caller, &args.name, tool_args).await?;
    let failed = result.is_error == Some(true);
    // What the tool answered is the remote server's text, read for red flags like its
    // description: shown, never a reason to withhold the result.
    let flags = tool_result_flags(&result);
    if args.remote.json {
        let mut out = json!({
            "did": remote.did.as_str(),
            "url": remote.endpoint.url.as_str(),
            "tool": args.name,
            "result": result,
        });
        if !flags.is_empty() {
            out["flags"] = serde_json::to_value(&flags)?;
        }
        out!("{}", json_line(&out)?)?;
    } else {
        let texts: Vec<String> = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect();
        if texts.is_empty() {
            if let Some(s) = &result.structured_content {
                out!("{}", json_line(s)?)?;
            }
        }
        for t in texts {
            out!("{}", text::sanitize(&t))?;
        }
        super::network::say_flags(&format!("tool {}", args.name), &flags);
    }
    if failed {
        say!("error: the tool reported an error (isError)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentnet call`: find the agent (by DID or skill, or its ANP description with `--ad`), send
/// the message or continue the task, log the receipt, print the answer; exit 1 when the task
/// failed.
pub(super) async fn call_cmd(args: CallArgs) -> anyhow::Result<ExitCode> {
    let dir = data_dir::resolve(args.reach.node.data_dir.as_deref())?;
    let caller = call_caller(&args, &dir)?;
    let allow_private = caller.options().allow_private;
    if let Some(ad) = &args.ad {
        return anp_call(&caller, ad, &args)
            .await
            .map_err(|e| private_hint(e, allow_private));
    }
    let target = if args.skill.is_empty() {
        call::Target::Did(args.did.clone().unwrap_or_default())
    } else {
        call::Target::Skill {
            tags: args.skill.clone(),
            did: args.did.clone(),
        }
    };
    let mut progress = progress_lines();
    let agent = caller
        .find(&target, &mut progress)
        .await
        .map_err(|e| private_hint(e.into(), allow_private))?;
    let result = match &args.task {
        Some(t) => {
            caller
                .continue_task(&agent, t, &args.text, &mut progress)
                .await
        }
        None => caller.send(&agent, &args.text, &mut progress).await,
    };
    let (outcome, failed) = match result {
        Ok(o) => (o, None),
        Err(call::CallError::NoArtifacts(t)) => {
            let e = format!("task {} completed without any artifact", t.id);
            (call::Outcome::Task(t), Some(e))
        }
        Err(e) => return Err(e.into()),
    };
    let (state, task_id) = match &outcome {
        call::Outcome::Task(t) => (Some(t.status.state.clone()), Some(t.id.clone())),
        call::Outcome::Message(_) => (None, None),
    };
    let flags = answer_flags(&outcome);
    let recorded = record_receipt(&args, &dir, &agent, &outcome).await?;
    print_outcome(&args, &agent, &outcome, recorded.as_ref(), &flags)?;
    if let Some(e) = failed {
        say!("error: {}", text::sanitize(&e));
        return Ok(ExitCode::FAILURE);
    }
    let ok = match &state {
        None => true,
        Some(s) => !s.is_terminal() || *s == agentnet_a2a::types::TaskState::Completed,
    };
    if !ok {
        say!(
            "error: task {} ended {}",
            text::sanitize(task_id.as_deref().unwrap_or("")),
            state.as_ref().map(call::state_name).unwrap_or_default()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The caller of `agentnet call`: signing as `--as` or the node's did:key (unless
/// `--anonymous`), presenting `--delegation`, streaming with `--stream`.
fn call_caller(args: &CallArgs, dir: &Path) -> anyhow::Result<call::Caller> {
    let signer = if args.anonymous {
        None
    } else {
        Some(signer(dir, args.as_did.as_deref(), "--as or --anonymous")?)
    };
    let holder = if args.anonymous {
        None
    } else {
        Some(super::delegate::identity_of(
            dir,
            args.as_did.as_deref(),
            "--as or --anonymous",
        )?)
    };
    let opts = call::CallOptions {
        stream: args.stream,
        timeout: std::time::Duration::from_secs(args.timeout_secs.max(1)),
        delegation: super::delegate::delegation_for(
            args.delegation.as_deref(),
            holder,
            args.no_hand_off,
        )?,
        ..Default::default()
    };
    caller(&args.reach, signer, opts)
}

/// The receipt of a task that ended: verified, then logged by the node (never a reason to
/// fail the call: a warning, and `receipt` in --json). `None` while the task goes on.
async fn record_receipt(
    args: &CallArgs,
    dir: &Path,
    agent: &call::Agent,
    outcome: &call::Outcome,
) -> anyhow::Result<Option<crate::audit::Recorded>> {
    Ok(match outcome {
        call::Outcome::Task(t) if t.status.state.is_terminal() => {
            let caller_did = match (&args.anonymous, &args.as_did) {
                (true, _) => None,
                (false, Some(d)) => Some(d.clone()),
                (false, None) => SecretKey::load(&data_dir::key_file(dir))
                    .ok()
                    .map(|k| k.did_key().to_string()),
            };
            let rec = super::audit::recorder(&args.reach, dir)?;
            // The request as the agent holds it, held against the text sent.
            let held = crate::audit::request_of(t);
            let sent = [agentnet_a2a::types::Part::text(args.text.as_str())];
            let r = rec
                .record(
                    "call",
                    agent.did.as_str(),
                    caller_did.as_deref(),
                    t,
                    held,
                    Some(&sent),
                    None,
                )
                .await;
            match &r {
                crate::audit::Recorded::Logged { seq, .. } => {
                    say!("receipt verified, audit entry {seq}")
                }
                other => {
                    if let Some(w) = other.warning() {
                        say!("{}", text::sanitize(&w));
                    }
                }
            }
            Some(r)
        }
        _ => None,
    })
}

/// Print the answer: one JSON line with `--json` (with the receipt, the pin and the flags),
/// else its texts, the flags, and how to answer a task that waits for input.
fn print_outcome(
    args: &CallArgs,
    agent: &call::Agent,
    outcome: &call::Outcome,
    recorded: Option<&crate::audit::Recorded>,
    flags: &[crate::trust::flags::Flag],
) -> anyhow::Result<()> {
    if args.json {
        let body = match outcome {
            call::Outcome::Task(t) => json!({"task": t}),
            call::Outcome::Message(m) => json!({"message": m}),
        };
        let mut out = json!({
            "did": agent.did.as_str(),
            "interface": {"url": agent.endpoint.url.as_str(), "binding": agent.endpoint.binding.name()},
            "result": body,
        });
        if let Some(r) = recorded {
            out["receipt"] = serde_json::to_value(r)?;
        }
        if let Some(p) = &agent.pin {
            out["pin"] = serde_json::to_value(p)?;
        }
        if !flags.is_empty() {
            out["flags"] = serde_json::to_value(flags)?;
        }
        out!("{}", json_line(&out)?)?;
    } else {
        for t in call::texts(outcome) {
            out!("{}", text::sanitize(&t))?;
        }
        super::network::say_flags(agent.did.as_str(), flags);
        if let call::Outcome::Task(t) = outcome {
            if matches!(
                t.status.state,
                agentnet_a2a::types::TaskState::InputRequired
            ) {
                if let Some(q) = call::status_text(t) {
                    out!("{}", text::sanitize(&q))?;
                }
                say!(
                    "the agent waits for input; answer with: {}",
                    text::sanitize(&answer_command(args, agent.did.as_str(), &t.id))
                );
            }
        }
    }
    Ok(())
}

/// `agentnet call --ad URL`: an ANP agent, through its description ([`call::anp`]).
async fn anp_call(caller: &call::Caller, ad: &str, args: &CallArgs) -> anyhow::Result<ExitCode> {
    let mut progress = progress_lines();
    let agent = caller
        .find_anp(ad, args.did.as_deref(), &mut progress)
        .await?;
    let result = caller.call_anp(&agent, &args.text).await?;
    let mut texts = Vec::new();
    json_strings(&result, "result".into(), &mut texts);
    let flags = crate::trust::flags::builtin().answer(&texts);
    if args.json {
        let mut out = json!({
            "did": agent.did,
            "interface": {"url": agent.rpc_url.as_str(), "binding": "ANP JSON-RPC", "method": agent.method},
            "result": result,
        });
        if !flags.is_empty() {
            out["flags"] = serde_json::to_value(&flags)?;
        }
        out!("{}", json_line(&out)?)?;
    } else {
        let text = match result.get("text").or(Some(&result)) {
            Some(Value::String(s)) => s.clone(),
            _ => result.to_string(),
        };
        out!("{}", text::sanitize(&text))?;
        super::network::say_flags(&agent.did, &flags);
    }
    Ok(ExitCode::SUCCESS)
}

/// Progress on standard error, a line each, a line said twice in a row said once (the state a
/// send returned and the first poll's are the same).
fn progress_lines() -> impl FnMut(call::Progress) {
    let mut last = String::new();
    move |p: call::Progress| {
        let line = text::sanitize(&p.to_string()).into_owned();
        if line != last {
            say!("{line}");
            last = line;
        }
    }
}

/// The `agentnet call` that answers task `task` of `did`, to run as printed: the flags of this
/// call that choose the node, the identity and the transport, and a placeholder answer.
fn answer_command(args: &CallArgs, did: &str, task: &str) -> String {
    let mut words: Vec<String> = ["agentnet", "call", "--did", did, "--task", task]
        .map(String::from)
        .into();
    let mut flag = |name: &str, value: Option<String>| {
        words.push(format!("--{name}"));
        words.extend(value);
    };
    if let Some(d) = &args.reach.node.data_dir {
        flag("data-dir", Some(d.display().to_string()));
    }
    if let Some(n) = &args.reach.node.node {
        flag("node", Some(n.clone()));
    }
    if let Some(a) = &args.as_did {
        flag("as", Some(a.clone()));
    }
    for (name, set) in [
        ("anonymous", args.anonymous),
        ("stream", args.stream),
        ("allow-private", args.reach.allow_private),
        ("local", args.reach.net.local),
        ("allow-http-loopback", args.reach.net.allow_http_loopback),
    ] {
        if set {
            flag(name, None);
        }
    }
    if let Some(ca) = &args.reach.net.ca_cert {
        flag("ca-cert", Some(ca.display().to_string()));
    }
    words.push("your answer".into());
    words
        .iter()
        .map(|w| shell_word(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The red flags of an A2A answer's texts: its status message (`status`), then its artifacts'
/// or message's texts (`texts[i]`), as MCP `send_message` reads them.
fn answer_flags(outcome: &call::Outcome) -> Vec<crate::trust::flags::Flag> {
    let texts = call::texts(outcome);
    let status = match outcome {
        call::Outcome::Task(t) => call::status_text(t),
        call::Outcome::Message(_) => None,
    };
    let mut at: Vec<(String, &str)> = status
        .iter()
        .map(|s| ("status".into(), s.as_str()))
        .collect();
    at.extend(
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("texts[{i}]"), t.as_str())),
    );
    crate::trust::flags::builtin().answer(&at)
}

/// The red flags of an MCP tool's result: every string of it (text blocks, structured
/// content), with its path.
fn tool_result_flags(result: &rmcp::model::CallToolResult) -> Vec<crate::trust::flags::Flag> {
    let v = serde_json::to_value(result).unwrap_or(Value::Null);
    let mut texts = Vec::new();
    json_strings(&v, "result".into(), &mut texts);
    crate::trust::flags::builtin().answer(&texts)
}

/// Every string of `v` with its path, at most 512.
fn json_strings<'a>(v: &'a Value, at: String, out: &mut Vec<(String, &'a str)>) {
    if out.len() >= 512 {
        return;
    }
    match v {
        Value::String(s) => out.push((at, s)),
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                json_strings(x, format!("{at}[{i}]"), out);
            }
        }
        Value::Object(m) => {
            for (k, x) in m {
                json_strings(x, format!("{at}.{k}"), out);
            }
        }
        _ => {}
    }
}
