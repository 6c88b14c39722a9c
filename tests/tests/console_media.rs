//! The console's room history in a real browser (issue 32): an image posted with a message
//! is shown as a thumbnail fetched behind the token from the gateway's own store (the
//! authenticated `…/history/{id}/images/{n}` route, with its type, `nosniff` and a
//! Content-Security-Policy), a voice note's transcript is marked as transcribed, and the
//! 👍/👎 on a reply are shown on it. (console.rs is near its size limit, so this is its own
//! file, with the same harness.) An image from a platform (a Telegram photo, fetched when
//! its message is handled) is kept the same way and served the same way.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use troupe_e2e::browser::{Browser, screenshots_dir};
use troupe_e2e::fake_telegram::{FakeTelegram, tg};
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, persona_json};

const AGENT: &str = "ada";
/// An 8×8 orange PNG.
const PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAgAAAAICAIAAABLbSncAAAAEklEQVR4nGP438CAFWEXHbQSAKmzX8FBxi1QAAAAAElFTkSuQmCC";

/// A voice note's transcript, as transcription stores it (tests/tests/voice.rs covers the
/// transcription itself), and a 👍 on the reply, as a reaction records it
/// (tests/tests/reactions.rs covers the platforms).
async fn a_transcript_and_a_thumbs_up(app: &TestApp) {
    let db = sqlx::SqlitePool::connect(app.database_url()).await.unwrap();
    sqlx::query(
        "INSERT INTO messages (agent_id, room, author_id, author_name, text, from_agent, created_at_ms)
         VALUES ('ada', 'web:console', 'u1', 'Sam', '[voice, transcribed] is the ferry on time?', 0, 2)",
    )
    .execute(&db)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO feedback (agent_id, room, message_id, user_id, value, outbox_id, created_at_ms)
         SELECT 'ada', 'web:console', 'r1', 'u2', 1, id, 3 FROM outbox WHERE agent_id = 'ada'",
    )
    .execute(&db)
    .await
    .unwrap();
}

/// The room's history in the API: the image, the transcript mark and the feedback; and
/// the image route's headers.
async fn the_api_shows_the_extras_and_serves_the_image(app: &TestApp) {
    let (status, memories) = app
        .get(&format!("/api/agents/{AGENT}/rooms/web:console/memories"))
        .await;
    assert_eq!(status, 200, "{memories}");
    let messages = memories["messages"].as_array().unwrap();
    let pictured = messages
        .iter()
        .find(|m| m["images"].is_array())
        .expect("a message with an image");
    assert_eq!(pictured["images"], json!([{"n": 0, "mime": "image/png"}]));
    assert!(
        messages.iter().any(|m| m["transcribed"] == true),
        "{memories}"
    );
    let reply = messages.iter().find(|m| m["fromAgent"] == true).unwrap();
    assert_eq!(reply["feedback"], json!({"up": 1, "down": 0}));
    let id = pictured["id"].as_i64().unwrap();
    let image = app
        .client()
        .get(app.url(&format!(
            "/api/agents/{AGENT}/rooms/web:console/history/{id}/images/0"
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(image.status(), 200);
    let header = |name: &str| {
        image
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    assert_eq!(header("content-type").as_deref(), Some("image/png"));
    assert_eq!(header("x-content-type-options").as_deref(), Some("nosniff"));
    assert_eq!(
        header("content-security-policy").as_deref(),
        Some("default-src 'none'; sandbox")
    );
    let (status, _) = app
        .get(&format!(
            "/api/agents/{AGENT}/rooms/web:console/history/{id}/images/1"
        ))
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_rooms_history_shows_an_image_a_transcript_and_feedback() {
    let Some(browser) = Browser::start("console_media::history").await else {
        return;
    };
    let fake = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file(
                "ada.json",
                persona_json("Ada", "Ada keeps the harbour office."),
            )
            .openai(&fake)
            .env("TROUPE_RATE_API_PER_MIN", "0"),
    )
    .await;
    let (status, body) = app
        .post_message(
            AGENT,
            &json!({"roomId": "console", "userId": "u1", "userName": "Sam",
                "text": "what is in this picture?",
                "attachments": [{"data": PNG_B64, "mime": "image/png"}]}),
        )
        .await;
    assert!(status.is_success(), "{status}: {body}");
    a_transcript_and_a_thumbs_up(&app).await;
    the_api_shows_the_extras_and_serves_the_image(&app).await;

    // The page.
    browser.goto("about:blank").await;
    browser
        .goto(&app.url("/#/rooms?agent=ada&room=web:console"))
        .await;
    browser
        .wait_for("the rooms page", "document.body.dataset.ready === 'rooms'")
        .await;
    let seen: Value = browser
        .wait_for(
            "the image drawn, the transcript marked, the feedback shown",
            "(() => {
               const img = document.querySelector('#room .msg img.thumb');
               const badge = document.querySelector('#room .msg .badge.transcribed');
               const feedback = document.querySelector('#room .msg.agent .feedback');
               if (!img || !img.complete || img.naturalWidth === 0 || !badge || !feedback) return null;
               return {src: img.src.slice(0, 22), width: img.naturalWidth,
                       transcript: badge.parentElement.textContent, feedback: feedback.textContent};
             })()",
        )
        .await;
    assert_eq!(seen["src"], "data:image/png;base64,");
    assert_eq!(seen["width"], 8);
    assert!(
        seen["transcript"]
            .as_str()
            .unwrap()
            .contains("is the ferry on time?"),
        "{seen}"
    );
    assert!(
        !seen["transcript"]
            .as_str()
            .unwrap()
            .contains("[voice, transcribed]"),
        "{seen}"
    );
    assert_eq!(seen["feedback"], "👍 1 · 👎 0");
    if let Some(dir) = screenshots_dir() {
        browser.screenshot(&dir, "rooms-media").await;
    }
    browser.quit().await;
}

/// A Telegram photo is fetched when its message is handled (`getFile`, then the file URL)
/// and kept like a posted image: the room's history lists it on the message, and the image
/// route serves the very bytes Telegram had, with their type.
#[tokio::test]
async fn a_telegram_photo_is_kept_and_served_in_the_history() {
    const WAIT: Duration = Duration::from_secs(60);
    let telegram = FakeTelegram::start().await;
    let openai = FakeOpenAi::start().await;
    let character = telegram.persona("Ada", "Ada keeps the harbour office.");
    let options = TestAppOptions::new(Backend::Sqlite).persona_file("ada.json", character);
    let app = TestApp::spawn(options.openai(&openai)).await;
    let photo = STANDARD.decode(PNG_B64).unwrap();
    telegram.add_file("P-harbour", "photos/file_1.png", &photo);
    let (chat, sam) = (tg::private_chat(701, "Sam"), tg::user(701, "Sam"));
    let question = "what is in this picture?";
    telegram.push_message(tg::photo(
        chat,
        sam,
        question,
        "P-harbour",
        photo.len() as u64,
    ));
    if let Err(e) = telegram.try_wait_for_sent(1, WAIT).await {
        panic!("{e}\n----- troupe output -----\n{}", app.logs());
    }

    let room = format!("/api/agents/{AGENT}/rooms/telegram:701");
    let (status, memories) = app.get(&format!("{room}/memories")).await;
    assert_eq!(status, 200, "{memories}");
    let messages = memories["messages"].as_array().unwrap();
    let pictured = messages
        .iter()
        .find(|m| m["images"].is_array())
        .unwrap_or_else(|| panic!("a message with an image: {memories}"));
    assert!(
        pictured["text"].as_str().unwrap().contains(question),
        "{pictured}"
    );
    assert_eq!(pictured["images"], json!([{"n": 0, "mime": "image/png"}]));
    let id = pictured["id"].as_i64().unwrap();
    let image = app
        .client()
        .get(app.url(&format!("{room}/history/{id}/images/0")))
        .send()
        .await
        .unwrap();
    assert_eq!(image.status(), 200);
    let content_type = image.headers().get("content-type").cloned();
    assert_eq!(content_type.unwrap(), "image/png");
    assert_eq!(
        image.bytes().await.unwrap().to_vec(),
        photo,
        "the same bytes"
    );
    assert_eq!(
        telegram.calls_to("getFile").len(),
        1,
        "fetched once, for the model"
    );
}
