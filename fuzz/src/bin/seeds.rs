//! Write every target's seed inputs ([`agentnet_fuzz::seeds`]) to `fuzz/corpus/<target>/`:
//! `cargo run -p agentnet-fuzz --bin seeds`.
use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (target, name, bytes) in agentnet_fuzz::seeds::all() {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(name), bytes)?;
        println!("{target}/{name}");
    }
    Ok(())
}
