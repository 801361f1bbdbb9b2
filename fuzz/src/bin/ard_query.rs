//! AFL entry point of [`agentnet_fuzz::ard_query`] (`scripts/fuzz.sh ard_query`).
fn main() {
    afl::fuzz!(|data: &[u8]| agentnet_fuzz::ard_query(data));
}
