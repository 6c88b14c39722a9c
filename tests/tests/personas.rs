//! End-to-end tests of personas through the real binary: hot reload of character files
//! while `troupe run` runs, and `troupe check` as an author uses it.

use serde_json::{Value, json};
use std::time::Duration;
use troupe_e2e::{
    Backend, FakeOpenAi, TestApp, TestAppOptions, eventually, persona_json, troupe_bin,
};

const OLD_BIO: &str = "Ada keeps the lighthouse on the northern shore.";
const NEW_BIO: &str = "Ada now runs a bakery famous for its rye bread.";
const WAIT: Duration = Duration::from_secs(20);

async fn revision(app: &TestApp, agent: &str) -> Option<String> {
    let (status, body) = app.get(&format!("/api/agents/{agent}")).await;
    status
        .is_success()
        .then(|| body["revision"].as_str().unwrap_or_default().to_string())
}

#[tokio::test]
async fn an_edited_bio_reaches_the_next_prompt_without_a_restart() {
    let fake = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona("Ada", OLD_BIO)
            .openai(&fake),
    )
    .await;

    let (status, _) = app
        .post_message("ada", &json!({"text": "who are you?"}))
        .await;
    assert!(status.is_success());
    assert!(fake.last_prompt_text().contains(OLD_BIO));
    let before = revision(&app, "ada").await.expect("ada is loaded");

    let file = app.data_dir().join("personas").join("ada.json");
    std::fs::write(&file, persona_json("Ada", NEW_BIO).to_string()).unwrap();
    eventually("the edited persona to be reloaded", WAIT, || async {
        revision(&app, "ada").await.is_some_and(|r| r != before)
    })
    .await;

    let (status, _) = app.post_message("ada", &json!({"text": "and now?"})).await;
    assert!(status.is_success());
    let prompt = fake.last_prompt_text();
    assert!(
        prompt.contains(NEW_BIO),
        "the new bio is not in the prompt:\n{prompt}"
    );
    assert!(
        !prompt.contains(OLD_BIO),
        "the old bio is still in the prompt"
    );
}

#[tokio::test]
async fn an_invalid_edit_keeps_the_last_good_version_and_logs_the_position() {
    let fake = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona("Ada", OLD_BIO)
            .openai(&fake),
    )
    .await;
    let file = app.data_dir().join("personas").join("ada.json");
    std::fs::write(&file, "{\n  \"name\": \"Ada\",\n  \"bio\": 42\n}\n").unwrap();
    eventually("the invalid edit to be reported", WAIT, || async {
        app.logs()
            .contains("ada.json:3:10: bio: expected a string or a list of strings")
    })
    .await;

    let (status, body) = app
        .post_message("ada", &json!({"text": "still there?"}))
        .await;
    assert!(status.is_success(), "{body}");
    assert!(fake.last_prompt_text().contains(OLD_BIO));
}

#[tokio::test]
async fn adding_a_file_adds_a_persona_and_removing_it_stops_it() {
    let fake = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona("Ada", OLD_BIO)
            .openai(&fake),
    )
    .await;
    let file = app.data_dir().join("personas").join("bob.json");
    std::fs::write(
        &file,
        persona_json("Bob", "Bob fixes bicycles.").to_string(),
    )
    .unwrap();
    eventually("Bob to be loaded", WAIT, || async {
        revision(&app, "bob").await.is_some()
    })
    .await;
    let (status, body) = app.post_message("bob", &json!({"text": "hello Bob"})).await;
    assert!(status.is_success(), "{body}");
    assert!(fake.last_prompt_text().contains("Bob fixes bicycles."));

    std::fs::remove_file(&file).unwrap();
    eventually("Bob to be stopped", WAIT, || async {
        revision(&app, "bob").await.is_none()
    })
    .await;
    let (status, body) = app.post_message("bob", &json!({"text": "Bob?"})).await;
    assert_eq!(status.as_u16(), 404, "{body}");
    // Ada is untouched.
    assert!(revision(&app, "ada").await.is_some());
}

fn check(args: &[&str], cwd: &std::path::Path) -> (i32, String) {
    let out = std::process::Command::new(troupe_bin())
        .arg("check")
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("troupe check runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
    )
}

#[test]
fn troupe_check_reports_each_problem_with_its_position_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.json"),
        "{\n  \"name\": \"Bad\",\n  \"bio\": 42,\n  \"biography\": \"x\"\n}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("broken.json"),
        "{\n  \"name\": \"Broken\",\n  \"bio\": \"x\",\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("good.json"),
        persona_json("Good", "Good is fine.").to_string(),
    )
    .unwrap();

    let (code, out) = check(&["bad.json", "broken.json"], dir.path());
    assert_eq!(code, 1, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines.contains(
            &"bad.json:3:10: bio: expected a string or a list of strings, found a number"
        ),
        "{out}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with(
            "bad.json:4:3: warning: biography: unknown field (did you mean \"bio\"?)"
        )),
        "{out}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("broken.json:4:1: (json): unexpected end of file")),
        "{out}"
    );

    let (code, out) = check(&["good.json"], dir.path());
    assert_eq!(code, 0, "{out}");
}

#[test]
fn troupe_check_accepts_every_elizaos_fixture() {
    let Some(dir) = troupe_e2e::fixtures_dir() else {
        return;
    };
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| p.display().to_string())
        .collect();
    files.sort();
    assert!(
        files.len() >= 20,
        "expected the elizaOS fixtures in {}",
        dir.display()
    );
    let args: Vec<&str> = files.iter().map(String::as_str).collect();
    let (code, out) = check(&args, &dir);
    assert_eq!(code, 0, "{out}");
    let value: Value = json!(
        out.lines()
            .filter(|l| !l.contains("warning:"))
            .collect::<Vec<_>>()
    );
    assert_eq!(value, json!([]), "errors on fixtures");
}

#[test]
fn two_personas_with_one_platform_token_refuse_to_start_naming_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let personas = dir.path().join("personas");
    std::fs::create_dir_all(&personas).unwrap();
    for name in ["Ann", "Ben"] {
        let mut p = persona_json(name, "Shares a bot token by mistake.");
        p["clients"] = json!(["telegram"]);
        p["settings"]["secrets"]["TELEGRAM_BOT_TOKEN"] = json!("123:same");
        std::fs::write(
            personas.join(format!("{}.json", name.to_lowercase())),
            p.to_string(),
        )
        .unwrap();
    }
    let out = std::process::Command::new(troupe_bin())
        .arg("run")
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("TROUPE_HTTP_ADDR", "127.0.0.1:0")
        .env("OPENAI_API_KEY", "k")
        .output()
        .expect("troupe run runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ann.json and") && stderr.contains("ben.json use the same telegram token"),
        "{stderr}"
    );
}
