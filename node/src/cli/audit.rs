//! `agentnet audit`: the node's audit log of verified task receipts ([`crate::audit`]).

use std::io::Read as _;

use anyhow::Context as _;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agentnet_did::{text, Resolver};
use anyhow::bail;
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::args::{admin_client, is_local, resolver_options, NetArgs, NodeArg, Reach};
use super::output::json_line;
use crate::audit::{self, Entry, Recorder, Report};
use crate::{admin, data_dir};

/// `agentnet audit`.
#[derive(Debug, Args)]
pub(super) struct AuditArgs {
    #[command(subcommand)]
    command: Option<AuditCommand>,
    /// Only the entries of this task id (and the entries of the sub-receipts they name).
    #[arg(long)]
    task: Option<String>,
    /// Print JSON: `{"entries": [...], "head": {...}}`.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    node: NodeArg,
    #[command(flatten)]
    net: NetArgs,
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Re-check every entry's receipt signature and every link of the chain, and that the
    /// chain ends at the node's signed checkpoint; names the first bad entry and exits
    /// non-zero.
    Verify {
        /// Check an export file (`agentnet audit export`) instead, offline: no node needed.
        #[arg(long)]
        file: Option<PathBuf>,
        /// The node's DID, learnt elsewhere than from the file: its checkpoint must be signed
        /// by it. Without it the DID the export names is used, which proves only that the
        /// file is self-consistent.
        #[arg(long)]
        did: Option<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        node: NodeArg,
        #[command(flatten)]
        net: NetArgs,
    },
    /// Write every entry, with its chain links, to FILE (JSON lines: a header, then each
    /// entry's stored bytes), for `agentnet audit verify --file FILE` anywhere.
    Export {
        /// The file to write (`-` for standard output).
        file: PathBuf,
        #[command(flatten)]
        node: NodeArg,
    },
}

/// Where `call` sends a receipt: the node's admin API, or nowhere (verified only) when no node
/// runs on the data directory.
pub(super) fn recorder(reach: &Reach, dir: &Path) -> anyhow::Result<Recorder> {
    let local = is_local(&reach.net, dir);
    let resolver =
        Resolver::new(resolver_options(&reach.net, local)?).map_err(anyhow::Error::msg)?;
    let running = reach.node.node.is_some() || data_dir::NodeFile::read(dir).is_ok();
    Ok(match admin_client(&reach.node) {
        Ok(c) if running => Recorder::Remote(std::sync::Arc::new(c), resolver),
        _ => Recorder::Nowhere(
            resolver,
            format!(
                "no node is running on {} (start `agentnet up` there to keep an audit log)",
                dir.display()
            ),
        ),
    })
}

/// The log's raw entries, head and signed checkpoint: through the running node, else from its
/// store directly.
async fn read_all(node: &NodeArg) -> anyhow::Result<(Vec<Vec<u8>>, u64, String, Option<String>)> {
    let dir = data_dir::resolve(node.data_dir.as_deref())?;
    // A node that was killed leaves its node.json: then the store is read directly.
    let running = node.node.is_some()
        || (data_dir::NodeFile::read(&dir).is_ok()
            && match admin_client(node) {
                Ok(c) => !matches!(
                    c.audit_page(u64::MAX).await,
                    Err(admin::ClientError::NotRunning(_))
                ),
                Err(_) => false,
            });
    if running {
        let client = admin_client(node)?;
        let mut out = Vec::new();
        let mut after = 0;
        // Bounded: each page moves `after` forward, the log holds at most max_entries.
        for _ in 0..=audit::Limits::default().max_entries {
            let page = client.audit_page(after).await.with_context(|| {
                format!("reading the audit log of the node on {}", dir.display())
            })?;
            let entries = page["entries"].as_array().cloned().unwrap_or_default();
            let head = (
                page["head"]["seq"].as_u64().unwrap_or(0),
                page["head"]["digest"]
                    .as_str()
                    .unwrap_or(audit::GENESIS)
                    .to_string(),
                page["head"]["checkpoint"].as_str().map(str::to_string),
            );
            if entries.is_empty() {
                return Ok((out, head.0, head.1, head.2));
            }
            for e in entries {
                after = e["seq"].as_u64().unwrap_or(after + 1);
                out.push(e["raw"].as_str().unwrap_or_default().as_bytes().to_vec());
            }
        }
        bail!("the audit log did not end")
    } else {
        let path = dir.join(crate::db::STORE_DIR);
        if !path.exists() {
            return Ok((Vec::new(), 0, audit::GENESIS.into(), None));
        }
        let log = tokio::task::spawn_blocking(move || audit::open_dir(&path))
            .await?
            .with_context(|| {
                format!(
                    "opening the audit log in {} (no node is running there; if one is, pass --node)",
                    dir.display()
                )
            })?
            .1;
        let (seq, digest, checkpoint) = log.signed_head();
        let mut out = Vec::new();
        let mut after = 0;
        loop {
            let l = log.clone();
            let page =
                tokio::task::spawn_blocking(move || l.raw_page(after, audit::MAX_PAGE)).await??;
            let Some(last) = page.last().map(|p| p.0) else {
                break;
            };
            out.extend(page.into_iter().map(|p| p.1));
            after = last;
        }
        Ok((out, seq, digest, checkpoint))
    }
}

fn resolver_for(node: &NodeArg, net: &NetArgs) -> anyhow::Result<Resolver> {
    let local = data_dir::resolve(node.data_dir.as_deref()).is_ok_and(|d| is_local(net, &d));
    Resolver::new(resolver_options(net, local)?).map_err(anyhow::Error::msg)
}

pub(super) async fn audit_cmd(args: AuditArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        Some(AuditCommand::Verify {
            file: Some(f),
            did,
            json,
            node,
            net,
        }) => {
            let resolver = resolver_for(&node, &net)?;
            // An export holds at most the log's bytes, a line per entry and a header.
            let bound = audit::Limits::default().max_bytes + (16 << 20);
            let mut text = Vec::new();
            std::fs::File::open(&f)
                .with_context(|| format!("opening {}", f.display()))?
                .take(bound + 1)
                .read_to_end(&mut text)
                .with_context(|| format!("reading {}", f.display()))?;
            if text.len() as u64 > bound {
                bail!(
                    "{} is larger than an audit export can be ({bound} bytes)",
                    f.display()
                );
            }
            let text = String::from_utf8(text).context("the export file is not UTF-8")?;
            let report = audit::verify_export(&text, &resolver, trust(did.as_deref()))
                .await
                .map_err(anyhow::Error::msg)?;
            print_report(&report, json)
        }
        Some(AuditCommand::Verify {
            file: None,
            did,
            json,
            node,
            net,
        }) => {
            let resolver = resolver_for(&node, &net)?;
            let (raw, seq, digest, checkpoint) = read_all(&node).await?;
            let mut v = audit::Verifier::new();
            for b in &raw {
                let s = serde_json::from_slice::<Value>(b)
                    .ok()
                    .and_then(|e| e["seq"].as_u64())
                    .unwrap_or(0);
                v.check(s, b, &resolver).await;
            }
            let report = v
                .finish_signed(
                    (seq, &digest),
                    checkpoint.as_deref(),
                    trust(did.as_deref()),
                    &resolver,
                )
                .await;
            print_report(&report, json)
        }
        Some(AuditCommand::Export { file, node }) => {
            let (raw, seq, digest, checkpoint) = read_all(&node).await?;
            let mut text = audit::export_header(seq, &digest, checkpoint.as_deref());
            for b in &raw {
                text.push('\n');
                text.push_str(&String::from_utf8_lossy(b));
            }
            text.push('\n');
            if file.as_os_str() == "-" {
                out!("{}", text.trim_end())?;
            } else {
                std::fs::write(&file, text)
                    .with_context(|| format!("writing {}", file.display()))?;
                say!(
                    "wrote {} entries to {}; check it with `agentnet audit verify --file {}`",
                    raw.len(),
                    file.display(),
                    file.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        None => {
            let (raw, seq, digest, _) = read_all(&args.node).await?;
            let entries: Vec<Entry> = raw
                .iter()
                .filter_map(|b| serde_json::from_slice(b).ok())
                .collect();
            let shown = match &args.task {
                Some(t) => tree_of(&entries, t),
                None => entries.iter().collect(),
            };
            if args.task.is_some() && shown.is_empty() {
                bail!(
                    "no audit entry for task {} (list them all with `agentnet audit`)",
                    text::sanitize(args.task.as_deref().unwrap_or(""))
                );
            }
            if args.json {
                let out = json!({"entries": shown, "head": {"seq": seq, "digest": digest}});
                out!("{}", json_line(&out)?)?;
            } else {
                print_tree(&entries, &shown)?;
                if entries.is_empty() {
                    say!("the audit log is empty: `agentnet call` adds the receipts of the tasks it follows");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The entries of `task` and, below them, those of the sub-receipts they name (bounded depth).
fn tree_of<'a>(entries: &'a [Entry], task: &str) -> Vec<&'a Entry> {
    let mut out: Vec<&Entry> = entries.iter().filter(|e| e.task_id == task).collect();
    let mut i = 0;
    while i < out.len() && out.len() < 10_000 {
        for d in &out[i].sub_receipts.clone() {
            if let Some(e) = entries.iter().find(|e| &e.receipt_digest == d) {
                if !out.iter().any(|o| o.seq == e.seq) {
                    out.push(e);
                }
            }
        }
        i += 1;
    }
    out
}

fn print_tree(all: &[Entry], shown: &[&Entry]) -> anyhow::Result<()> {
    // Entries named as a sub-receipt by another shown entry print under it.
    let named: std::collections::HashSet<&str> = shown
        .iter()
        .flat_map(|e| e.sub_receipts.iter().map(String::as_str))
        .collect();
    fn line(e: &Entry, depth: usize) -> String {
        format!(
            "{}#{} {} {} task {} agent {} ({}, {})",
            "  ".repeat(depth),
            e.seq,
            e.at,
            e.state.strip_prefix("TASK_STATE_").unwrap_or(&e.state),
            e.task_id,
            e.agent,
            e.writer,
            &e.receipt_digest[..e.receipt_digest.len().min(16)]
        )
    }
    fn walk(all: &[Entry], e: &Entry, depth: usize) -> anyhow::Result<()> {
        out!("{}", text::sanitize(&line(e, depth)))?;
        if depth < 16 {
            for d in &e.sub_receipts {
                match all.iter().find(|x| &x.receipt_digest == d) {
                    Some(sub) => walk(all, sub, depth + 1)?,
                    None => out!(
                        "{}- sub-receipt {} (not in this node's log: the agent that holds it has it)",
                        "  ".repeat(depth + 1),
                        &d[..d.len().min(16)]
                    )?,
                }
            }
        }
        Ok(())
    }
    for e in shown
        .iter()
        .filter(|e| !named.contains(e.receipt_digest.as_str()))
    {
        walk(all, e, 0)?;
    }
    Ok(())
}

/// `--did`: the checkpoint must be that DID's; without it, the DID the log names.
fn trust(did: Option<&str>) -> audit::Trust<'_> {
    match did {
        Some(d) => audit::Trust::Given(d),
        None => audit::Trust::FromFile,
    }
}

fn print_report(r: &Report, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        out!("{}", json_line(&serde_json::to_value(r)?)?)?;
    } else if r.ok {
        match &r.signed_by {
            Some(d) => out!(
                "ok: {} entries, every receipt and link verified, ending at the checkpoint {} signed at {}",
                r.entries,
                text::sanitize(d),
                text::sanitize(r.signed_at.as_deref().unwrap_or(""))
            )?,
            None => out!("ok: {} entries, every receipt and link verified", r.entries)?,
        }
        if let Some(n) = &r.note {
            say!("note: {}", text::sanitize(n));
        }
    } else if let Some(bad) = r.bad_entry {
        say!(
            "error: audit entry {} is bad: {} ({} entries before it verified)",
            bad,
            text::sanitize(r.reason.as_deref().unwrap_or("")),
            r.entries
        );
    } else {
        say!(
            "error: the audit log is refused: {} ({} entries checked)",
            text::sanitize(r.reason.as_deref().unwrap_or("")),
            r.entries
        );
    }
    Ok(if r.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
