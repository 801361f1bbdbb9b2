//! The `agentnet` command. All the work is in the library; this only runs it.

/// mimalloc instead of the system allocator: serving A2A, glibc's `malloc`/`free` took a sixth
/// of the node's CPU (perf, `docs/BENCHMARKS.md`).
/// (Not with the `system-alloc` feature: heaptrack sees only what goes through malloc.)
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    agentnet_node::cli::main()
}
