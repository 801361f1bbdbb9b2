//! The process the run lives in: its temporary directory, what `/proc` says about it (CPU, memory,
//! load), the watchdog on its memory and its limit on open files.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A directory removed when dropped.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    /// A fresh directory under the system's temporary one.
    pub(crate) fn new() -> std::io::Result<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let path =
            std::env::temp_dir().join(format!("agentnet-simulate-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path)?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            eprintln!("removing {}: {e}", self.0.display());
        }
    }
}

/// `/proc/loadavg`'s first three fields.
pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "n/a".into())
}

/// CPU time this process used so far (user + system), from `/proc/self/stat`.
pub(crate) fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesized command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // USER_HZ is 100 on every Linux configuration we run on.
    Some(Duration::from_millis(ticks * 10))
}

/// A `kB` field of a `/proc` file such as `/proc/self/status` or `/proc/meminfo`, in MiB.
pub(crate) fn proc_mib(file: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

/// Ends the process if it grows past `limit_mib`: every node holds buffers per connection, and a
/// network where every node connects to every other outgrows the machine. The stores' directory
/// is removed first. A thread, not a task, so that a saturated runtime cannot starve it.
pub(crate) fn rss_watchdog(limit_mib: u64, dir: PathBuf) {
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(250));
        let rss = proc_mib("/proc/self/status", "VmRSS:").unwrap_or(0);
        if rss > limit_mib {
            eprintln!(
                "simulate: resident memory {rss} MiB passed the limit of {limit_mib} MiB \
                 (--max-rss-mb); aborting"
            );
            let _ = std::fs::remove_dir_all(&dir);
            std::process::exit(3);
        }
    });
}

/// Samples the process's resident memory every second, from the start of the run.
pub(crate) fn rss_sampler(
    started: Instant,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Arc<Mutex<Vec<(f64, u64)>>> {
    let samples: Arc<Mutex<Vec<(f64, u64)>>> = Default::default();
    let out = samples.clone();
    std::thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if let Some(rss) = proc_mib("/proc/self/status", "VmRSS:") {
                out.lock()
                    .expect("samples lock poisoned")
                    .push((started.elapsed().as_secs_f64(), rss));
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    samples
}

/// Files one node's store holds open: RocksDB keeps its lock, info log, manifest and
/// write-ahead log open, and a handle on the store's directory per column family (15, counted
/// in a run), and a flush adds a table file for a while.
const OPEN_FILES_PER_STORE: u64 = 16;
/// Open files the rest of the process may need (the runtime, the output, the figures).
const OPEN_FILES_SPARE: u64 = 256;

/// Raises the process's soft limit on open files as far as the run needs and the hard limit
/// allows, and refuses a run that would still run out: at ~1 250 nodes under a limit of 20 000
/// the stores would fail to open, or to flush, part way through.
pub(crate) fn ensure_open_files(stores: u64) -> Result<(), String> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let need = stores * OPEN_FILES_PER_STORE + OPEN_FILES_SPARE;
    let mut limit = getrlimit(Resource::Nofile);
    let enough = |l: Option<u64>| l.is_none_or(|l| l >= need);
    if enough(limit.current) {
        return Ok(());
    }
    let hard = limit.maximum;
    limit.current = Some(hard.map_or(need, |h| h.min(need)));
    let raised = setrlimit(Resource::Nofile, limit).is_ok();
    let now = getrlimit(Resource::Nofile).current;
    if raised && enough(now) {
        return Ok(());
    }
    let show = |l: Option<u64>| l.map_or("unlimited".to_string(), |l| l.to_string());
    Err(format!(
        "{stores} stores need about {need} open files ({OPEN_FILES_PER_STORE} each), and this \
         process may open {} (hard limit {}): run fewer nodes, or raise the hard limit \
         (`ulimit -Hn {need}` as root, or LimitNOFILE= for a service) and run again",
        show(now),
        show(hard),
    ))
}
