//! `mesh console`: it serves the store on the address asked for and stops on SIGTERM; a bad
//! token file is a usage error that never shows the token.

use std::net::SocketAddr;

use mesh_audit::{Store, StoreOptions};
use mesh_testkit::http::must_get;
use mesh_testkit::TempStore;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::{assert_code, finish, mesh, run, stderr, WAIT};

const LISTENING: &str = "console on http://";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_serves_the_store_read_only_and_stops_on_sigterm() {
    let temp = TempStore::sqlite();
    let store = Store::open(temp.url().parse::<StoreOptions>().expect("a store url"))
        .await
        .expect("the store opens");
    store.close().await;
    let mut child = mesh(None)
        .args([
            "console",
            "--store",
            temp.url(),
            "--addr",
            "127.0.0.1:0",
            "--read-only",
        ])
        .spawn()
        .expect("mesh console starts");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr piped")).lines();
    let mut seen = Vec::new();
    let addr: SocketAddr = tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.next_line().await.expect("stderr readable") {
            seen.push(line.clone());
            if let Some(rest) = line.split(LISTENING).nth(1) {
                return rest.split('/').next().and_then(|a| a.parse().ok());
            }
        }
        None
    })
    .await
    .expect("the console says where it listens in time")
    .unwrap_or_else(|| panic!("no address on stderr: {seen:?}"));
    assert!(addr.ip().is_loopback());
    let drained = tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            seen.push(line);
        }
        seen
    });

    let (status, html) = must_get(addr, "/").await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Overview"), "{html}");
    let (status, html) = must_get(addr, "/events?key=module..x").await;
    assert_eq!(status, 400, "{html}");
    let (status, html) = must_get(addr, "/dead/redrive?queue=n1.a.events").await;
    assert_eq!(status, 403, "{html}");
    assert!(html.contains("read-only"), "{html}");

    let pid = child.id().expect("the child runs");
    kill(
        Pid::from_raw(i32::try_from(pid).expect("a pid")),
        Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let output = finish(child).await;
    let seen = drained.await.expect("the reader ran");
    assert_eq!(output.status.code(), Some(0), "{}", seen.join("\n"));
}

#[tokio::test]
async fn a_bad_token_file_is_a_usage_error_that_hides_the_token() {
    let temp = TempStore::sqlite();
    let dir = std::env::temp_dir().join(format!("mesh-console-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let file = dir.join("tokens");
    std::fs::write(&file, "alice sh0rt-secret\n").expect("the token file");
    let output = run(
        None,
        &[
            "console",
            "--store",
            temp.url(),
            "--token-file",
            file.to_str().expect("a utf-8 path"),
        ],
    )
    .await;
    assert_code(&output, 2);
    let text = stderr(&output);
    assert!(text.contains("line 1"), "{text}");
    assert!(!text.contains("sh0rt-secret"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
