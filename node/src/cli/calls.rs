//! Calling agents: `call` (A2A), `tools` and `tool` (their MCP endpoints).

use super::*;

/// The caller and the verified MCP endpoint of `agentnet tools` and `agentnet tool`.
async fn remote_mcp(
    a: &RemoteMcpArgs,
) -> anyhow::Result<(call::Caller, crate::mcp::client::Remote)> {
    let dir = data_dir::resolve(a.node.data_dir.as_deref())?;
    let id = match &a.as_did {
        Some(did) => data_dir::AgentKeys::new(&dir).load_identity(did)?,
        None => identity::Identity::did_key(
            SecretKey::load(&data_dir::key_file(&dir))
                .context("loading the node key to sign with (run `agentnet init`, or pass --as)")?,
        ),
    };
    let signer: Arc<dyn agentnet_a2a::client::Signer> = Arc::new(call::DidSigner::new(id));
    let resolver = Resolver::new(resolver_options(&a.net)?).map_err(anyhow::Error::msg)?;
    let opts = call::CallOptions {
        allow_private: a.allow_private,
        timeout: std::time::Duration::from_secs(a.timeout_secs.max(1)),
        ..Default::default()
    };
    let caller = call::Caller::new(
        Some(Arc::new(admin_client(&a.node)?)),
        resolver,
        Some(signer),
        opts,
    );
    let mut progress = |p: call::Progress| eprintln!("{}", text::sanitize(&p.to_string()));
    let remote = match &a.did {
        Some(did) => crate::mcp::client::Remote::find(&caller, did, None, &mut progress).await?,
        None => crate::mcp::client::Remote::find_by_skill(&caller, &a.skill, &mut progress).await?,
    };
    eprintln!(
        "MCP endpoint {} ({})",
        text::sanitize(remote.endpoint.url.as_str()),
        remote.endpoint.versions.join(", ")
    );
    Ok((caller, remote))
}

pub(super) async fn tools_cmd(args: ToolsArgs) -> anyhow::Result<ExitCode> {
    let (caller, remote) = remote_mcp(&args.remote).await?;
    let tools = remote.list_tools(&caller).await?;
    if args.remote.json {
        let out = json!({
            "did": remote.did.as_str(),
            "url": remote.endpoint.url.as_str(),
            "tools": tools,
        });
        out!("{}", json_line(&out)?)?;
    } else {
        for t in &tools {
            let d = t.description.as_deref().unwrap_or("");
            out!(
                "{}\t{}",
                text::sanitize(&t.name),
                text::sanitize(&d.chars().take(300).collect::<String>())
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn tool_cmd(args: ToolArgs) -> anyhow::Result<ExitCode> {
    let tool_args: Value = serde_json::from_str(&args.args).context("--args is not JSON")?;
    if !tool_args.is_object() {
        bail!("--args must be a JSON object");
    }
    let (caller, remote) = remote_mcp(&args.remote).await?;
    let result = remote.call_tool(&caller, &args.name, tool_args).await?;
    let failed = result.is_error == Some(true);
    if args.remote.json {
        let out = json!({
            "did": remote.did.as_str(),
            "url": remote.endpoint.url.as_str(),
            "tool": args.name,
            "result": result,
        });
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
    }
    if failed {
        eprintln!("error: the tool reported an error (isError)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn call_cmd(args: CallArgs) -> anyhow::Result<ExitCode> {
    let dir = data_dir::resolve(args.node.data_dir.as_deref())?;
    let signer: Option<Arc<dyn agentnet_a2a::client::Signer>> = if args.anonymous {
        None
    } else {
        let id = match &args.as_did {
            Some(did) => data_dir::AgentKeys::new(&dir).load_identity(did)?,
            None => identity::Identity::did_key(
                SecretKey::load(&data_dir::key_file(&dir))
                    .context("loading the node key to sign with (run `agentnet init`, or pass --as or --anonymous)")?,
            ),
        };
        Some(Arc::new(call::DidSigner::new(id)))
    };
    let resolver = Resolver::new(resolver_options(&args.net)?).map_err(anyhow::Error::msg)?;
    let admin = admin_client(&args.node)?;
    let opts = call::CallOptions {
        stream: args.stream,
        allow_private: args.allow_private,
        timeout: std::time::Duration::from_secs(args.timeout_secs.max(1)),
        ..Default::default()
    };
    let caller = call::Caller::new(Some(Arc::new(admin)), resolver, signer, opts);
    let target = if args.skill.is_empty() {
        call::Target::Did(args.did.clone().unwrap_or_default())
    } else {
        call::Target::Skill {
            tags: args.skill.clone(),
            did: args.did.clone(),
        }
    };
    let mut progress = |p: call::Progress| eprintln!("{}", text::sanitize(&p.to_string()));
    let agent = caller.find(&target, &mut progress).await?;
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
    if args.json {
        let body = match &outcome {
            call::Outcome::Task(t) => json!({"task": t}),
            call::Outcome::Message(m) => json!({"message": m}),
        };
        let out = json!({
            "did": agent.did.as_str(),
            "interface": {"url": agent.endpoint.url.as_str(), "binding": agent.endpoint.binding.name()},
            "result": body,
        });
        out!("{}", json_line(&out)?)?;
    } else {
        for t in call::texts(&outcome) {
            out!("{}", text::sanitize(&t))?;
        }
        if let call::Outcome::Task(t) = &outcome {
            if matches!(
                t.status.state,
                agentnet_a2a::types::TaskState::InputRequired
            ) {
                if let Some(q) = call::status_text(t) {
                    out!("{}", text::sanitize(&q))?;
                }
                eprintln!(
                    "the agent waits for input: agentnet call --did {} --task {} \"…\"",
                    agent.did,
                    text::sanitize(&t.id)
                );
            }
        }
    }
    if let Some(e) = failed {
        eprintln!("error: {}", text::sanitize(&e));
        return Ok(ExitCode::FAILURE);
    }
    let ok = match &state {
        None => true,
        Some(s) => !s.is_terminal() || *s == agentnet_a2a::types::TaskState::Completed,
    };
    if !ok {
        eprintln!(
            "error: task {} ended {}",
            text::sanitize(task_id.as_deref().unwrap_or("")),
            state.as_ref().map(call::state_name).unwrap_or_default()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
