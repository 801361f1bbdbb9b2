//! agentnet
