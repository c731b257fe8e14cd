//! A headless Chromium driven over WebDriver, for tests that click through the console as
//! an operator would.
//!
//! Each [`Browser`] is a `chromedriver` of its own on a free port, and the Chromium it starts
//! with a profile directory of its own, so tests of one binary run in parallel without
//! sharing anything. Both are found on the `PATH` (Debian's `chromium` and
//! `chromium-driver`, which `scripts/test.sh` installs); a missing one fails the test with
//! that hint, never skips it. chromedriver runs in a process group of its own, which Chromium
//! and its helpers join: the whole group is killed when the [`Browser`] is dropped, also when
//! the test panics (the crash reporter's handler, in a session of its own, exits with the
//! browser it watches).
//! [`Browser::close`] ends the session first, the polite way.
//!
//! Every wait is bounded: [`Browser::wait_for_text`] polls the page until an element shows a
//! text, or fails with what the page showed instead.

use std::future::Future;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use mesh_testkit::{free_port, TempDir};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// How long chromedriver may take to answer its `/status`, and a session to start.
const START: Duration = Duration::from_secs(60);
/// The default bound of a wait for the page.
pub(crate) const WAIT: Duration = Duration::from_secs(20);
/// The pause between two looks at the page while waiting.
const POLL: Duration = Duration::from_millis(50);
/// The window, so screenshots are the same size on every machine.
const WINDOW: (u32, u32) = (1280, 900);

/// How the browser looks: its window's size and its colour scheme.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Look {
    pub(crate) window: (u32, u32),
    pub(crate) dark: bool,
}

impl Default for Look {
    fn default() -> Look {
        Look {
            window: WINDOW,
            dark: false,
        }
    }
}

const HINT: &str = "the console's browser tests need Chromium and chromedriver (Debian: \
                    apt-get install chromium chromium-driver; bash scripts/test.sh installs them)";

/// Where screenshots go: `docs/console/` at the workspace's root.
pub(crate) const SCREENSHOTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/console/");

/// A headless Chromium and the chromedriver that drives it.
pub(crate) struct Browser {
    client: Client,
    driver: Driver,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser")
            .field("port", &self.driver.port)
            .finish_non_exhaustive()
    }
}

/// The chromedriver process, with every process it starts, killed on drop.
struct Driver {
    child: Child,
    port: u16,
    // Removed after the processes that use it are gone (fields drop after `drop` runs).
    profile: TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The group is chromedriver's own (`process_group(0)`): its id is chromedriver's.
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `name` on the `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

impl Browser {
    /// Starts chromedriver on a free port, waits until it answers, and opens a session of a
    /// headless Chromium with a window of [`WINDOW`] and a profile of its own.
    pub(crate) async fn start() -> anyhow::Result<Browser> {
        Browser::start_with(Look::default()).await
    }

    /// As [`Browser::start`], with a window of `look.window` and, when `look.dark`, the
    /// system's dark colour scheme (`prefers-color-scheme: dark`).
    pub(crate) async fn start_with(look: Look) -> anyhow::Result<Browser> {
        let chromium = on_path("chromium").context(HINT)?;
        let chromedriver = on_path("chromedriver").context(HINT)?;
        let profile = TempDir::new("console-browser")?;
        let port = free_port();
        let log = profile.join("chromedriver.log");
        let child = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}: {HINT}", chromedriver.display()))?;
        let mut driver = Driver {
            child,
            port,
            profile,
        };
        let url = format!("http://127.0.0.1:{port}");
        driver.wait_ready(&url, &log).await?;

        let user_data = driver.profile.join("profile");
        let mut args = vec![
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--no-first-run".to_owned(),
            "--hide-scrollbars".to_owned(),
            format!("--window-size={},{}", look.window.0, look.window.1),
            format!("--user-data-dir={}", user_data.display()),
        ];
        if look.dark {
            args.push("--force-dark-mode".to_owned());
            args.push("--blink-settings=preferredColorScheme=0".to_owned());
        }
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            serde_json::json!({ "binary": chromium, "args": args }),
        );
        // The console's messages (a Content-Security-Policy violation is one), for
        // `console_log`.
        capabilities.insert(
            "goog:loggingPrefs".to_owned(),
            serde_json::json!({ "browser": "ALL" }),
        );
        let client = tokio::time::timeout(
            START,
            ClientBuilder::new(HttpConnector::new())
                .capabilities(capabilities)
                .connect(&url),
        )
        .await
        .with_context(|| format!("no Chromium session within {START:?}"))?
        .with_context(|| {
            format!(
                "starting a Chromium session ({HINT}); chromedriver's log: {}",
                tail(&log)
            )
        })?;
        Ok(Browser { client, driver })
    }

    /// The WebDriver client, for what the helpers here do not cover.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Loads `url` and waits until it has loaded.
    pub(crate) async fn open(&self, url: &str) -> anyhow::Result<()> {
        self.client
            .goto(url)
            .await
            .with_context(|| format!("opening {url}"))
    }

    /// The page's URL.
    pub(crate) async fn url(&self) -> anyhow::Result<String> {
        Ok(self.client.current_url().await?.to_string())
    }

    /// The first element `css` selects.
    pub(crate) async fn find(&self, css: &str) -> anyhow::Result<Element> {
        match self.client.find(Locator::Css(css)).await {
            Ok(element) => Ok(element),
            Err(e) => bail!(
                "no `{css}` on {}: {e}; the page shows:\n{}",
                self.where_().await,
                self.body_text().await
            ),
        }
    }

    /// Every element `css` selects (none is no error).
    pub(crate) async fn find_all(&self, css: &str) -> anyhow::Result<Vec<Element>> {
        Ok(self.client.find_all(Locator::Css(css)).await?)
    }

    /// The visible text of the first element `css` selects.
    pub(crate) async fn text(&self, css: &str) -> anyhow::Result<String> {
        Ok(self.find(css).await?.text().await?)
    }

    /// The visible texts of every element `css` selects, in document order.
    pub(crate) async fn texts(&self, css: &str) -> anyhow::Result<Vec<String>> {
        let mut out = Vec::new();
        for element in self.find_all(css).await? {
            out.push(element.text().await?);
        }
        Ok(out)
    }

    /// The attribute `name` of every element `css` selects (those without it left out).
    pub(crate) async fn attrs(&self, css: &str, name: &str) -> anyhow::Result<Vec<String>> {
        let mut out = Vec::new();
        for element in self.find_all(css).await? {
            if let Some(value) = element.attr(name).await? {
                out.push(value);
            }
        }
        Ok(out)
    }

    /// Clicks the first element `css` selects.
    pub(crate) async fn click(&self, css: &str) -> anyhow::Result<()> {
        self.find(css)
            .await?
            .click()
            .await
            .with_context(|| format!("clicking `{css}`"))
    }

    /// Clears the first input `css` selects and types `text` into it, key by key.
    pub(crate) async fn type_into(&self, css: &str, text: &str) -> anyhow::Result<()> {
        let input = self.find(css).await?;
        input.clear().await?;
        input
            .send_keys(text)
            .await
            .with_context(|| format!("typing into `{css}`"))
    }

    /// Waits until an element `css` selects shows `text` (within its visible text), at most
    /// `timeout`; fails with what the page shows instead.
    pub(crate) async fn wait_for_text(
        &self,
        css: &str,
        text: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let found = self
            .poll(timeout, || async {
                let texts = self.texts(css).await.ok()?;
                texts.iter().any(|t| t.contains(text)).then_some(())
            })
            .await;
        match found {
            Some(()) => Ok(()),
            None => bail!(
                "no `{css}` showed {text:?} within {timeout:?} on {}; the page shows:\n{}",
                self.where_().await,
                self.body_text().await
            ),
        }
    }

    /// Waits until the page's URL satisfies `check`, at most `timeout` (after a click that
    /// navigates, before reading the new page).
    pub(crate) async fn wait_for_url(
        &self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&str) -> bool,
    ) -> anyhow::Result<String> {
        let found = self
            .poll(timeout, || async {
                let url = self.url().await.ok()?;
                check(&url).then_some(url)
            })
            .await;
        match found {
            Some(url) => Ok(url),
            None => bail!(
                "the page did not go to {what} within {timeout:?}: it is {}",
                self.where_().await
            ),
        }
    }

    /// Polls `f` until it returns `Some`, at most `timeout`.
    async fn poll<T, F, Fut>(&self, timeout: Duration, mut f: F) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        tokio::time::timeout(timeout, async {
            loop {
                if let Some(value) = f().await {
                    return value;
                }
                tokio::time::sleep(POLL).await;
            }
        })
        .await
        .ok()
    }

    /// The messages of the browser's console since the last call (chromedriver's log of type
    /// `browser`, which it empties as it answers): every Content-Security-Policy violation
    /// of a page is one.
    pub(crate) async fn console_log(&self) -> anyhow::Result<Vec<String>> {
        let session = self
            .client
            .session_id()
            .await?
            .context("the browser has no session")?;
        let url = format!(
            "http://127.0.0.1:{}/session/{session}/se/log",
            self.driver.port
        );
        let response = super::client()
            .post(&url)
            .header("content-type", "application/json")
            .body(r#"{"type":"browser"}"#)
            .send()
            .await
            .with_context(|| format!("reading the browser's log at {url}"))?;
        let body: serde_json::Value = serde_json::from_str(&response.text().await?)?;
        let entries = body["value"]
            .as_array()
            .with_context(|| format!("the browser's log is not a list: {body}"))?;
        Ok(entries
            .iter()
            .filter_map(|entry| entry["message"].as_str().map(str::to_owned))
            .collect())
    }

    /// Polls `f` until it returns `Some`, at most `timeout`; fails saying `what` did not
    /// happen.
    pub(crate) async fn wait_until<T, F, Fut>(
        &self,
        what: &str,
        timeout: Duration,
        f: F,
    ) -> anyhow::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        match self.poll(timeout, f).await {
            Some(value) => Ok(value),
            None => bail!(
                "{what} did not happen within {timeout:?} on {}; the page shows:\n{}",
                self.where_().await,
                self.body_text().await
            ),
        }
    }

    /// Saves a PNG of the window as `docs/console/<name>.png`, and returns its path.
    pub(crate) async fn screenshot(&self, name: &str) -> anyhow::Result<PathBuf> {
        let png = self
            .client
            .screenshot()
            .await
            .context("taking a screenshot")?;
        anyhow::ensure!(png.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
        let dir = Path::new(SCREENSHOTS);
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("{name}.png"));
        // Whole or not at all: a reader (or a parallel test) never sees half a file.
        let partial = dir.join(format!(".{name}.png.partial"));
        std::fs::write(&partial, &png).with_context(|| format!("writing {}", partial.display()))?;
        std::fs::rename(&partial, &path).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    /// Ends the session (Chromium quits), then chromedriver.
    pub(crate) async fn close(self) -> anyhow::Result<()> {
        let Browser { client, driver } = self;
        let closed = client.close().await;
        drop(driver);
        Ok(closed?)
    }

    /// The page's URL, for messages.
    async fn where_(&self) -> String {
        self.url()
            .await
            .unwrap_or_else(|e| format!("(no URL: {e})"))
    }

    /// The page's visible text, for messages (cut at 4000 characters).
    async fn body_text(&self) -> String {
        let text = match self.client.find(Locator::Css("body")).await {
            Ok(body) => body
                .text()
                .await
                .unwrap_or_else(|e| format!("(no text: {e})")),
            Err(e) => format!("(no body: {e})"),
        };
        text.chars().take(4000).collect()
    }
}

impl Driver {
    /// Polls chromedriver's `/status` until it says it is ready, at most [`START`].
    async fn wait_ready(&mut self, url: &str, log: &Path) -> anyhow::Result<()> {
        let client = super::client();
        let status = format!("{url}/status");
        let ready = tokio::time::timeout(START, async {
            loop {
                if let Some(exit) = self.child.try_wait()? {
                    bail!("chromedriver exited ({exit}); its log: {}", tail(log));
                }
                if let Ok(response) = client.get(&status).send().await {
                    let body = response.text().await.unwrap_or_default();
                    let body: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                    if body["value"]["ready"] == serde_json::Value::Bool(true) {
                        return Ok(());
                    }
                }
                tokio::time::sleep(POLL).await;
            }
        })
        .await;
        match ready {
            Ok(result) => result,
            Err(_) => bail!(
                "chromedriver did not answer on {status} within {START:?}; its log: {}",
                tail(log)
            ),
        }
    }
}

/// The last lines of a log, for messages.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
