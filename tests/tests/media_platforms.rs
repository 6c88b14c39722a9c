//! Images from the platforms, end to end (issue 32): the real `troupe run`, the fake
//! platforms (Telegram's `getFile` and file URL, Discord's CDN, Neynar's cast embeds) and the
//! fake OpenAI, which records the image parts it is sent.
//!
//! On each platform a photo with "what is in this picture?" reaches the model as an image
//! part, fetched when the message is handled: Telegram's and Discord's files by the
//! connector with its own client (no `TROUPE_FETCH_ALLOW` for them), a Farcaster embed under
//! the fetch policy. Hostile images (25 MB, a link to an internal address) are refused with
//! their reason given to the persona, and the gateway goes on answering. The journal and the
//! bus carry references, never the bytes: an image over NATS's default limit for a message
//! (1 MiB) posted to the API goes through NATS.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use reqwest::StatusCode;
use serde_json::{Value, json};
use troupe_e2e::fake_discord::{Author, FakeDiscord, NewMessage};
use troupe_e2e::fake_neynar::{FakeNeynar, NewCast};
use troupe_e2e::fake_telegram::{FakeTelegram, tg};
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions};

const QUESTION: &str = "what is in this picture?";
/// A hang guard, not a timing assertion.
const WAIT: Duration = Duration::from_secs(60);
/// A `TROUPE_FETCH_ALLOW` that leaves loopback refused (the harness allows `127.0.0.1`, where
/// the fakes serve; TEST-NET-1 is reached by nothing here).
const NOT_LOOPBACK: &str = "192.0.2.1";
/// Over `TROUPE_MEDIA_MAX_BYTES`'s default of 10 MiB.
const HUGE: usize = 25 << 20;

fn png() -> Vec<u8> {
    let mut b = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    b.extend_from_slice(b"\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0");
    b
}

/// A JPEG's start, its JFIF segment and the frame header of a 1×1 image: enough for the
/// type and the size (issue 43), and never decoded.
fn jpeg() -> Vec<u8> {
    let mut b = vec![0xff, 0xd8, 0xff, 0xe0, 0, 16];
    b.extend_from_slice(b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0");
    b.extend_from_slice(&[0xff, 0xc0, 0, 11, 8, 0, 1, 0, 1, 1, 1, 0x11, 0]);
    b
}

fn data_url(mime: &str, bytes: &[u8]) -> String {
    format!("data:{mime};base64,{}", STANDARD.encode(bytes))
}

/// Serves `/pic.png` and a 25 MB `/huge.png`, as an image host would; returns its port.
async fn image_host() -> u16 {
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let files = axum::Router::new()
        .route("/pic.png", get(|| async { png() }))
        .route(
            "/huge.png",
            get(|| async {
                let mut b = png();
                b.resize(HUGE, 0);
                b
            }),
        );
    tokio::spawn(async move {
        let _ = axum::serve(listener, files).await;
    });
    port
}

/// The prompt's last user message, and its image parts, of request `n` (0-based).
async fn asked(openai: &FakeOpenAi, app: &TestApp, n: usize) -> (String, Vec<String>) {
    let seen = match openai.try_wait_for_requests(n + 1, WAIT).await {
        Ok(seen) => seen,
        Err(e) => panic!("{e}\n----- troupe output -----\n{}", app.logs()),
    };
    let text = seen[n].last_user_message().unwrap_or_default().to_string();
    (text, seen[n].image_urls())
}

#[tokio::test]
async fn a_telegram_photo_and_image_document_reach_the_model_and_a_huge_one_is_refused() {
    let telegram = FakeTelegram::start().await;
    let openai = FakeOpenAi::start().await;
    let character = telegram.persona("Tess", "Tess looks closely at whatever she is shown.");
    // Loopback is not allowed: the file URL is the operator's TELEGRAM_API_ROOT, fetched
    // by the connector, not under the fetch policy.
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("tess.json", character)
            .openai(&openai)
            .env("TROUPE_FETCH_ALLOW", NOT_LOOPBACK),
    )
    .await;
    let chat = || tg::private_chat(501, "Ann");
    let ann = || tg::user(501, "Ann");

    // A photo: the largest size, by getFile and the file URL.
    let photo = jpeg();
    telegram.add_file("P-large", "photos/file_7.jpg", &photo);
    telegram.push_message(tg::photo(
        chat(),
        ann(),
        QUESTION,
        "P-large",
        photo.len() as u64,
    ));
    let (text, images) = asked(&openai, &app, 0).await;
    assert!(text.contains(QUESTION), "{text}");
    assert_eq!(images, vec![data_url("image/jpeg", &photo)]);
    let got_file = telegram.calls_to("getFile");
    assert_eq!(got_file.len(), 1, "{got_file:?}");

    // An image sent as a document (uncompressed).
    telegram.add_file("D-1", "documents/file_8.png", &png());
    telegram.push_message(tg::document(
        chat(),
        ann(),
        "and this one?",
        "D-1",
        ("cat.png", "image/png", png().len() as u64),
    ));
    let (_, images) = asked(&openai, &app, 1).await;
    assert_eq!(images, vec![data_url("image/png", &png())]);

    // 25 MB: refused from the size Telegram announces, before any download; the persona is
    // told why and still answers.
    let mut huge = png();
    huge.resize(HUGE, 0);
    telegram.add_file("P-huge", "photos/file_9.jpg", &huge);
    telegram.push_message(tg::photo(chat(), ann(), QUESTION, "P-huge", HUGE as u64));
    let (text, images) = asked(&openai, &app, 2).await;
    assert!(images.is_empty(), "{images:?}");
    assert!(text.contains("TROUPE_MEDIA_MAX_BYTES"), "{text}");
    assert_eq!(
        telegram.calls_to("getFile").len(),
        2,
        "no getFile for the huge one"
    );
    telegram.push_message(tg::text(chat(), ann(), "still there?"));
    let (text, _) = asked(&openai, &app, 3).await;
    assert!(text.contains("still there?"), "{text}");

    // The file URL carries the token: it is never logged.
    assert!(
        !app.logs().contains(telegram.token()),
        "the bot token reached the logs"
    );
}

#[tokio::test]
async fn a_discord_attachment_and_image_embed_reach_the_model_and_hostile_ones_are_refused() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    let host = image_host().await;
    let character = discord.persona("Dot", "Dot looks closely at whatever she is shown.");
    // Loopback is not allowed (the harness allows it by default): the CDN (the fake, on a
    // loopback port) is reached by the connector's own client, and the image host on
    // loopback stays refused.
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("dot.json", character)
            .openai(&openai)
            .env("TROUPE_FETCH_ALLOW", NOT_LOOPBACK),
    )
    .await;
    if let Err(e) = discord.try_wait_for_ready(1, WAIT).await {
        panic!("{e}\n----- troupe output -----\n{}", app.logs());
    }
    let channel = "410000000000000001";
    let ask =
        |text: &str| NewMessage::guild(channel, Author::person("alice"), text).mentioning_bot();

    // An attachment on the CDN.
    let cat = discord.add_cdn_file("cat.png", &png());
    discord.send_message_create(ask(QUESTION).with_file(&cat, "cat.png", "image/png", 25));
    let (text, images) = asked(&openai, &app, 0).await;
    assert!(text.contains(QUESTION), "{text}");
    assert_eq!(images, vec![data_url("image/png", &png())]);

    // A picture link Discord unfurled: its copy on Discord's media proxy is fetched.
    let proxied = discord.add_cdn_file("dog.jpg", &jpeg());
    discord.send_message_create(
        ask("https://pics.example/dog.jpg")
            .with_image_embed("https://pics.example/dog.jpg", Some(&proxied)),
    );
    let (_, images) = asked(&openai, &app, 1).await;
    assert_eq!(images, vec![data_url("image/jpeg", &jpeg())]);
    assert!(
        discord
            .cdn_requests()
            .iter()
            .all(|(_, authorized)| !authorized),
        "the bot token went to the CDN: {:?}",
        discord.cdn_requests()
    );

    // Hostile: an embed without a proxied copy pointing at a loopback address (fetched under
    // the fetch policy, so refused), and an attachment of 25 MB (refused from its size).
    let internal = format!("http://127.0.0.1:{host}/pic.png");
    discord.send_message_create(ask(QUESTION).with_image_embed(&internal, None));
    let (text, images) = asked(&openai, &app, 2).await;
    assert!(images.is_empty(), "{images:?}");
    assert!(text.contains("loopback"), "{text}");
    let huge = discord.add_cdn_file("huge.png", &png());
    discord.send_message_create(ask(QUESTION).with_file(
        &huge,
        "huge.png",
        "image/png",
        HUGE as u64,
    ));
    let (text, images) = asked(&openai, &app, 3).await;
    assert!(images.is_empty(), "{images:?}");
    assert!(text.contains("TROUPE_MEDIA_MAX_BYTES"), "{text}");
    assert!(
        !discord
            .cdn_requests()
            .iter()
            .any(|(p, _)| p.ends_with("huge.png"))
    );

    // Unharmed.
    discord.send_message_create(ask("still there?"));
    let (text, images) = asked(&openai, &app, 4).await;
    assert!(text.contains("still there?") && images.is_empty(), "{text}");
}

#[tokio::test]
async fn a_farcaster_image_embed_reaches_the_model_and_an_internal_one_is_refused() {
    let neynar = FakeNeynar::start().await;
    let openai = FakeOpenAi::start().await;
    let host = image_host().await;
    let character = neynar.persona("Fern", "Fern looks closely at whatever she is shown.");
    // The image host is listed as the operator would list a trusted internal host; the
    // gateway's own port is not.
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("fern.json", character)
            .openai(&openai)
            .env("TROUPE_FETCH_ALLOW", &format!("127.0.0.1:{host}")),
    )
    .await;
    let bot = neynar.bot_fid();
    let cast = |text: &str, url: &str, mime: Option<&str>| {
        NewCast::new(7001, "ann", &format!("@fern {text}"))
            .mentioning(bot)
            .embedding(url, mime)
    };

    neynar.push_cast(cast(
        QUESTION,
        &format!("http://127.0.0.1:{host}/pic.png"),
        Some("image/png"),
    ));
    let (text, images) = asked(&openai, &app, 0).await;
    assert!(text.contains(QUESTION), "{text}");
    assert_eq!(images, vec![data_url("image/png", &png())]);

    let internal = format!("http://127.0.0.1:{}/api/agents", app.addr().port());
    neynar.push_cast(cast(QUESTION, &format!("{internal}/x.png"), None));
    let (text, images) = asked(&openai, &app, 1).await;
    assert!(images.is_empty(), "{images:?}");
    assert!(text.contains("loopback"), "{text}");
    assert!(
        !text.contains("/api/agents"),
        "the reason names the host, not the link: {text}"
    );

    neynar.push_cast(cast(
        QUESTION,
        &format!("http://127.0.0.1:{host}/huge.png"),
        Some("image/png"),
    ));
    let (text, images) = asked(&openai, &app, 2).await;
    assert!(images.is_empty(), "{images:?}");
    assert!(text.contains("TROUPE_MEDIA_MAX_BYTES"), "{text}");
}

/// The bus carries the reference: an image larger than NATS's default limit for a message
/// (1 MiB; inline, its base64 alone would be 1.7 MB) posted to the API reaches the model
/// whole through NATS. 1.25 MB rather than more: the fake OpenAI takes request bodies up to
/// axum's default 2 MB, and the image's base64 goes to it.
#[tokio::test]
async fn an_image_over_the_nats_limit_goes_through_nats_by_reference() {
    let Some(nats) =
        troupe_e2e::env::nats_url("an_image_over_the_nats_limit_goes_through_nats_by_reference")
    else {
        return;
    };
    let openai = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona("Iris", "Iris looks closely at whatever she is shown.")
            .openai(&openai)
            .env("TROUPE_BUS_URL", &nats)
            .env(
                "TROUPE_BUS_PREFIX",
                &format!("e2emedia{}", uuid::Uuid::new_v4().simple()),
            ),
    )
    .await;
    let mut big = png();
    big.resize(1_250_000, 7);
    let (status, body): (StatusCode, Value) = app
        .post_message(
            "Iris",
            &json!({"roomId": "album", "text": QUESTION,
                    "attachments": [{"data": STANDARD.encode(&big), "mime": "image/png"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}\n{}", app.logs());
    let (text, images) = asked(&openai, &app, 0).await;
    assert!(text.contains(QUESTION), "{text}");
    assert_eq!(images.len(), 1);
    assert!(
        images[0] == data_url("image/png", &big),
        "the image arrived changed"
    );
}
