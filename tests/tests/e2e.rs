//! The end-to-end tests, as one test binary: each file beside this one is a module here
//! (`access.rs` is `access`, so `cargo test -p troupe-e2e --test e2e access::` runs its
//! tests alone), not a binary of its own.
//!
//! Why one binary (issue 48, item 5; docs/benchmarks.md, "CI time"): as a binary per file each
//! linked the fakes and their dependencies again, monomorphised the same async code again,
//! was checked again by clippy, and `cargo test` ran them one after another, each on its
//! own two threads, so one slow test held the whole run while the other thread idled. One
//! binary is compiled and linked once, and libtest runs all its tests on one pool.
//!
//! `autotests = false` in tests/Cargo.toml keeps cargo from also building each file as a
//! binary; the test at the end of this file fails when a file here is not a module, so a
//! new test file cannot be left out of the run.

mod access;
mod access_platforms;
mod api_scopes;
mod architecture;
mod binary;
mod character_secrets;
mod connect_platforms;
mod console;
mod console_media;
mod console_platforms;
mod discord;
mod docs;
mod durability;
mod edits;
mod eliza2;
mod fake_openai_genai;
mod farcaster;
mod faults;
mod gateway;
mod hostile;
mod http_edge;
mod http_limits;
mod knowledge;
mod leader;
mod linked_accounts;
mod mcp_policy;
mod media;
mod media_platforms;
mod memory;
mod metrics;
mod models;
mod openai_api;
mod openai_bounds;
mod personas;
mod post_drafts;
mod posts;
mod prompt_injection;
mod reactions;
mod replicas;
mod rooms;
mod security_policy;
mod settings;
mod spend;
mod ssrf;
mod streaming;
mod telegram;
mod telegram_accounts;
mod telegram_streaming;
mod telegram_troupe;
mod tools;
mod traces;
mod troupe_room;
mod voice;
mod webhooks;

/// Every `.rs` file beside this one is a module of this binary: with `autotests = false`,
/// cargo would not build or run a file left out of the list above.
#[test]
fn every_test_file_is_a_module_of_the_binary() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let root = include_str!("e2e.rs");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("the tests directory") {
        let path = entry.expect("a directory entry").path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let is_rust = path.extension().is_some_and(|e| e == "rs");
        if is_rust && stem != "e2e" && !root.lines().any(|l| l == format!("mod {stem};")) {
            missing.push(stem.to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "tests/tests/e2e.rs must declare `mod NAME;` for each of: {missing:?}"
    );
}
