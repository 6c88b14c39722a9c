//! End-to-end tests of personas through the real binary: hot reload of character files
//! while `troupe run` runs, `troupe check` as an author uses it, and `knowledge` paths that
//! try to leave the personas directory.

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
    check_with(args, cwd, &[])
}

fn check_with(args: &[&str], cwd: &std::path::Path, env: &[(&str, &str)]) -> (i32, String) {
    let out = std::process::Command::new(troupe_bin())
        .arg("check")
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(env.iter().copied())
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

/// `../` enough times to climb from `dir` to `/`, then `etc/passwd`: `../../etc/passwd`
/// for a directory two levels deep.
fn climb_to_etc_passwd(dir: &std::path::Path) -> String {
    let depth = std::fs::canonicalize(dir).unwrap().components().count() - 1;
    format!("{}etc/passwd", "../".repeat(depth))
}

/// A character whose `knowledge` names an inline fact, `/etc/passwd` twice (absolute and
/// through `..`) and, when `link` is given, a file inside the directory.
fn escaping_character(name: &str, climb: &str, extra: Option<&str>) -> Value {
    let mut c = persona_json(name, "Keeps to her own files.");
    let mut knowledge = vec![
        json!("The lamp is lit at dusk, every day of the year."),
        json!({"path": "/etc/passwd"}),
        json!({"path": climb}),
    ];
    if let Some(extra) = extra {
        knowledge.push(json!({"path": extra}));
    }
    c["knowledge"] = json!(knowledge);
    c
}

#[cfg(unix)]
#[test]
fn troupe_check_refuses_knowledge_paths_outside_the_personas_directory() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("shared.md"), "shared notes").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("shared.md"),
        dir.path().join("linked.md"),
    )
    .unwrap();
    let climb = climb_to_etc_passwd(dir.path());
    let character = escaping_character("Eve", &climb, Some("linked.md"));
    // Pretty-printed: one entry per line, so each refusal has its own line.
    std::fs::write(
        dir.path().join("eve.json"),
        serde_json::to_string_pretty(&character).unwrap(),
    )
    .unwrap();

    let (code, out) = check(&["eve.json"], dir.path());
    assert_eq!(code, 1, "{out}");
    let errors: Vec<&str> = out.lines().filter(|l| !l.contains("warning:")).collect();
    assert_eq!(errors.len(), 3, "{out}");
    let find = |needle: &str| {
        errors
            .iter()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no error with {needle:?}:\n{out}"))
    };
    let abs = find("knowledge[1].path: file \"/etc/passwd\" is an absolute path outside");
    assert!(abs.starts_with("eve.json:"), "{abs}");
    let up = find("knowledge[2].path: file \"../");
    assert!(
        up.contains("climbs out of the personas directory") && up.contains("/etc/passwd"),
        "{up}"
    );
    let link = find("knowledge[3].path: file \"linked.md\" is reached through a symlink");
    assert!(link.contains("TROUPE_KNOWLEDGE_ALLOW_PATHS"), "{link}");
    // Each at its own line of the file.
    let line_of = |l: &str| l.split(':').nth(1).unwrap().to_string();
    assert_ne!(line_of(abs), line_of(up));
    assert_ne!(line_of(up), line_of(link));

    // The operator allows the outside directory: the symlink is fine, /etc stays refused.
    let allow = outside.path().display().to_string();
    let (code, out) = check_with(
        &["eve.json"],
        dir.path(),
        &[("TROUPE_KNOWLEDGE_ALLOW_PATHS", allow.as_str())],
    );
    assert_eq!(code, 1, "{out}");
    let errors: Vec<&str> = out.lines().filter(|l| !l.contains("warning:")).collect();
    assert_eq!(errors.len(), 2, "{out}");
    assert!(!out.contains("linked.md"), "{out}");
}

#[tokio::test]
async fn a_persona_with_refused_knowledge_paths_runs_without_them() {
    let fake = FakeOpenAi::start().await;
    // Deep enough for any data directory: `..` stops at `/`.
    let climb = format!("{}etc/passwd", "../".repeat(40));
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("eve.json", escaping_character("Eve", &climb, None))
            .openai(&fake),
    )
    .await;
    // Eve runs, with the inline fact as her only document.
    let (status, listed) = app.get("/api/agents/eve/documents").await;
    assert!(status.is_success(), "{listed}");
    let docs = listed["documents"].as_array().unwrap();
    assert_eq!(docs.len(), 1, "{listed}");
    let logs = app.logs();
    assert!(
        logs.contains("knowledge[1].path: file \"/etc/passwd\" is an absolute path"),
        "{logs}"
    );
    assert!(logs.contains("the entry is skipped"), "{logs}");

    let (status, body) = app
        .post_message(
            "eve",
            &json!({"text": "When is the lamp lit? And who is root, with bin bash and daemon?"}),
        )
        .await;
    assert!(status.is_success(), "{body}");
    let prompt = fake.last_prompt_text();
    assert!(prompt.contains("lit at dusk"), "{prompt}");
    assert!(!prompt.contains("root:x:0"), "{prompt}");
}
