//! The command line as a user meets it: shell completions, man pages, short flags, the fixed
//! set of `--reason` values and `--bind`.

use std::process::Stdio;

use crate::{assert_code, finish, json, run, stderr, stdout, vhost, NODE};

/// Nothing listens on port 1: these commands must not need a broker.
const UNREACHABLE: &str = "amqp://127.0.0.1:1";

/// Every dead reason `--reason` accepts.
const REASONS: [&str; 10] = [
    "max-attempts",
    "permanent",
    "undecodable",
    "unread-schema",
    "delivery-limit",
    "rejected",
    "expired",
    "forged-source",
    "schema-invalid",
    "foreign-path",
];

#[tokio::test]
async fn completions_are_printed_for_each_shell_and_bash_loads_them() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let output = run(Some(UNREACHABLE), &["completions", shell]).await;
        assert_code(&output, 0);
        let script = stdout(&output);
        for word in ["emit", "redrive", "purge", "dry-run", "completions"] {
            assert!(script.contains(word), "{shell}: no `{word}` in {script}");
        }
        // The reasons are completed as values.
        assert!(script.contains("forged-source"), "{shell}");
    }
    let output = run(Some(UNREACHABLE), &["completions", "tcsh"]).await;
    assert_code(&output, 2);

    // bash sources it and then completes `mesh` with it.
    let command = format!(
        "source <('{}' completions bash) && complete -p mesh",
        env!("CARGO_BIN_EXE_mesh")
    );
    let child = tokio::process::Command::new("bash")
        .args(["-c", &command])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("bash runs (install bash to run the CLI tests)");
    let output = finish(child).await;
    assert_code(&output, 0);
    assert!(
        stdout(&output).contains("_mesh mesh"),
        "{}",
        stdout(&output)
    );
}

/// Renders a page with groff, as `man` does; returns the text.
async fn render(page: &std::path::Path) -> String {
    let child = tokio::process::Command::new("groff")
        .args(["-man", "-Tutf8", "-ww"])
        .arg(page)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("groff runs (Debian: apt-get install groff-base; scripts/test.sh installs it)");
    let output = finish(child).await;
    assert_code(&output, 0);
    assert_eq!(stderr(&output), "", "groff warns about {}", page.display());
    stdout(&output)
}

#[tokio::test]
async fn man_pages_are_written_and_render() {
    let dir = std::env::temp_dir().join(format!("mesh-cli-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let output = run(
        Some(UNREACHABLE),
        &[
            "man",
            "--out",
            dir.to_str().expect("a UTF-8 path"),
            "--json",
        ],
    )
    .await;
    assert_code(&output, 0);
    let listed = json(&output);
    let pages: Vec<&str> = listed["pages"]
        .as_array()
        .expect("a list of pages")
        .iter()
        .map(|p| p.as_str().expect("a file name"))
        .collect();
    for wanted in [
        "mesh.1",
        "mesh-emit.1",
        "mesh-tail.1",
        "mesh-topology-apply.1",
        "mesh-dead.1",
        "mesh-dead-redrive.1",
        "mesh-dead-purge.1",
        "mesh-outbox-relay.1",
        "mesh-outbox-status.1",
        "mesh-completions.1",
    ] {
        assert!(pages.contains(&wanted), "{wanted} not in {pages:?}");
    }
    assert!(!pages.iter().any(|p| p.contains("help")), "{pages:?}");
    for page in &pages {
        let text = std::fs::read_to_string(dir.join(page)).expect("the page was written");
        let name = page.trim_end_matches(".1");
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!(".TH {name} 1"))),
            "{page}: {text}"
        );
        assert!(text.contains(".SH SYNOPSIS"), "{page}");
        assert!(text.is_ascii(), "{page} is not plain ASCII roff");
        render(&dir.join(page)).await;
    }
    let shown = render(&dir.join("mesh-dead-redrive.1")).await;
    assert!(shown.contains("mesh dead redrive"), "{shown}");
    assert!(shown.contains("--dry-run"), "{shown}");
    let shown = render(&dir.join("mesh-dead-list.1")).await;
    for reason in REASONS {
        assert!(shown.contains(reason), "{reason} in {shown}");
    }

    // Without --out: the page of mesh itself on stdout.
    let output = run(Some(UNREACHABLE), &["man"]).await;
    assert_code(&output, 0);
    assert!(
        stdout(&output).contains(".TH mesh 1"),
        "{}",
        stdout(&output)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn an_unknown_reason_is_a_usage_error_listing_the_reasons() {
    for command in [&["dead", "list"][..], &["dead", "purge"][..]] {
        for flag in ["--reason", "-r"] {
            let args = [
                command,
                &[flag, "max-attempt", "--store", "sqlite::memory:"],
            ]
            .concat();
            let output = run(Some(UNREACHABLE), &args).await;
            assert_code(&output, 2);
            let err = stderr(&output);
            assert!(err.contains("max-attempt"), "{args:?}: {err}");
            for reason in REASONS {
                assert!(err.contains(reason), "{args:?}: {reason} not listed: {err}");
            }
        }
    }
    // The help says what each one means.
    let output = run(Some(UNREACHABLE), &["dead", "list", "--help"]).await;
    assert_code(&output, 0);
    let help = stdout(&output);
    for reason in REASONS {
        assert!(help.contains(&format!("{reason}:")), "{reason}: {help}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_flags_and_bind_work() {
    let vhost = vhost("cli-short").await;
    let url = vhost.url();

    // emit -d -s -n, call -d -t, tail -n.
    let output = run(
        Some(&url),
        &[
            "emit",
            "module.umami.tick",
            "-d",
            r#"{"n":1}"#,
            "-s",
            "umami",
            "-n",
            "3",
            "--json",
        ],
    )
    .await;
    assert_code(&output, 0);
    assert_eq!(json(&output)["confirmed"], 3);
    let output = run(
        Some(&url),
        &["call", "nobody.serves", "-d", "1", "-t", "2s"],
    )
    .await;
    assert_code(&output, 4);
    let (tail, _errors) = crate::tail(&url, "module.umami.#", &["-n", "1", "--json"]).await;
    let output = run(Some(&url), &["emit", "module.umami.tock", "-d", "7"]).await;
    assert_code(&output, 0);
    let output = finish(tail).await;
    assert_code(&output, 0);
    assert_eq!(json(&output)["key"], "module.umami.tock");

    // --bind pairs module and pattern in any order; with one --module, -p is its own
    // wherever it stands.
    let billing = format!("{NODE}.billing.events");
    let mailer = format!("{NODE}.mailer.events");
    let output = run(
        Some(&url),
        &[
            "topology",
            "plan",
            "-b",
            "billing=module.umami.#",
            "-p",
            "node.*.joined",
            "-m",
            "mailer",
            "-b",
            "billing=a.b",
            "--json",
        ],
    )
    .await;
    assert_code(&output, 0);
    let plan = json(&output);
    let mut bound: Vec<(String, String)> = plan["differences"]
        .as_array()
        .expect("a list")
        .iter()
        .filter(|d| d["kind"] == "missing-binding")
        .map(|d| {
            (
                d["queue"].as_str().unwrap_or_default().to_owned(),
                d["routing_key"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    bound.sort();
    assert_eq!(
        bound,
        [
            (billing.clone(), "a.b".to_owned()),
            (billing.clone(), "module.umami.#".to_owned()),
            (mailer.clone(), "node.*.joined".to_owned()),
        ],
        "{plan}"
    );
    // With several modules, a pattern before all of them belongs to none: say --bind.
    let output = run(
        Some(&url),
        &["topology", "plan", "-p", "x.y", "-m", "a", "-m", "b"],
    )
    .await;
    assert_code(&output, 2);
    assert!(
        stderr(&output).contains("--bind M=x.y"),
        "{}",
        stderr(&output)
    );
    let output = run(Some(&url), &["topology", "plan", "-b", "billing"]).await;
    assert_code(&output, 2);
    assert!(
        stderr(&output).contains("MODULE=PATTERN"),
        "{}",
        stderr(&output)
    );
    vhost.delete().await.unwrap();
}
