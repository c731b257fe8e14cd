use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;

use super::*;

/// A fresh directory of this test process.
fn scratch() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "mesh-files-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// A FIFO at `dir/name`, made by `mkfifo(1)`.
fn fifo(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let status = Command::new("mkfifo")
        .arg(&path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
    path
}

/// Writes `content` into the FIFO at `path` from a thread (opening it blocks until the
/// reader is there), then closes it.
fn feed(path: &Path, content: Vec<u8>) -> std::thread::JoinHandle<()> {
    let path = path.to_owned();
    std::thread::spawn(move || {
        let mut writer = File::options()
            .write(true)
            .open(path)
            .expect("the FIFO opens");
        // The reader may refuse and close early: a broken pipe is not this test's failure.
        let _ = writer.write_all(&content);
    })
}

/// A source that counts what it hands out.
struct Counting<'a> {
    given: &'a AtomicU64,
}

impl Read for Counting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        buf.fill(7);
        self.given.fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(buf.len())
    }
}

const WAIT: Duration = Duration::from_secs(30);

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_content_up_to_the_bound_reads_back_exactly(
        content in proptest::collection::vec(any::<u8>(), 0..=3000),
        slack in 0u64..200,
    ) {
        let dir = scratch();
        let max = content.len() as u64 + slack;
        let regular = dir.join("file");
        std::fs::write(&regular, &content).expect("written");
        prop_assert_eq!(read_bounded(&regular, max, WAIT).expect("read"), content.clone());

        let pipe = fifo(&dir, "fifo");
        let writer = feed(&pipe, content.clone());
        prop_assert_eq!(read_bounded(&pipe, max, WAIT).expect("read"), content);
        writer.join().expect("the writer ends");
        std::fs::remove_dir_all(dir).expect("cleaned");
    }

    #[test]
    fn content_over_the_bound_is_too_large(
        content in proptest::collection::vec(any::<u8>(), 1..=3000),
        short in 1u64..=3000,
    ) {
        let dir = scratch();
        let max = (content.len() as u64).saturating_sub(short.min(content.len() as u64));
        for path in [dir.join("file"), fifo(&dir, "fifo")] {
            let writer = if path.ends_with("fifo") {
                Some(feed(&path, content.clone()))
            } else {
                std::fs::write(&path, &content).expect("written");
                None
            };
            let error = read_bounded(&path, max, WAIT).expect_err("over the bound");
            prop_assert_eq!(error.kind(), FileErrorKind::TooLarge { limit: max });
            prop_assert_eq!(error.path(), path.as_path());
            if let Some(writer) = writer {
                writer.join().expect("the writer ends");
            }
        }
        std::fs::remove_dir_all(dir).expect("cleaned");
    }

    #[test]
    fn never_more_than_the_bound_and_one_is_read(max in 0u64..1_000_000) {
        let given = AtomicU64::new(0);
        let outcome = drain(Counting { given: &given }, max, || Ok(true));
        prop_assert!(matches!(outcome, Err(Stop::TooLarge)));
        prop_assert_eq!(given.load(Ordering::Relaxed), max + 1);
    }
}

#[test]
fn an_endless_device_is_refused_at_the_bound() {
    let error = read_bounded(Path::new("/dev/zero"), 4096, WAIT).expect_err("endless");
    assert_eq!(error.kind(), FileErrorKind::TooLarge { limit: 4096 });
    assert_eq!(error.to_string(), "/dev/zero is larger than 4 KiB");
}

#[test]
fn a_fifo_nobody_writes_to_is_refused_at_the_deadline() {
    let dir = scratch();
    let pipe = fifo(&dir, "fifo");
    let deadline = Duration::from_millis(300);
    let started = Instant::now();
    let error = read_bounded(&pipe, 4096, deadline).expect_err("no writer");
    assert!(started.elapsed() >= deadline);
    assert_eq!(
        error.kind(),
        FileErrorKind::NotReady {
            deadline,
            received: 0
        }
    );
    assert!(
        error.to_string().contains("gave nothing within 0.3s"),
        "{error}"
    );
    std::fs::remove_dir_all(dir).expect("cleaned");
}

#[test]
fn a_fifo_whose_writer_stays_silent_is_refused_at_the_deadline() {
    let dir = scratch();
    let pipe = fifo(&dir, "fifo");
    let (opened, wait_opened) = std::sync::mpsc::channel();
    let (done, wait_done) = std::sync::mpsc::channel::<()>();
    let path = pipe.clone();
    let writer = std::thread::spawn(move || {
        let mut writer = File::options().write(true).open(path).expect("opens");
        writer.write_all(b"half").expect("written");
        opened.send(()).expect("the test waits");
        // Held open, silent, until the test is done.
        let _ = wait_done.recv();
    });
    // The reader opens first (never blocking), then the writer's open completes.
    let reader = std::thread::spawn({
        let pipe = pipe.clone();
        move || read_bounded(&pipe, 4096, Duration::from_secs(2))
    });
    wait_opened.recv_timeout(WAIT).expect("the writer opened");
    let error = reader
        .join()
        .expect("the reader ends")
        .expect_err("never ends");
    assert!(
        matches!(error.kind(), FileErrorKind::NotReady { received: 4, .. }),
        "{error:?}"
    );
    done.send(()).expect("the writer waits");
    writer.join().expect("the writer ends");
    std::fs::remove_dir_all(dir).expect("cleaned");
}

#[test]
fn directories_and_missing_files_are_typed() {
    let dir = scratch();
    let error = read_bounded(&dir, 10, WAIT).expect_err("a directory");
    assert_eq!(
        error.kind(),
        FileErrorKind::NotAFile {
            what: "a directory"
        }
    );
    let missing = read_bounded(&dir.join("missing"), 10, WAIT).expect_err("missing");
    assert_eq!(missing.kind(), FileErrorKind::Io);
    assert!(missing.is_not_found());
    assert!(std::error::Error::source(&missing).is_some());
    std::fs::remove_dir_all(dir).expect("cleaned");
}

#[test]
fn text_must_be_utf8() {
    let dir = scratch();
    let path = dir.join("bin");
    std::fs::write(&path, [0xff, 0xfe]).expect("written");
    let error = read_bounded_text(&path, 10, WAIT).expect_err("not UTF-8");
    assert_eq!(error.kind(), FileErrorKind::NotText);
    std::fs::write(&path, "héllo").expect("written");
    assert_eq!(read_bounded_text(&path, 10, WAIT).expect("text"), "héllo");
    std::fs::remove_dir_all(dir).expect("cleaned");
}
