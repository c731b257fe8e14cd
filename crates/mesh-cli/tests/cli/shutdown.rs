//! The binary tears its runtime down after every command, and nothing the commands opened is
//! still closing by then: run many times, side by side, the commands that open connections
//! (`emit`, `tail --count 1`, `call` to a tool nobody serves, `status`) each exit with their
//! own code and never print a panic.
//!
//! What this guards: the client library panics (an `unwrap` in its channel dispatcher) when
//! the broker acknowledges a channel close whose task is gone, as it is once the runtime is
//! dropped; a transport's close therefore returns only when every close it made was
//! acknowledged, and `main` drops the runtime instead of leaking it.

use std::process::Output;

use crate::{code, finish, run, stderr, stdout, tail, vhost, WAIT};

/// Rounds of the four commands; each round runs `call`, `status` and a second `emit` beside
/// the tail and its event, so the processes compete for the cores as they exit.
const ROUNDS: usize = 12;

/// Asserts `output` exited with `expected` and printed no panic.
fn exited_cleanly(what: &str, output: &Output, expected: i32) {
    let errors = stderr(output);
    assert!(
        !errors.contains("panicked at"),
        "{what} panicked:\n{errors}"
    );
    assert_eq!(
        code(output),
        expected,
        "{what}: stdout: {}\nstderr: {errors}",
        stdout(output)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_that_connect_exit_with_their_code_and_never_panic() {
    let vhost = vhost("cli-exit").await;
    let url = vhost.url();
    for round in 0..ROUNDS {
        let (tail, mut tail_errors) = tail(&url, "module.umami.#", &["--count", "1"]).await;
        let emit = run(
            Some(&url),
            &["emit", "module.umami.site.created", "--data", "{}"],
        );
        let beside = run(Some(&url), &["emit", "node.clitest.started"]);
        let call = run(Some(&url), &["call", "nobody.serves.this"]);
        let status = run(Some(&url), &["status"]);
        let (emit, beside, call, status) = tokio::join!(emit, beside, call, status);
        exited_cleanly(&format!("round {round}: emit"), &emit, 0);
        exited_cleanly(&format!("round {round}: emit beside"), &beside, 0);
        // 4: no server serves the tool.
        exited_cleanly(&format!("round {round}: call"), &call, 4);
        exited_cleanly(&format!("round {round}: status"), &status, 0);

        let mut tailed = finish(tail).await;
        // The tail's stderr was taken to see it listening: the rest of it, to its end.
        let mut rest = Vec::new();
        while let Some(line) = tokio::time::timeout(WAIT, tail_errors.next_line())
            .await
            .expect("the tail's stderr ends with the process")
            .expect("stderr readable")
        {
            rest.push(line);
        }
        tailed.stderr = rest.join("\n").into_bytes();
        exited_cleanly(&format!("round {round}: tail --count 1"), &tailed, 0);
        assert!(
            stdout(&tailed).contains("module.umami.site.created"),
            "round {round}: the tail printed the event: {}",
            stdout(&tailed)
        );
    }
    vhost.delete().await.unwrap();
}
