//! The console's Platforms page in a real browser (issue 47): paste a Telegram token →
//! troupe checks it with the fake Bot API → the bot's name is shown → a DM to the fake
//! Telegram is answered without a restart; a wrong token is refused with the fake's
//! reason and keeps nothing; the secrets file is 0600 and the character file unchanged;
//! Disconnect stops the connector. The same harness as console.rs (which is near its size
//! limit, so this is its own file).

use serde_json::{Value, json};
use std::time::Duration;
use troupe_e2e::browser::{Browser, screenshots_dir};
use troupe_e2e::fake_telegram::{FakeTelegram, FakeTelegramConfig, tg};
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, persona_json};

const TOKEN: &str = "7001234567:AAH-tess-secret-token-wxyz";
/// A hang guard on waiting for the gateway, not a timing assertion.
const WAIT: Duration = Duration::from_secs(60);

/// Types `text` into the Telegram card's token box and clicks Check.
async fn paste_and_check(browser: &Browser, text: &str) {
    browser.type_into("#token-telegram", text).await;
    browser.click("#check-telegram").await;
}

/// A wrong token: the fake's reason on the page, nothing kept, the token not shown.
async fn a_wrong_token_is_refused(browser: &Browser, secrets: &std::path::Path) {
    // A wrong token: the fake's reason on the page, nothing kept, the box emptied.
    paste_and_check(browser, "7001234567:AAH-not-the-right-one-0000").await;
    let refused = browser
        .wait_for(
            "the refusal",
            "(() => { const e = document.querySelector('#result-telegram .error'); return e && e.textContent; })()",
        )
        .await;
    let refused = refused.as_str().unwrap_or("");
    assert!(refused.contains("Unauthorized"), "{refused}");
    assert!(!refused.contains("not-the-right"), "{refused}");
    assert!(!secrets.exists(), "a refused token keeps nothing");
}

/// Disconnect: the card says so, the file forgets the token, the character file stays.
async fn disconnect(browser: &Browser, secrets: &std::path::Path, before: &[u8]) {
    // Disconnect: the card says so, the file forgets the token.
    browser.click("#disconnect-telegram").await;
    browser
        .wait_for(
            "disconnected",
            "document.querySelector('#disconnected-telegram') && document.querySelector('#state-telegram').textContent.includes('not connected')",
        )
        .await;
    assert!(!std::fs::read_to_string(secrets).unwrap().contains(TOKEN));
    assert_eq!(
        std::fs::read(
            secrets
                .parent()
                .unwrap()
                .parent()
                .unwrap()
                .join("personas/tess.json")
        )
        .unwrap(),
        before
    );
}

#[tokio::test]
async fn paste_a_telegram_token_see_the_bot_and_get_answered() {
    let Some(browser) = Browser::start("console_platforms::telegram").await else {
        return;
    };
    let telegram = FakeTelegram::start_with(FakeTelegramConfig {
        token: TOKEN.into(),
        ..FakeTelegramConfig::default()
    })
    .await;
    let model = FakeOpenAi::start().await;
    model.push_reply("The green buoy marks the channel.");
    let mut tess = persona_json("Tess", "Tess keeps the night ferry's logbook.");
    tess["clients"] = json!(["telegram"]);
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("tess.json", tess)
            .openai(&model)
            .env("TELEGRAM_API_ROOT", &telegram.api_root())
            .env("TROUPE_RATE_API_PER_MIN", "0"),
    )
    .await;
    let character = app.data_dir().join("personas/tess.json");
    let secrets = app.data_dir().join("data/secrets.json");
    let before = std::fs::read(&character).unwrap();

    browser.goto("about:blank").await;
    browser.goto(&app.url("/#/platforms?agent=tess")).await;
    browser
        .wait_for(
            "the platforms page",
            "document.body.dataset.ready === 'platforms'",
        )
        .await;

    a_wrong_token_is_refused(&browser, &secrets).await;

    // The right one: the bot's name, privacy mode, and the last 4 characters only.
    paste_and_check(&browser, TOKEN).await;
    let shown: Value = browser
        .wait_for(
            "the bot's name",
            "(() => {
               const a = document.querySelector('#account-telegram');
               const key = document.querySelector('[data-platform=telegram] li[data-key=TELEGRAM_BOT_TOKEN]');
               if (!a || !key) return null;
               return {account: a.textContent, key: key.textContent, origin: key.dataset.origin,
                       privacy: (document.querySelector('#privacy-mode') || {}).textContent,
                       box: document.querySelector('#token-telegram').value,
                       page: document.body.innerText};
             })()",
        )
        .await;
    assert!(
        shown["account"]
            .as_str()
            .unwrap_or("")
            .contains("Tess (@tess_bot)"),
        "{shown}"
    );
    assert_eq!(shown["origin"], "secretsFile", "{shown}");
    assert!(
        shown["key"].as_str().unwrap_or("").contains("…wxyz"),
        "{shown}"
    );
    assert_eq!(shown["privacy"], "Privacy mode: on", "{shown}");
    assert_eq!(shown["box"], "", "the token is not left in the page");
    assert!(!shown["page"].as_str().unwrap_or("").contains("tess-secret"));
    if let Some(dir) = screenshots_dir() {
        browser.screenshot(&dir, "platforms").await;
    }

    // The secrets file is 0600, the character file unchanged.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&secrets).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    assert!(std::fs::read_to_string(&secrets).unwrap().contains(TOKEN));
    assert_eq!(std::fs::read(&character).unwrap(), before);

    // A DM is answered by the connector the page just started.
    telegram.push_message(tg::text(
        tg::private_chat(501, "Ann"),
        tg::user(501, "Ann"),
        "Which buoy marks the channel?",
    ));
    let sent = match telegram.try_wait_for_sent(1, WAIT).await {
        Ok(sent) => sent,
        Err(e) => panic!("{e}\n----- troupe output -----\n{}", app.logs()),
    };
    assert_eq!(sent[0].text, "The green buoy marks the channel.");

    disconnect(&browser, &secrets, &before).await;
    browser.quit().await;
}
