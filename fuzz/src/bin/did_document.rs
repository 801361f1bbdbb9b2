//! AFL entry point of [`agentnet_fuzz::did_document`] (`scripts/fuzz.sh did_document`).
fn main() {
    afl::fuzz!(|data: &[u8]| agentnet_fuzz::did_document(data));
}
