//! Connecting a platform from the console's API (issue 47): `GET /api/agents/{agent}/platforms`,
//! `PUT` and `DELETE /api/agents/{agent}/platforms/{platform}`, through the real binary
//! against the fake Telegram, Discord and Neynar.
//!
//! What must hold: a token is checked with its platform before it is kept, a refused one
//! keeps nothing and is never echoed, a kept one lands in the secrets file (mode 0600),
//! never in the character file, and the connector answers with it without a restart; the
//! environment wins; scoped tokens reach none of it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use troupe_e2e::fake_discord::FakeDiscord;
use troupe_e2e::fake_neynar::FakeNeynar;
use troupe_e2e::fake_telegram::{FakeTelegram, FakeTelegramConfig, tg};
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, persona_json};

const OPERATOR: &str = "operator-token-0123456789abcdef";
const SHOP: &str = "shop-token-0123456789abcdefghij";
const BIO: &str = "Tess keeps the night ferry's logbook and knows every buoy in the strait.";
/// The bot's token: long enough that its last 4 characters give nothing away.
const TOKEN: &str = "7001234567:AAH-tess-secret-token-wxyz";
/// A hang guard on waiting for the gateway, not a timing assertion.
const WAIT: Duration = Duration::from_secs(60);

/// Tess on Telegram, without a token in her file.
fn tess() -> Value {
    let mut c = persona_json("Tess", BIO);
    c["clients"] = json!(["telegram"]);
    c
}

async fn spawn(
    model: &FakeOpenAi,
    character: Value,
    env: &[(&str, &str)],
) -> (TestApp, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    std::fs::write(
        &tokens,
        json!([{"name": "shop", "token": SHOP, "personas": ["tess"]}]).to_string(),
    )
    .unwrap();
    let mut options = TestAppOptions::new(Backend::Sqlite)
        .persona_file("tess.json", character)
        .openai(model)
        .api_token(OPERATOR)
        .env("TROUPE_API_TOKENS_FILE", &tokens.display().to_string())
        .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
        .env("TROUPE_MEMORY_FACTS_EVERY", "0");
    for (k, v) in env {
        options = options.env(k, v);
    }
    (TestApp::spawn(options).await, dir)
}

/// `METHOD path` with `token` and an optional JSON body: the status, the body as JSON,
/// and the body's raw text (to look for what must never be in it).
async fn call(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (StatusCode, Value, String) {
    let mut req = app
        .client()
        .request(method, app.url(path))
        .bearer_auth(token);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let response = req.send().await.expect("the gateway answers");
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    (status, json, text)
}

fn secrets_file(app: &TestApp) -> PathBuf {
    app.data_dir().join("data/secrets.json")
}

fn character_file(app: &TestApp) -> PathBuf {
    app.data_dir().join("personas/tess.json")
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn telegram_of(platforms: &Value) -> Value {
    platforms["platforms"]
        .as_array()
        .and_then(|all| all.iter().find(|p| p["platform"] == "telegram"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// A wrong token gets the fake's reason, a Discord token pasted as Telegram's is refused
/// before anything is sent to Telegram; neither is kept nor echoed.
async fn wrong_tokens_keep_nothing(app: &TestApp, telegram: &FakeTelegram, path: &str) {
    // A wrong token: the fake's reason, nothing kept, the token not echoed.
    let wrong = "7001234567:AAH-not-the-right-one-0000";
    let (status, body, text) = call(
        app,
        reqwest::Method::PUT,
        path,
        OPERATOR,
        Some(json!({"token": wrong})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    assert_eq!(body["error"], "token_refused", "{text}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or("")
            .contains("Unauthorized"),
        "the platform's reason is given: {text}"
    );
    assert!(
        !text.contains(wrong) && !text.contains("not-the-right"),
        "{text}"
    );
    assert!(!secrets_file(app).exists(), "a refused token keeps nothing");

    // A Discord token pasted as Telegram's: refused before anything is sent to Telegram.
    let calls_before = telegram.calls().len();
    let (status, body, text) = call(
        app,
        reqwest::Method::PUT,
        path,
        OPERATOR,
        Some(json!({"token": "MTAxMjM0NTY3ODkw.GhIjKl.abcdefghijklmnopqrstuvwxyz012345"})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    assert_eq!(body["error"], "not_a_token", "{text}");
    assert!(
        body["detail"].as_str().unwrap_or("").contains("Discord"),
        "{text}"
    );
    assert_eq!(
        telegram.calls().len(),
        calls_before,
        "nothing was sent to Telegram"
    );
}

/// Disconnect: the file forgets the token, the connector stops, the character file stays.
async fn disconnecting_forgets_it(app: &TestApp, path: &str, character_before: &[u8]) {
    // Disconnect: the file forgets it, the connector stops.
    let (status, body, text) = call(app, reqwest::Method::DELETE, path, OPERATOR, None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(body["connected"], false, "{text}");
    assert_eq!(body["running"], false, "{text}");
    assert!(
        !std::fs::read_to_string(secrets_file(app))
            .unwrap()
            .contains(TOKEN)
    );
    #[cfg(unix)]
    assert_eq!(mode(&secrets_file(app)), 0o600);
    assert_eq!(
        std::fs::read(character_file(app)).unwrap(),
        character_before
    );
}

#[tokio::test]
async fn a_telegram_token_is_checked_kept_0600_and_answers_without_a_restart() {
    let telegram = FakeTelegram::start_with(FakeTelegramConfig {
        token: TOKEN.into(),
        ..FakeTelegramConfig::default()
    })
    .await;
    let model = FakeOpenAi::start().await;
    model.push_reply("The red buoy is off Gull Point.");
    let root = telegram.api_root();
    let (app, _tokens) = spawn(&model, tess(), &[("TELEGRAM_API_ROOT", &root)]).await;
    let character_before = std::fs::read(character_file(&app)).unwrap();
    let path = "/api/agents/tess/platforms/telegram";

    wrong_tokens_keep_nothing(&app, &telegram, path).await;

    // The right one: the bot's name, privacy mode, and only the last 4 characters.
    let (status, body, text) = call(
        &app,
        reqwest::Method::PUT,
        path,
        OPERATOR,
        Some(json!({"token": TOKEN})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}\n{}", app.logs());
    assert_eq!(body["account"]["name"], "Tess", "{text}");
    assert_eq!(body["account"]["username"], "tess_bot", "{text}");
    assert_eq!(body["account"]["nextSteps"]["privacyMode"], true, "{text}");
    assert_eq!(
        body["account"]["nextSteps"]["botUrl"],
        "https://t.me/tess_bot"
    );
    assert_eq!(body["keys"][0]["origin"], "secretsFile", "{text}");
    assert_eq!(body["keys"][0]["shown"], "…wxyz", "{text}");
    assert!(
        !text.contains(TOKEN) && !text.contains("tess-secret"),
        "{text}"
    );

    // Kept in the secrets file, 0600; the character file untouched.
    let stored = std::fs::read_to_string(secrets_file(&app)).unwrap();
    assert!(stored.contains(TOKEN));
    #[cfg(unix)]
    assert_eq!(mode(&secrets_file(&app)), 0o600);
    assert_eq!(
        std::fs::read(character_file(&app)).unwrap(),
        character_before
    );

    // A DM is answered by the connector that just started: no restart.
    telegram.push_message(tg::text(
        tg::private_chat(501, "Ann"),
        tg::user(501, "Ann"),
        "Where is the red buoy?",
    ));
    let sent = match telegram.try_wait_for_sent(1, WAIT).await {
        Ok(sent) => sent,
        Err(e) => panic!("{e}\n----- troupe output -----\n{}", app.logs()),
    };
    assert_eq!(sent[0].chat_id, 501);
    assert_eq!(sent[0].text, "The red buoy is off Gull Point.");

    let (status, listed, text) = call(
        &app,
        reqwest::Method::GET,
        "/api/agents/tess/platforms",
        OPERATOR,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let tg = telegram_of(&listed);
    assert_eq!(tg["connected"], true, "{text}");
    assert_eq!(tg["running"], true, "{text}");
    assert!(!text.contains(TOKEN), "{text}");

    disconnecting_forgets_it(&app, path, &character_before).await;
}

#[tokio::test]
async fn scoped_tokens_neither_see_nor_change_secrets() {
    let telegram = FakeTelegram::start_with(FakeTelegramConfig {
        token: TOKEN.into(),
        ..FakeTelegramConfig::default()
    })
    .await;
    let model = FakeOpenAi::start().await;
    let root = telegram.api_root();
    let (app, _tokens) = spawn(&model, tess(), &[("TELEGRAM_API_ROOT", &root)]).await;
    for (method, path, body) in [
        (reqwest::Method::GET, "/api/agents/tess/platforms", None),
        (
            reqwest::Method::PUT,
            "/api/agents/tess/platforms/telegram",
            Some(json!({"token": TOKEN})),
        ),
        (
            reqwest::Method::DELETE,
            "/api/agents/tess/platforms/telegram",
            None,
        ),
    ] {
        let (status, body, text) = call(&app, method.clone(), path, SHOP, body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {text}");
        assert_eq!(body["error"], "forbidden");
    }
    assert!(!secrets_file(&app).exists());
    assert!(
        telegram.calls_to("getMe").is_empty(),
        "a scoped token checks nothing"
    );
}

#[tokio::test]
async fn the_environment_wins_and_the_console_says_so() {
    let telegram = FakeTelegram::start_with(FakeTelegramConfig {
        token: TOKEN.into(),
        ..FakeTelegramConfig::default()
    })
    .await;
    let model = FakeOpenAi::start().await;
    let root = telegram.api_root();
    let (app, _tokens) = spawn(
        &model,
        tess(),
        &[("TELEGRAM_API_ROOT", &root), ("TELEGRAM_BOT_TOKEN", TOKEN)],
    )
    .await;
    let (status, listed, text) = call(
        &app,
        reqwest::Method::GET,
        "/api/agents/tess/platforms",
        OPERATOR,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let tg = telegram_of(&listed);
    assert_eq!(tg["keys"][0]["origin"], "env", "{text}");
    assert_eq!(
        tg["keys"][0]["from"],
        "environment variable TELEGRAM_BOT_TOKEN"
    );
    assert!(!text.contains(TOKEN), "{text}");
    let (status, body, text) = call(
        &app,
        reqwest::Method::PUT,
        "/api/agents/tess/platforms/telegram",
        OPERATOR,
        Some(json!({"token": "7001234567:AAH-another-token-0000"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{text}");
    assert_eq!(body["error"], "set_in_environment", "{text}");
    assert!(!secrets_file(&app).exists());
}

#[cfg(unix)]
#[tokio::test]
async fn a_secrets_file_others_may_read_is_never_written() {
    use std::os::unix::fs::PermissionsExt;
    let telegram = FakeTelegram::start_with(FakeTelegramConfig {
        token: TOKEN.into(),
        ..FakeTelegramConfig::default()
    })
    .await;
    let model = FakeOpenAi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("secrets.json");
    std::fs::write(&file, "{}").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let root = telegram.api_root();
    let file_name = file.display().to_string();
    let (app, _tokens) = spawn(
        &model,
        tess(),
        &[
            ("TELEGRAM_API_ROOT", &root),
            ("TROUPE_SECRETS_FILE", &file_name),
        ],
    )
    .await;
    assert!(
        app.logs().contains("has mode 644"),
        "a warning at start: {}",
        app.logs()
    );
    let (status, body, text) = call(
        &app,
        reqwest::Method::PUT,
        "/api/agents/tess/platforms/telegram",
        OPERATOR,
        Some(json!({"token": TOKEN})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{text}");
    assert_eq!(body["error"], "secrets_file_refused", "{text}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "{}");
    assert_eq!(mode(&file), 0o644);
}

/// Farcaster: the fid looked up with the Neynar key, and the signer's state.
async fn farcaster_is_checked_with_its_signer(app: &TestApp, neynar: &FakeNeynar) {
    let (status, body, text) = call(
        app,
        reqwest::Method::PUT,
        "/api/agents/tess/platforms/farcaster",
        OPERATOR,
        Some(json!({
            "token": neynar.api_key(),
            "fid": neynar.bot_fid(),
            "signerUuid": neynar.signer_uuid(),
        })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}\n{}", app.logs());
    assert_eq!(body["account"]["nextSteps"]["signer"], "approved", "{text}");
    assert_eq!(
        body["account"]["id"],
        neynar.bot_fid().to_string(),
        "{text}"
    );
    assert!(!text.contains(neynar.api_key()), "{text}");
}

#[tokio::test]
async fn discord_and_farcaster_are_checked_and_named() {
    let discord = FakeDiscord::start().await;
    let neynar = FakeNeynar::start().await;
    let model = FakeOpenAi::start().await;
    let discord_url = discord.url();
    let neynar_url = neynar.url();
    let mut character = persona_json("Tess", BIO);
    character["clients"] = json!([]);
    let (app, _tokens) = spawn(
        &model,
        character,
        &[
            ("DISCORD_API_URL", &discord_url),
            ("NEYNAR_API_URL", &neynar_url),
        ],
    )
    .await;

    let (status, body, text) = call(
        &app,
        reqwest::Method::PUT,
        "/api/agents/tess/platforms/discord",
        OPERATOR,
        Some(json!({"token": "not.the.token"})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or("")
            .contains("401: Unauthorized"),
        "{text}"
    );

    let token = troupe_e2e::fake_discord::TOKEN;
    let (status, body, text) = call(
        &app,
        reqwest::Method::PUT,
        "/api/agents/tess/platforms/discord",
        OPERATOR,
        Some(json!({"token": token})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}\n{}", app.logs());
    assert_eq!(
        body["account"]["name"],
        troupe_e2e::fake_discord::BOT_NAME,
        "{text}"
    );
    let invite = body["account"]["nextSteps"]["inviteUrl"]
        .as_str()
        .unwrap_or("");
    assert!(
        invite.contains(&format!(
            "client_id={}",
            troupe_e2e::fake_discord::APPLICATION_ID
        )),
        "{text}"
    );
    // Manage Webhooks (1 << 29) is among the invite's permissions.
    let permissions: u64 = invite
        .rsplit("permissions=")
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    assert_ne!(permissions & (1 << 29), 0, "{invite}");
    assert!(!text.contains(token), "{text}");

    farcaster_is_checked_with_its_signer(&app, &neynar).await;
    let stored = std::fs::read_to_string(secrets_file(&app)).unwrap();
    assert!(stored.contains(token) && stored.contains(neynar.api_key()));
}
