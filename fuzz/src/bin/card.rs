//! AFL entry point of [`agentnet_fuzz::card`] (`scripts/fuzz.sh card`).
fn main() {
    afl::fuzz!(|data: &[u8]| agentnet_fuzz::card(data));
}
