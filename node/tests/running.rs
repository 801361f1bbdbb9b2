//! A started node owns its tasks: dropping the [`Running`] without a shutdown stops them
//! (before, the HTTP servers, the publisher and the swarm went on, detached, with nothing left
//! to stop them).

use std::time::Duration;

use agentnet_node::daemon::{self, Options, Running};
use tokio::net::TcpStream;

/// Whether `addr` stops taking connections within five seconds.
async fn closes(addr: std::net::SocketAddr) -> bool {
    for _ in 0..100 {
        if TcpStream::connect(addr).await.is_err() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn dropping_a_running_node_stops_its_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let node: Running = daemon::start(Options::local(dir.path().to_path_buf()))
        .await
        .unwrap();
    let (http, admin) = (node.info.http, node.info.admin);
    assert!(TcpStream::connect(http).await.is_ok(), "the node serves");
    assert!(TcpStream::connect(admin).await.is_ok(), "the node serves");
    drop(node);
    for addr in [http, admin] {
        assert!(
            closes(addr).await,
            "{addr} still serves after the node was dropped"
        );
    }
}
