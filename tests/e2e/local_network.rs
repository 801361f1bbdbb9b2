//! A network on one machine with one switch (issue 16): `agentnet up --local` is recorded in
//! `node.json` and the commands run on that data directory follow it; without it, an agent on
//! loopback is refused with the flag that allows it named. And the hints the CLI prints (the
//! testnet's "try" lines, `call`'s answer to a waiting task) run as printed, through `sh`.

use std::io::BufRead as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;
use common::*;
use serde_json::Value;

/// `sh -c line` with the binary under test first on `PATH`, as a user pastes a printed line.
fn run_as_printed(line: &str) -> std::process::Output {
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("sh")
        .args(["-c", line])
        .env("PATH", path)
        .env_remove("AGENTNET_DATA_DIR")
        .env_remove("AGENTNET_LOCAL")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The command after "answer with: " in `call`'s standard error.
fn answer_hint(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .find_map(|l| l.split_once("answer with: ").map(|(_, c)| c.to_owned()))
}

fn sigterm(child: &std::process::Child) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

fn wait_exit(child: &mut std::process::Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "did not stop within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_testnet_and_call_hints_run_as_printed() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("net");
    let mut testnet = Command::new(BIN)
        .args(["testnet", "--nodes", "2", "--keep", "--data-dir", p(&base)])
        .env_remove("AGENTNET_DATA_DIR")
        .env_remove("AGENTNET_LOCAL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let out = testnet.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The summary, then the "try" lines; nothing follows them until Ctrl-C.
    let mut printed = String::new();
    let mut hints = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let wait = if hints.is_empty() {
            deadline.saturating_duration_since(Instant::now())
        } else {
            Duration::from_secs(2)
        };
        match rx.recv_timeout(wait) {
            Ok(line) => {
                printed.push_str(&line);
                printed.push('\n');
                if let Some(cmd) = line.strip_prefix("  agentnet ") {
                    hints.push(format!("agentnet {cmd}"));
                }
            }
            Err(_) => break,
        }
    }
    assert!(
        printed.contains("Try, from another terminal:") && hints.len() >= 4,
        "no hints: {printed}"
    );
    assert!(
        hints.iter().any(|h| h.contains(" call ")),
        "a call among the hints: {hints:?}"
    );
    for hint in &hints {
        let o = run_as_printed(hint);
        assert!(
            o.status.success(),
            "`{hint}` as printed: {}{}",
            stdout(&o),
            stderr(&o)
        );
        if hint.contains(" call ") {
            // The greeter asks a question first: its answer line runs as printed too.
            assert!(stdout(&o).contains("What is your name?"), "{}", stdout(&o));
            let err = stderr(&o);
            let answer = answer_hint(&err).unwrap_or_else(|| panic!("no answer hint: {err}"));
            let o = run_as_printed(&answer);
            assert!(
                o.status.success() && stdout(&o).contains("Hello, your answer!"),
                "`{answer}` as printed: {}{}",
                stdout(&o),
                stderr(&o)
            );
        }
    }
    sigterm(&testnet);
    assert!(wait_exit(&mut testnet, Duration::from_secs(30)).success());
}

/// A node hosting an echo agent (signed callers) on loopback, `--local` or not.
fn echo_node(dir: &Path, local: bool) -> UpNode {
    let cfg = dir.with_extension("toml");
    std::fs::write(
        &cfg,
        "[[agent]]\nid = \"echo\"\nkind = \"echo\"\nname = \"Local Echo\"\ntags = [\"echo\"]\nmcp = true\n",
    )
    .unwrap();
    let mut args = LOOPBACK.to_vec();
    args.extend(["--config", p(&cfg)]);
    if local {
        args.push("--local");
    }
    UpNode::spawn(dir, &args)
}

fn call(dir: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["call", "--skill", "echo", "hi", "--data-dir", p(dir)];
    args.extend(extra);
    agentnet(&args)
}

#[test]
fn up_local_is_followed_by_the_commands_on_its_data_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let mut local = echo_node(&a, true);
    let public = echo_node(&b, false);
    assert_eq!(local.info["local"], true, "{}", local.info);
    assert_eq!(public.info["local"], false, "{}", public.info);

    // On the local node's data directory, no flag is needed.
    let o = call(&a, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "hi");
    let o = agentnet(&["tools", "--skill", "echo", "--data-dir", p(&a)]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A table with its header, as the other commands print.
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("TOOL") && lines[0].contains("PIN"),
        "{lines:?}"
    );
    assert!(lines[1].starts_with("echo "), "{lines:?}");

    // Elsewhere the loopback agent is refused, and the error names the switch; `--local` or
    // AGENTNET_LOCAL turn it on for one command.
    let o = call(&b, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: refusing the interface http://127.0.0.1:")
            && last.contains("--local")
            && last.contains("agentnet up --local"),
        "{err}"
    );
    let o = call(&b, &["--local"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = Command::new(BIN)
        .args(["call", "--skill", "echo", "hi", "--data-dir", p(&b)])
        .env("AGENTNET_LOCAL", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));

    // `discover` names the agent and says when its advert expires, for people.
    let o = agentnet(&["discover", "--skill", "echo", "--data-dir", p(&a)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = stdout(&o);
    let header = table.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("NAME") && header.contains("EXPIRES"),
        "{table}"
    );
    assert!(
        table.contains("Local Echo") && (table.contains("in 1 h ") || table.contains("in 59 min")),
        "{table}"
    );

    // Stopped by SIGTERM (Ctrl-C does the same), it says so, and exits 0.
    sigterm(&local.child);
    let status = wait_exit(&mut local.child, Duration::from_secs(30));
    assert!(status.success(), "{status}: {}", local.log());
    let log = local.log();
    assert!(
        log.contains("stopping...") && log.contains("stopped"),
        "{log}"
    );
}

/// `discover --json` on `dir`'s node for the echo agent: its entry (once the node holds it).
fn discovered_echo(dir: &Path) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = json_of(&[
            "discover",
            "--skill",
            "echo",
            "--json",
            "--data-dir",
            p(dir),
        ]);
        if let Some(echo) = found.as_array().and_then(|a| a.first()) {
            return echo.clone();
        }
        assert!(Instant::now() < deadline, "echo not discovered: {found}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What a newcomer following the guide saw: on a `--local` node its own echo agent was flagged
/// `private-url` at every `discover`, the URL cut at 30 characters, and a did:key agent read
/// `domain_verified: true` beside the level "self-asserted, no domain vouches for the key".
/// On a `--local` node loopback URLs are what the operator asked for: no flag; elsewhere the
/// flag shows the whole URL; a did:key agent names no domain and none vouched for its key.
#[test]
fn a_local_node_does_not_flag_its_own_loopback_agents_and_did_key_claims_no_domain() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let _local = echo_node(&a, true);
    let _public = echo_node(&b, false);

    let echo = discovered_echo(&a);
    let url = echo["card"]["supportedInterfaces"][0]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{echo}");
    let flags = echo["flags"].as_array().cloned().unwrap_or_default();
    assert!(
        flags.iter().all(|f| f["rule"] != "private-url"),
        "a --local node flags its own loopback agent: {echo}"
    );
    assert!(echo["did"].as_str().unwrap().starts_with("did:key:"));
    assert_eq!(echo["level"], "self-asserted", "{echo}");
    assert_eq!(echo["domain_verified"], false, "{echo}");
    assert_eq!(echo["domain"], Value::Null, "{echo}");

    let echo = discovered_echo(&b);
    let url = echo["card"]["supportedInterfaces"][0]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let flag = echo["flags"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["rule"] == "private-url"))
        .unwrap_or_else(|| panic!("no private-url flag off --local: {echo}"));
    assert_eq!(flag["at"], "supportedInterfaces[0].url", "{flag}");
    assert_eq!(flag["excerpt"], url.as_str(), "the URL shown whole: {flag}");
    let o = agentnet(&["discover", "--skill", "echo", "--data-dir", p(&b)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains(&url), "{}", stderr(&o));
    assert!(
        !stdout(&o).contains("domain not verified"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn config_check_shows_the_local_switch() {
    let tmp = tempfile::tempdir().unwrap();
    let o = agentnet(&["config", "check", "--local", "--data-dir", p(tmp.path())]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("local = true"), "{}", stdout(&o));
    let o = agentnet(&["config", "check", "--data-dir", p(tmp.path())]);
    assert!(stdout(&o).contains("local = false"), "{}", stdout(&o));
}

#[test]
fn init_names_the_peer_id_the_node_runs_with_and_key_new_makes_an_agent_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("n");
    let init = json_of(&["init", "--data-dir", p(&dir), "--json"]);
    let peer_id = init["peerId"].as_str().unwrap().to_owned();
    assert!(
        init["bootstrap"]
            .as_str()
            .is_some_and(|b| b.ends_with(&format!("/p2p/{peer_id}"))),
        "{init}"
    );
    let o = agentnet(&["init", "--data-dir", p(&dir)]);
    assert!(
        stderr(&o).contains(&format!("peer id: {peer_id}")),
        "{}",
        stderr(&o)
    );
    let node = UpNode::alone(&dir);
    assert_eq!(node.info["peer_id"], peer_id.as_str());
    drop(node);

    // `key new`: a private JWK, mode 0600, never over an existing file, whose did:key signs.
    let key = tmp.path().join("agent.jwk");
    let o = agentnet(&["key", "new", p(&key), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let did = v["did"].as_str().unwrap().to_owned();
    assert!(did.starts_with("did:key:z6Mk"), "{v}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let before = std::fs::read(&key).unwrap();
    let o = agentnet(&["key", "new", p(&key)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("refusing to overwrite"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(&key).unwrap(), before);
    let card = tmp.path().join("card.json");
    std::fs::write(&card, r#"{"name":"x","skills":[]}"#).unwrap();
    let o = agentnet(&["card", "sign", p(&card), "--key", p(&key)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let signed = tmp.path().join("signed.json");
    std::fs::write(&signed, &o.stdout).unwrap();
    let o = agentnet(&["card", "verify", p(&signed)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("signature by {did}")),
        "{}",
        stdout(&o)
    );
}
