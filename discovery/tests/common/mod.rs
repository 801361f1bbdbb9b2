//! Helpers shared by the discovery crate's network tests.
#![allow(dead_code)] // each test crate uses its own subset

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentnet_discovery::net::Client;
use agentnet_discovery::store::StoredAdvert;

static NEXT_PORT: AtomicU64 = AtomicU64::new(0);

/// A memory-transport port distinct per test binary run and per node (the memory transport is
/// process-wide); `range` (0 or 1) keeps two test binaries apart should they share a process.
pub fn memory_port(range: u64) -> u64 {
    let base = ((std::process::id() as u64) << 20) | (range << 19);
    base + NEXT_PORT.fetch_add(1, Ordering::Relaxed) + 1
}

/// `client.discover(tags)` every 300 ms until it finds something or `limit` has passed; the
/// last answer.
pub async fn discover_within(client: &Client, tags: &[&str], limit: Duration) -> Vec<StoredAdvert> {
    let tags: Vec<String> = tags.iter().map(|t| t.to_string()).collect();
    let start = Instant::now();
    loop {
        let found = client.discover(&tags, 5).await.unwrap();
        if !found.is_empty() || start.elapsed() > limit {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
