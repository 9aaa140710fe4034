//! Headless Chromium driven through chromedriver (Debian's `chromium` and `chromium-driver`,
//! installed by `tools/deps.sh`), a `pallet ui` process to point it at, screenshots, and the
//! axe-core accessibility check (`tools/axe.sh` installs it). Used with
//! `#[path = "support/browser.rs"] mod browser;`.

#![allow(dead_code)] // each test binary uses a different part of this module

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Where the tests' screenshots go: `<target>/tmp/ui-screenshots`.
pub fn screenshot_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A chromedriver process and one browser session, both ended when dropped.
pub struct Browser {
    driver: Child,
    /// The WebDriver session.
    pub client: Client,
    profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium of `width` × `height` with a fresh profile.
    pub async fn start(width: u32, height: u32) -> Browser {
        for binary in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(binary).exists(),
                "{binary} is missing: install Debian's chromium and chromium-driver (tools/deps.sh)"
            );
        }
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let profile = tempfile::tempdir().unwrap();
        // Flags that keep Chromium from reaching out (no network here) and from refusing
        // connections in this sandbox; a fresh profile each time.
        let args = vec![
            "--headless".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        });
        let capabilities = capabilities.as_object().unwrap().clone();
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => break client,
                // chromedriver is still starting.
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("no WebDriver session from chromedriver at {url}: {e}"),
            }
        };
        Browser {
            driver,
            client,
            profile,
        }
    }

    /// Opens `url`.
    pub async fn open(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    /// The page's text (its `<main>`).
    pub async fn main_text(&self) -> String {
        match self.client.find(Locator::Css("main")).await {
            Ok(main) => main.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Waits until `probe(main text)` holds, up to `timeout`; panics with the last text.
    pub async fn wait_text(
        &self,
        what: &str,
        timeout: Duration,
        probe: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let text = self.main_text().await;
            if probe(&text) {
                return text;
            }
            if Instant::now() >= deadline {
                panic!("timed out after {timeout:?} waiting for {what}; the page said:\n{text}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Runs `script` (a function body) in the page and returns its value.
    pub async fn js(&self, script: &str) -> Value {
        self.client.execute(script, vec![]).await.unwrap()
    }

    /// Saves a screenshot of the page as `<screenshot_dir>/<name>.png`; returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.unwrap();
        let path = screenshot_dir().join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        eprintln!("screenshot: {}", path.display());
        path
    }

    /// Runs axe-core on the page; returns the serious and critical violations as
    /// `id: help (n nodes)` lines, and every violation's id.
    pub async fn axe(&self) -> (Vec<String>, Vec<String>) {
        let script = axe_script();
        self.client.execute(&script, vec![]).await.unwrap();
        let result = self
            .client
            .execute_async(
                "const done = arguments[arguments.length - 1];
                 axe.run(document, {resultTypes: ['violations']})
                    .then(r => done(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.length,
                        targets: v.nodes.slice(0, 3).map(n => n.target.join(' '))}))))
                    .catch(e => done([{id: 'axe-error', impact: 'critical', help: String(e), nodes: 0, targets: []}]));",
                vec![],
            )
            .await
            .unwrap();
        let all: Vec<Value> = result.as_array().cloned().unwrap_or_default();
        let serious = all
            .iter()
            .filter(|v| matches!(v["impact"].as_str(), Some("serious") | Some("critical")))
            .map(|v| {
                format!(
                    "{}: {} ({} nodes: {})",
                    v["id"], v["help"], v["nodes"], v["targets"]
                )
            })
            .collect();
        let ids = all
            .iter()
            .map(|v| {
                format!(
                    "{} ({})",
                    v["id"].as_str().unwrap_or(""),
                    v["impact"].as_str().unwrap_or("")
                )
            })
            .collect();
        (serious, ids)
    }
}

/// axe-core's script, installed by `tools/axe.sh` (run here when missing).
fn axe_script() -> String {
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tools/axe.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("tools/axe.sh runs");
    assert!(out.status.success(), "tools/axe.sh failed");
    let path = String::from_utf8(out.stdout).unwrap();
    std::fs::read_to_string(path.trim()).unwrap()
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// A `pallet ui` process, stopped when dropped.
pub struct View {
    child: Child,
    /// Its login address (with the session's secret).
    pub login: String,
    /// Its base address (`http://127.0.0.1:PORT`).
    pub base: String,
}

impl View {
    /// Starts `pallet ui` with `args` (a kubeconfig, a change log…) on a free port.
    pub fn start(args: &[&str]) -> View {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pallet"))
            .arg("ui")
            .args(["--address", "127.0.0.1:0", "--allow-loopback-egress"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("pallet ui starts");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let login = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("pallet ui printed no address: {line:?}"))
            .to_string();
        let base = login.split("/login").next().unwrap().to_string();
        View { child, login, base }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for View {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
