//! One `simulate` invocation: the process made ready for the run (its temporary directory, open
//! files, the memory watchdog, the runtime), the run under its time bound, and its output.

use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;

use crate::args::Args;
use crate::process::{ensure_open_files, proc_mib, rss_watchdog, TempDir};
use crate::report::{print_text, write_out};
use crate::run::run;

/// Runs the simulation `args` describe and writes or prints its report; the exit code says how
/// it went (2: a run this machine cannot hold).
pub fn simulate(args: &Args) -> ExitCode {
    let dir = match TempDir::new() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("simulate: creating a temporary directory: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = ensure_open_files(args.stores as u64) {
        eprintln!("simulate: {e}");
        return ExitCode::from(2);
    }
    let limit = args
        .max_rss_mb
        .unwrap_or_else(|| proc_mib("/proc/meminfo", "MemAvailable:").map_or(8192, |m| m / 2));
    rss_watchdog(limit, dir.0.clone());
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("simulate: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let bound = bound(args);
    let result = rt.block_on(async {
        tokio::time::timeout(bound, run(args, &dir.0))
            .await
            .unwrap_or_else(|_| Err(format!("run exceeded its bound of {bound:?}")))
    });
    // Stops the node tasks and blocking work still running; the stores close with them.
    rt.shutdown_timeout(Duration::from_secs(10));
    drop(dir);
    output(args, result)
}

/// The watchdog's bound on the run: setup, every advertisement's deadline, and slack for checks
/// and shutdown.
fn bound(args: &Args) -> Duration {
    let nodes = (args.nodes() as usize + args.adversaries) as u32;
    Duration::from_secs(60)
        + Duration::from_secs(1) * nodes
        + args.warmup()
        + args.idle
        + (args.deadline + args.gap + Duration::from_millis(100)) * args.adverts as u32
        // Healing a partition: its redials and a gap.
        + args.partition.as_ref().map_or(Duration::ZERO, |_| Duration::from_secs(60) + args.gap)
        // Joins: each a node start and its dials.
        + args.churn.as_ref().map_or(Duration::ZERO, |c| {
            let minutes = (args.deadline + args.gap).as_secs_f64() * args.adverts as f64 / 60.0;
            Duration::from_secs(12) * (c.join_per_min * minutes).ceil() as u32
        })
        // Queries: each bounded at 30 s.
        + Duration::from_secs(30) * args.queries as u32
        // The floor: its warm-up, each message's deadline and gap, and its shutdown.
        + if args.floor {
            args.warmup()
                + (args.deadline + args.gap.min(Duration::from_millis(500))) * args.adverts as u32
                + Duration::from_secs(60)
        } else {
            Duration::ZERO
        }
}

/// The report into `--out`, then printed (JSON or text); or the run's error.
fn output(args: &Args, result: Result<Value, String>) -> ExitCode {
    match result {
        Ok(report) => {
            if let Some(out) = &args.out {
                if let Err(e) = write_out(out, &report) {
                    eprintln!("simulate: {e}");
                    return ExitCode::FAILURE;
                }
                eprintln!("simulate: results and figures in {}", out.display());
            }
            if args.json {
                println!("{report}");
            } else {
                print_text(&report);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("simulate: {e}");
            ExitCode::FAILURE
        }
    }
}
