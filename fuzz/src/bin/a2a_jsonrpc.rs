//! AFL entry point of [`agentnet_fuzz::a2a_jsonrpc`] (`scripts/fuzz.sh a2a_jsonrpc`).
fn main() {
    afl::fuzz!(|data: &[u8]| agentnet_fuzz::a2a_jsonrpc(data));
}
