//! The members of a testnet: a node in this process ([`daemon::Running`]) or a child process
//! running `agentnet up` (`agentnet testnet --processes`), behind one interface, so that the
//! samples run unchanged against either.
//!
//! A child never outlives the testnet. Four guards, from the usual path to the last resort:
//! 1. [`Member::shutdown`]: SIGTERM, [`STOP_GRACE`] for the node's ordered teardown, then
//!    SIGKILL; the child is reaped before it returns.
//! 2. Dropping a [`Member`] (an error path, a panic): its keeper task is aborted, which drops
//!    the [`tokio::process::Child`], made with `kill_on_drop`: SIGKILL.
//! 3. The runtime's end: every keeper task is dropped with it, the same way.
//! 4. The testnet killed outright (SIGKILL, the OOM killer): each child asked the kernel for a
//!    SIGTERM when its parent dies (`PR_SET_PDEATHSIG`).
//!
//! Each child is in a process group of its own: Ctrl-C at the terminal reaches the testnet
//! only, which then stops the nodes in order and says so, rather than every node at once.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{bail, Context as _};
use tokio::io::AsyncBufReadExt as _;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cli::netns::Forward;
use crate::daemon::{NodeFile, Running};

/// How long a child gets to print its banner (its key, store and listeners ready).
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a child gets to stop after SIGTERM before SIGKILL: the daemon's own teardown
/// bounds are 5 s for the HTTP drain and 5 s for the network task.
const STOP_GRACE: Duration = Duration::from_secs(15);
/// Lines of a child's log quoted in an error.
const TAIL_LINES: usize = 4;
/// Bytes read from the end of a child's log for them.
const TAIL_BYTES: u64 = 4096;
/// Most characters of them quoted (the end): a long line must not swamp the error.
const TAIL_CHARS: usize = 600;

/// One node of the testnet.
pub(super) enum Member {
    /// Started with [`crate::daemon::start`] in this process (boxed: it is large).
    InProcess(Box<Running>),
    /// A child process running `agentnet up` (boxed as well: both are large).
    Process(Box<Child>),
}

impl Member {
    /// What its `node.json` says: addresses, DID, PeerId, process id.
    pub(super) fn info(&self) -> &NodeFile {
        match self {
            Member::InProcess(r) => &r.info,
            Member::Process(c) => &c.info,
        }
    }

    /// Where the testnet reaches its admin API: `info().admin`, or, for a node in a network
    /// namespace, the forwarder into it.
    pub(super) fn admin(&self) -> SocketAddr {
        match self {
            Member::InProcess(r) => r.info.admin,
            Member::Process(c) => c.ns.as_ref().map_or(c.info.admin, |ns| ns.admin.addr),
        }
    }

    /// The network namespace it runs in, when not this one's.
    pub(super) fn netns(&self) -> Option<&str> {
        match self {
            Member::InProcess(_) => None,
            Member::Process(c) => c.ns.as_ref().map(|ns| ns.name.as_str()),
        }
    }

    /// The child's log (its standard error), for a child.
    pub(super) fn log(&self) -> Option<&Path> {
        match self {
            Member::InProcess(_) => None,
            Member::Process(c) => Some(&c.watch.log),
        }
    }

    /// Stop it and wait until it has: the daemon's teardown, or the child's (reaped).
    pub(super) async fn shutdown(self) {
        match self {
            Member::InProcess(r) => (*r).shutdown().await,
            Member::Process(c) => (*c).shutdown().await,
        }
    }
}

/// How a child ended, for an error.
#[derive(Debug, Clone)]
struct Exit(String);

/// A child process running `agentnet up`, owned by a keeper task.
pub(super) struct Child {
    /// Its banner: the contents of its `node.json`.
    info: NodeFile,
    /// Tells the keeper to stop the child.
    stop: CancellationToken,
    /// Which it is, where its log is, whether it has exited.
    watch: ExitWatch,
    /// Owns the [`tokio::process::Child`]; aborted (the child killed) if we are dropped.
    keeper: Option<JoinHandle<()>>,
    /// Its network namespace and the testnet's ways into it, with `--netns`.
    ns: Option<Inside>,
}

/// A child in a network namespace of its own: its name, and a forwarder from the testnet's
/// loopback to the child's admin API, on the namespace's loopback. (Its public listener the
/// testnet reaches directly, through the run's uplink.)
struct Inside {
    name: String,
    admin: Forward,
}

/// Which child, and whether it has exited (set by its keeper once it is reaped).
#[derive(Clone)]
struct ExitWatch {
    /// 1-based.
    node: usize,
    pid: u32,
    /// Its standard error.
    log: PathBuf,
    exited: watch::Receiver<Option<Exit>>,
}

impl ExitWatch {
    /// Resolves when the child has exited, with what to say about it.
    async fn exited(mut self) -> anyhow::Error {
        let how = match self.exited.wait_for(Option::is_some).await {
            Ok(v) => v.clone().map(|e| e.0).unwrap_or_default(),
            Err(_) => "is gone".into(),
        };
        anyhow::anyhow!(
            "node {} (pid {}) {how}: {}; its log: {}",
            self.node,
            self.pid,
            tail(&self.log),
            self.log.display()
        )
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // Without a `shutdown`: the keeper's future is dropped, and with it the child
        // (`kill_on_drop`: SIGKILL).
        if let Some(k) = &self.keeper {
            k.abort();
        }
    }
}

/// How to start one child.
pub(super) struct Spawn<'a> {
    /// 1-based.
    pub(super) node: usize,
    /// `agentnet` itself.
    pub(super) exe: &'a Path,
    /// Its `--data-dir`.
    pub(super) data_dir: &'a Path,
    /// Its `--config`.
    pub(super) config: &'a Path,
    /// Where its standard error goes.
    pub(super) log: &'a Path,
    /// Its `--bootstrap` addresses.
    pub(super) bootstrap: &'a [String],
    /// The address its libp2p and public HTTP listeners bind (127.0.0.1, or its address in
    /// its namespace); the admin API is always on the loopback.
    pub(super) ip: Ipv4Addr,
    /// The network namespace it runs in (`--netns`): its name and the opened namespace file.
    pub(super) netns: Option<(&'a str, &'a std::fs::File)>,
}

impl Spawn<'_> {
    /// Start `agentnet up` and wait for its banner.
    pub(super) async fn start(self) -> anyhow::Result<Child> {
        let node = self.node;
        let log = std::fs::File::create(self.log)
            .with_context(|| format!("creating node {node}'s log {}", self.log.display()))?;
        let mut cmd = tokio::process::Command::new(self.exe);
        cmd.arg("up")
            .arg("--data-dir")
            .arg(self.data_dir)
            .arg("--config")
            .arg(self.config)
            .arg("--listen")
            .arg(format!("/ip4/{}/tcp/0", self.ip))
            .arg("--http")
            .arg(format!("{}:0", self.ip))
            .args(["--admin", "127.0.0.1:0"])
            .args(["--no-mdns", "--local", "--json"]);
        for b in self.bootstrap {
            cmd.arg("--bootstrap").arg(b);
        }
        // The flag says where the data is; the variable would only confuse a reader of `ps`.
        cmd.env_remove("AGENTNET_DATA_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .process_group(0);
        let parent = std::process::id();
        // The namespace file stays open (borrowed from the caller) until `spawn` returns.
        let ns_fd = self.netns.map(|(_, f)| f.as_raw_fd());
        // SAFETY: the closure runs in the forked child before exec, where only
        // async-signal-safe calls are allowed: setns(2), prctl(2) and getppid(2) are plain
        // system calls that allocate nothing and take no lock. The parent-death signal is sent
        // when the thread that forked exits: the thread polling the testnet's future (the runtime's
        // `block_on` thread or a worker), which lives as long as the runtime; the testnet never
        // starts a child from a blocking-pool thread, which could retire early. If the testnet
        // died between fork and prctl, the child's parent is another process already: it
        // gives up.
        unsafe {
            cmd.pre_exec(move || {
                if let Some(fd) = ns_fd {
                    crate::cli::netns::enter_in_child(fd)?;
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if u32::try_from(libc::getppid()).ok() != Some(parent) {
                    return Err(std::io::Error::other("the testnet is gone"));
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting node {node}: {} up", self.exe.display()))?;
        let pid = child.id().context("a child that has no process id")?;
        let stdout = child.stdout.take().context("the child's standard output")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        // The banner is one JSON line; anything else on standard output is skipped.
        let banner = tokio::time::timeout(START_TIMEOUT, async {
            while let Some(line) = lines.next_line().await? {
                if let Ok(info) = serde_json::from_str::<NodeFile>(&line) {
                    return Ok(Some(info));
                }
            }
            Ok::<_, std::io::Error>(None)
        })
        .await;
        let info = match banner {
            Ok(Ok(Some(info))) => info,
            Ok(Ok(None)) | Ok(Err(_)) => {
                // Standard output closed: the child is exiting, or has.
                let status = tokio::time::timeout(STOP_GRACE, child.wait()).await;
                let how = match status {
                    Ok(Ok(s)) => describe(s),
                    _ => {
                        let _ = child.kill().await;
                        "closed its standard output".into()
                    }
                };
                bail!(
                    "node {node} (pid {pid}) {how} before it was up: {}; its log: {}",
                    tail(self.log),
                    self.log.display()
                );
            }
            Err(_) => {
                let _ = child.kill().await;
                bail!(
                    "node {node} (pid {pid}) printed no banner within {} s (killed): {}; its \
                     log: {}",
                    START_TIMEOUT.as_secs(),
                    tail(self.log),
                    self.log.display()
                );
            }
        };
        if info.pid != pid {
            let _ = child.kill().await;
            bail!("node {node}'s banner names pid {}, not {pid}", info.pid);
        }
        // Inside a namespace: the testnet's ways in, before anything else can fail.
        let ns = match self.netns {
            None => None,
            Some((name, _)) => {
                let made = Forward::start(name, info.admin)
                    .with_context(|| format!("reaching node {node}'s admin API in {name}"));
                match made {
                    Ok(admin) => Some(Inside {
                        name: name.to_owned(),
                        admin,
                    }),
                    Err(e) => {
                        let _ = child.kill().await;
                        return Err(e);
                    }
                }
            }
        };
        // The rest of standard output, read so that a write there never fails; it ends when
        // the child does.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let stop = CancellationToken::new();
        let (tx, exited) = watch::channel(None);
        let keeper = tokio::spawn({
            let stop = stop.clone();
            async move {
                let status = tokio::select! {
                    s = child.wait() => s,
                    () = stop.cancelled() => terminate(&mut child, pid).await,
                };
                let how = match status {
                    Ok(s) => describe(s),
                    Err(e) => format!("could not be waited for ({e})"),
                };
                let _ = tx.send(Some(Exit(how)));
            }
        });
        Ok(Child {
            info,
            stop,
            watch: ExitWatch {
                node,
                pid,
                log: self.log.to_owned(),
                exited,
            },
            keeper: Some(keeper),
            ns,
        })
    }
}

impl Child {
    /// Stop the child (SIGTERM, then SIGKILL after [`STOP_GRACE`]) and wait until it is reaped.
    async fn shutdown(mut self) {
        self.stop.cancel();
        if let Some(k) = self.keeper.take() {
            if let Err(error) = k.await {
                tracing::warn!(%error, node = self.watch.node, "the keeper of a node's process");
            }
        }
    }
}

/// Resolves with an error naming the first child of `members` to exit; never, if none does
/// (nodes in this process included).
pub(super) async fn first_exit(members: &[Member]) -> anyhow::Error {
    let mut waits = tokio::task::JoinSet::new();
    for m in members {
        if let Member::Process(c) = m {
            waits.spawn(c.watch.clone().exited());
        }
    }
    match waits.join_next().await {
        Some(Ok(e)) => e,
        Some(Err(e)) => anyhow::anyhow!("watching the nodes' processes: {e}"),
        None => std::future::pending().await,
    }
}

/// SIGTERM, [`STOP_GRACE`], SIGKILL; the child reaped.
async fn terminate(child: &mut tokio::process::Child, pid: u32) -> std::io::Result<ExitStatus> {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) takes plain integers and touches no memory of ours. The pid is our
        // child's and it has not been reaped (we hold its `Child` and its wait has not
        // returned), so the id cannot name another process.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
    match tokio::time::timeout(STOP_GRACE, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            tracing::warn!(pid, "a node did not stop within {STOP_GRACE:?}; killing it");
            child.kill().await?;
            child.wait().await
        }
    }
}

/// `exited with status 1`, `was killed by signal 9`.
fn describe(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (s.code(), s.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => format!("exited ({s})"),
    }
}

/// The last [`TAIL_LINES`] non-empty lines of `log`, on one line, at most [`TAIL_CHARS`].
fn tail(log: &Path) -> String {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let read = || -> std::io::Result<String> {
        let mut f = std::fs::File::open(log)?;
        let len = f.metadata()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)))?;
        let mut buf = Vec::new();
        f.take(TAIL_BYTES).read_to_end(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    };
    match read() {
        Ok(text) => {
            let lines: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            let from = lines.len().saturating_sub(TAIL_LINES);
            // Escaped for the terminal where the error is printed (`cli::main`), not here.
            let quoted = lines[from..].join(" / ");
            let chars = quoted.chars().count();
            match quoted {
                s if s.is_empty() => "(its log is empty)".into(),
                s if chars > TAIL_CHARS => {
                    format!(
                        "…{}",
                        s.chars().skip(chars - TAIL_CHARS).collect::<String>()
                    )
                }
                s => s,
            }
        }
        Err(e) => format!("(its log could not be read: {e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_quotes_the_last_lines_of_the_log_on_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("node-2.log");
        assert!(tail(&log).starts_with("(its log could not be read: "));
        std::fs::write(&log, "\n  \n").unwrap();
        assert_eq!(tail(&log), "(its log is empty)");
        let lines: String = (1..=9).map(|i| format!("line {i}\n\n")).collect();
        std::fs::write(&log, lines).unwrap();
        assert_eq!(tail(&log), "line 6 / line 7 / line 8 / line 9");
        // A long log, a long line: only the end of each is read and quoted.
        let long = format!("{}\nthe end\n", "x".repeat(3 * TAIL_BYTES as usize));
        std::fs::write(&log, long).unwrap();
        let t = tail(&log);
        assert!(t.starts_with("…x") && t.ends_with("x / the end"), "{t}");
        assert_eq!(t.chars().count(), TAIL_CHARS + 1);
    }

    #[test]
    fn an_exit_says_the_status_or_the_signal() {
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(
            describe(ExitStatus::from_raw(1 << 8)),
            "exited with status 1"
        );
        assert_eq!(describe(ExitStatus::from_raw(9)), "was killed by signal 9");
    }
}
