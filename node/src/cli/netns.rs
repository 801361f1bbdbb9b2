//! Network namespaces for local runs of many node processes, made with iproute2's `ip` (needs
//! root) and removed when the run ends: `agentnet testnet --processes N --netns` and
//! `shadowgen --run-netns` (the simulator crate's).
//!
//! The layout: a hub namespace holds one bridge; each node's namespace has its loopback and
//! an `eth0`, one end of a veth pair whose other end is a port of the bridge. Node M has the
//! address [`FIRST`] plus M in one /16, so every node dials from an address of its own and
//! sees its peers' addresses, not 127.0.0.1: its limits per source address apply as they do
//! between machines. Nothing is added to this machine's own namespace (no interface, no
//! route) unless the run asks for an uplink: then one veth pair joins this namespace to the
//! bridge, with [`UPLINK`] on this side (a route to the nodes' /16, gone with the hub), so that
//! this process reaches the nodes' public listeners. Whatever listens on a node's loopback
//! only (its admin API) it reaches through a [`Forward`]: a listener on this namespace's
//! loopback whose connections are made from inside the node's.
//!
//! Written on `ip` rather than on netlink from Rust (the `rtnetlink` crate): the commands are
//! few, the same an operator would type to inspect or clean up, and `ip -batch` runs each
//! namespace's in one process.

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd as _;
use std::process::{Command, Stdio};
use std::sync::Arc;

/// Node 0's address; node M's is this plus M.
pub const FIRST: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// Nodes one /16 holds after [`FIRST`] (10.77.255.255 is its broadcast address).
pub const MAX_NODES: u32 = 65_534;
/// This namespace's address on the bridge, with an uplink: the /16's last, so a run with one
/// has one node fewer.
pub const UPLINK: Ipv4Addr = Ipv4Addr::new(10, 77, 255, 254);
/// Namespaces of a run are named `<PREFIX><pid>-hub` and `<PREFIX><pid>-<M>`.
const PREFIX: &str = "agentnet-";

/// The namespaces of one run; dropping it removes them.
#[derive(Debug)]
pub struct Net {
    run: String,
    nodes: u32,
    /// Whether dropping it removes the namespaces (always, but in unit tests).
    made: bool,
    /// Whether this namespace joined the bridge ([`UPLINK`]).
    uplink: bool,
    /// The kernel's neighbour-table thresholds before the run raised them, and what it set.
    raised: Option<([u64; 3], [u64; 3])>,
}

/// The kernel's IPv4 neighbour (ARP) table is one table for every network namespace, garbage
/// collected above `gc_thresh1` entries and full at `gc_thresh3` (1 024 by default): past it
/// no namespace can resolve a new neighbour, and a node that had not yet resolved its peers is
/// cut off (seen at 100 nodes: a tenth of them with no connection at all). Each node learns
/// the addresses of the peers it dials and of those that dial it.
const NEIGH: [&str; 3] = [
    "/proc/sys/net/ipv4/neigh/default/gc_thresh1",
    "/proc/sys/net/ipv4/neigh/default/gc_thresh2",
    "/proc/sys/net/ipv4/neigh/default/gc_thresh3",
];
/// Entries per node the thresholds make room for: below the first, no collection at all.
const NEIGH_PER_NODE: [u64; 3] = [128, 256, 512];

fn read_neigh() -> Result<[u64; 3], String> {
    let mut v = [0u64; 3];
    for (i, f) in NEIGH.iter().enumerate() {
        v[i] = std::fs::read_to_string(f)
            .map_err(|e| format!("reading {f}: {e}"))?
            .trim()
            .parse()
            .map_err(|e| format!("reading {f}: {e}"))?;
    }
    Ok(v)
}

fn write_neigh(v: [u64; 3]) -> Result<(), String> {
    // gc_thresh3 first when raising, last when lowering, so that 1 <= 2 <= 3 throughout.
    let order: [usize; 3] = if v[2] >= read_neigh()?[2] {
        [2, 1, 0]
    } else {
        [0, 1, 2]
    };
    for i in order {
        std::fs::write(NEIGH[i], v[i].to_string())
            .map_err(|e| format!("writing {}: {e}", NEIGH[i]))?;
    }
    Ok(())
}

/// The thresholds a run of `nodes` needs: never below what they are.
fn neigh_wanted(nodes: u32, now: [u64; 3]) -> [u64; 3] {
    let mut v = now;
    for i in 0..3 {
        v[i] = v[i].max(u64::from(nodes) * NEIGH_PER_NODE[i]);
    }
    v
}

/// Runs `ip ARGS` with `batch` on its standard input when given, and returns what it printed;
/// the error names the command and what `ip` printed on its standard error.
fn ip(args: &[&str], batch: Option<&str>) -> Result<String, String> {
    let mut child = Command::new("ip")
        .args(args)
        .stdin(if batch.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "running `ip`: {e} (network namespaces are made with iproute2: apt-get install \
                 iproute2)"
            )
        })?;
    if let (Some(text), Some(mut stdin)) = (batch, child.stdin.take()) {
        stdin
            .write_all(text.as_bytes())
            .map_err(|e| format!("writing to `ip {}`: {e}", args.join(" ")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("waiting for `ip {}`: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether this process runs as root (effective uid 0, from /proc/self/status).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|u| u.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// The names `ip netns list` prints.
fn namespaces() -> Result<Vec<String>, String> {
    // Each line is a name, then " (id: N)" once the namespace has an id.
    Ok(ip(&["netns", "list"], None)?
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect())
}

/// The pid in a namespace name of a run (`agentnet-<pid>-…`), if it is one.
fn run_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, tail) = rest.split_once('-')?;
    if tail.is_empty() {
        return None;
    }
    pid.parse().ok()
}

/// Removes those of `names` that exist, in one `ip` process.
fn delete(names: &[String]) -> Result<(), String> {
    let present = namespaces()?;
    let batch: String = names
        .iter()
        .filter(|n| present.contains(n))
        .map(|n| format!("netns del {n}\n"))
        .collect();
    if batch.is_empty() {
        return Ok(());
    }
    // -force: go on past a line that fails, and remove the rest.
    ip(&["-force", "-batch", "-"], Some(&batch)).map(drop)
}

impl Net {
    /// The namespaces of this run's `nodes` nodes, made now. Namespaces left by runs whose
    /// process is gone (killed before it could remove them) are removed first. `flag` is the
    /// option that asked for them, `instead` what to run without root; both for the errors.
    /// With `uplink`, this namespace joins the bridge at [`UPLINK`].
    pub fn create(nodes: u32, uplink: bool, flag: &str, instead: &str) -> Result<Net, String> {
        let most = if uplink { MAX_NODES - 1 } else { MAX_NODES };
        if nodes == 0 || nodes > most {
            return Err(format!(
                "{flag} runs 1 to {most} nodes (one /16), not {nodes}"
            ));
        }
        if !is_root() {
            return Err(format!(
                "{flag} makes network namespaces, which needs root: run it as root, or {instead}"
            ));
        }
        let stale: Vec<String> = namespaces()?
            .into_iter()
            .filter(|n| {
                run_pid(n)
                    .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
            })
            .collect();
        if !stale.is_empty() {
            eprintln!(
                "removing {} network namespace(s) of earlier runs that ended without removing them",
                stale.len()
            );
            delete(&stale)?;
        }
        let mut net = Net {
            run: format!("{PREFIX}{}", std::process::id()),
            nodes,
            made: true,
            uplink: false,
            raised: None,
        };
        let before = read_neigh()?;
        let wanted = neigh_wanted(nodes, before);
        if wanted != before {
            write_neigh(wanted)?;
            eprintln!(
                "raised the kernel's neighbour table, shared by every namespace \
                 (net.ipv4.neigh.default.gc_thresh1..3), from {before:?} to {wanted:?} for the run"
            );
            net.raised = Some((before, wanted));
        }
        // From here on, dropping `net` removes whatever was made.
        let hub = net.hub();
        let mut batch = format!("netns add {hub}\n");
        for m in 0..nodes {
            batch.push_str(&format!("netns add {}\n", net.name(m)));
        }
        ip(&["-batch", "-"], Some(&batch))?;
        let mut batch = "link add br0 type bridge\nlink set br0 up\n".to_string();
        for m in 0..nodes {
            batch.push_str(&format!(
                "link add v{m} type veth peer name eth0 netns {}\nlink set v{m} master br0\nlink set v{m} up\n",
                net.name(m)
            ));
        }
        ip(&["-n", &hub, "-batch", "-"], Some(&batch))?;
        if uplink {
            // The end in the hub first: made there, its peer is moved here; removing the hub
            // removes both.
            let link = net.uplink_name();
            let batch = format!(
                "link add up0 type veth peer name {link} netns {}\nlink set up0 master br0\n\
                 link set up0 up\n",
                std::process::id()
            );
            ip(&["-n", &hub, "-batch", "-"], Some(&batch))?;
            let batch = format!("addr add {UPLINK}/16 dev {link}\nlink set {link} up\n");
            net.uplink = true;
            ip(&["-batch", "-"], Some(&batch))?;
        }
        for m in 0..nodes {
            let batch = format!(
                "link set lo up\naddr add {}/16 dev eth0\nlink set eth0 up\n",
                net.address(m)
            );
            ip(&["-n", &net.name(m), "-batch", "-"], Some(&batch))?;
            if m % 100 == 99 {
                eprintln!("{} of {nodes} namespaces ready", m + 1);
            }
        }
        Ok(net)
    }

    /// The hub's namespace, which holds the bridge.
    pub fn hub(&self) -> String {
        format!("{}-hub", self.run)
    }

    /// The uplink's interface in this namespace (at most 15 bytes, as names of links are).
    pub fn uplink_name(&self) -> String {
        format!("an-{}", &self.run[PREFIX.len()..])
    }

    /// Node `m`'s namespace.
    pub fn name(&self, m: u32) -> String {
        format!("{}-{m}", self.run)
    }

    /// Node `m`'s address.
    pub fn address(&self, m: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(FIRST) + m)
    }

    /// Node `m`'s namespace, opened: what `setns(2)` takes (a child's `pre_exec` enters it).
    pub fn open(&self, m: u32) -> std::io::Result<std::fs::File> {
        open(&self.name(m))
    }

    /// Every namespace of this run.
    fn all(&self) -> Vec<String> {
        std::iter::once(self.hub())
            .chain((0..self.nodes).map(|m| self.name(m)))
            .collect()
    }
}

/// The file `ip netns add NAME` bind-mounts the namespace on.
fn open(name: &str) -> std::io::Result<std::fs::File> {
    let path = format!("/run/netns/{name}");
    std::fs::File::open(&path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("opening {path}: {e}")))
}

/// Moves the calling thread (only it) into the namespace of `ns`, an opened namespace file.
fn enter(ns: &std::fs::File) -> std::io::Result<()> {
    enter_in_child(ns.as_raw_fd())
}

/// Moves the calling thread into the namespace of the descriptor `fd`: a forked child before
/// `exec` (its one thread), or [`enter`]'s. Only setns(2): async-signal-safe, as `pre_exec`
/// requires.
pub fn enter_in_child(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    // SAFETY: setns(2) on a descriptor the caller keeps open for the call (a child's is the
    // parent's, inherited by the fork, open until it has exec'd); it changes the calling
    // thread's network namespace and nothing of Rust's memory.
    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Most connections one [`Forward`] carries at a time; more wait in its listener's backlog.
const FORWARD_CONNECTIONS: usize = 64;

/// A TCP forwarder from this namespace's loopback into a node's namespace: each connection
/// to [`Forward::addr`] is carried to `target` as seen from inside that namespace (its
/// loopback included, where the node's admin API listens). One thread per forwarder, moved
/// into the namespace once: a socket belongs to the namespace of the thread that made it, so
/// the listener is made before the move and every outgoing connection after it. Dropping it
/// stops the thread and closes the connections it carries.
#[derive(Debug)]
pub struct Forward {
    /// Where this namespace reaches `target`.
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Forward {
    /// Start forwarding `127.0.0.1:<any port>` here to `target` in namespace `ns`.
    pub fn start(ns: &str, target: SocketAddr) -> std::io::Result<Forward> {
        let file = open(ns)?;
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let name = ns.to_owned();
        std::thread::Builder::new()
            .name(format!("fwd-{ns}"))
            .spawn(move || {
                let started = enter(&file).and_then(|()| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_io()
                        .enable_time()
                        .build()
                });
                let rt = match started {
                    Ok(rt) => {
                        let _ = ready_tx.send(Ok(()));
                        rt
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                rt.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    let slots = Arc::new(tokio::sync::Semaphore::new(FORWARD_CONNECTIONS));
                    let carry = async {
                        loop {
                            let Ok(slot) = slots.clone().acquire_owned().await else {
                                return;
                            };
                            let Ok((mut inbound, _)) = listener.accept().await else {
                                // Out of descriptors, say: not a loop that spins.
                                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                                continue;
                            };
                            let name = name.clone();
                            // Spawned on this runtime: its one thread, in the namespace.
                            tokio::spawn(async move {
                                let _slot = slot;
                                match tokio::net::TcpStream::connect(target).await {
                                    Ok(mut outbound) => {
                                        let _ = tokio::io::copy_bidirectional(
                                            &mut inbound,
                                            &mut outbound,
                                        )
                                        .await;
                                    }
                                    Err(error) => tracing::warn!(
                                        %error, ns = %name, %target, "forwarding a connection"
                                    ),
                                }
                            });
                        }
                    };
                    tokio::select! {
                        () = carry => {}
                        _ = stopped => {}
                    }
                });
            })?;
        match ready.recv() {
            Ok(Ok(())) => Ok(Forward {
                addr,
                stop: Some(stop),
            }),
            Ok(Err(e)) => Err(std::io::Error::new(
                e.kind(),
                format!("entering network namespace {ns}: {e}"),
            )),
            Err(_) => Err(std::io::Error::other(format!(
                "the forwarder into {ns} stopped before it started"
            ))),
        }
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if !self.made {
            return;
        }
        // Gone with the hub too, but only once the kernel has released the namespace, which it
        // does in the background: removed here first, so that none is seen after the run.
        if self.uplink {
            if let Err(e) = ip(&["link", "del", &self.uplink_name()], None) {
                eprintln!("error: removing the run's uplink: {e}");
            }
        }
        if let Err(e) = delete(&self.all()) {
            eprintln!(
                "error: removing the run's network namespaces: {e}; list them with `ip netns list | grep {}-`",
                self.run
            );
        }
        // Put the thresholds back, unless someone changed them meanwhile (then theirs stand).
        // A second run started meanwhile found them high enough and did not raise them: it
        // loses the room when this one ends, so runs are meant one at a time.
        if let Some((before, ours)) = self.raised {
            if read_neigh().ok() == Some(ours) {
                if let Err(e) = write_neigh(before) {
                    eprintln!(
                        "error: restoring the neighbour table's thresholds to {before:?}: {e}"
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_namespaces_are_told_from_others() {
        assert_eq!(run_pid("agentnet-1234-hub"), Some(1234));
        assert_eq!(run_pid("agentnet-1234-7"), Some(1234));
        for other in [
            "agentnet-1234",
            "agentnet-1234-",
            "agentnet-x-1",
            "agentnet--1",
            "ns1",
            "blue",
        ] {
            assert_eq!(run_pid(other), None, "{other}");
        }
    }

    #[test]
    fn the_neighbour_table_is_only_ever_raised() {
        assert_eq!(
            neigh_wanted(100, [128, 512, 1024]),
            [12_800, 25_600, 51_200]
        );
        assert_eq!(neigh_wanted(4, [128, 512, 1024]), [512, 1024, 2048]);
        assert_eq!(neigh_wanted(1, [128, 512, 1024]), [128, 512, 1024]);
        assert_eq!(neigh_wanted(2, [1 << 20, 1 << 20, 1 << 20]), [1 << 20; 3]);
    }

    #[test]
    fn more_nodes_than_the_16_holds_are_refused() {
        let e = Net::create(MAX_NODES + 1, false, "--run-netns", "x").unwrap_err();
        assert!(
            e.contains("1 to 65534 nodes") && e.contains("--run-netns"),
            "{e}"
        );
        // The uplink takes the last address.
        let e = Net::create(MAX_NODES, true, "--netns", "x").unwrap_err();
        assert!(e.contains("1 to 65533 nodes"), "{e}");
        let e = Net::create(0, false, "--run-netns", "x").unwrap_err();
        assert!(e.contains("not 0"), "{e}");
    }

    /// As root (this project's CI machines): a forwarder reaches what listens on a node
    /// namespace's loopback only, carries at most [`FORWARD_CONNECTIONS`] connections at a
    /// time (the next waits until one closes), and stops with its owner.
    #[test]
    fn a_forwarder_reaches_a_namespaces_loopback_and_carries_a_bounded_number_of_connections() {
        use std::io::{Read as _, Write as _};
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::time::{Duration, Instant};

        let net = Net::create(1, false, "--test", "run as root").unwrap();
        // An echo server on the node namespace's loopback: made by a thread inside it.
        let ns = net.open(0).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn({
            let accepted = accepted.clone();
            move || {
                enter(&ns).unwrap();
                let l = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
                tx.send(l.local_addr().unwrap()).unwrap();
                for c in l.incoming() {
                    let Ok(mut c) = c else { return };
                    accepted.fetch_add(1, Ordering::SeqCst);
                    std::thread::spawn(move || {
                        let mut b = [0u8; 64];
                        while let Ok(n @ 1..) = c.read(&mut b) {
                            if c.write_all(&b[..n]).is_err() {
                                return;
                            }
                        }
                    });
                }
            }
        });
        let target = rx.recv().unwrap();
        // Not reachable from here: this namespace's loopback is another.
        assert!(std::net::TcpStream::connect(target)
            .and_then(|mut c| {
                c.set_read_timeout(Some(Duration::from_millis(500)))?;
                c.write_all(b"x")?;
                let mut b = [0u8; 1];
                c.read_exact(&mut b)
            })
            .is_err());
        let fwd = Forward::start(&net.name(0), target).unwrap();

        let mut clients: Vec<std::net::TcpStream> = (0..FORWARD_CONNECTIONS + 6)
            .map(|_| std::net::TcpStream::connect(fwd.addr).unwrap())
            .collect();
        let settle = |want: usize| {
            let deadline = Instant::now() + Duration::from_secs(10);
            while accepted.load(Ordering::SeqCst) < want && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            std::thread::sleep(Duration::from_millis(300));
            accepted.load(Ordering::SeqCst)
        };
        assert_eq!(settle(FORWARD_CONNECTIONS), FORWARD_CONNECTIONS);
        // The first carries bytes both ways.
        clients[0].write_all(b"ping").unwrap();
        let mut b = [0u8; 4];
        clients[0].read_exact(&mut b).unwrap();
        assert_eq!(&b, b"ping");
        // One closed: one more is carried.
        drop(clients.remove(0));
        assert_eq!(settle(FORWARD_CONNECTIONS + 1), FORWARD_CONNECTIONS + 1);

        drop(fwd);
        // Its connections are closed: a read ends (not a timeout).
        clients[0]
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut b = [0u8; 1];
        match clients[0].read(&mut b) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("still carried after the drop: {other:?}"),
        }
    }

    #[test]
    fn addresses_count_from_the_first() {
        let net = Net {
            run: "agentnet-1".into(),
            nodes: MAX_NODES,
            made: false,
            uplink: false,
            raised: None,
        };
        assert_eq!(net.address(0), FIRST);
        assert_eq!(net.address(300), Ipv4Addr::new(10, 77, 1, 45));
        // The last node's address is still in the /16 and is not its broadcast address.
        assert_eq!(net.address(MAX_NODES - 1), Ipv4Addr::new(10, 77, 255, 254));
        assert_eq!(net.name(3), "agentnet-1-3");
        assert_eq!(net.hub(), "agentnet-1-hub");
    }
}
