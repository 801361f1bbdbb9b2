//! AFL entry point of [`agentnet_fuzz::anp_jsonrpc`] (`scripts/fuzz.sh anp_jsonrpc`).
fn main() {
    afl::fuzz!(|data: &[u8]| agentnet_fuzz::anp_jsonrpc(data));
}
