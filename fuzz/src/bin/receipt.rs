//! AFL entry point of [`agentnet_fuzz::receipt`] (`scripts/fuzz.sh receipt`).
fn main() {
    afl::fuzz!(|data: &[u8]| agentnet_fuzz::receipt(data));
}
