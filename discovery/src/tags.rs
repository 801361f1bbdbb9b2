//! Skill tags: normalization and their DHT provider keys.

use sha2::{Digest, Sha256};

/// Longest tag, in bytes after normalization.
pub const MAX_TAG_LEN: usize = 64;
/// Most tags indexed for one advertisement.
pub const MAX_TAGS: usize = 32;
/// A tag's providers are spread over this many DHT keys, so that no key holds more than about 20
/// providers per shard for popular tags (Kademlia keeps K = 20 per key).
pub const SHARDS: u32 = 4;

/// Normalize a tag: trimmed, lowercased. `None` if empty or longer than [`MAX_TAG_LEN`].
pub fn normalize(tag: &str) -> Option<String> {
    let t = tag.trim().to_lowercase();
    (!t.is_empty() && t.len() <= MAX_TAG_LEN && !t.chars().any(char::is_control)).then_some(t)
}

/// The DHT key of one shard of a normalized tag: `sha256("agentnet/skill/" + tag)` for shard 0,
/// `sha256("agentnet/skill/" + tag + "#" + shard)` for the others.
pub fn dht_key(tag: &str, shard: u32) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"agentnet/skill/");
    h.update(tag.as_bytes());
    if shard > 0 {
        h.update(format!("#{shard}").as_bytes());
    }
    h.finalize().into()
}

/// Which shard a provider announces under: a stable function of its peer id bytes.
pub fn shard_for(provider: &[u8]) -> u32 {
    let h = Sha256::digest(provider);
    u32::from_be_bytes([h[0], h[1], h[2], h[3]]) % SHARDS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization() {
        assert_eq!(normalize("  Translation "), Some("translation".into()));
        assert_eq!(normalize("ÜBER"), Some("über".into()));
        assert_eq!(normalize("   "), None);
        assert_eq!(normalize(&"x".repeat(65)), None);
        assert_eq!(normalize("a\nb"), None);
    }

    #[test]
    fn shard_zero_is_the_plain_key() {
        let plain: [u8; 32] = Sha256::digest(b"agentnet/skill/translation").into();
        assert_eq!(dht_key("translation", 0), plain);
        assert_ne!(dht_key("translation", 1), plain);
        assert!(shard_for(b"peer") < SHARDS);
    }
}
