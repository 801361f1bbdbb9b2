//! The `agentnet` command. All the work is in the library; this only runs it.

fn main() -> std::process::ExitCode {
    agentnet_node::cli::main()
}
