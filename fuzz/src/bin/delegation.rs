//! AFL entry point of [`agentnet_fuzz::delegation`] (`scripts/fuzz.sh delegation`).
fn main() {
    afl::fuzz!(|data: &[u8]| agentnet_fuzz::delegation(data));
}
