//! AFL entry point of [`agentnet_fuzz::jcs`] (`scripts/fuzz.sh jcs`).
fn main() {
    afl::fuzz!(|data: &[u8]| agentnet_fuzz::jcs(data));
}
