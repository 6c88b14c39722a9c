//! What the gateway says about itself that a test may wait on: its decision counters from
//! `GET /metrics`, its peak memory, and the pairing helpers of the access tests (`troupe pairing`, run
//! beside the gateway on its database). Waiting on a counter the gateway bumps after a
//! message's turn ended is how a test knows a message that gets no reply was handled.

use std::time::Duration;

use crate::TestApp;

/// The text of `GET /metrics`.
pub async fn metrics_text(app: &TestApp) -> String {
    app.client()
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics body")
}

/// The peak resident memory of process `pid` in KiB (`VmHWM` of `/proc/<pid>/status`).
pub fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// `troupe_decisions_total` for `platform` and `decision` (`responded`, `ignored`…).
pub async fn decisions(app: &TestApp, platform: &str, decision: &str) -> u64 {
    metrics_text(app)
        .await
        .lines()
        .filter(|l| l.starts_with("troupe_decisions_total{"))
        .filter(|l| l.contains(&format!("platform=\"{platform}\"")))
        .filter(|l| l.contains(&format!("decision=\"{decision}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// Waits until `n` messages on `platform` were decided `decision`.
pub async fn decided(app: &TestApp, platform: &str, decision: &str, n: u64, timeout: Duration) {
    crate::eventually(
        &format!("{n} {platform} messages {decision}"),
        timeout,
        || async { decisions(app, platform, decision).await >= n },
    )
    .await;
}

/// Runs `troupe pairing ARGS` on the app's database, with `env` added: whether it
/// succeeded, and what it printed.
pub async fn pairing(app: &TestApp, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = tokio::process::Command::new(crate::troupe_bin());
    cmd.arg("pairing")
        .args(args)
        .current_dir(app.data_dir())
        .env("TROUPE_DATABASE_URL", app.database_url())
        .env("TROUPE_PERSONAS", app.data_dir().join("personas"))
        .env_remove("TROUPE_CONFIG")
        .env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().await.expect("run troupe pairing");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The pairing code in a reply: the 8 characters after "code is ".
pub fn code_in(text: &str) -> String {
    let code: String = text
        .split("code is ")
        .nth(1)
        .unwrap_or_else(|| panic!("no code in {text:?}"))
        .chars()
        .take(8)
        .collect();
    assert!(
        code.chars()
            .all(|c| "ABCDEFGHJKLMNPQRSTUVWXYZ23456789".contains(c)),
        "{code}"
    );
    code
}
