//! AFL entry point of [`agentnet_fuzz::advert`] (`scripts/fuzz.sh advert`).
fn main() {
    afl::fuzz!(|data: &[u8]| agentnet_fuzz::advert(data));
}
