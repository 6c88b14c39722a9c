//! Images in messages, end to end (issue 32): the real `troupe run`, the fake OpenAI (which
//! records the image parts it is sent) and a small file server on an allow-listed loopback
//! port (the fetch policy's `TROUPE_FETCH_ALLOW`, as the operator would list an internal
//! image host).
//!
//! A photo posted to the API with "what is in this picture?" reaches a vision model as an
//! image part (inline or fetched from a link), a text-only model is told an image was sent
//! that it cannot see, the room remembers a description and not the bytes, and hostile
//! images (25 MB, a link to an internal address, bytes that are no image) are refused with
//! a clear reason while the gateway goes on answering.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use reqwest::StatusCode;
use serde_json::{Value, json};
use troupe_e2e::multipart::{self, Part};
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, persona_json};

const SEER: &str = "Iris";
const BLIND: &str = "Slate";
const QUESTION: &str = "what is in this picture?";
/// A hang guard, not a timing assertion.
const WAIT: Duration = Duration::from_secs(60);

/// A PNG's signature and the start of its header: enough for the type, and never decoded.
fn png() -> Vec<u8> {
    let mut b = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    b.extend_from_slice(b"\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0");
    b
}

/// A PNG whose header says `width`×`height`, padded to 4 KB: it would decode to
/// width × height × 4 bytes.
fn png_sized(width: u32, height: u32) -> Vec<u8> {
    let mut b = png();
    b[16..20].copy_from_slice(&width.to_be_bytes());
    b[20..24].copy_from_slice(&height.to_be_bytes());
    b.resize(4096, 0);
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

/// Serves `/cat.jpg`, a 25 MB `/huge.png` and `/notes.txt`; returns its port.
async fn file_server() -> u16 {
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let files = axum::Router::new()
        .route("/cat.jpg", get(|| async { jpeg() }))
        .route(
            "/huge.png",
            get(|| async {
                let mut b = png();
                b.resize(25 << 20, 0);
                b
            }),
        )
        .route("/notes.txt", get(|| async { "just words" }))
        .route("/wide.png", get(|| async { png_sized(100_000, 1) }));
    tokio::spawn(async move {
        let _ = axum::serve(listener, files).await;
    });
    port
}

/// Posts a JSON body of `size` bytes (an image's base64 that goes on and on) over a raw
/// connection, and returns what the gateway answered. A client that stops at the first
/// failed write could not read the 413 the gateway sends before the body has all arrived.
async fn post_huge(app: &TestApp, path: &str, size: usize) -> String {
    let start = br#"{"text":"what is in this picture?","attachments":[{"data":""#;
    post_raw(app, path, "application/json", start.to_vec(), size).await
}

/// Posts a body of `start` then `A`s, `size` bytes said in `Content-Length`, of `kind`.
async fn post_raw(app: &TestApp, path: &str, kind: &str, start: Vec<u8>, size: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stream = tokio::net::TcpStream::connect(app.addr()).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: {kind}\r\n\
         Content-Length: {size}\r\nConnection: close\r\n\r\n",
        app.addr()
    );
    let writer = tokio::spawn(async move {
        write.write_all(head.as_bytes()).await?;
        write.write_all(&start).await?;
        let chunk = vec![b'A'; 64 * 1024];
        for _ in 0..size / chunk.len() {
            write.write_all(&chunk).await?;
        }
        std::io::Result::Ok(())
    });
    let mut answer = Vec::new();
    let read_all = async {
        let mut buf = [0u8; 8192];
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(WAIT, read_all)
        .await
        .expect("the gateway answers an oversized body");
    writer.abort();
    String::from_utf8_lossy(&answer).into_owned()
}

fn error_text(body: &Value) -> String {
    body.to_string()
}

/// An inline photo reaches the vision model as an image part, with the question; a link
/// is fetched (under the fetch policy) and its type read from the bytes; the room
/// remembers a short description of each, never the bytes.
async fn photos_and_links_reach_the_model(app: &TestApp, openai: &FakeOpenAi, files: u16) {
    let (status, body) = app
        .post_message(
            SEER,
            &json!({"roomId": "album", "text": QUESTION,
                    "attachments": [{"data": STANDARD.encode(png()), "mime": "image/png"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let seen = openai.wait_for_requests(1, WAIT).await;
    let images = seen[0].image_urls();
    assert_eq!(
        images,
        vec![format!("data:image/png;base64,{}", STANDARD.encode(png()))]
    );
    assert!(seen[0].last_user_message().unwrap().contains(QUESTION));

    let (status, body) = app
        .post_message(
            SEER,
            &json!({"roomId": "album", "text": "and this one?",
                    "attachments": [{"url": format!("http://127.0.0.1:{files}/cat.jpg")}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let seen = openai.wait_for_requests(2, WAIT).await;
    let images = seen[1].image_urls();
    assert_eq!(images.len(), 1, "{images:?}");
    assert!(
        images[0].starts_with("data:image/jpeg;base64,"),
        "{images:?}"
    );

    let (status, memories) = app
        .get(&format!("/api/agents/{SEER}/rooms/album/memories"))
        .await;
    assert_eq!(status, StatusCode::OK, "{memories}");
    let remembered = memories.to_string();
    assert!(
        remembered.contains("[image: image/png, 1 KB]"),
        "{remembered}"
    );
    assert!(
        remembered.contains("[image: image/jpeg, 1 KB]"),
        "{remembered}"
    );
    assert!(!remembered.contains("base64"), "{remembered}");
}

/// A text-only model gets no image part, but is told an image came that it cannot see.
async fn a_text_only_model_is_told_it_cannot_see(app: &TestApp, openai: &FakeOpenAi) {
    let (status, body) = app
        .post_message(
            BLIND,
            &json!({"text": QUESTION, "attachments": [{"data": STANDARD.encode(png())}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let seen = openai.wait_for_requests(3, WAIT).await;
    assert!(seen[2].image_urls().is_empty());
    let asked = seen[2].last_user_message().unwrap();
    assert!(asked.contains("cannot see"), "{asked}");
}

/// Hostile images, and the status and reason each is refused with: too large, inside
/// (loopback, link-local), not an image, not the type it says, not base64, and a few
/// kilobytes that would decode to 40 GB (issue 43), inline or linked.
fn hostile_images(files: u16, gateway: u16) -> Vec<(Value, StatusCode, &'static str)> {
    vec![
        (
            json!({"url": format!("http://127.0.0.1:{files}/huge.png")}),
            StatusCode::PAYLOAD_TOO_LARGE,
            "TROUPE_MEDIA_MAX_BYTES",
        ),
        (
            json!({"url": format!("http://127.0.0.1:{}/api/agents", gateway)}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "loopback",
        ),
        (
            json!({"url": "http://169.254.169.254/latest/meta-data/"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "link-local",
        ),
        (
            json!({"url": format!("http://127.0.0.1:{files}/notes.txt")}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "not a PNG, JPEG, GIF or WebP",
        ),
        (
            json!({"data": STANDARD.encode(jpeg()), "mime": "image/png"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "its bytes are image/jpeg",
        ),
        (
            json!({"data": "not base64!"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "not valid base64",
        ),
        // A few kilobytes that would decode to 40 GB (issue 43), inline or linked.
        (
            json!({"data": STANDARD.encode(png_sized(100_000, 100_000))}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "100000×100000 pixels",
        ),
        (
            json!({"url": format!("http://127.0.0.1:{files}/wide.png")}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "at most 16384 pixels a side",
        ),
    ]
}

/// Each hostile image refused with its reason, naming the host, never the link.
async fn hostile_images_are_refused(app: &TestApp, files: u16) {
    let refusals = hostile_images(files, app.addr().port());
    for (attachment, want_status, want_reason) in refusals {
        let (status, body) = app
            .post_message(
                SEER,
                &json!({"roomId": "hostile", "text": QUESTION, "attachments": [attachment]}),
            )
            .await;
        assert_eq!(status, want_status, "{attachment}: {body}");
        assert!(
            error_text(&body).contains(want_reason),
            "{attachment}: {body}"
        );
        assert!(
            !error_text(&body).contains("/api/agents") && !error_text(&body).contains("meta-data"),
            "the reason names the host, never the link: {body}"
        );
    }
}

#[tokio::test]
async fn images_reach_the_model_and_hostile_ones_are_refused() {
    let openai = FakeOpenAi::start().await;
    let files = file_server().await;
    let mut blind = persona_json(BLIND, "Slate answers in plain words.");
    blind["settings"]["model"] = json!("gpt-3.5-turbo");
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona(SEER, "Iris looks closely at whatever she is shown.")
            .persona_file("slate.json", blind)
            .openai(&openai)
            .env("TROUPE_FETCH_ALLOW", &format!("127.0.0.1:{files}")),
    )
    .await;

    photos_and_links_reach_the_model(&app, &openai, files).await;
    a_text_only_model_is_told_it_cannot_see(&app, &openai).await;
    hostile_images_are_refused(&app, files).await;
    // 25 MB inline is over the body limit before any of it is decoded.
    let answer = post_huge(&app, &format!("/api/agents/{SEER}/messages"), 25 << 20).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("payload_too_large"), "{answer}");
    assert_eq!(
        openai.request_count(),
        3,
        "no refused image reached the model"
    );

    // The gateway is unharmed: healthy, and answering the next message.
    let (status, _) = app.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = app
        .post_message(SEER, &json!({"roomId": "hostile", "text": "still there?"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let seen = openai.wait_for_requests(4, WAIT).await;
    assert!(seen[3].image_urls().is_empty());
}

/// `TROUPE_VISION=off`: an image posted to the API is refused, saying which setting.
#[tokio::test]
async fn vision_off_refuses_images_on_the_api() {
    let openai = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona(SEER, "Iris looks closely at whatever she is shown.")
            .openai(&openai)
            .env("TROUPE_VISION", "off"),
    )
    .await;
    let (status, body) = app
        .post_message(
            SEER,
            &json!({"text": QUESTION, "attachments": [{"data": STANDARD.encode(png())}]}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body.to_string().contains("TROUPE_VISION=off"), "{body}");
    assert_eq!(openai.request_count(), 0);
}

/// Posts `parts` as `multipart/form-data` to the persona's `/messages`.
async fn post_form(app: &TestApp, agent: &str, parts: &[Part<'_>]) -> (StatusCode, Value) {
    let url = app.url(&format!("/api/agents/{agent}/messages"));
    let response = multipart::attach(app.client().post(url), parts)
        .send()
        .await
        .expect("an answer");
    let status = response.status();
    let body = response.json().await.expect("a JSON answer");
    (status, body)
}

/// The same photo as a multipart file part (a browser form, `curl -F image=@cat.png`):
/// the same checks, stored the same way, seen by the model as an image part.
/// Hostile parts, each refused with its reason before the model is asked: not an image,
/// one image too many, not the type it says, a field the API does not know.
async fn hostile_parts_are_refused(app: &TestApp, photo: &[u8]) {
    let words = b"just words".to_vec();
    let five: Vec<Part<'_>> = std::iter::once(Part::Text("text", QUESTION))
        .chain((0..5).map(|_| Part::Image("cat.png", "image/png", photo)))
        .collect();
    let refusals: [(Vec<Part<'_>>, StatusCode, &str); 4] = [
        (
            vec![
                Part::Text("text", QUESTION),
                Part::Image("notes.png", "image/png", &words),
            ],
            StatusCode::UNPROCESSABLE_ENTITY,
            "not a PNG, JPEG, GIF or WebP",
        ),
        (five, StatusCode::UNPROCESSABLE_ENTITY, "at most 4 images"),
        (
            vec![
                Part::Text("text", QUESTION),
                Part::Image("cat.png", "image/jpeg", photo),
            ],
            StatusCode::UNPROCESSABLE_ENTITY,
            "its bytes are image/png",
        ),
        (
            vec![Part::Text("txt", QUESTION)],
            StatusCode::BAD_REQUEST,
            "txt",
        ),
    ];
    for (parts, want_status, want_reason) in refusals {
        let (status, body) = post_form(app, SEER, &parts).await;
        assert_eq!(status, want_status, "{want_reason}: {body}");
        assert!(body.to_string().contains(want_reason), "{body}");
    }
}

/// A 25 MB part: refused with a clear 413, naming the setting, before it has all arrived.
async fn a_huge_part_is_refused(app: &TestApp, photo: &[u8]) {
    let kind = multipart::content_type();
    let boundary = kind.split("boundary=").nth(1).unwrap();
    let start = multipart::body(&[
        Part::Text("text", QUESTION),
        Part::Image("huge.png", "image/png", photo),
    ]);
    // The body up to the image's bytes; the rest of the 25 MB follows as `A`s.
    let cut = start.len() - format!("\r\n--{boundary}--\r\n").len();
    let start = start[..cut].to_vec();
    let answer = post_raw(
        app,
        &format!("/api/agents/{SEER}/messages"),
        &kind,
        start,
        25 << 20,
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("TROUPE_MEDIA_MAX_BYTES"), "{answer}");
}

#[tokio::test]
async fn multipart_image_parts_reach_the_model_and_hostile_ones_are_refused() {
    let openai = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona(SEER, "Iris looks closely at whatever she is shown.")
            .openai(&openai),
    )
    .await;
    let photo = png();
    let (status, body) = post_form(
        &app,
        SEER,
        &[
            Part::Text("roomId", "form"),
            Part::Text("text", QUESTION),
            Part::Image("cat.png", "image/png", &photo),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let seen = openai.wait_for_requests(1, WAIT).await;
    assert_eq!(
        seen[0].image_urls(),
        vec![format!("data:image/png;base64,{}", STANDARD.encode(png()))]
    );
    assert!(seen[0].last_user_message().unwrap().contains(QUESTION));
    let (status, memories) = app
        .get(&format!("/api/agents/{SEER}/rooms/form/memories"))
        .await;
    assert_eq!(status, StatusCode::OK, "{memories}");
    assert!(
        memories.to_string().contains("[image: image/png, 1 KB]"),
        "{memories}"
    );

    hostile_parts_are_refused(&app, &photo).await;
    a_huge_part_is_refused(&app, &photo).await;
    assert_eq!(
        openai.request_count(),
        1,
        "no refused image reached the model"
    );

    // The gateway is unharmed.
    let (status, body) = post_form(&app, SEER, &[Part::Text("text", "still there?")]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let seen = openai.wait_for_requests(2, WAIT).await;
    assert!(seen[1].image_urls().is_empty());
}

/// `TROUPE_VISION_MODEL`: a text-only persona's images are described by the vision model
/// (sent the image part), and the persona's own model gets the description, no image.
/// `character` (Slate) on a text-only model (`gpt-3.5-turbo`), served with the OpenAI
/// provider at `openai`, memory upkeep off (no model calls but the turn's), and `env`.
async fn blind_app(mut character: Value, openai: &FakeOpenAi, env: &[(&str, &str)]) -> TestApp {
    character["settings"]["model"] = json!("gpt-3.5-turbo");
    let mut options = TestAppOptions::new(Backend::Sqlite)
        .persona_file("slate.json", character)
        .openai(openai)
        .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
        .env("TROUPE_MEMORY_FACTS_EVERY", "0");
    for (k, v) in env {
        options = options.env(k, v);
    }
    TestApp::spawn(options).await
}

/// Asks Slate [`QUESTION`] with [`png`] attached, on the API; the answer is a 200.
async fn ask_with_an_image(app: &TestApp) {
    let (status, body) = app
        .post_message(
            BLIND,
            &json!({"text": QUESTION, "attachments": [{"data": STANDARD.encode(png())}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn a_vision_model_describes_images_for_a_text_only_persona() {
    const SEEN: &str = "A grey cat asleep on a red chair.";
    let openai = FakeOpenAi::start().await;
    let blind = persona_json(BLIND, "Slate answers in plain words.");
    let vision = ("TROUPE_VISION_MODEL", "gpt-4o-mini");
    let app = blind_app(blind, &openai, &[vision]).await;
    openai.push_reply(SEEN);
    ask_with_an_image(&app).await;
    let seen = openai.wait_for_requests(2, WAIT).await;
    // First the vision model, with the image part.
    assert_eq!(seen[0].model, "gpt-4o-mini");
    assert_eq!(
        seen[0].image_urls(),
        vec![format!("data:image/png;base64,{}", STANDARD.encode(png()))]
    );
    // Then the persona's own model: the description, no image, not "cannot see" alone.
    assert_eq!(seen[1].model, "gpt-3.5-turbo");
    assert!(seen[1].image_urls().is_empty());
    let asked = seen[1].last_user_message().unwrap();
    assert!(asked.contains(SEEN), "{asked}");
    assert!(asked.contains(QUESTION), "{asked}");

    // The room remembers the description, not the image: the next turn's prompt has what
    // the image showed, and no image part, and the vision model is not asked again.
    let (status, body) = app
        .post_message(BLIND, &json!({"text": "and what colour was the chair?"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let seen = openai.wait_for_requests(3, WAIT).await;
    let vision_calls = seen.iter().filter(|r| r.model == "gpt-4o-mini").count();
    assert_eq!(vision_calls, 1, "no second vision call");
    assert_eq!(seen[2].model, "gpt-3.5-turbo");
    assert!(seen[2].image_urls().is_empty());
    let history = seen[2].prompt_text();
    assert!(
        history.contains(&format!("[images described: {SEEN}]")),
        "{history}"
    );
}

/// elizaOS's `imageVisionModelProvider`: a persona talking through its own endpoint (the
/// file's `OPENAI_BASE_URL`, with the file's own key) has its images described on the
/// provider the operator configured (the environment's endpoint, with the environment's
/// key), by that provider's default vision model; the file picks the provider, never where
/// it is.
#[tokio::test]
async fn image_vision_model_provider_sends_the_image_to_the_operators_provider() {
    const SEEN: &str = "A lighthouse at dusk.";
    let own = FakeOpenAi::start().await;
    let operator = FakeOpenAi::start().await;
    let mut blind = persona_json(BLIND, "Slate answers in plain words.");
    blind["settings"]["secrets"] = json!({
        "OPENAI_BASE_URL": own.base_url(),
        "OPENAI_API_KEY": own.api_key().unwrap(),
    });
    blind["imageVisionModelProvider"] = json!("openai");
    let app = blind_app(blind, &operator, &[]).await;
    operator.push_reply(SEEN);
    ask_with_an_image(&app).await;
    let described = operator.wait_for_requests(1, WAIT).await;
    assert_eq!(described[0].model, "gpt-4o-mini", "the provider's default");
    assert_eq!(
        described[0].authorization,
        Some(format!("Bearer {}", operator.api_key().unwrap())),
        "the operator's key for the operator's provider"
    );
    assert_eq!(
        described[0].image_urls(),
        vec![format!("data:image/png;base64,{}", STANDARD.encode(png()))]
    );
    let answered = own.wait_for_requests(1, WAIT).await;
    assert_eq!(answered[0].model, "gpt-3.5-turbo");
    assert!(answered[0].image_urls().is_empty());
    let asked = answered[0].last_user_message().unwrap();
    assert!(asked.contains(SEEN), "{asked}");
    assert_eq!(
        operator.request_count(),
        1,
        "the reply is the persona's own"
    );
}
