//! AFL entry point of [`agentnet_fuzz::endorsement`] (`scripts/fuzz.sh endorsement`).
fn main() {
    afl::fuzz!(|data: &[u8]| agentnet_fuzz::endorsement(data));
}
