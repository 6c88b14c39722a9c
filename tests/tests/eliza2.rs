//! elizaOS 2.x character files through the binary (issue 46): the real ones from elizaOS's
//! repository (tests/fixtures/eliza2/, with their sources in SOURCES.md) pass `troupe check` clean,
//! and one of them, loaded unchanged, answers.

use reqwest::StatusCode;
use serde_json::{Value, json};
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, troupe_bin};

/// The 2.x fixtures live in the repository (tests/fixtures/eliza2, with SOURCES.md), so every
/// clone has them and no run skips them.
fn eliza2_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/eliza2")
}

fn files(dir: &std::path::Path) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| p.display().to_string())
        .collect();
    files.sort();
    files
}

#[test]
fn troupe_check_accepts_the_elizaos_2x_files_clean() {
    let dir = eliza2_dir();
    let files = files(&dir);
    assert!(files.len() >= 2, "{}", dir.display());
    let out = std::process::Command::new(troupe_bin())
        .arg("check")
        .args(&files)
        .current_dir(&dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("troupe check runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    // Clean: no error and no warning on any of them.
    assert_eq!(stdout.trim(), "", "{stdout}");
}

#[tokio::test]
async fn an_elizaos_2x_file_loaded_unchanged_answers() {
    let dir = eliza2_dir();
    let text = std::fs::read_to_string(dir.join("v2_eliza__psychosis.json")).unwrap();
    let character: Value = serde_json::from_str(&text).unwrap();
    let model = FakeOpenAi::start().await;
    model.push_reply("paper hand. you knew that already.");
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("psychosis.json", character)
            .openai(&model)
            .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
            .env("TROUPE_MEMORY_FACTS_EVERY", "0"),
    )
    .await;
    let (status, body) = app
        .post_message(
            "psychosis",
            &json!({"roomId": "desk", "userId": "u-ann", "userName": "Ann", "text": "i sold at the bottom again"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["replies"][0]["text"], "paper hand. you knew that already.",
        "{body}"
    );
    let prompt = model.requests()[0].prompt_text();
    // The 2.x example groups reach the prompt, their speakers named.
    assert!(prompt.contains("i always sell too early"), "{prompt}");
    assert!(prompt.contains("i sold at the bottom again"), "{prompt}");
    assert!(!prompt.contains("{{"), "{prompt}");
}
