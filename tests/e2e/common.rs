//! Helpers shared by the tests that run the `agentnet` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_agentnet");

/// The flags of an `agentnet up` on loopback only: libp2p and HTTP on free ports, no mDNS.
pub const LOOPBACK: [&str; 5] = [
    "--listen",
    "/ip4/127.0.0.1/tcp/0",
    "--http",
    "127.0.0.1:0",
    "--no-mdns",
];

/// Run `agentnet args` to completion, without the caller's `AGENTNET_DATA_DIR` and with no stdin.
pub fn agentnet(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("AGENTNET_DATA_DIR")
        .stdin(Stdio::null())
        .output()
        .expect("the agentnet binary runs")
}

/// Its standard output, as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Its standard error, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A temporary path as `&str`.
pub fn p(path: &Path) -> &str {
    path.to_str().expect("temp paths are UTF-8")
}

/// Run `agentnet args` and parse its standard output as JSON; panics with stderr on failure.
pub fn json_of(args: &[&str]) -> Value {
    let o = agentnet(args);
    assert!(o.status.success(), "agentnet {args:?}: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stdout(&o)))
}

/// `agentnet config check` of `config` once `bad` is written there: refused (exit 1) with one
/// line on standard error, which names `says`, and nothing on standard output.
pub fn assert_config_refused(config: &Path, bad: &str, says: &str) {
    std::fs::write(config, bad).unwrap();
    let o = agentnet(&["config", "check", "--config", p(config)]);
    assert_eq!(o.status.code(), Some(1), "{bad}: {}", stdout(&o));
    let err = stderr(&o);
    assert_eq!(err.trim().lines().count(), 1, "{bad}: {err}");
    assert!(err.contains(says), "{bad}: {err}");
    assert!(stdout(&o).is_empty(), "{bad}");
}

/// The adverts that `agentnet discover --skill <skill> <more> --json` lists from `data`'s node.
pub fn discover_json(data: &Path, skill: &str, more: &[&str]) -> Vec<Value> {
    let mut args = vec!["discover", "--skill", skill];
    args.extend_from_slice(more);
    args.extend(["--json", "--data-dir", p(data)]);
    json_of(&args).as_array().unwrap().clone()
}

/// `agentnet call --skill <skill> <text> --json` from `data`'s node, allowed to call private
/// addresses (the agents are on loopback) and given 30 s.
pub fn call_skill(data: &Path, skill: &str, text: &str) -> Output {
    agentnet(&[
        "call",
        "--skill",
        skill,
        text,
        "--allow-private",
        "--json",
        "--timeout-secs",
        "30",
        "--data-dir",
        p(data),
    ])
}

/// `jws` (compact) with the character at `at` of its base64url payload changed (to `A`, or to
/// `B` where it was `A`): the signature no longer matches.
pub fn forge_payload(jws: &str, at: usize) -> String {
    let parts: Vec<&str> = jws.split('.').collect();
    let mut payload = parts[1].to_string().into_bytes();
    payload[at] = if payload[at] == b'A' { b'B' } else { b'A' };
    format!(
        "{}.{}.{}",
        parts[0],
        String::from_utf8(payload).unwrap(),
        parts[2]
    )
}

/// Start a configured `agentnet up … --json` command and read the JSON banner it prints once
/// `node.json` is written; the rest of its standard output is drained. The node is killed when
/// the child is dropped.
pub async fn start_up(mut cmd: tokio::process::Command) -> (tokio::process::Child, Value) {
    use tokio::io::AsyncBufReadExt;
    let mut child = cmd
        .env_remove("AGENTNET_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("agentnet up runs");
    let mut out = tokio::io::BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let line = out
        .next_line()
        .await
        .expect("reading agentnet up's output")
        .expect("agentnet up prints its banner");
    let info: Value = serde_json::from_str(&line).expect("the banner is JSON");
    tokio::spawn(async move { while let Ok(Some(_)) = out.next_line().await {} });
    (child, info)
}

/// A running `agentnet up` whose log is `<dir>/up.err`; killed (SIGKILL) when dropped, its log
/// printed if the test is failing. Each test crate adds the accessors it needs.
pub struct UpNode {
    /// The process.
    pub child: std::process::Child,
    /// Its data directory.
    pub dir: PathBuf,
    /// Its `node.json`.
    pub info: Value,
}

impl UpNode {
    /// `agentnet up` on `dir` alone: loopback listeners on ports the system picks, no mDNS.
    pub fn alone(dir: &Path) -> UpNode {
        UpNode::on_loopback(dir, &[])
    }

    /// [`UpNode::alone`] with more flags for `agentnet up`.
    pub fn on_loopback(dir: &Path, extra: &[&str]) -> UpNode {
        let mut args = LOOPBACK.to_vec();
        args.extend_from_slice(extra);
        UpNode::spawn(dir, &args)
    }

    /// [`UpNode::alone`], bootstrapping from each address of `bootstrap`.
    pub fn joining(dir: &Path, bootstrap: &[&str]) -> UpNode {
        let mut args = Vec::new();
        for b in bootstrap {
            args.extend(["--bootstrap", *b]);
        }
        UpNode::on_loopback(dir, &args)
    }

    /// `agentnet up --config <dir>/node.toml --http 127.0.0.1:0` with `config` in that file
    /// (the flag overrides the file; where libp2p listens is the file's `[node]` section).
    pub fn with_config(dir: &Path, config: &str) -> UpNode {
        UpNode::with_config_args(dir, config, &["--http", "127.0.0.1:0"])
    }

    /// `agentnet up --config <dir>/node.toml <args>`, with `config` written to that file first.
    pub fn with_config_args(dir: &Path, config: &str, args: &[&str]) -> UpNode {
        let path = write_config(dir, config);
        let mut all = vec!["--config", p(&path)];
        all.extend_from_slice(args);
        UpNode::spawn(dir, &all)
    }

    /// `agentnet up --data-dir <dir> <args>` (logging at `info`), once it has written the
    /// `node.json` of this process (at most 60 s); panics with its log if it exits first.
    pub fn spawn(dir: &Path, args: &[&str]) -> UpNode {
        std::fs::create_dir_all(dir).unwrap();
        let child = Command::new(BIN)
            .args(["up", "--data-dir", p(dir)])
            .args(args)
            .env_remove("AGENTNET_DATA_DIR")
            .env("AGENTNET_LOG", "info")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("up.out")).unwrap())
            .stderr(std::fs::File::create(dir.join("up.err")).unwrap())
            .spawn()
            .expect("agentnet up starts");
        let mut node = UpNode {
            child,
            dir: dir.to_owned(),
            info: Value::Null,
        };
        let pid = node.child.id();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = node.child.try_wait() {
                panic!("agentnet up exited with {status}: {}", node.log());
            }
            if let Some(v) = std::fs::read(dir.join("node.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .filter(|v| v["pid"] == serde_json::json!(pid))
            {
                node.info = v;
                return node;
            }
            assert!(Instant::now() < deadline, "no node.json: {}", node.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("up.err")).unwrap_or_default()
    }

    /// Its public HTTP listener as a base URL: `http://<addr>`.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.info["http"].as_str().unwrap())
    }
}

/// `config` written to `<dir>/node.toml` (`dir` made first); the file's path.
pub fn write_config(dir: &Path, config: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("node.toml");
    std::fs::write(&path, config).unwrap();
    path
}

/// `agentnet up --data-dir <dir>/data … --json` on loopback as [`start_up`] takes it, with
/// `--config <dir>/node.toml` holding `config` when there is one.
pub fn up_command(dir: &Path, config: Option<&str>) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(["up", "--data-dir"]).arg(dir.join("data"));
    if let Some(c) = config {
        cmd.arg("--config").arg(write_config(dir, c));
    }
    cmd.args(LOOPBACK).arg("--json");
    cmd
}

/// `f` until it gives a value, polled every `every`; panics after `within`.
pub fn eventually<T>(
    what: &str,
    within: Duration,
    every: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(every);
    }
}

impl Drop for UpNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- log of the node in {} ---\n{}",
                self.dir.display(),
                self.log()
            );
        }
    }
}

/// The interop venv's python (`interop/setup.sh`): `$AGENTNET_VENV/bin/python`, by default
/// under `~/.cache/agentnet/venv`. It may not exist.
pub fn venv_python() -> PathBuf {
    let venv = std::env::var_os("AGENTNET_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").expect("HOME is not set");
            PathBuf::from(home).join(".cache/agentnet/venv")
        });
    venv.join("bin/python")
}

/// [`venv_python`], if it exists and imports `module`.
pub fn venv_python_with(module: &str) -> Option<PathBuf> {
    let py = venv_python();
    let ok = Command::new(&py)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(py)
}

/// A TCP port free on 127.0.0.1 now (for a process that must be restarted on the same port).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `interop/node`, when Node.js and its packages (`interop/setup.sh`; `package` is the one the
/// test needs) are there; `None` (the test skips) otherwise, except under `scripts/test.sh`,
/// which installs them and sets `AGENTNET_INTEROP_REQUIRED`: a skip there is a failure.
pub fn interop_node_dir(package: &str) -> Option<PathBuf> {
    let js_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("interop/node");
    let node_ok = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if node_ok && js_dir.join("node_modules").join(package).exists() {
        return Some(js_dir);
    }
    assert!(
        std::env::var_os("AGENTNET_INTEROP_REQUIRED").is_none(),
        "interop tools missing although scripts/test.sh installed them"
    );
    eprintln!("SKIPPED: node or interop/node/node_modules missing (run interop/setup.sh)");
    None
}

/// A current-thread tokio runtime, for the requests of a plain `#[test]`.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A client for the nodes on loopback: no proxy, each request given up after 30 s.
pub fn loopback_client() -> reqwest::Client {
    agentnet_did::http::client_builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// A client (no proxy) whose connections leave from the loopback address `from`: any
/// 127.0.0.0/8 address binds on Linux, and each is a source of its own to the node.
pub fn client_from(from: &str) -> reqwest::Client {
    agentnet_did::http::client_builder()
        .no_proxy()
        .local_address(from.parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap()
}

/// `GET url` with `client`: the answer's body as JSON.
pub async fn get_json(client: &reqwest::Client, url: impl reqwest::IntoUrl) -> Value {
    client.get(url).send().await.unwrap().json().await.unwrap()
}

/// POST `body` unsigned to the A2A endpoint `url` (`application/a2a+json`, A2A version 1.0)
/// from the loopback address `from`, on a runtime of its own: the HTTP status and the JSON
/// answer (null when it is not JSON).
pub fn post_a2a_from(from: &str, url: &str, body: String) -> (u16, Value) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let r = client_from(from)
            .post(url)
            .header("content-type", "application/a2a+json")
            .header("A2A-Version", "1.0")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    })
}
