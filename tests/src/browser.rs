//! A headless Chromium for the console's browser tests, driven over W3C WebDriver.
//!
//! [`Browser::start`] runs Debian's `chromedriver` on a free loopback port and opens one
//! headless `chromium` session. Outside CI, a machine without them skips the test with a
//! note; under `CI=true` their absence fails it (`.ci/run` installs both).
//!
//! Decision: the WebDriver protocol is spoken directly over the crate's `reqwest` instead
//! of through fantoccini or chromiumoxide. The tests need eight commands (new session,
//! navigate, execute, find, click, type, screenshot, end), each one JSON request; the
//! crates would add their own HTTP stack (fantoccini: hyper plus the `webdriver` crate and
//! its ICU tables; chromiumoxide: the generated CDP bindings, minutes of build on two
//! cores) for no behaviour the tests use.
//!
//! Waiting: [`Browser::wait_for`] runs a predicate in the page until it holds (checked on
//! every animation frame and every DOM mutation, bounded by a deadline), so no test sleeps.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// Where Debian puts them.
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The W3C key of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
/// How long a wait in the page may take before the test fails (a hang guard).
pub const WAIT: Duration = Duration::from_secs(30);

pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
}

fn find(var: &str, default: &str) -> Option<PathBuf> {
    let path = std::env::var(var)
        .ok()
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    path.is_file().then_some(path)
}

/// Chromium and chromedriver, if both are installed; `None` (with a note) when one is
/// missing outside CI, a panic under `CI=true`.
fn installed(test: &str) -> Option<(PathBuf, PathBuf)> {
    let (Some(chromium), Some(driver)) = (
        find("TROUPE_CHROMIUM", CHROMIUM),
        find("TROUPE_CHROMEDRIVER", CHROMEDRIVER),
    ) else {
        if crate::env::in_ci() {
            panic!(
                "{test}: chromium and chromium-driver are missing and CI=true; the browser \
                 tests must run in CI (apt-get install chromium chromium-driver)"
            );
        }
        eprintln!("note: {test} skipped: install chromium and chromium-driver to run it");
        return None;
    };
    Some((chromium, driver))
}

/// Waits until chromedriver answers `/status`, as it does once it listens; bounded.
async fn driver_answering(http: &reqwest::Client, base: &str, child: &mut Child) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(r) = http.get(format!("{base}/status")).send().await
            && r.status().is_success()
        {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("chromedriver exited at start: {status}");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "chromedriver did not answer within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A new headless Chromium session; its id.
async fn new_session(http: &reqwest::Client, base: &str, chromium: &Path) -> String {
    let caps = json!({"capabilities": {"alwaysMatch": {
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,900",
                     "--no-first-run", "--no-default-browser-check"]
        }
    }}});
    let answer: Value = http
        .post(format!("{base}/session"))
        .json(&caps)
        .send()
        .await
        .expect("new session")
        .json()
        .await
        .expect("new session JSON");
    answer["value"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("no session: {answer}"))
        .to_string()
}

impl Browser {
    /// Starts chromedriver and a headless session. `None` (with a note) when chromium or
    /// chromedriver is missing outside CI; a panic under `CI=true`.
    pub async fn start(test: &str) -> Option<Browser> {
        let (chromium, driver) = installed(test)?;
        let port = free_port();
        let mut child = Command::new(&driver)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", driver.display()));
        let http = crate::http_client()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("reqwest client");
        let base = format!("http://127.0.0.1:{port}");
        driver_answering(&http, &base, &mut child).await;
        let session = new_session(&http, &base, &chromium).await;
        let browser = Browser {
            driver: child,
            base,
            session,
            http,
        };
        browser
            .command(
                "POST",
                "timeouts",
                json!({"script": WAIT.as_millis() as u64 + 5_000}),
            )
            .await;
        Some(browser)
    }

    async fn command(&self, method: &str, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}/{path}", self.base, self.session);
        let request = match method {
            "GET" => self.http.get(&url),
            "DELETE" => self.http.delete(&url),
            _ => self.http.post(&url).json(&body),
        };
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        assert!(
            status.is_success(),
            "{method} {path} failed ({status}): {answer}"
        );
        answer["value"].clone()
    }

    pub async fn goto(&self, url: &str) {
        self.command("POST", "url", json!({ "url": url })).await;
    }

    /// Runs `body` (a function body; `arguments` holds `args`) in the page; its result.
    pub async fn run(&self, body: &str, args: Value) -> Value {
        self.command(
            "POST",
            "execute/sync",
            json!({"script": body, "args": args}),
        )
        .await
    }

    /// Waits until `expression` (JavaScript) is truthy in the page and returns its value.
    /// Panics after [`WAIT`] with `what` and the page's visible text.
    pub async fn wait_for(&self, what: &str, expression: &str) -> Value {
        let script = format!(
            "const done = arguments[arguments.length - 1];
             const probe = () => {{ try {{ return ({expression}); }} catch (e) {{ return null; }} }};
             const deadline = Date.now() + {ms};
             let observer = null;
             const check = () => {{
               const v = probe();
               if (v) {{ if (observer) observer.disconnect(); done({{ok: true, value: v}}); return true; }}
               if (Date.now() > deadline) {{
                 if (observer) observer.disconnect();
                 done({{ok: false, text: document.body ? document.body.innerText.slice(0, 3000) : ''}});
                 return true;
               }}
               return false;
             }};
             if (!check()) {{
               observer = new MutationObserver(check);
               observer.observe(document, {{subtree: true, childList: true, attributes: true, characterData: true}});
               const tick = () => {{ if (!check()) setTimeout(tick, 50); }};
               tick();
             }}",
            ms = WAIT.as_millis()
        );
        let answer = self
            .command(
                "POST",
                "execute/async",
                json!({"script": script, "args": []}),
            )
            .await;
        if answer["ok"].as_bool() != Some(true) {
            panic!(
                "waited {WAIT:?} for {what} (`{expression}`); the page shows:\n{}",
                answer["text"].as_str().unwrap_or("")
            );
        }
        answer["value"].clone()
    }

    async fn element(&self, css: &str) -> String {
        let found = self
            .command(
                "POST",
                "element",
                json!({"using": "css selector", "value": css}),
            )
            .await;
        found[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element `{css}`: {found}"))
            .to_string()
    }

    pub async fn click(&self, css: &str) {
        let id = self.element(css).await;
        self.command("POST", &format!("element/{id}/click"), json!({}))
            .await;
    }

    /// Types `text` into the element, as a user would (key events).
    pub async fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.command(
            "POST",
            &format!("element/{id}/value"),
            json!({ "text": text }),
        )
        .await;
    }

    /// Ends the session (chromium exits) and stops chromedriver.
    pub async fn quit(mut self) {
        let url = format!("{}/session/{}", self.base, self.session);
        let _ = self.http.delete(&url).send().await;
        let _ = self.driver.kill().await;
    }

    /// Writes a PNG of the window to `dir/name.png`.
    pub async fn screenshot(&self, dir: &Path, name: &str) {
        use base64::Engine;
        let data = self.command("GET", "screenshot", Value::Null).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data.as_str().expect("screenshot data"))
            .expect("screenshot base64");
        std::fs::create_dir_all(dir).expect("screenshots dir");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("write screenshot");
    }
}

/// `TROUPE_SCREENSHOTS_DIR`, when the tests should write screenshots (docs/console/).
pub fn screenshots_dir() -> Option<PathBuf> {
    std::env::var("TROUPE_SCREENSHOTS_DIR")
        .ok()
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

impl Drop for Browser {
    fn drop(&mut self) {
        // A test that panicked did not `quit`: stop chromedriver at least (an async
        // DELETE of the session cannot run in a drop).
        let _ = self.driver.start_kill();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
