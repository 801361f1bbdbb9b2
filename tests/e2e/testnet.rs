//! `agentnet testnet` as a newcomer runs it: real nodes on loopback in one process, sample
//! agents published from some, discovered from the last; and the same run with each node a
//! real `agentnet up` process (`--processes`), which must leave no process behind.

use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Far above what the command needs (about a second for three nodes); only a hang trips it.
const TIMEOUT: Duration = Duration::from_secs(120);

struct Run {
    /// The testnet's own process id.
    pid: u32,
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Run `agentnet <args>`, killing it after [`TIMEOUT`].
fn agentnet(args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentnet"))
        .args(args)
        .env_remove("AGENTNET_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("the agentnet binary runs");
    let pid = child.id();
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "agentnet {args:?} still running after {TIMEOUT:?}; stderr:\n{}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Run {
        pid,
        status,
        stdout: std::fs::read_to_string(&out).unwrap(),
        stderr: std::fs::read_to_string(&err).unwrap(),
    }
}

/// The run exited 0 and printed one JSON object: the report.
fn succeeded_with_json(run: &Run) -> Value {
    assert!(
        run.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        run.status.code(),
        run.stdout,
        run.stderr
    );
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{}", run.stdout))
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} is not a string in {v}"))
}

#[test]
fn three_nodes_discover_every_sample_agent_from_the_last_node() {
    let run = agentnet(&["testnet", "--nodes", "3", "--json"]);
    let report = succeeded_with_json(&run);
    assert_three_node_run(&report);
    // One process: every node reports the testnet's own.
    assert_eq!(report["mode"], "in-process", "{report:#}");
    for n in report["nodes"].as_array().unwrap() {
        assert_eq!(n["pid"], run.pid, "{n}");
        assert!(n.get("log").is_none(), "{n}");
    }
}

/// Twenty nodes on one loopback address: gossipsub's peer score counts peers sharing an
/// address (past 10, each costs the square of the surplus), and before the testnet's nodes
/// (`--local`) exempted loopback from it, a node with 19 such peers gossiped to none: the last
/// node found its agents through the DHT only and never saw node 1's endorsement, which only
/// gossip carries (the run failed after 37 s).
#[test]
fn twenty_nodes_on_one_loopback_address_still_gossip() {
    let run = agentnet(&["testnet", "--nodes", "20", "--json"]);
    let report = succeeded_with_json(&run);
    assert_eq!(report["ok"], true, "{report:#}");
    assert!(
        report["trust"].get("error").is_none(),
        "{:#}",
        report["trust"]
    );
    assert_eq!(report["nodes"].as_array().unwrap().len(), 20);
}

/// What a successful run of three nodes reports, whichever way they ran.
fn assert_three_node_run(report: &Value) {
    assert_eq!(report["ok"], true, "{report:#}");

    let nodes = report["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3, "{report:#}");
    let node_dids: HashSet<&str> = nodes.iter().map(|n| str_of(n, "did")).collect();
    for n in nodes {
        assert!(n["peers"].as_u64().unwrap() >= 1, "an isolated node: {n}");
    }

    // Three agents, each under its own fresh did:key (not a node's), published by nodes other
    // than the last, and not all by the same one.
    let published = report["published"].as_array().unwrap();
    let names: HashSet<&str> = published.iter().map(|p| str_of(p, "name")).collect();
    assert_eq!(
        names,
        HashSet::from(["Translator", "Summarizer", "Weather"]),
        "{report:#}"
    );
    let dids: HashSet<&str> = published.iter().map(|p| str_of(p, "did")).collect();
    assert_eq!(dids.len(), 3, "agent DIDs are not distinct: {report:#}");
    for did in &dids {
        assert!(did.starts_with("did:key:z6Mk"), "{did}");
        assert!(!node_dids.contains(did), "{did} is a node's key");
    }
    let publishers: HashSet<u64> = published
        .iter()
        .map(|p| p["node"].as_u64().unwrap())
        .collect();
    assert!(
        !publishers.contains(&3),
        "the last node published: {report:#}"
    );
    assert!(publishers.len() >= 2, "one node published all: {report:#}");

    // The last node found every one of them, by one of its tags, with the right DID and
    // publisher.
    let discoveries = report["discoveries"].as_array().unwrap();
    for p in published {
        let did = str_of(p, "did");
        let d = discoveries
            .iter()
            .find(|d| d["did"] == did)
            .unwrap_or_else(|| panic!("no discovery of {did}: {report:#}"));
        assert_eq!(d["found"], true, "{d}");
        assert_eq!(d["node"], 3, "{d}");
        assert_eq!(d["name"], p["name"], "{d}");
        assert_eq!(d["published_by"], p["node"], "{d}");
        assert!(
            p["tags"].as_array().unwrap().contains(&d["tag"].clone()),
            "{d} searched a tag {p} does not carry"
        );
        assert!(["gossip", "dht"].contains(&str_of(d, "via")), "{d}");
    }
    assert_eq!(discoveries.len(), 3, "{report:#}");

    // And called the agent node 1 hosts, found by skill, with DID-signed requests (its policy
    // refuses unsigned ones), through the INPUT_REQUIRED round.
    let call = &report["call"];
    assert!(call.get("error").is_none(), "{call:#}");
    assert_eq!(call["tag"], "greeting", "{call:#}");
    assert!(str_of(call, "did").starts_with("did:key:"), "{call:#}");
    assert!(str_of(call, "caller").starts_with("did:key:"), "{call:#}");
    assert_ne!(call["did"], call["caller"], "{call:#}");
    assert!(
        str_of(call, "url").contains("/a2a/greeter"),
        "the call went to node 1's hosted agent: {call:#}"
    );
    assert!(!str_of(call, "question").is_empty(), "{call:#}");
    assert_eq!(call["state"], "TASK_STATE_COMPLETED", "{call:#}");
    let answer = call["answer"].as_array().unwrap();
    assert!(
        answer
            .iter()
            .any(|a| a.as_str().unwrap_or("").contains("Ada")),
        "the answer uses what the caller gave: {call:#}"
    );

    // And called the echo tool of node 1's MCP sample over MCP, the endpoint read from its
    // verified card, every request signed (its policy refuses unsigned ones).
    let mcp = &report["mcp"];
    assert!(mcp.get("error").is_none(), "{mcp:#}");
    assert_eq!(mcp["tag"], "mcp-echo", "{mcp:#}");
    assert!(str_of(mcp, "did").starts_with("did:key:"), "{mcp:#}");
    assert_ne!(
        mcp["did"], call["did"],
        "another agent than the greeter: {mcp:#}"
    );
    assert!(str_of(mcp, "caller").starts_with("did:key:"), "{mcp:#}");
    assert!(
        str_of(mcp, "url").ends_with("/a2a/mcp-echo/mcp"),
        "the endpoint of node 1's hosted agent: {mcp:#}"
    );
    assert_eq!(mcp["versions"][0], "2026-07-28", "{mcp:#}");
    assert_eq!(mcp["tools"], serde_json::json!(["echo"]), "{mcp:#}");
    assert_eq!(mcp["tool"], "echo", "{mcp:#}");
    assert_eq!(mcp["result"]["text"], mcp["sent"], "{mcp:#}");
    assert!(!str_of(mcp, "sent").is_empty(), "{mcp:#}");

    // The same agent's ANP face (its description, linked from the verified card, and a signed
    // JSON-RPC call) and the last node's ARD registry, answering from its P2P index.
    let faces = &report["faces"];
    assert!(faces.get("error").is_none(), "{faces:#}");
    assert_eq!(faces["did"], mcp["did"], "{faces:#}");
    assert!(
        str_of(faces, "ad_url").ends_with("/a2a/mcp-echo/ad.json"),
        "{faces:#}"
    );
    assert!(
        str_of(faces, "rpc_url").ends_with("/a2a/mcp-echo/anp/rpc"),
        "{faces:#}"
    );
    assert_eq!(faces["answer"], faces["sent"], "{faces:#}");
    assert_eq!(
        str_of(faces, "ard_identifier"),
        format!("urn:air:key.did.invalid:{}", str_of(mcp, "did")),
        "{faces:#}"
    );
    let last_http = report["nodes"].as_array().unwrap().last().unwrap()["http"].clone();
    assert_eq!(
        str_of(faces, "ard_search"),
        format!("http://{}/search", last_http.as_str().unwrap()),
        "{faces:#}"
    );

    // Authority across hops (issue 18): the last node acts for the principal through node 2's
    // specialist to node 1's sub-agent; every hop checks the chain; the last node's audit log
    // holds the specialist's receipt, which names the sub-agent's, which node 2 logged; a
    // narrower delegation is refused by the sub-agent, one hop further.
    let d = &report["delegation"];
    assert!(d.get("error").is_none(), "{d:#}");
    assert_eq!(
        d["orchestrator"],
        report["nodes"].as_array().unwrap().last().unwrap()["did"],
        "{d:#}"
    );
    assert_eq!(d["answer"][0], d["sent"], "{d:#}");
    assert_eq!(d["links_at_specialist"], 2, "{d:#}");
    assert!(d["audit_entry"].as_u64().is_some_and(|n| n >= 1), "{d:#}");
    assert_eq!(d["sub_receipts"].as_array().map(Vec::len), Some(1), "{d:#}");
    assert_eq!(d["sub_receipts_logged"], true, "{d:#}");
    assert_eq!(d["refused_state"], "TASK_STATE_FAILED", "{d:#}");
    assert!(
        str_of(d, "refused_reason").contains("PERMISSION_DENIED")
            && str_of(d, "refused_reason").contains("not among the agents granted"),
        "{d:#}"
    );

    // Discovery is not approval (issue 19): node 1's endorsement ranks Breeze first at the
    // last node (which trusts node 1's DID as an endorser), with the reason; Gale's card,
    // changed under its DID, is shown CHANGED with the diff and the flags.
    let t = &report["trust"];
    assert!(t.get("error").is_none(), "{t:#}");
    let (breeze, gale) = (str_of(t, "endorsed"), str_of(t, "other"));
    assert_eq!(t["before"], serde_json::json!([gale, breeze]), "{t:#}");
    assert_eq!(t["after"], serde_json::json!([breeze, gale]), "{t:#}");
    assert_eq!(t["level"], "endorsed", "{t:#}");
    assert_eq!(t["endorser"], report["nodes"][0]["did"], "{t:#}");
    assert!(
        t["reasons"]
            .to_string()
            .contains(&format!("endorsed by {}", str_of(t, "endorser"))),
        "{t:#}"
    );
    assert_eq!(t["pin"], "CHANGED", "{t:#}");
    assert!(
        t["diff"].to_string().contains("gale-mirror.invalid"),
        "{t:#}"
    );
    let flags = t["flags"].to_string();
    assert!(
        flags.contains("instruction") && flags.contains("pick-me"),
        "{t:#}"
    );

    let well_known = &report["well_known"];
    assert!(str_of(well_known, "did_json").ends_with("/.well-known/did.json"));
    assert!(str_of(well_known, "agent_card_json").ends_with("/.well-known/agent-card.json"));
    assert!(str_of(well_known, "agent_descriptions").ends_with("/.well-known/agent-descriptions"));
    assert!(str_of(well_known, "ard_json").ends_with("/.well-known/ard.json"));
}

#[test]
fn testnet_needs_at_least_two_nodes() {
    let run = agentnet(&["testnet", "--nodes", "1"]);
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("--nodes"), "{}", run.stderr);
}

#[test]
fn processes_are_refused_with_nodes_and_out_of_range() {
    let run = agentnet(&["testnet", "--nodes", "3", "--processes", "3"]);
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("--processes"), "{}", run.stderr);
    let run = agentnet(&["testnet", "--processes", "33"]);
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("--processes"), "{}", run.stderr);
}

/// The processes (other than this test's) whose command line mentions `needle`, with it.
fn processes_mentioning(needle: &str) -> Vec<(u32, String)> {
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // Gone since the listing, or a zombie (empty): not running.
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if pid != me && cmdline.contains(needle) {
            found.push((pid, cmdline));
        }
    }
    found
}

/// No process of `pids` is left, nor any other whose command line names `base`.
fn assert_none_left(pids: &[u32], base: &Path) {
    let base = base.to_str().unwrap();
    for pid in pids {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&cmdline).contains(base),
            "node process {pid} outlived the testnet: {}",
            String::from_utf8_lossy(&cmdline).replace('\0', " ")
        );
    }
    let left = processes_mentioning(base);
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

#[test]
fn three_processes_run_the_same_testnet_and_leave_none_behind() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("net");
    let run = agentnet(&[
        "testnet",
        "--processes",
        "3",
        "--json",
        "--data-dir",
        base.to_str().unwrap(),
    ]);
    let report = succeeded_with_json(&run);
    assert_three_node_run(&report);
    assert_eq!(report["mode"], "processes", "{report:#}");

    // Three processes, none of them the testnet's, each with its log (standard error) beside
    // its data directory.
    let nodes = report["nodes"].as_array().unwrap();
    let pids: Vec<u32> = nodes
        .iter()
        .map(|n| u32::try_from(n["pid"].as_u64().unwrap()).unwrap())
        .collect();
    assert_eq!(
        pids.iter().collect::<HashSet<_>>().len(),
        3,
        "not three processes: {pids:?}"
    );
    assert!(
        !pids.contains(&run.pid),
        "a node ran in the testnet: {pids:?}"
    );
    for (i, n) in nodes.iter().enumerate() {
        let log = Path::new(str_of(n, "log"));
        assert_eq!(log, base.join(format!("node-{}.log", i + 1)), "{n}");
        let text = std::fs::read_to_string(log).unwrap();
        assert!(
            text.contains("stopped"),
            "node {} did not stop in order:\n{text}",
            i + 1
        );
        assert_eq!(
            Path::new(str_of(n, "data_dir")),
            base.join(format!("node-{}", i + 1))
        );
        // It stopped: its node.json is gone with it.
        assert!(!base.join(format!("node-{}/node.json", i + 1)).exists());
    }
    // What node 1 hosted came from the configuration file `agentnet up --config` read.
    let config = std::fs::read_to_string(base.join("node-1.toml")).unwrap();
    assert!(
        config.contains("mcp-echo") && config.contains("greeter"),
        "{config}"
    );
    assert_none_left(&pids, &base);
}

/// The network namespaces `ip netns list` names.
fn namespaces() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(out.status.success(), "ip netns list: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// The names of this namespace's network interfaces.
fn links() -> Vec<String> {
    std::fs::read_dir("/sys/class/net")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// As root with iproute2 (this project's CI machines): each node in a network namespace of
/// its own, at an address only that namespace has, and the same run as on loopback succeeds.
/// Each namespace's loopback is its own, so gossip, the DHT, the A2A, MCP and ANP calls and
/// the delegation all crossed the bridge.
/// Afterwards no namespace, no interface and no process of the run is left.
#[test]
fn three_processes_in_network_namespaces_run_the_same_testnet_and_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("net");
    let links_before = links();
    let run = agentnet(&[
        "testnet",
        "--processes",
        "3",
        "--netns",
        "--json",
        "--data-dir",
        base.to_str().unwrap(),
    ]);
    let report = succeeded_with_json(&run);
    assert_three_node_run(&report);
    assert_eq!(report["mode"], "namespaces", "{report:#}");
    let nodes = report["nodes"].as_array().unwrap();
    let mut pids = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let ip = format!("10.77.0.{}", i + 1);
        assert_eq!(
            str_of(n, "netns"),
            format!("agentnet-{}-{i}", run.pid),
            "{n}"
        );
        // Its public listener and its libp2p address are its namespace's; its admin API is on
        // that namespace's loopback, which the testnet reached through its forwarder.
        assert!(str_of(n, "http").starts_with(&format!("{ip}:")), "{n}");
        assert!(str_of(n, "admin").starts_with("127.0.0.1:"), "{n}");
        let listen = n["listen"].as_array().unwrap();
        assert!(!listen.is_empty(), "{n}");
        for a in listen {
            assert!(
                a.as_str().unwrap().starts_with(&format!("/ip4/{ip}/tcp/")),
                "{n}"
            );
        }
        pids.push(u32::try_from(n["pid"].as_u64().unwrap()).unwrap());
    }
    assert!(
        run.stderr.contains("(bridge br0 in agentnet-"),
        "{}",
        run.stderr
    );
    let prefix = format!("agentnet-{}-", run.pid);
    let left: Vec<String> = namespaces()
        .into_iter()
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
    let uplink = format!("an-{}", run.pid);
    assert!(
        !links().contains(&uplink),
        "the uplink {uplink} is left in this namespace"
    );
    assert_eq!(links(), links_before, "interfaces changed");
    assert_none_left(&pids, &base);
}

#[test]
fn network_namespaces_need_processes_and_root() {
    let run = agentnet(&["testnet", "--nodes", "3", "--netns"]);
    assert!(!run.status.success());
    assert!(run.stderr.contains("--processes"), "{}", run.stderr);
    // Not root: in a user namespace of its own, root there maps to nobody here.
    let out = Command::new("unshare")
        .args(["--user", "--"])
        .arg(env!("CARGO_BIN_EXE_agentnet"))
        .args(["testnet", "--processes", "2", "--netns"])
        .env_remove("AGENTNET_DATA_DIR")
        .output()
        .expect("unshare (util-linux) runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--netns makes network namespaces, which needs root")
            && stderr.contains("run without it"),
        "{stderr}"
    );
}

/// `started node 1/3 in 412 ms: … (pid 1234, log …)`: the pids the progress lines name.
fn started_pids(stderr: &str) -> Vec<u32> {
    stderr
        .lines()
        .filter(|l| l.starts_with("started node "))
        .filter_map(|l| l.split("(pid ").nth(1)?.split(',').next()?.parse().ok())
        .collect()
}

#[test]
fn a_node_process_that_cannot_start_fails_the_run_and_leaves_none_behind() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("net");
    std::fs::create_dir(&base).unwrap();
    // Node 2's data directory is a file: its `agentnet up` refuses it and exits.
    std::fs::write(base.join("node-2"), "not a directory").unwrap();
    let run = agentnet(&[
        "testnet",
        "--processes",
        "3",
        "--data-dir",
        base.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    let error = run
        .stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line:\n{}", run.stderr));
    // The node, how it ended, its own words (the tail of its log) and where the log is.
    assert!(error.contains("node 2 (pid "), "{error}");
    assert!(
        error.contains("exited with status 1 before it was up"),
        "{error}"
    );
    assert!(error.contains("is not a directory"), "{error}");
    let log = base.join("node-2.log");
    assert!(error.contains(log.to_str().unwrap()), "{error}");
    assert!(std::fs::read_to_string(&log)
        .unwrap()
        .contains("is not a directory"));
    // Node 1 had started; it was stopped, and node 3 never was (progress without --json is
    // on standard output).
    let pids = started_pids(&run.stdout);
    assert_eq!(pids.len(), 1, "{}", run.stdout);
    assert!(
        run.stdout.contains("stopped 1 node process in"),
        "{}",
        run.stdout
    );
    assert!(!base.join("node-3").exists());
    assert_none_left(&pids, &base);
}

#[test]
fn a_kept_process_testnet_stops_its_nodes_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("net");
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentnet"))
        .args([
            "testnet",
            "--processes",
            "2",
            "--json",
            "--keep",
            "--data-dir",
        ])
        .arg(&base)
        .env_remove("AGENTNET_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    // The report comes while the nodes keep running.
    let deadline = Instant::now() + TIMEOUT;
    let report: Value = loop {
        let text = std::fs::read_to_string(&out).unwrap();
        if let Ok(v) = serde_json::from_str(&text) {
            break v;
        }
        if Instant::now() >= deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!(
                "no report; stderr:\n{}",
                std::fs::read_to_string(&err).unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(report["ok"], true, "{report:#}");
    let pids: Vec<u32> = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| u32::try_from(n["pid"].as_u64().unwrap()).unwrap())
        .collect();
    for pid in &pids {
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "node process {pid} is not running with --keep"
        );
    }
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("still running 30 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(status.success(), "exit {:?}: {stderr}", status.code());
    assert!(stderr.contains("stopped 2 node processes"), "{stderr}");
    assert_none_left(&pids, &base);
}
