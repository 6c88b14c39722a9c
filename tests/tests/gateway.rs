//! End-to-end tests of `troupe run` through HTTP, with the OpenAI-compatible fake as the
//! model. One binary for all of them; each test body runs once on SQLite and once on
//! Postgres (`TROUPE_TEST_DATABASE_URL`).

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use troupe_e2e::fake_openai::openai_error;
use troupe_e2e::{
    Backend, FakeOpenAi, Outcome, Script, TestApp, TestAppOptions, WAIT, eventually,
    json_contains_text,
};

const AGENT: &str = "Ada";
const BIO: &str =
    "Ada is a retired lighthouse keeper who collects sea glass on the northern shore.";

troupe_e2e::on_each_backend!(
    a_reply_comes_back,
    the_prompt_holds_the_bio_and_the_room_history,
    rooms_do_not_see_each_other,
    room_memory_survives_a_restart,
    a_repeated_message_id_is_answered_once,
    concurrent_posts_of_one_message_id_are_answered_once,
    a_repost_while_the_next_start_drives_it_again_is_answered_once,
    two_reposts_of_a_failed_message_are_answered_once,
    a_model_error_is_reported_and_the_message_stays_journaled,
    a_model_timeout_is_reported_and_the_message_stays_journaled,
    a_journaled_message_is_answered_at_the_next_start,
    a_message_pending_at_a_crash_is_answered_after_it,
    without_a_model_provider_messages_get_503_naming_the_variable,
    agents_are_listed_and_bad_requests_get_json_errors,
    the_api_token_guards_every_route_but_the_probes,
);

/// The app with one persona, Ada, pointed at `fake`.
async fn spawn_with(backend: Backend, fake: &FakeOpenAi) -> TestApp {
    TestApp::spawn(
        TestAppOptions::new(backend)
            .persona(AGENT, BIO)
            .openai(fake),
    )
    .await
}

/// Waits until the room's memories hold `text` (written by the gateway in the background).
async fn wait_for_memory(app: &TestApp, room: &str, text: &str) {
    let path = format!("/api/agents/{AGENT}/rooms/{room}/memories");
    eventually(&format!("GET {path} lists {text:?}"), WAIT, || async {
        let (status, body) = app.get(&path).await;
        status == StatusCode::OK && json_contains_text(&body, text)
    })
    .await;
}

fn message(room: &str, text: &str) -> Value {
    json!({"roomId": room, "userId": "u-sam", "userName": "Sam", "text": text})
}

/// The text of the first reply, failing with the whole body when there is none.
fn reply_text(status: StatusCode, body: &Value, fake: &FakeOpenAi) -> String {
    assert_eq!(
        status,
        StatusCode::OK,
        "expected 200 with replies, got {status}: {body}\nfake requests: {:?}\nfake unknown paths: {:?}",
        fake.requests()
            .iter()
            .map(|r| &r.outcome)
            .collect::<Vec<_>>(),
        fake.unmatched()
    );
    body["replies"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no replies[0].text in {body}"))
        .to_string()
}

/// Asserts the documented error shape `{error, detail}` and returns the body as text.
fn assert_error_json(status: StatusCode, body: &Value, allowed: &[StatusCode]) -> String {
    assert!(
        allowed.contains(&status),
        "expected one of {allowed:?}, got {status}: {body}"
    );
    assert!(
        body.is_object(),
        "the error body is not a JSON object: {body}"
    );
    assert!(body["error"].is_string(), "no string `error` in {body}");
    assert!(body["detail"].is_string(), "no string `detail` in {body}");
    body.to_string()
}

/// The text of a message built with `json!`.
fn text_of(msg: &Value) -> &str {
    msg["text"].as_str().expect("the message has a text")
}

/// Posts `msg` while the model fails (a fallback the caller set): the answer is the JSON
/// error of a failed model call. Returns how many requests the model has had.
async fn post_while_the_model_fails(app: &TestApp, fake: &FakeOpenAi, msg: &Value) -> usize {
    let (status, body) = app.post_message(AGENT, msg).await;
    assert_error_json(
        status,
        &body,
        &[StatusCode::BAD_GATEWAY, StatusCode::GATEWAY_TIMEOUT],
    );
    let calls = fake.request_count();
    assert!(calls >= 1, "the model was never called");
    calls
}

/// While the model fails with `failure`, posting `msg` gets a JSON error; once the model is
/// back, `msg` (still journaled) posted again is answered with `answer`.
async fn a_failed_message_is_answered_once_the_model_is_back(
    app: &TestApp,
    fake: &FakeOpenAi,
    failure: Script,
    msg: &Value,
    answer: &str,
) {
    fake.set_fallback(Some(failure));
    post_while_the_model_fails(app, fake, msg).await;

    fake.set_fallback(None);
    fake.push_reply(answer);
    let (status, body) = app.post_message(AGENT, msg).await;
    assert_eq!(
        reply_text(status, &body, fake),
        answer,
        "the journaled message was not answered"
    );
    assert!(fake.last_prompt_text().contains(text_of(msg)));
}

/// Posts `msg` on a task of its own, so that the test can act while it is in hand.
fn post_in_the_background(
    app: &TestApp,
    msg: &Value,
) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let url = app.url(&format!("/api/agents/{AGENT}/messages"));
    tokio::spawn(app.client().post(url).json(msg).send())
}

/// Posts `msg` twice, the second time while the model is on the first (its request number
/// `calls + 1`), as a client retry does. The texts of the two replies, in the order posted.
async fn post_again_during_the_answer(
    app: &TestApp,
    fake: &FakeOpenAi,
    msg: &Value,
    calls: usize,
) -> [String; 2] {
    let first = post_in_the_background(app, msg);
    fake.wait_for_requests(calls + 1, WAIT).await;
    let (status, second) = app.post_message(AGENT, msg).await;
    let second = reply_text(status, &second, fake);
    let first = first.await.expect("join").expect("the first post");
    let status = first.status();
    let first: Value = first.json().await.expect("the first answer is JSON");
    [reply_text(status, &first, fake), second]
}

/// What the model was asked from its request number `calls + 1` on, leaving out a later
/// message of r1 that this posts first: a room's messages are handled in order, so once
/// that one is answered, any second handling of an earlier message is over too.
async fn answers_since(app: &TestApp, fake: &FakeOpenAi, calls: usize) -> Vec<Outcome> {
    let fence = "Thank you, Ada.";
    let (status, body) = app.post_message(AGENT, &message("r1", fence)).await;
    reply_text(status, &body, fake);
    fake.requests()[calls..]
        .iter()
        .filter(|r| !r.prompt_text().contains(fence))
        .map(|r| r.outcome.clone())
        .collect()
}

/// Waits until the gateway, on its own, has sent the model `calls` requests, the last one
/// for the journaled `msg`.
async fn wait_for_the_drive_of(app: &TestApp, fake: &FakeOpenAi, msg: &Value, calls: usize) {
    let reqs = fake
        .try_wait_for_requests(calls, WAIT)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the journaled message was not driven again: {e}\n{}",
                app.logs()
            )
        });
    let prompt = reqs[calls - 1].prompt_text();
    assert!(
        prompt.contains(text_of(msg)),
        "request {calls} is not for the journaled message:\n{prompt}"
    );
}

/// Once `answer` is stored, `msg` posted again gets it without another model call: the
/// model has had `calls` requests, and still has.
async fn a_repost_gets_the_stored_answer(
    app: &TestApp,
    fake: &FakeOpenAi,
    msg: &Value,
    answer: &str,
    calls: usize,
) {
    let room = msg["roomId"].as_str().expect("the message has a room");
    wait_for_memory(app, room, answer).await;
    let (status, body) = app.post_message(AGENT, msg).await;
    assert_eq!(reply_text(status, &body, fake), answer);
    assert_eq!(
        fake.request_count(),
        calls,
        "answered twice: {:?}",
        fake.requests()
    );
}

async fn a_reply_comes_back(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = spawn_with(backend, &fake).await;
    fake.push_reply("Ahoy from the lighthouse.");

    let (status, body) = app.post_message(AGENT, &json!({"text": "hi"})).await;
    assert_eq!(
        reply_text(status, &body, &fake),
        "Ahoy from the lighthouse."
    );
    assert_eq!(body["replies"].as_array().map(Vec::len), Some(1), "{body}");

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1, "one message, one model call");
    assert_eq!(
        reqs[0].authorization.as_deref(),
        Some(format!("Bearer {}", fake.api_key().unwrap()).as_str())
    );
    assert!(reqs[0].prompt_text().contains("hi"));
    assert!(
        !app.logs().contains(fake.api_key().unwrap()),
        "the API key leaked into the logs:\n{}",
        app.logs()
    );
}

async fn the_prompt_holds_the_bio_and_the_room_history(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = spawn_with(backend, &fake).await;
    fake.push_reply("Biscuit is a fine name for a cat.");
    fake.push_reply("Your cat is called Biscuit.");

    let (status, body) = app
        .post_message(AGENT, &message("r1", "My cat is called Biscuit."))
        .await;
    reply_text(status, &body, &fake);
    let (status, body) = app
        .post_message(AGENT, &message("r1", "What is my cat called?"))
        .await;
    assert_eq!(
        reply_text(status, &body, &fake),
        "Your cat is called Biscuit."
    );

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert!(
        reqs[0].prompt_text().contains(BIO),
        "the bio is not in the prompt:\n{}",
        reqs[0].prompt_text()
    );
    let second = reqs[1].prompt_text();
    assert!(
        second.contains(BIO),
        "the bio is not in the second prompt:\n{second}"
    );
    assert!(
        second.contains("What is my cat called?"),
        "the message is not in its prompt:\n{second}"
    );
    assert!(
        second.contains("My cat is called Biscuit."),
        "the earlier message is not in the prompt:\n{second}"
    );
    assert!(
        second.contains("Biscuit is a fine name for a cat."),
        "the earlier reply is not in the prompt:\n{second}"
    );
}

async fn rooms_do_not_see_each_other(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = spawn_with(backend, &fake).await;
    fake.push_reply("I will keep swordfish to myself.");
    fake.push_reply("Hello, stranger.");

    let (status, body) = app
        .post_message(AGENT, &message("r1", "The password is swordfish."))
        .await;
    reply_text(status, &body, &fake);
    let (status, body) = app
        .post_message(AGENT, &message("r2", "Hello, who are you?"))
        .await;
    reply_text(status, &body, &fake);

    let second = fake.requests()[1].prompt_text();
    assert!(second.contains("Hello, who are you?"));
    assert!(
        !second.contains("swordfish"),
        "room r2 saw room r1's messages:\n{second}"
    );
}

async fn room_memory_survives_a_restart(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let mut app = spawn_with(backend, &fake).await;
    fake.push_reply("I will remember 4242.");
    let (status, body) = app
        .post_message(AGENT, &message("r1", "Remember the number 4242."))
        .await;
    reply_text(status, &body, &fake);

    app.restart().await;

    fake.push_reply("The number was 4242.");
    let (status, body) = app
        .post_message(AGENT, &message("r1", "Which number did I give you?"))
        .await;
    reply_text(status, &body, &fake);
    let after = fake.requests()[1].prompt_text();
    assert!(
        after.contains("Remember the number 4242."),
        "the room's memory was lost on restart:\n{after}"
    );
    assert!(
        after.contains("I will remember 4242."),
        "the agent's reply was lost on restart:\n{after}"
    );

    let (status, memories) = app
        .get(&format!("/api/agents/{AGENT}/rooms/r1/memories"))
        .await;
    assert_eq!(status, StatusCode::OK, "{memories}");
    for text in [
        "Remember the number 4242.",
        "I will remember 4242.",
        "Which number did I give you?",
    ] {
        assert!(
            json_contains_text(&memories, text),
            "{text:?} is not in the room's memories: {memories}"
        );
    }
}

async fn a_repeated_message_id_is_answered_once(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = spawn_with(backend, &fake).await;
    fake.push_reply("Only once.");
    let msg =
        json!({"roomId": "r1", "userId": "u-sam", "messageId": "m-1", "text": "Say it once."});

    let (status, first) = app.post_message(AGENT, &msg).await;
    assert_eq!(reply_text(status, &first, &fake), "Only once.");
    let (status, second) = app.post_message(AGENT, &msg).await;
    assert_eq!(
        reply_text(status, &second, &fake),
        "Only once.",
        "the duplicate got a different answer"
    );
    assert_eq!(
        fake.request_count(),
        1,
        "the model was called for the duplicate: {:?}",
        fake.requests()
    );
}

async fn concurrent_posts_of_one_message_id_are_answered_once(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = spawn_with(backend, &fake).await;
    // The model takes a moment, so the second post arrives while the first is in hand.
    fake.push(Script::Delay(
        Duration::from_millis(500),
        Box::new(Script::reply("Just the one answer.")),
    ));
    let msg = json!({"roomId": "r1", "userId": "u-sam", "messageId": "m-twice", "text": "Are you there?"});
    let [first, second] = post_again_during_the_answer(&app, &fake, &msg, 0).await;
    assert_eq!(first, "Just the one answer.");
    assert_eq!(
        second, "Just the one answer.",
        "the repost during the answer got another answer"
    );
    assert_eq!(
        fake.request_count(),
        1,
        "the model was called for the repost: {:?}",
        fake.requests()
    );
}

async fn a_model_error_is_reported_and_the_message_stays_journaled(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = spawn_with(backend, &fake).await;
    // Every call fails until the model "recovers", so a retrying gateway fails too.
    let failure = Script::Status(
        500,
        openai_error(
            "The server had an error while processing your request.",
            "server_error",
            None,
        ),
    );
    let msg = json!({"roomId": "r1", "userId": "u-sam", "messageId": "m-err", "text": "Tell me about the tides."});
    a_failed_message_is_answered_once_the_model_is_back(
        &app,
        &fake,
        failure,
        &msg,
        "The tides follow the moon.",
    )
    .await;
}

async fn a_model_timeout_is_reported_and_the_message_stays_journaled(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        TestAppOptions::new(backend)
            .persona(AGENT, BIO)
            .openai(&fake)
            .env("TROUPE_MODEL_TIMEOUT_SECS", "2"),
    )
    .await;
    let msg =
        json!({"roomId": "r1", "userId": "u-sam", "messageId": "m-hang", "text": "Are you awake?"});
    a_failed_message_is_answered_once_the_model_is_back(
        &app,
        &fake,
        Script::Hang,
        &msg,
        "Wide awake now.",
    )
    .await;
}

async fn a_journaled_message_is_answered_at_the_next_start(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let mut app = spawn_with(backend, &fake).await;
    fake.set_fallback(Some(Script::server_error()));
    let msg = json!({"roomId": "r1", "userId": "u-sam", "messageId": "m-redo", "text": "Where is the sea glass?"});
    let failed = post_while_the_model_fails(&app, &fake, &msg).await;

    // The model is back; the next start drives the pending entry again on its own.
    fake.set_fallback(None);
    fake.push_reply("On the northern shore.");
    app.restart().await;
    wait_for_the_drive_of(&app, &fake, &msg, failed + 1).await;

    // Once that answer is stored, the message posted again gets it without another model
    // call. (A repost while the answer is in flight is `concurrent_posts_…`'s subject.)
    a_repost_gets_the_stored_answer(&app, &fake, &msg, "On the northern shore.", failed + 1).await;
}

async fn a_repost_while_the_next_start_drives_it_again_is_answered_once(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let mut app = spawn_with(backend, &fake).await;
    fake.set_fallback(Some(Script::server_error()));
    let msg = json!({"roomId": "r1", "userId": "u-sam", "messageId": "m-race", "text": "Is the lamp trimmed?"});
    let failed = post_while_the_model_fails(&app, &fake, &msg).await;

    // The next start drives it again, and the model takes a moment; the user posts it
    // again meanwhile (a client retry).
    fake.set_fallback(None);
    fake.push(Script::Delay(
        Duration::from_millis(500),
        Box::new(Script::reply("Trimmed and lit.")),
    ));
    app.restart().await;
    fake.wait_for_requests(failed + 1, WAIT).await;
    let (status, body) = app.post_message(AGENT, &msg).await;
    assert_eq!(reply_text(status, &body, &fake), "Trimmed and lit.");

    let answers_to_the_repost = answers_since(&app, &fake, failed).await;
    assert_eq!(
        answers_to_the_repost.len(),
        1,
        "the message reposted while the restart drove it again was answered {} times: {:?}",
        answers_to_the_repost.len(),
        answers_to_the_repost
    );
    let last = fake.requests().last().unwrap().prompt_text();
    assert_eq!(
        last.matches("Is the lamp trimmed?").count(),
        1,
        "the room's history holds the message more than once:\n{last}"
    );
}

async fn two_reposts_of_a_failed_message_are_answered_once(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = spawn_with(backend, &fake).await;
    fake.set_fallback(Some(Script::server_error()));
    let msg = json!({"roomId": "r1", "userId": "u-sam", "messageId": "m-retry", "text": "Is the fog lifting?"});
    let failed = post_while_the_model_fails(&app, &fake, &msg).await;

    // The model is back but slow; the client retries twice, the second retry while the
    // first is being answered.
    fake.set_fallback(None);
    fake.push(Script::Delay(
        Duration::from_millis(500),
        Box::new(Script::reply("The fog is lifting.")),
    ));
    let replies = post_again_during_the_answer(&app, &fake, &msg, failed).await;
    assert_eq!(replies, ["The fog is lifting.", "The fog is lifting."]);

    let answers = answers_since(&app, &fake, failed).await;
    assert_eq!(
        answers.len(),
        1,
        "two retries of a failed message were answered {} times: {answers:?}",
        answers.len()
    );
}

async fn a_message_pending_at_a_crash_is_answered_after_it(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let mut app = spawn_with(backend, &fake).await;
    fake.set_fallback(Some(Script::Hang));
    let msg = json!({"roomId": "r1", "userId": "u-sam", "messageId": "m-crash", "text": "Light the lamp, please."});

    // The model is thinking when the process dies.
    let in_flight = post_in_the_background(&app, &msg);
    fake.wait_for_requests(1, WAIT).await;
    app.kill().await;
    assert!(
        in_flight.await.expect("join").is_err(),
        "the in-flight request was answered although the process was killed"
    );

    fake.set_fallback(None);
    fake.push_reply("The lamp is lit.");
    app.start_again().await;
    wait_for_the_drive_of(&app, &fake, &msg, 2).await;
    a_repost_gets_the_stored_answer(&app, &fake, &msg, "The lamp is lit.", 2).await;
}

async fn without_a_model_provider_messages_get_503_naming_the_variable(backend: Backend) {
    // No OPENAI_API_KEY nor OPENAI_BASE_URL; the persona still asks for openai.
    let app = TestApp::spawn(TestAppOptions::new(backend).persona(AGENT, BIO)).await;
    let (status, _) = app.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);

    let (status, body) = app.post_message(AGENT, &json!({"text": "hi"})).await;
    let text = assert_error_json(status, &body, &[StatusCode::SERVICE_UNAVAILABLE]);
    assert!(
        text.contains("OPENAI_API_KEY"),
        "the error does not name OPENAI_API_KEY: {text}"
    );
}

async fn agents_are_listed_and_bad_requests_get_json_errors(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = spawn_with(backend, &fake).await;

    let (status, agents) = app.get("/api/agents").await;
    assert_eq!(status, StatusCode::OK, "{agents}");
    assert!(
        json_contains_text(&agents, AGENT),
        "Ada is not listed: {agents}"
    );

    let (status, agent) = app.get(&format!("/api/agents/{AGENT}")).await;
    assert_eq!(status, StatusCode::OK, "{agent}");
    assert!(json_contains_text(&agent, AGENT), "{agent}");

    let (status, body) = app.get("/api/agents/nobody-here").await;
    assert_error_json(status, &body, &[StatusCode::NOT_FOUND]);

    let (status, body) = app
        .post_message("nobody-here", &json!({"text": "hi"}))
        .await;
    assert_error_json(status, &body, &[StatusCode::NOT_FOUND]);

    let path = format!("/api/agents/{AGENT}/messages");
    let (status, body) = app
        .post_raw(&path, "{\"text\": \"hi\"", "application/json", None)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body.is_object() && body["error"].is_string(),
        "not a JSON error: {body}"
    );

    let (status, body) = app.post_json(&path, &json!({"roomId": "r1"}), None).await;
    assert!(
        status == StatusCode::BAD_REQUEST || status == StatusCode::UNPROCESSABLE_ENTITY,
        "a message without text: {status} {body}"
    );
    assert!(
        body.is_object() && body["error"].is_string(),
        "not a JSON error: {body}"
    );

    assert_eq!(fake.request_count(), 0, "bad requests reached the model");
    // Still alive after all of that.
    let (status, _) = app.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
}

async fn the_api_token_guards_every_route_but_the_probes(backend: Backend) {
    let token = "tok-e2e-7c1d0a";
    let fake = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        TestAppOptions::new(backend)
            .persona(AGENT, BIO)
            .openai(&fake)
            .api_token(token),
    )
    .await;
    let path = format!("/api/agents/{AGENT}/messages");
    let msg = json!({"text": "hi"});

    let (status, body) = app.post_json(&path, &msg, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "without a token: {body}");
    let (status, body) = app.post_json(&path, &msg, Some("not-the-token")).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "with a wrong token: {body}"
    );
    assert_eq!(
        fake.request_count(),
        0,
        "an unauthorized message reached the model"
    );

    let (status, body) = app.post_json(&path, &msg, Some(token)).await;
    reply_text(status, &body, &fake);

    // Reads show every room's messages, facts and documents: they need the token too.
    let private = [
        "/api/agents".to_string(),
        format!("/api/agents/{AGENT}/rooms"),
        format!("/api/agents/{AGENT}/rooms/default/memories"),
        format!("/api/agents/{AGENT}/documents"),
        format!("/api/agents/{AGENT}/knowledge/search?q=hi"),
        "/metrics".to_string(),
    ];
    for path in &private {
        for wrong in [None, Some("not-the-token")] {
            let (status, body) = app.get_as(path, wrong).await;
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "GET {path} with {wrong:?}: {body}"
            );
            assert_eq!(body["error"], "unauthorized", "GET {path}: {body}");
        }
        let (status, body) = app.get_as(path, Some(token)).await;
        assert_eq!(status, StatusCode::OK, "GET {path} with the token: {body}");
    }
    for open in ["/healthz", "/readyz"] {
        let (status, body) = app.get_as(open, None).await;
        assert_eq!(status, StatusCode::OK, "GET {open} needs no token: {body}");
    }
    assert!(
        !app.logs().contains(token),
        "the API token leaked into the logs:\n{}",
        app.logs()
    );
}

/// `troupe healthcheck` (the image's health check) reports the gateway it is pointed at:
/// 0 while it runs, 1 with the reason once it has stopped. The listen address is the
/// gateway's own, as the image passes it.
#[tokio::test]
async fn troupe_healthcheck_reports_the_running_gateway() {
    async fn healthcheck(
        dir: &std::path::Path,
        addr: std::net::SocketAddr,
    ) -> std::process::Output {
        tokio::process::Command::new(troupe_e2e::troupe_bin())
            .arg("healthcheck")
            .current_dir(dir)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("TROUPE_HTTP_ADDR", addr.to_string())
            .output()
            .await
            .expect("troupe healthcheck runs")
    }
    let fake = FakeOpenAi::start().await;
    let mut app = spawn_with(Backend::Sqlite, &fake).await;
    let (dir, addr) = (app.data_dir().to_path_buf(), app.addr());
    let up = healthcheck(&dir, addr).await;
    assert!(
        up.status.success(),
        "healthy gateway: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    app.stop().await;
    let down = healthcheck(&dir, addr).await;
    assert_eq!(down.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&down.stderr);
    assert!(stderr.contains("cannot connect"), "{stderr}");
}
