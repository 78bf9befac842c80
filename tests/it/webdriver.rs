//! A real headless Chromium driven through chromedriver (WebDriver), for
//! the dashboard tests. Outside CI a machine without Chromium skips them
//! with a message; in CI (`CI` set) a missing browser fails them.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};

use crate::support::{free_port, wait_for};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The screenshots the book's console page shows.
const BOOK: [&str; 9] = [
    "overview",
    "bulk-confirm",
    "audit",
    "overview-live",
    "partitions",
    "partition-progress",
    "partition-failed",
    "processors-send-rate",
    "limits",
];

/// chromedriver plus one browser session; `close` it at the end of a test.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium; `javascript: false`
    /// turns scripts off. None (skip) without Chromium outside CI.
    pub async fn start(javascript: bool) -> Option<Browser> {
        let chromium = std::env::var("FEED_CHROMIUM").unwrap_or_else(|_| CHROMIUM.into());
        let driver = std::env::var("FEED_CHROMEDRIVER").unwrap_or_else(|_| CHROMEDRIVER.into());
        if !PathBuf::from(&chromium).exists() || !PathBuf::from(&driver).exists() {
            let why = format!(
                "{chromium} or {driver} missing (apt-get install chromium chromium-driver)"
            );
            if std::env::var_os("CI").is_some() {
                panic!("browser tests need Chromium in CI: {why}");
            }
            eprintln!("skipping browser test: {why}");
            return None;
        }
        let port = free_port();
        let child = Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        wait_for(
            "chromedriver listening",
            Duration::from_secs(30),
            || async {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
            },
        )
        .await;
        let profile = tempfile::tempdir().unwrap();
        let mut prefs = serde_json::Map::new();
        if !javascript {
            prefs.insert(
                "profile.managed_default_content_settings.javascript".into(),
                2.into(),
            );
        }
        let options = serde_json::json!({
            "binary": chromium,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,1000",
                format!("--user-data-dir={}", profile.path().display()),
            ],
            "prefs": prefs,
        });
        let mut caps = serde_json::Map::new();
        caps.insert("goog:chromeOptions".into(), options);
        // chromedriver is on loopback: plain HTTP, no TLS stack needed.
        let http = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(http)
            .capabilities(caps)
            .connect(&url)
            .await
            .expect("WebDriver session");
        Some(Browser {
            client,
            driver: child,
            _profile: profile,
        })
    }

    /// Ends the session (Chromium exits) and stops chromedriver.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }

    pub async fn goto(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
    }

    /// The text of the first element matching `css`, or "" when there is none.
    pub async fn text(&self, css: &str) -> String {
        match self.client.find(Locator::Css(css)).await {
            Ok(e) => e.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    pub async fn click(&self, css: &str) {
        self.click_found(Locator::Css(css), css).await
    }

    /// Clicks the link whose text is `text`.
    pub async fn click_link(&self, text: &str) {
        self.click_found(Locator::LinkText(text), text).await
    }

    /// Clicks what `locator` finds, finding it again while the page
    /// replaces it (a live page redraws its tables between the find and
    /// the click).
    async fn click_found(&self, locator: Locator<'_>, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let clicked = match self.client.find(locator).await {
                Ok(e) => e.click().await,
                Err(e) => Err(e),
            };
            match clicked {
                Ok(()) => return,
                Err(e) if Instant::now() > deadline => panic!("{what:?}: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Replaces the value of the input `css` with `text`, as typed.
    pub async fn fill(&self, css: &str, text: &str) {
        let input = self
            .client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css}: {e}"));
        input.clear().await.unwrap();
        if !text.is_empty() {
            input.send_keys(text).await.unwrap();
        }
    }

    /// Clicks the button whose text is `label` inside the first `scope` match.
    pub async fn press(&self, scope: &str, label: &str) {
        let css = format!("{scope} button[value='{label}']");
        self.click(&css).await;
    }

    /// Waits until `css`'s text contains `want` (the page refreshes itself).
    pub async fn wait_text(&self, css: &str, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let got = self.text(css).await;
            if got.contains(want) {
                return;
            }
            if Instant::now() > deadline {
                let page = self.client.source().await.unwrap_or_default();
                panic!("{css}: waited for {want:?}, have {got:?}\n{page}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Evaluates a script expression and returns its JSON value.
    pub async fn eval(&self, expr: &str) -> serde_json::Value {
        self.client
            .execute(&format!("return {expr};"), vec![])
            .await
            .unwrap()
    }

    /// Writes a PNG of the page to `target/screenshots/NAME.png`; with
    /// `FEED_SCREENSHOTS=1`, the pages the book shows also to
    /// `docs/book/src/images/console-NAME.png`.
    pub async fn screenshot(&self, name: &str) {
        let dir = std::env::var("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
            .join("screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let png = self.client.screenshot().await.unwrap();
        std::fs::write(dir.join(format!("{name}.png")), &png).unwrap();
        if std::env::var("FEED_SCREENSHOTS").is_ok_and(|v| v == "1") && BOOK.contains(&name) {
            let book = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/book/src/images");
            std::fs::write(book.join(format!("console-{name}.png")), &png).unwrap();
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
