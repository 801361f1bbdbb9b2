//! Endorsements (issue 19, part 3) against the real binary over real libp2p: an endorsement
//! one node's operator makes is gossiped, and a node that trusts that node's DID as an endorser
//! ranks the agent `endorsed`, first, and says why; its revocation undoes it. An attacker peer
//! (a libp2p node in this process) sends a ring of 50 fresh DIDs endorsing each other and the
//! other agent, forgeries, junk, and a flood past the per-peer rate: the agent stays
//! self-asserted, the forgeries are rejected, the flood is throttled, the node serves on.

use std::path::Path;
use std::time::{Duration, Instant};

use agentnet_did::endorsement::{self, Endorsement};
use agentnet_did::SecretKey;
use agentnet_discovery::net;
use serde_json::{json, Value};

use crate::common;
use common::*;

const WAIT: Duration = Duration::from_secs(60);
const SKILL: &str = "weather-endorse";

/// A node on loopback with more flags `extra`.
fn start(dir: &Path, extra: &[&str]) -> UpNode {
    UpNode::on_loopback(dir, extra)
}

fn addr(n: &UpNode) -> String {
    n.info["listen"][0].as_str().unwrap().to_owned()
}

fn card(name: &str) -> Value {
    json!({
        "name": name,
        "description": "Tells the weather.",
        "version": "1.0.0",
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "capabilities": {},
        "supportedInterfaces": [{"url": format!("https://{}.example/a2a", name.to_lowercase()), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "skills": [{"id": "w", "name": "Weather", "description": "Forecasts.", "tags": [SKILL]}]
    })
}

/// A new did:key agent published through the node on `data`: its DID.
fn publish_agent(tmp: &Path, data: &Path, name: &str) -> String {
    let keys = tmp.join(name);
    let v = json_of(&["init", "--data-dir", p(&keys), "--json"]);
    let path = tmp.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_vec(&card(name)).unwrap()).unwrap();
    let o = agentnet(&[
        "publish",
        "--card",
        p(&path),
        "--key",
        p(&keys.join("node.key")),
        "--data-dir",
        p(data),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    v["did"].as_str().unwrap().to_owned()
}

/// The adverts `discover --skill` [`SKILL`] lists from `data`'s node.
fn discover(data: &Path) -> Vec<Value> {
    discover_json(data, SKILL, &[])
}

fn dids(found: &[Value]) -> Vec<String> {
    found
        .iter()
        .map(|a| a["did"].as_str().unwrap().to_owned())
        .collect()
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn peers(data: &Path) -> Value {
    json_of(&["peers", "--json", "--data-dir", p(data)])
}

/// An attacker's libp2p node in this process, connected to `to`.
async fn attacker(dir: &Path, to: &str) -> net::Client {
    let store = agentnet_discovery::store::Store::open(&dir.join("store")).unwrap();
    let validator = agentnet_discovery::advert::Validator::new(
        agentnet_did::Resolver::new(Default::default()).unwrap(),
        Default::default(),
    );
    let cfg = net::Config {
        listen: vec!["/ip4/127.0.0.1/tcp/0".parse().unwrap()],
        mdns: false,
        heartbeat: Duration::from_millis(200),
        ..Default::default()
    };
    let key = SecretKey::from_seed(&[0x66; 32]);
    // Never cancelled: the attacker runs until the test ends.
    let stop = net::CancellationToken::new();
    let (client, _task) = net::spawn(&key, cfg, store, validator, stop).await.unwrap();
    client.dial(to.parse().unwrap()).await.unwrap();
    client
}

fn fresh(i: u32) -> SecretKey {
    let mut s = [0x42; 32];
    s[..4].copy_from_slice(&i.to_be_bytes());
    SecretKey::from_seed(&s)
}

#[test]
fn an_endorsement_from_a_trusted_node_ranks_its_agent_first_and_strangers_count_for_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (a_dir, b_dir) = (tmp.path().join("a"), tmp.path().join("b"));
    let a = start(&a_dir, &[]);
    let a_did = a.info["did"].as_str().unwrap().to_owned();
    let cfg = tmp.path().join("b.toml");
    std::fs::write(&cfg, format!("[trust]\nendorsers = [{a_did:?}]\n")).unwrap();
    let b = start(&b_dir, &["--config", p(&cfg), "--bootstrap", &addr(&a)]);
    // Published in this order, a second apart: `other` is known the longer, shown first.
    let other = publish_agent(tmp.path(), &b_dir, "Other");
    std::thread::sleep(Duration::from_millis(1100));
    let agent = publish_agent(tmp.path(), &b_dir, "Agent");
    let found = discover(&b_dir);
    assert_eq!(dids(&found), [other.clone(), agent.clone()], "{found:?}");
    assert!(
        found.iter().all(|f| f["level"] == "self-asserted"),
        "{found:?}"
    );
    // Both nodes in one gossip mesh: A has B's adverts.
    wait_for("A to hear of B's agents", || {
        (discover(&a_dir).len() == 2).then_some(())
    });

    // The attacker: a ring of 50 fresh did:keys, each endorsing the next and `other`; then
    // forgeries and junk; then a flood past the per-peer rate.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let bad = rt.block_on(async {
        let c = attacker(&tmp.path().join("attacker"), &addr(&b)).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = net::unix_now();
        let mut sent = 0;
        for i in 0..50u32 {
            let k = fresh(i);
            let next = fresh((i + 1) % 50).did_key().to_string();
            for sub in [next.as_str(), other.as_str()] {
                let e = Endorsement::new(
                    k.did_key().as_str(),
                    sub,
                    vec![SKILL.into()],
                    now,
                    now + 600,
                );
                c.publish_endorsement(endorsement::sign(&e, &k).into_bytes())
                    .await
                    .unwrap();
                sent += 1;
            }
            // Within the per-peer rate (100 messages in 10 s).
            if sent % 40 == 0 {
                tokio::time::sleep(Duration::from_secs(11)).await;
            }
        }
        tokio::time::sleep(Duration::from_secs(11)).await;
        // The flood: 300 more at once.
        for i in 0..300u32 {
            let k = fresh(1000 + i);
            let e = Endorsement::new(k.did_key().as_str(), &other, vec![], now, now + 600);
            c.publish_endorsement(endorsement::sign(&e, &k).into_bytes())
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_secs(11)).await;
        // A forgery (A's DID as the issuer, signed by another key), junk, and bytes that are
        // not text.
        let e = Endorsement::new(&a_did, &other, vec![], now, now + 600);
        let forged = endorsement::sign(&e, &fresh(99));
        c.publish_endorsement(forged.into_bytes()).await.unwrap();
        c.publish_endorsement(b"not an endorsement".to_vec())
            .await
            .unwrap();
        c.publish_endorsement(vec![0xff; 3000]).await.unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        c
    });
    let stats = wait_for("B to count the attacker's endorsements", || {
        let s = peers(&b_dir)["stats"].clone();
        let e = &s["endorsements"];
        (e[0].as_u64().unwrap() >= 100 && e[2].as_u64().unwrap() >= 3).then_some(s)
    });
    // The flood used the attacker's budget: it was muted, and the rest dropped unread.
    assert!(
        stats["muted"].as_u64().unwrap() > 0,
        "the flood was not throttled: {stats}"
    );
    let found = discover(&b_dir);
    assert_eq!(dids(&found), [other.clone(), agent.clone()], "{found:?}");
    assert!(
        found.iter().all(|f| f["level"] == "self-asserted"),
        "strangers raised a level: {found:?}"
    );
    let none = json_of(&["endorsements", &other, "--json", "--data-dir", p(&b_dir)]);
    assert_eq!(none, json!([]), "{none}");
    let o = agentnet(&["peers", "--data-dir", p(&b_dir)]);
    assert!(stdout(&o).contains("endorsements: "), "{}", stdout(&o));

    // A's operator endorses `agent`: gossiped, counted on B, ranked first with the reason.
    let o = agentnet(&[
        "endorse",
        &agent,
        "--skill",
        SKILL,
        "--for",
        "2h",
        "--data-dir",
        p(&a_dir),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("endorsed ") || stdout(&o).contains("endorsed "),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    let found = wait_for("B to rank the endorsed agent first", || {
        let f = discover(&b_dir);
        (f.first().map(|x| x["did"] == agent.as_str()) == Some(true)).then_some(f)
    });
    assert_eq!(found[0]["level"], "endorsed", "{found:?}");
    let why = found[0]["reasons"].to_string();
    assert!(
        why.contains(&format!("endorsed by {a_did}")) && why.contains(SKILL),
        "{why}"
    );
    assert_eq!(found[1]["level"], "self-asserted");
    let listed = json_of(&["endorsements", &agent, "--json", "--data-dir", p(&b_dir)]);
    assert_eq!(listed[0]["iss"], a_did.as_str(), "{listed}");
    assert_eq!(listed[0]["counts"], true, "{listed}");
    // The human table.
    let o = agentnet(&["discover", "--skill", SKILL, "--data-dir", p(&b_dir)]);
    assert!(stdout(&o).contains("endorsed"), "{}", stdout(&o));
    // The same endorsement does not count on a node that does not trust A (A itself trusts
    // only its own DID, and that is the issuer: there it counts).
    let on_a = discover(&a_dir);
    assert_eq!(on_a[0]["did"], agent.as_str(), "{on_a:?}");

    // Revoked: back to self-asserted, the longer known first again.
    let o = agentnet(&["endorse", &agent, "--revoke", "--data-dir", p(&a_dir)]);
    assert!(o.status.success(), "{}", stderr(&o));
    wait_for("B to see the revocation", || {
        let f = discover(&b_dir);
        (f.iter().all(|x| x["level"] == "self-asserted")
            && dids(&f) == [other.clone(), agent.clone()])
        .then_some(())
    });
    // An endorsement for another skill does not count for this one.
    let o = agentnet(&[
        "endorse",
        &other,
        "--skill",
        "books",
        "--data-dir",
        p(&a_dir),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    wait_for("B to hear of the endorsement for books", || {
        let l = json_of(&["endorsements", &other, "--json", "--data-dir", p(&b_dir)]);
        (l[0]["skills"] == json!(["books"])).then_some(())
    });
    let f = discover(&b_dir);
    assert!(f.iter().all(|x| x["level"] == "self-asserted"), "{f:?}");
    drop(bad);
    drop(rt);
}

#[test]
fn endorse_refuses_what_it_cannot_sign_and_config_check_names_bad_endorsers() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("n");
    let _n = start(&data, &[]);
    for (args, says) in [
        (vec!["endorse", "not-a-did"], "did"),
        (
            vec![
                "endorse",
                "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
                "--for",
                "400d",
            ],
            "366 days",
        ),
        (
            vec![
                "endorse",
                "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
                "--skill",
                "bad\u{200b}tag",
            ],
            "tag",
        ),
    ] {
        let mut a = args.clone();
        a.extend(["--data-dir", p(&data)]);
        let o = agentnet(&a);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
    let cfg = tmp.path().join("bad.toml");
    std::fs::write(&cfg, "[trust]\nendorsers = [\"did:web:acme.example\"]\n").unwrap();
    let o = agentnet(&["config", "check", "--config", p(&cfg)]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not a did:key"), "{}", stderr(&o));
    std::fs::write(&cfg, "[trust]\nendorse_depth = 9\n").unwrap();
    let o = agentnet(&["config", "check", "--config", p(&cfg)]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("endorse_depth"), "{}", stderr(&o));
}

/// `interop/node/endorsement.mjs` (`jose`, `canonicalize`, @digitalbazaar/ed25519-multikey):
/// it verifies an endorsement we signed and refuses it with one payload byte changed; it issues
/// one from a seed, and our verifier (the check every node runs on gossip) accepts it, naming
/// the same did:key for that seed as we derive.
#[test]
fn an_independent_jose_implementation_verifies_and_issues_endorsements() {
    let Some(js_dir) = interop_node_dir("canonicalize") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let js = |args: &[&str]| {
        let o = std::process::Command::new("node")
            .arg(js_dir.join("endorsement.mjs"))
            .args(args)
            .current_dir(&js_dir)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
        (o.status.success(), v)
    };
    let now = net::unix_now();
    let issuer = SecretKey::from_seed(&[0x21; 32]);
    let sub = SecretKey::from_seed(&[0x22; 32]).did_key().to_string();
    let e = Endorsement::new(
        issuer.did_key().as_str(),
        &sub,
        vec![SKILL.into()],
        now,
        now + 600,
    );
    let jws = endorsement::sign(&e, &issuer);
    let f = tmp.path().join("e.jws");
    std::fs::write(&f, &jws).unwrap();
    let (ok, v) = js(&["verify", p(&f)]);
    assert!(ok, "{v}");
    assert_eq!(v["payload"]["sub"], sub.as_str(), "{v}");
    assert_eq!(v["payload"]["skills"], json!([SKILL]), "{v}");
    let forged = forge_payload(&jws, 12);
    std::fs::write(&f, &forged).unwrap();
    let (ok, v) = js(&["verify", p(&f)]);
    assert!(!ok, "a changed payload verified: {v}");

    let seed = [0x23u8; 32];
    let hex: String = seed.iter().map(|b| format!("{b:02x}")).collect();
    let (ok, v) = js(&[
        "issue",
        &hex,
        &sub,
        SKILL,
        &now.to_string(),
        &(now + 600).to_string(),
    ]);
    assert!(ok, "{v}");
    let theirs = endorsement::verify(v["jws"].as_str().unwrap(), now).unwrap();
    let expected = SecretKey::from_seed(&seed).did_key().to_string();
    assert_eq!(theirs.iss, expected);
    assert_eq!(v["iss"], expected.as_str());
    assert_eq!(
        (theirs.sub.as_str(), theirs.skills.as_slice()),
        (sub.as_str(), [SKILL.to_string()].as_slice())
    );
    assert!(theirs.covers(Some(SKILL)) && !theirs.covers(Some("books")));
}

/// `agentnet mcp` over stdio, as an MCP host runs it: `discover_agents` for `tags`, `limit`;
/// the DIDs in the order it answered.
fn mcp_discover(data: &Path, tags: &[&str], limit: usize) -> Vec<String> {
    use std::io::{BufRead, Write};
    let mut child = std::process::Command::new(BIN)
        .args(["mcp", "--data-dir", p(data)])
        .env_remove("AGENTNET_DATA_DIR")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "sybil-test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "discover_agents", "arguments": {"tags": tags, "limit": limit}}}),
    ];
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
    }
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut answer = Value::Null;
    for line in out.lines() {
        let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if v["id"] == 2 {
            answer = v;
            break;
        }
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    let agents = answer["result"]["structuredContent"]["agents"]
        .as_array()
        .unwrap_or_else(|| panic!("no agents in {answer}"));
    agents
        .iter()
        .map(|a| a["did"].as_str().unwrap().to_owned())
        .collect()
}

/// [`discover`] with `--limit <limit>`.
fn discover_limit(data: &Path, limit: usize) -> Vec<Value> {
    discover_json(data, SKILL, &["--limit", &limit.to_string()])
}

/// Issue 43, 1: an attacker's node publishes forty agents under forty fresh did:keys, all
/// fresher than an honest agent the victim knew before. The victim's `discover --limit 10` and
/// MCP `discover_agents` still answer the honest agent first (known longer), and first with
/// its level once the operator endorses it; with `min_level = "endorsed"` the answer is that
/// agent, not empty. Before the fix the freshest ten were taken and then ranked: the forty
/// filled every answer below `limit = 45`.
#[test]
fn forty_fresh_dids_push_no_known_or_endorsed_agent_out_of_discover() {
    let tmp = tempfile::tempdir().unwrap();
    let (v_dir, a_dir) = (tmp.path().join("victim"), tmp.path().join("attacker"));
    let v = start(&v_dir, &[]);
    let a = start(&a_dir, &["--bootstrap", &addr(&v)]);
    let honest = publish_agent(tmp.path(), &v_dir, "Honest");
    // A second later, so that every Sybil is newer to the victim by its own clock.
    std::thread::sleep(Duration::from_millis(1100));
    let mut sybils = Vec::new();
    for i in 0..40 {
        sybils.push(publish_agent(tmp.path(), &a_dir, &format!("Sybil{i}")));
    }
    wait_for("the victim to hold all 41 agents", || {
        (discover_limit(&v_dir, 50).len() == 41).then_some(())
    });
    let top = discover_limit(&v_dir, 10);
    assert_eq!(top.len(), 10);
    assert_eq!(top[0]["did"], honest.as_str(), "{:?}", dids(&top));
    assert_eq!(mcp_discover(&v_dir, &[SKILL], 10)[0], honest);

    // The operator endorses it: first, `endorsed`.
    let o = agentnet(&["endorse", &honest, "--data-dir", p(&v_dir)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let top = discover_limit(&v_dir, 10);
    assert_eq!(top[0]["did"], honest.as_str(), "{:?}", dids(&top));
    assert_eq!(top[0]["level"], "endorsed", "{}", top[0]);
    assert!(top[1..]
        .iter()
        .all(|f| sybils.iter().any(|s| f["did"] == s.as_str())));
    assert_eq!(mcp_discover(&v_dir, &[SKILL], 10)[0], honest);

    // A policy that takes only endorsed agents answers with it, not with nothing.
    drop(v);
    let cfg = tmp.path().join("strict.toml");
    std::fs::write(&cfg, "[trust]\nmin_level = \"endorsed\"\n").unwrap();
    let _v = start(&v_dir, &["--config", p(&cfg)]);
    let top = discover_limit(&v_dir, 10);
    assert_eq!(dids(&top), [honest.clone()], "{top:?}");
    assert_eq!(mcp_discover(&v_dir, &[SKILL], 10), [honest]);
    drop(a);
}
