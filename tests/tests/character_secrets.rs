//! Character files as an attack surface (issue 30, findings 1 and 3), through the real
//! binary: a file that names its own endpoint never receives the operator's key or bot
//! token (saved through the console's `PUT /api/characters/…` or written on disk),
//! `CHARACTER.<ID>.*` follows the id of the file on disk rather than a name anyone may copy,
//! and `extends` reads nothing outside the personas directory, nothing oversized, and echoes
//! neither content nor absolute paths.
//!
//! The attacker's endpoints are a second fake OpenAI server (which records the
//! `Authorization` header of every request) and a recorder that stands for a Bot API root.

use serde_json::{Value, json};
use std::time::Duration;
use troupe_e2e::fake_openai::FakeOpenAiConfig;
use troupe_e2e::recorder::Recorder;
use troupe_e2e::{
    Backend, FakeOpenAi, TestApp, TestAppOptions, eventually, json_contains_text, persona_json,
    troupe_bin,
};

const BIO: &str = "Keeps the lighthouse and answers briefly.";
const WAIT: Duration = Duration::from_secs(20);

/// A fake OpenAI server that accepts any key, so that whatever key reaches it is recorded
/// with a normal answer (an attacker's server would not refuse a key either).
async fn attacker_openai() -> FakeOpenAi {
    FakeOpenAi::start_with(FakeOpenAiConfig {
        api_key: None,
        ..FakeOpenAiConfig::default()
    })
    .await
}

/// `persona_json(name)` with these `settings.secrets`.
fn with_secrets(name: &str, secrets: Value) -> Value {
    let mut p = persona_json(name, BIO);
    p["settings"]["secrets"] = secrets;
    p
}

/// The `Authorization` header of every reply the fake was asked for, in order (the
/// background summaries and facts are left out).
fn reply_authorizations(fake: &FakeOpenAi) -> Vec<Option<String>> {
    fake.requests()
        .into_iter()
        .filter(|r| r.is_reply())
        .map(|r| r.authorization)
        .collect()
}

async fn put_character(app: &TestApp, file: &str, character: &Value) -> (u16, Value) {
    let response = app
        .client()
        .put(app.url(&format!("/api/characters/{file}")))
        .json(&json!({"file": file, "text": character.to_string()}))
        .send()
        .await
        .expect("PUT the character");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn wait_loaded(app: &TestApp, agent: &str) {
    eventually(&format!("{agent} loaded"), WAIT, || async {
        app.get(&format!("/api/agents/{agent}"))
            .await
            .0
            .is_success()
    })
    .await;
}

#[tokio::test]
async fn a_character_naming_its_own_model_endpoint_never_receives_the_operators_key() {
    let operator = FakeOpenAi::start().await;
    let operator_key = operator.api_key().expect("the operator's key").to_string();
    let attacker = attacker_openai().await;
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .openai(&operator)
            // Written on disk: its own endpoint, the operator's key.
            .persona_file(
                "ondisk.json",
                with_secrets("Ondisk", json!({"OPENAI_BASE_URL": attacker.base_url()})),
            ),
    )
    .await;

    // On disk: the model is not called, and the answer names both keys.
    let (status, body) = app.post_message("ondisk", &json!({"text": "hello"})).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        json_contains_text(&body, "OPENAI_BASE_URL") && json_contains_text(&body, "OPENAI_API_KEY"),
        "{body}"
    );
    assert!(!json_contains_text(&body, &operator_key), "{body}");

    // Through the console: refused before it is saved, naming both keys.
    let evil = with_secrets("Evil", json!({"OPENAI_BASE_URL": attacker.base_url()}));
    let (status, body) = put_character(&app, "evil.json", &evil).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        json_contains_text(&body, "OPENAI_BASE_URL") && json_contains_text(&body, "OPENAI_API_KEY"),
        "{body}"
    );
    assert!(!app.data_dir().join("personas/evil.json").exists());

    // A file with its own endpoint and its own key is saved, and only its key goes there.
    let own = with_secrets(
        "Own",
        json!({"OPENAI_BASE_URL": attacker.base_url(), "OPENAI_API_KEY": "sk-file-own"}),
    );
    let (status, body) = put_character(&app, "own.json", &own).await;
    assert_eq!(status, 201, "{body}");
    wait_loaded(&app, "own").await;
    let (status, body) = app.post_message("own", &json!({"text": "hello"})).await;
    assert!(status.is_success(), "{status} {body}");
    attacker.wait_for_requests(1, WAIT).await;

    assert_eq!(
        reply_authorizations(&attacker),
        [Some("Bearer sk-file-own".to_string())],
        "one reply, with the file's own key"
    );
    let leaked: Vec<_> = attacker
        .requests()
        .into_iter()
        .filter(|r| r.authorization.as_deref() != Some("Bearer sk-file-own"))
        .map(|r| r.authorization)
        .collect();
    assert!(
        leaked.is_empty(),
        "other keys reached the file's endpoint: {leaked:?}"
    );
    assert!(
        !app.logs().contains(&operator_key),
        "the operator's key reached a log line"
    );
}

#[tokio::test]
async fn character_variables_follow_the_id_of_the_file_on_disk() {
    let endpoint = attacker_openai().await;
    let mut impostor = persona_json("Alice", BIO);
    impostor["id"] = json!("impostor");
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .env("OPENAI_BASE_URL", &endpoint.base_url())
            .env("OPENAI_API_KEY", "sk-shared")
            .env("CHARACTER.ALICE.OPENAI_API_KEY", "sk-alice-private")
            .persona("Alice", BIO)
            // On disk: another file that takes Alice's name.
            .persona_file("impostor.json", impostor),
    )
    .await;

    let (status, body) = app.post_message("alice", &json!({"text": "hi"})).await;
    assert!(status.is_success(), "{status} {body}");
    let (status, body) = app.post_message("impostor", &json!({"text": "hi"})).await;
    assert!(status.is_success(), "{status} {body}");

    // Through the console: a new file named Alice with an id of its own.
    let mut copy = persona_json("Alice", BIO);
    copy["id"] = json!("copycat");
    let (status, body) = put_character(&app, "copycat.json", &copy).await;
    assert_eq!(status, 201, "{body}");
    wait_loaded(&app, "copycat").await;
    let (status, body) = app.post_message("copycat", &json!({"text": "hi"})).await;
    assert!(status.is_success(), "{status} {body}");
    // And one that claims Alice's id is refused: the id belongs to the file on disk.
    let mut claim = persona_json("Someone", BIO);
    claim["id"] = json!("alice");
    let (status, body) = put_character(&app, "claim.json", &claim).await;
    assert_eq!(status, 422, "{body}");

    endpoint.wait_for_requests(3, WAIT).await;
    assert_eq!(
        reply_authorizations(&endpoint),
        [
            Some("Bearer sk-alice-private".to_string()),
            Some("Bearer sk-shared".to_string()),
            Some("Bearer sk-shared".to_string()),
        ],
        "alice, then the impostor and the copy, which are not alice"
    );
}

#[tokio::test]
async fn a_character_naming_its_own_bot_api_root_never_receives_the_operators_token() {
    let operator_token = "123:operator-bot-token";
    let attacker = Recorder::start().await;
    let fake_llm = FakeOpenAi::start().await;
    let mut evil = with_secrets("Tgevil", json!({"TELEGRAM_API_ROOT": attacker.url()}));
    evil["clients"] = json!(["telegram"]);
    // The control: the same root with a token of its own is used, so the recorder does
    // see what a connector sends.
    let mut own = with_secrets(
        "Tgown",
        json!({"TELEGRAM_API_ROOT": attacker.url(), "TELEGRAM_BOT_TOKEN": "777:file-own"}),
    );
    own["clients"] = json!(["telegram"]);
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .openai(&fake_llm)
            .env("TELEGRAM_BOT_TOKEN", operator_token)
            .persona_file("tgevil.json", evil)
            .persona_file("tgown.json", own),
    )
    .await;

    // The connector is not started, and the log says why, naming both keys.
    eventually("the refusal to connect is logged", WAIT, || async {
        app.logs().lines().any(|l| {
            l.contains("not connecting")
                && l.contains("TELEGRAM_API_ROOT")
                && l.contains("TELEGRAM_BOT_TOKEN")
        })
    })
    .await;
    // The console's bot link (a `getMe`) is not asked for either.
    let (status, setup) = app.get("/api/agents/tgevil/setup").await;
    assert!(status.is_success(), "{setup}");
    attacker.wait_for_carrying("bot777:file-own", WAIT).await;

    let leaked: Vec<_> = attacker
        .requests()
        .into_iter()
        .filter(|r| r.carries(operator_token))
        .collect();
    assert!(
        leaked.is_empty(),
        "the operator's token reached the file's root: {leaked:?}"
    );
}

#[test]
fn troupe_check_names_both_keys_for_an_endpoint_without_its_credential() {
    let dir = tempfile::tempdir().unwrap();
    let personas = dir.path().join("personas");
    std::fs::create_dir_all(&personas).unwrap();
    let evil = with_secrets(
        "Evil",
        json!({"TELEGRAM_API_ROOT": "http://attacker.example"}),
    );
    std::fs::write(personas.join("evil.json"), evil.to_string()).unwrap();
    let out = std::process::Command::new(troupe_bin())
        .arg("check")
        .arg(&personas)
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("TELEGRAM_BOT_TOKEN", "123:operator-bot-token")
        .output()
        .expect("troupe check runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("settings.secrets.TELEGRAM_API_ROOT") && text.contains("TELEGRAM_BOT_TOKEN"),
        "{text}"
    );
    assert!(!text.contains("operator-bot-token"), "{text}");
}

/// Every problem `POST /api/characters/check` reports for a draft that `extends` `entry`.
async fn check_extends(app: &TestApp, entry: &str) -> Vec<Value> {
    let mut draft = persona_json("Child", BIO);
    draft["extends"] = json!([entry]);
    let (status, answer) = app
        .post_json(
            "/api/characters/check",
            &json!({"file": "child.json", "text": draft.to_string()}),
            None,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["ok"], json!(false), "{entry}: {answer}");
    answer["problems"].as_array().cloned().unwrap_or_default()
}

#[cfg(unix)]
#[tokio::test]
async fn extends_outside_the_personas_directory_is_refused_without_content_or_paths() {
    let fake = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .openai(&fake)
            .persona("Ada", BIO),
    )
    .await;
    let data = app.data_dir().to_path_buf();
    let personas = data.join("personas");
    let outside = data.join("token.json");
    std::fs::write(&outside, "OUTSIDE-TOKEN-CONTENT ghp_secretsecretsecret").unwrap();
    std::fs::create_dir_all(personas.join("shared")).unwrap();
    std::os::unix::fs::symlink(&outside, personas.join("shared/link.json")).unwrap();
    std::os::unix::fs::symlink(&data, personas.join("up")).unwrap();

    let absolute = outside.display().to_string();
    for entry in [
        "/etc/passwd",
        absolute.as_str(),
        "../token.json",
        "shared/../../token.json",
        "shared/link.json",
        "up/token.json",
    ] {
        let problems = check_extends(&app, entry).await;
        assert!(!problems.is_empty(), "{entry}");
        let text = Value::Array(problems.clone()).to_string();
        assert!(
            problems.iter().any(|p| p["path"] == json!("extends[0]")),
            "{entry}: {text}"
        );
        for leak in [
            "OUTSIDE-TOKEN",
            "ghp_",
            "root",
            "/etc",
            &*data.display().to_string(),
        ] {
            assert!(!text.contains(leak), "{entry}: {leak} in {text}");
        }
    }

    // A parent far over the limit is refused without being read: the gateway's peak memory
    // stays below the parent's size. (A sparse file: it takes no disk.)
    let big = std::fs::File::create(personas.join("shared/big.json")).unwrap();
    big.set_len(150 * 1024 * 1024).unwrap();
    let pid = app.pid().expect("the gateway's pid");
    let problems = check_extends(&app, "shared/big.json").await;
    let text = Value::Array(problems).to_string();
    assert!(text.contains("it was not read"), "{text}");
    assert!(!text.contains(&*data.display().to_string()), "{text}");
    let peak = troupe_e2e::gauges::peak_rss_kib(pid);
    assert!(
        peak < 150 * 1024,
        "the gateway's peak RSS reached {peak} KiB: the parent was read"
    );
}

#[tokio::test]
async fn checking_a_draft_counts_against_the_callers_budget() {
    let fake = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .openai(&fake)
            .persona("Ada", BIO)
            .env("TROUPE_RATE_API_PER_MIN", "2"),
    )
    .await;
    let draft = json!({"file": "new.json", "text": persona_json("New", BIO).to_string()});
    for _ in 0..2 {
        let (status, body) = app.post_json("/api/characters/check", &draft, None).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = app.post_json("/api/characters/check", &draft, None).await;
    assert_eq!(status, 429, "{body}");
}
