//! One output rule for every command: text a module or the broker controls (a log record on
//! `mesh.logs`, a queue name) reaches the operator's terminal with its control and format
//! characters escaped, and `--json` carries them as `\uXXXX` escapes that read back as the
//! original text. `mesh logs tail` is read through a pseudo-terminal, so the terminal's code
//! path (colour on, nothing stripped) is the one tested.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::process::Stdio;

use mesh::amqp::management::ManagementClient;
use mesh_amqp::PlainLink;
use mesh_core::text::{escape, is_unsafe};
use mesh_testkit::TestVhost;
use nix::errno::Errno;
use nix::pty::openpty;
use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};
use serde_json::{json, Value};

use crate::logs::start_tail_with;
use crate::{assert_code, finish, mesh, options, run, stdout, vhost, NODE, WAIT};

/// What a module puts in a log record or its queue's name to take over a terminal: set the
/// clipboard (OSC 52), clear the screen, forge a line, rewrite this one (a lone CR), an 8-bit
/// CSI and NEL (C1), DEL, a right-to-left override, an isolate, a zero-width space and a line
/// separator. No dot, so it is one word of a queue name.
const HOSTILE: &str = "x\u{1b}]52;c;cm0gLXJmIH4K\u{7}\u{1b}[2J\r\n2026-01-01 INFO forged\rover\u{9b}1m\u{85}\u{7f}\u{202e}fdp\u{2066}i\u{200b}\u{2028}";

/// A pseudo-terminal in raw mode (no LF to CRLF), so what is read from its master side is
/// byte for byte what `mesh` wrote to it: (master, slave).
fn terminal() -> (OwnedFd, OwnedFd) {
    let pty = openpty(None, None).expect("a pseudo-terminal");
    let mut mode = tcgetattr(&pty.slave).expect("the terminal's mode");
    cfmakeraw(&mut mode);
    tcsetattr(&pty.slave, SetArg::TCSANOW, &mode).expect("raw mode");
    (pty.master, pty.slave)
}

/// Everything written to the terminal until its last writer closed it (EIO on Linux).
async fn read_terminal(master: OwnedFd) -> Vec<u8> {
    let reader = tokio::task::spawn_blocking(move || {
        let mut master = std::fs::File::from(master);
        let mut out = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            match master.read(&mut buffer) {
                Ok(0) => return out,
                Ok(n) => out.extend_from_slice(&buffer[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(Errno::EIO as i32) => return out,
                Err(e) => panic!("reading the terminal: {e}"),
            }
        }
    });
    tokio::time::timeout(WAIT, reader)
        .await
        .expect("the terminal closed in time")
        .expect("the reader ran")
}

/// Asserts that terminal output holds no unsafe character but line ends and, when `styles`,
/// the escapes of SGR styles (`ESC [ digits ; … m`), and shows `hostile` escaped.
fn assert_terminal_safe(output: &str, styles: bool, hostile: &str) {
    let mut rest = output;
    let mut plain = String::new();
    while let Some(at) = rest.find('\u{1b}') {
        plain.push_str(&rest[..at]);
        let sequence = &rest[at + 1..];
        let end = sequence
            .strip_prefix('[')
            .and_then(|s| s.find(|c: char| !c.is_ascii_digit() && c != ';'))
            .map(|n| n + 1);
        let sgr = end.is_some_and(|n| sequence[n..].starts_with('m'));
        assert!(
            styles && sgr,
            "an escape sequence other than a style: {output:?}"
        );
        rest = &sequence[end.unwrap_or(0) + 1..];
    }
    plain.push_str(rest);
    let bad: Vec<char> = plain
        .chars()
        .filter(|&c| is_unsafe(c) && c != '\n')
        .collect();
    assert!(
        bad.is_empty(),
        "unsafe {bad:?} reached the terminal: {output:?}"
    );
    assert!(
        plain.contains(escape(hostile).as_ref()),
        "shown escaped: {output:?}"
    );
}

/// Asserts that `--json` output holds no unsafe character; its documents, one a line (each
/// test then reads the hostile text back where the wire had it).
fn assert_json_safe(output: &str) -> Vec<Value> {
    let bad: Vec<char> = output
        .chars()
        .filter(|&c| is_unsafe(c) && c != '\n')
        .collect();
    assert!(
        bad.is_empty(),
        "unsafe {bad:?} in --json output: {output:?}"
    );
    output
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON document per line"))
        .collect()
}

/// Publishes a record to `mesh.logs` as any module may: raw, not through mesh-logs' layer.
async fn publish_record(vhost: &TestVhost) {
    let link = PlainLink::open(&options(vhost), mesh_logs::LOGS_EXCHANGE)
        .await
        .expect("a link to mesh.logs");
    let publisher = link.publisher().await.expect("a publisher");
    let record = json!({
        "time": "2026-01-01T00:00:00Z", "node": NODE, "source": "evil", "level": "info",
        "target": HOSTILE, "message": HOSTILE, "fields": {"note": HOSTILE},
    });
    publisher
        .publish(
            &format!("{NODE}.evil.info"),
            "application/json",
            serde_json::to_vec(&record).expect("a record"),
        )
        .await
        .expect("published");
    publisher.close().await;
    link.close().await;
}

/// `mesh logs tail` on a terminal, with its default colour and with `--color never`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_tail_shows_a_hostile_record_escaped_on_a_terminal() {
    let vhost = vhost("cli-escape-logs").await;
    for color in [None, Some("never")] {
        let (master, slave) = terminal();
        let mut command = mesh(Some(&vhost.url()));
        // A terminal that takes colour: nothing of the default path is turned off.
        command
            .env_remove("NO_COLOR")
            .env("TERM", "xterm-256color")
            .stdout(Stdio::from(slave));
        let mut args = vec!["--count", "1"];
        if let Some(color) = color {
            args.extend(["--color", color]);
        }
        let tail = start_tail_with(&vhost, command, "#", &args).await;
        let shown = tokio::spawn(read_terminal(master));
        publish_record(&vhost).await;
        let output = finish(tail).await;
        assert_code(&output, 0);
        let shown = shown.await.expect("the terminal was read");
        let text = String::from_utf8(shown).expect("UTF-8 on the terminal");
        assert_eq!(
            text.matches('\n').count(),
            1,
            "one record, one line: {text:?}"
        );
        assert_terminal_safe(&text, color.is_none(), HOSTILE);
    }

    // The same record as JSON: escaped, and it reads back as what was published.
    let (master, slave) = terminal();
    let mut command = mesh(Some(&vhost.url()));
    command.stdout(Stdio::from(slave));
    let tail = start_tail_with(&vhost, command, "#", &["--count", "1", "--json"]).await;
    let shown = tokio::spawn(read_terminal(master));
    publish_record(&vhost).await;
    assert_code(&finish(tail).await, 0);
    let text = String::from_utf8(shown.await.expect("read")).expect("UTF-8");
    let records = assert_json_safe(&text);
    assert_eq!(records.len(), 1, "{text:?}");
    assert_eq!(records[0]["message"], HOSTILE);
    assert_eq!(records[0]["fields"]["note"], HOSTILE);
    vhost.delete().await.expect("the vhost deleted");
}

/// `mesh status` and `mesh topology show` list a queue whose name a module chose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_topology_show_escape_a_hostile_queue_name() {
    let vhost = vhost("cli-escape-queue").await;
    let url = vhost.url();
    let management =
        mesh::amqp::management_options(&options(&vhost)).expect("the vhost's management API");
    let management = ManagementClient::new(&management).expect("a management client");
    // The management client addresses a queue by URL, and a URL parser drops CR, LF and TAB
    // from its input: the name declared here has the rest of the hostile text (the printers'
    // unit tests feed them CR and LF too).
    let module: String = HOSTILE
        .chars()
        .filter(|c| !matches!(c, '\r' | '\n' | '\t'))
        .collect();
    let queue = format!("{NODE}.{module}.events");
    assert!(queue.len() <= 255, "{}", queue.len());
    management
        .put_queue(vhost.name(), &queue, true, &serde_json::Map::new())
        .await
        .expect("the broker takes any UTF-8 queue name");

    for args in [
        &["status"][..],
        &[
            "topology",
            "show",
            "--module",
            "billing",
            "--pattern",
            "module.#",
        ][..],
    ] {
        let output = run(Some(&url), args).await;
        assert_code(&output, 0);
        let text = stdout(&output);
        assert_terminal_safe(&text, false, &module);
    }

    let output = run(Some(&url), &["status", "--json"]).await;
    assert_code(&output, 0);
    let status = assert_json_safe(&stdout(&output));
    assert_eq!(status[0]["modules"][0]["queue"], queue.as_str());
    assert_eq!(status[0]["modules"][0]["module"], module.as_str());

    let output = run(
        Some(&url),
        &[
            "topology",
            "show",
            "--json",
            "--module",
            "billing",
            "--pattern",
            "module.#",
        ],
    )
    .await;
    assert_code(&output, 0);
    let topology = assert_json_safe(&stdout(&output));
    let listed = topology[0]["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .any(|q| q["name"] == queue.as_str());
    assert!(listed, "{topology:?}");
    vhost.delete().await.expect("the vhost deleted");
}
