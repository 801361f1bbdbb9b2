//! Skill tags: normalization and their DHT provider keys.

use sha2::{Digest, Sha256};

/// Longest tag, in bytes after normalization.
pub const MAX_TAG_LEN: usize = 64;
/// Most tags indexed for one advertisement.
pub const MAX_TAGS: usize = 32;
/// A tag's providers are spread over this many DHT keys, so that no key holds more than about 20
/// providers per shard for popular tags (Kademlia keeps K = 20 per key).
pub const SHARDS: u32 = 4;

/// Normalize a tag: trimmed, lowercased, Unicode NFC (so that `é` typed as one code point or as
/// `e` + combining accent is one tag). `None` if empty, longer than [`MAX_TAG_LEN`], or holding a
/// character that is invisible or reorders text ([`agentnet_did::text::is_hidden`]: controls,
/// bidi overrides and isolates, zero-width characters, BOM, line separators): tags are shown to
/// people and matched by their bytes, and two tags that look the same must be the same tag.
pub fn normalize(tag: &str) -> Option<String> {
    let lower = tag.trim().to_lowercase();
    let t = agentnet_did::text::nfc(&lower).into_owned();
    (!t.is_empty() && t.len() <= MAX_TAG_LEN && !t.chars().any(agentnet_did::text::is_hidden))
        .then_some(t)
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
    fn lookalike_tags_are_one_tag_or_refused() {
        // Composed and decomposed é are one tag.
        assert_eq!(normalize("caf\u{e9}"), normalize("cafe\u{301}"));
        assert_eq!(normalize("CAFE\u{301}").as_deref(), Some("caf\u{e9}"));
        // Invisible and reordering characters would make a tag that looks like another.
        for bad in [
            "trans\u{200b}lation",
            "trans\u{200c}lation",
            "trans\u{200d}lation",
            "\u{feff}translation",
            "trans\u{2060}lation",
            "\u{202e}noitalsnart",
            "\u{2066}translation\u{2069}",
            "trans\u{ad}lation",
            "trans\u{2028}lation",
            "tr\u{1b}[31mans",
            "tr\u{85}ans",
        ] {
            assert_eq!(normalize(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn shard_zero_is_the_plain_key() {
        let plain: [u8; 32] = Sha256::digest(b"agentnet/skill/translation").into();
        assert_eq!(dht_key("translation", 0), plain);
        assert_ne!(dht_key("translation", 1), plain);
        assert!(shard_for(b"peer") < SHARDS);
    }
}
