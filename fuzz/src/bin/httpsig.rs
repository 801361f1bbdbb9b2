//! AFL entry point of [`agentnet_fuzz::httpsig`] (`scripts/fuzz.sh httpsig`).
fn main() {
    afl::fuzz!(|data: &[u8]| agentnet_fuzz::httpsig(data));
}
