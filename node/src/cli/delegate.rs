//! `agentnet delegate`: write a delegation link (docs/PROTOCOL.md, "Delegation"); and the
//! `--delegation FILE` that `call`, `tool` and `mcp` present.

use anyhow::Context as _;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use agentnet_did::SecretKey;
use anyhow::bail;
use clap::Args;
use serde_json::{json, Value};

use super::args::DataDirArg;
use super::output::{self, json_line};
use crate::{call, data_dir, identity};
use agentnet_did::delegation::{self, Capability, Chain, Grant};

#[derive(Debug, Args)]
pub(super) struct DelegateArgs {
    /// The audience: the agent (or person) DID the capability is granted to.
    #[arg(long, value_name = "DID")]
    to: String,
    /// Operations granted: send, get, cancel, tool:NAME, tool:* (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "send,get")]
    ops: Vec<String>,
    /// A skill tag the agents called must have (repeat for several); default: any skill.
    #[arg(long = "skill")]
    skills: Vec<String>,
    /// An agent DID it may call (repeat for several); with --domain, either.
    #[arg(long = "agent", value_name = "DID")]
    agents: Vec<String>,
    /// A domain whose did:web/did:wba agents it may call (the domain and below it).
    #[arg(long = "domain")]
    domains: Vec<String>,
    /// How long: 90s, 30m, 2h, 7d.
    #[arg(long = "for", default_value = "1h", value_parser = parse_for)]
    valid_for: i64,
    /// How many more times it may be passed on (0: not at all).
    #[arg(long, default_value_t = 0)]
    depth: u32,
    /// Extend this chain (a file `delegate` wrote): its last audience must be the issuer, and the
    /// new link no wider than the last.
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
    /// Issue as this identity (its key in <data-dir>/agents/); default: the node's did:key.
    #[arg(long = "as", value_name = "DID")]
    as_did: Option<String>,
    /// Write the chain here (default: standard output).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    #[command(flatten)]
    dir: DataDirArg,
    /// Print JSON (the chain and what it grants).
    #[arg(long)]
    json: bool,
}

pub(super) fn parse_for(s: &str) -> Result<i64, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = n
        .parse()
        .map_err(|_| format!("{s:?}: a number and a unit, as 90s, 30m, 2h, 7d"))?;
    let secs = match unit {
        // A bare number would be read as seconds by some and hours by others: ask.
        "" => return Err(format!("{s:?}: give a unit: {s}s, {s}m, {s}h or {s}d")),
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => return Err(format!("{s:?}: the unit is s, m, h or d")),
    };
    if !(1..=366 * 86_400).contains(&secs) {
        return Err("between 1 second and 366 days".into());
    }
    Ok(secs)
}

/// Refuse an audience no node could ever verify: a did:key that holds no Ed25519 key, or a
/// method the node does not resolve. (did:web and did:wba are resolved when the chain is
/// presented; writing a delegation needs no network.)
fn check_audience(did: &agentnet_did::Did) -> anyhow::Result<()> {
    use agentnet_did::Method;
    match did.method() {
        Method::Key => agentnet_did::didkey::decode(did).map(drop).map_err(|e| {
            anyhow::anyhow!(
                "--to {did}: not a did:key of an Ed25519 key ({e}); copy the DID whole, as \
                 `agentnet identity` or `agentnet discover` prints it"
            )
        }),
        Method::Other(m) => bail!(
            "--to {did}: did:{m} is not a method agentnet resolves (did:key, did:web, did:wba), \
             so no agent could verify a chain to it"
        ),
        _ => Ok(()),
    }
}

/// The identity requests are signed as, and links issued by: `--as DID` (its key in the data
/// directory), else the node's did:key.
pub(super) fn identity_of(
    dir: &Path,
    as_did: Option<&str>,
    flags: &str,
) -> anyhow::Result<identity::Identity> {
    Ok(match as_did {
        Some(did) => data_dir::AgentKeys::new(dir).load_identity(did)?,
        None => identity::Identity::did_key(
            SecretKey::load(&data_dir::key_file(dir)).with_context(|| {
                format!("loading the node key to sign with (run `agentnet init`, or pass {flags})")
            })?,
        ),
    })
}

/// Read a chain file ([`call::read_chain`]).
pub(super) fn read_chain(path: &Path) -> anyhow::Result<Value> {
    call::read_chain(path)
}

/// The delegation a call presents: `file`, held by `holder`, whose DID must be its last
/// audience; handed off to each agent called unless `no_hand_off`.
pub(super) fn delegation_for(
    file: Option<&Path>,
    holder: Option<identity::Identity>,
    no_hand_off: bool,
) -> anyhow::Result<Option<Arc<call::Delegation>>> {
    let Some(file) = file else { return Ok(None) };
    let chain = read_chain(file)?;
    let Some(holder) = holder else {
        bail!(
            "a delegation binds to a DID: drop --anonymous to present {}",
            file.display()
        );
    };
    let holds = Chain::parse(&chain)?
        .links()
        .last()
        .map(|l| l.audience.to_string())
        .unwrap_or_default();
    let what = file.display().to_string();
    let d = call::Delegation::held(chain, holder, !no_hand_off, &what).map_err(|e| {
        anyhow::anyhow!(
            "{e}; or pass --as {holds} to sign as the holder (its key in the data directory)"
        )
    })?;
    Ok(Some(Arc::new(d)))
}

pub(super) fn delegate_cmd(args: DelegateArgs) -> anyhow::Result<ExitCode> {
    let dir = data_dir::resolve(args.dir.data_dir.as_deref())?;
    let issuer = identity_of(&dir, args.as_did.as_deref(), "--as")?;
    let audience = agentnet_did::Did::parse(&args.to).context("--to is not a DID")?;
    check_audience(&audience)?;
    let none_if_empty = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
    let capability = Capability {
        agents: none_if_empty(&args.agents),
        domains: none_if_empty(&args.domains),
        skills: none_if_empty(&args.skills),
        ops: args.ops.clone(),
        depth: args.depth,
    };
    let parent = args.from.as_deref().map(read_chain).transpose()?;
    let now = delegation::now();
    let mut valid_until = now + args.valid_for;
    if let Some(p) = &parent {
        let parsed = Chain::parse(p)?;
        if let Some(last) = parsed.links().last() {
            if last.audience != *issuer.did() {
                bail!(
                    "--from: that chain is to {}, not to {} who issues this link: pass --as {}",
                    last.audience,
                    issuer.did(),
                    last.audience
                );
            }
            // Never past the parent: the link would not hold.
            valid_until = valid_until.min(last.valid_until);
        }
    }
    let grant = Grant {
        audience: &audience,
        capability: &capability,
        valid_from: now - 60,
        valid_until,
    };
    let chain = delegation::issue(issuer.key(), issuer.kid(), &grant, parent.as_ref())
        .context("the delegation does not hold")?;
    let text = serde_json::to_string_pretty(&chain)?;
    if let Some(out) = &args.out {
        std::fs::write(out, format!("{text}\n"))
            .with_context(|| format!("writing {}", out.display()))?;
    }
    let parsed = Chain::parse(&chain)?;
    let principal = parsed.links()[0].issuer.to_string();
    if args.json {
        let mut o = json!({
            "principal": principal,
            "issuer": issuer.did().as_str(),
            "audience": audience.as_str(),
            "capability": capability,
            "validUntil": delegation::rfc3339(valid_until),
            "links": parsed.links().len(),
            "digest": parsed.digest(),
        });
        if args.out.is_none() {
            o["chain"] = chain;
        }
        out!("{}", json_line(&o)?)?;
    } else {
        if args.out.is_none() {
            out!("{text}")?;
        }
        say!(
            "delegation: {} → {}: {}{}, until {} ({}), depth {}; {} link(s) from {}{}",
            issuer.did(),
            audience,
            capability.ops.join(","),
            capability
                .skills
                .as_ref()
                .map(|s| format!(" for skills {}", s.join(",")))
                .unwrap_or_default(),
            delegation::rfc3339(valid_until),
            output::expires_in(valid_until.max(0) as u64, now.max(0) as u64),
            capability.depth,
            parsed.links().len(),
            principal,
            args.out
                .as_ref()
                .map(|p| format!("; wrote {}", p.display()))
                .unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_needs_its_unit() {
        assert_eq!(parse_for("90s"), Ok(90));
        assert_eq!(parse_for("2h"), Ok(7200));
        assert_eq!(parse_for("7d"), Ok(7 * 86_400));
        let e = parse_for("2").unwrap_err();
        assert!(e.contains("2s, 2m, 2h or 2d"), "{e}");
        assert!(parse_for("2w").is_err());
        assert!(parse_for("0s").is_err());
        assert!(parse_for("367d").is_err());
    }

    #[test]
    fn an_audience_no_node_could_verify_is_refused() {
        let did = |s: &str| agentnet_did::Did::parse(s).unwrap();
        let key = SecretKey::generate().did_key();
        assert!(check_audience(&key).is_ok());
        assert!(check_audience(&did("did:web:example.com:agents:a")).is_ok());
        let e = check_audience(&did("did:key:zbad"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a did:key of an Ed25519 key"), "{e}");
        let e = check_audience(&did("did:example:123"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("did:example is not a method"), "{e}");
    }
}
