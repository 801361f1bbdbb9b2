//! What an operator asks of a node: `status` (the running node, from its admin API),
//! `config check` (the configuration `up` would run with, starting nothing), and the log
//! format of every command (`--log-format`).

use std::process::ExitCode;

use agentnet_did::text;
use anyhow::bail;
use clap::{Subcommand, ValueEnum};
use serde_json::{json, Value};

use super::args::{admin_client, NodeArg};
use super::node::UpArgs;
use super::output::{duration, expires_in, json_text, rfc3339};
use crate::config::{FileConfig, Overrides};
use crate::{admin, data_dir};

#[derive(Debug, Subcommand)]
pub(super) enum ConfigCommand {
    /// Print the configuration `up` would run with these flags and this file (TOML, or JSON
    /// with --json), or say on one line why it is invalid (exit 1); starts nothing.
    Check(UpArgs),
}

/// How the commands log on standard error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(super) enum LogFormat {
    /// Lines for people; coloured only when standard error is a terminal.
    #[default]
    Text,
    /// One JSON object per line (tracing-subscriber's JSON format), for log collectors.
    Json,
}

/// Whether standard error carries JSON lines only ([`LogFormat::Json`]).
static JSON_LOGS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Install the log subscriber: `AGENTNET_LOG` (default `warn`) in `format`, without colour
/// when standard error is not a terminal (a file, a pipe, journald).
pub(super) fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENTNET_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let fmt = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match format {
        LogFormat::Text => fmt
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => {
            JSON_LOGS.store(true, std::sync::atomic::Ordering::Relaxed);
            fmt.json().with_ansi(false).init()
        }
    }
}

/// Say `message` on standard error at `level` (`INFO`, `ERROR`): a plain line, or with
/// `--log-format json` a JSON object shaped like the log's, so that every line parses.
pub(super) fn notice(level: &str, message: &str) {
    if JSON_LOGS.load(std::sync::atomic::Ordering::Relaxed) {
        let line = json!({
            "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            "level": level,
            "fields": {"message": message},
            "target": "agentnet",
        });
        say!("{line}");
    } else if level == "ERROR" {
        say!("error: {message}");
    } else {
        say!("{message}");
    }
}

/// `agentnet status`: the running node on the data directory, from `GET /admin/v1/status`.
pub(super) async fn status(node: &NodeArg, json_out: bool) -> anyhow::Result<ExitCode> {
    let dir = data_dir::resolve(node.data_dir.as_deref())?;
    let no_node = || {
        anyhow::anyhow!(
            "no running node on {d}: start one with `agentnet up --data-dir {d}`",
            d = dir.display()
        )
    };
    let client = admin_client(node).map_err(|e| match e.downcast_ref::<admin::ClientError>() {
        Some(admin::ClientError::NotRunning(_) | admin::ClientError::Token(_)) => no_node(),
        _ => e,
    })?;
    let report = match client.status().await {
        Ok(r) => r,
        Err(admin::ClientError::NotRunning(_)) => return Err(no_node()),
        Err(e) => return Err(e.into()),
    };
    let now = agentnet_discovery::net::unix_now();
    let view = view(&report);
    if json_out {
        out!("{}", json_text(&view)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let s = |v: &Value| text::sanitize(v.as_str().unwrap_or_default()).into_owned();
    let n = &view["node"];
    out!("did: {}", s(&n["did"]))?;
    out!("peer id: {}", s(&n["peer_id"]))?;
    out!(
        "version {}, up {} (since {})",
        s(&n["version"]),
        duration(n["uptime_secs"].as_u64().unwrap_or_default()),
        s(&n["started"])
    )?;
    out!("public URL: {}", s(&n["public_url"]))?;
    out!(
        "status page: {}{} (log in with the token in {})",
        client.base().as_str().trim_end_matches('/'),
        crate::admin::status_page::PATH,
        crate::data_dir::token::token_file(&dir).display()
    )?;
    for a in n["listen"].as_array().into_iter().flatten() {
        out!("listening on {}", s(a))?;
    }
    out!("{} connected peer(s)", view["peers"])?;
    for b in view["bootstrap"].as_array().into_iter().flatten() {
        let since = b["since"].as_u64().unwrap_or_default();
        let mut line = format!(
            "bootstrap {}: {} for {}",
            s(&b["address"]),
            s(&b["state"]),
            duration(now.saturating_sub(since))
        );
        if b["last_error"].is_string() {
            line.push_str(&format!(" (last error: {})", s(&b["last_error"])));
        }
        out!("{line}")?;
    }
    for h in view["hosted"].as_array().into_iter().flatten() {
        out!(
            "hosting {} ({}) at {}{}",
            s(&h["id"]),
            s(&h["did"]),
            s(&h["url"]),
            if h["published"] == true {
                ", published"
            } else {
                ""
            }
        )?;
    }
    for p in view["published"].as_array().into_iter().flatten() {
        if p["announced"] == false {
            out!(
                "kept publication {d}: not announced, its key is missing from {}/agents/ \
                 (`agentnet unpublish --did {d}` forgets it)",
                dir.display(),
                d = s(&p["did"])
            )?;
            continue;
        }
        let tags: Vec<String> = p["tags"].as_array().into_iter().flatten().map(&s).collect();
        let expires = p["expires_at"].as_u64().unwrap_or_default();
        out!(
            "published {} ({}), tags {}, seq {}, expires {}",
            s(&p["did"]),
            s(&p["name"]),
            tags.join(","),
            p["seq"],
            expires_in(expires, now)
        )?;
    }
    let st = &view["store"];
    let mib = |v: &Value| v.as_u64().unwrap_or_default() as f64 / f64::from(1u32 << 20);
    let mut line = format!(
        "store: {:.1} MiB of {:.0} MiB, {} advert(s), {} refused for space",
        mib(&st["bytes"]),
        mib(&st["max_bytes"]),
        st["adverts"],
        st["refused"]
    );
    if st["free_disk_bytes"].is_u64() {
        line.push_str(&format!(
            ", {:.0} MiB free on disk",
            mib(&st["free_disk_bytes"])
        ));
    }
    out!("{line}")?;
    let t = &view["tasks"];
    out!(
        "tasks: {} ({:.1} MiB), {} unreadable set aside",
        t["total"],
        mib(&t["bytes"]),
        t["quarantined"]
    )?;
    Ok(ExitCode::SUCCESS)
}

/// What `status` shows of the [`crate::admin::status_page::Report`]: no history, no other nodes'
/// adverts, and Unix times also as RFC 3339 (`started`, `expires`, `since_time`).
fn view(r: &Value) -> Value {
    let mut node = r["node"].clone();
    node["started"] = rfc3339(&node["started_at"]).into();
    let mut published = r["published"].clone();
    for p in published.as_array_mut().into_iter().flatten() {
        p["expires"] = rfc3339(&p["expires_at"]).into();
    }
    let mut bootstrap = r["bootstrap"].clone();
    for b in bootstrap.as_array_mut().into_iter().flatten() {
        b["since_time"] = rfc3339(&b["since"]).into();
    }
    let t = &r["tasks"];
    json!({
        "node": node,
        "peers": r["connected"],
        "bootstrap": bootstrap,
        "hosted": r["hosted"],
        "published": published,
        "store": r["store"],
        "tasks": {"total": t["total"], "bytes": t["bytes"], "quarantined": t["quarantined"]},
    })
}

/// The `[node]` flags of `up` (and `config check`), as [`FileConfig::node`] takes them.
pub(super) fn overrides(args: &UpArgs) -> Overrides {
    Overrides {
        data_dir: args.dir.data_dir.clone(),
        listen: args.listen.clone(),
        bootstrap: args.bootstrap.clone(),
        http: args.http.clone(),
        admin: args.admin.clone(),
        public_url: args.public_url.clone(),
        no_mdns: args.no_mdns,
        local: args.net.local,
    }
}

/// `agentnet config check`: the configuration `up` would run with (the file with the flags
/// over it), as TOML that `--config` reads back or as JSON; refused with the check's error on
/// one line. Nothing is started or bound.
pub(super) fn config_check(args: &UpArgs) -> anyhow::Result<ExitCode> {
    let one_line = |e: &dyn std::fmt::Display| anyhow::anyhow!("{}", one_line(&e.to_string()));
    let cfg = match &args.config {
        Some(p) => FileConfig::read(p).map_err(|e| one_line(&e))?,
        None => FileConfig::default(),
    };
    let dir = data_dir::resolve(
        args.dir
            .data_dir
            .as_deref()
            .or(cfg.node.data_dir.as_deref()),
    )?;
    let effective = cfg
        .effective(&overrides(args), &dir)
        .map_err(|e| one_line(&e))?;
    // The store and memory bounds are flags only: checked as `up` checks them, shown apart.
    let flags = [
        ("store-max-mib", args.store_max_mib),
        ("store-peer-mib", args.store_peer_mib),
        ("store-min-free-mib", args.store_min_free_mib),
        ("max-memory-mib", args.max_memory_mib),
    ];
    for (flag, n) in flags {
        if n.checked_mul(1 << 20).is_none() {
            bail!("--{flag} {n}: too large");
        }
    }
    if args.json {
        let mut v = serde_json::to_value(&effective)?;
        v["flags"] = flags
            .iter()
            .map(|(f, n)| ((*f).to_owned(), json!(n)))
            .collect::<serde_json::Map<_, _>>()
            .into();
        out!("{}", json_text(&v)?)?;
    } else {
        out!("{}", toml::to_string(&effective)?.trim_end())?;
        let flags: Vec<String> = flags.iter().map(|(f, n)| format!("--{f} {n}")).collect();
        out!(
            "# and the flags without a place in the file: {}",
            flags.join(" ")
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A TOML parse error (which draws the line and a caret under the column) as one line: its
/// first line and its message lines, joined with `: `.
fn one_line(e: &str) -> String {
    let gutter = |l: &str| {
        let l = l.trim_start();
        l.starts_with('|')
            || l.split_once(" |")
                .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    e.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !gutter(l))
        .collect::<Vec<_>>()
        .join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_errors() {
        let e = "x.toml: TOML parse error at line 1, column 6\n  |\n1 | [node\n  |      ^\n\
                 invalid table header\nexpected `.`, `]`\n";
        assert_eq!(
            one_line(e),
            "x.toml: TOML parse error at line 1, column 6: invalid table header: expected `.`, `]`"
        );
        assert_eq!(one_line("plain"), "plain");
    }
}
