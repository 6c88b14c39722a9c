//! End-to-end tests of the Farcaster connector: the real `troupe run`, a persona with
//! `"clients": ["farcaster"]`, the fake Neynar for the platform and the fake OpenAI for the
//! model. The tests talk to the gateway only through the fakes and its HTTP API.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use troupe_e2e::fake_neynar::{Failure, FakeNeynar, NewCast, PublishedCast, Route};
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, json_contains_text, persona_json};

const AGENT: &str = "Fern";
const BIO: &str = "Fern is a tide-pool naturalist who answers questions about the sea.";
/// Generous: a debug binary on a busy 2-core machine, polling every second.
const WAIT: Duration = Duration::from_secs(60);

troupe_e2e::on_each_backend!(a_restart_does_not_answer_the_same_mention_again);

#[tokio::test]
async fn a_mention_gets_a_reply_under_that_cast() {
    a_mention_gets_a_reply(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_long_multibyte_answer_arrives_as_chained_casts() {
    a_long_answer_is_chained(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_failed_chunk_is_retried_without_casting_twice() {
    a_failed_chunk_is_retried(Backend::Sqlite).await;
}

#[tokio::test]
async fn rate_limits_are_waited_out_in_order() {
    rate_limits_are_waited_out(Backend::Sqlite).await;
}

#[tokio::test]
async fn notification_pages_are_followed() {
    pages_are_followed(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_badly_signed_webhook_gets_401_and_nothing_is_processed() {
    bad_webhooks_are_refused(Backend::Sqlite).await;
}

#[tokio::test]
async fn dry_run_posts_nothing_but_handles_the_message() {
    dry_run_posts_nothing(Backend::Sqlite).await;
}

#[tokio::test]
async fn the_thread_above_a_mention_reaches_the_model() {
    thread_context_reaches_the_model(Backend::Sqlite).await;
}

#[tokio::test]
async fn only_the_thread_s_author_steers_it_and_others_keep_their_personal_commands() {
    only_the_root_author_steers(Backend::Sqlite).await;
}

/// Fern on Farcaster, polling `neynar` every second, plus `extra` secrets.
fn fern(neynar: &FakeNeynar, extra: &[(&str, &str)]) -> Value {
    let mut character = persona_json(AGENT, BIO);
    character["clients"] = json!(["farcaster"]);
    let mut secrets = json!({
        "FARCASTER_FID": neynar.bot_fid().to_string(),
        "FARCASTER_NEYNAR_API_KEY": neynar.api_key(),
        "FARCASTER_NEYNAR_SIGNER_UUID": neynar.signer_uuid(),
        "NEYNAR_API_URL": neynar.url(),
        "FARCASTER_POLL_INTERVAL": "1",
    });
    for (k, v) in extra {
        secrets[*k] = json!(v);
    }
    character["settings"]["secrets"] = secrets;
    character
}

/// The app, serving. Tests push casts only after this returns: the gateway drives again
/// the journal entries it finds pending when it starts serving, and a cast journaled in
/// that instant would be handled twice (a gateway start-up race, not the connector's).
async fn spawn(
    backend: Backend,
    neynar: &FakeNeynar,
    openai: &FakeOpenAi,
    extra: &[(&str, &str)],
) -> TestApp {
    TestApp::spawn(
        TestAppOptions::new(backend)
            .persona_file("fern.json", fern(neynar, extra))
            .openai(openai),
    )
    .await
}

/// Waits for `n` casts, failing with the gateway's output as well as the fake's record.
async fn casts(app: &TestApp, neynar: &FakeNeynar, n: usize) -> Vec<PublishedCast> {
    match neynar.try_wait_for_casts(n, WAIT).await {
        Ok(c) => c,
        Err(e) => panic!("{e}\n----- troupe output -----\n{}", app.logs()),
    }
}

async fn polls(app: &TestApp, neynar: &FakeNeynar, n: usize) {
    if let Err(e) = neynar.try_wait_for_polls(n, WAIT).await {
        panic!("{e}\n----- troupe output -----\n{}", app.logs());
    }
}

async fn model_requests(app: &TestApp, openai: &FakeOpenAi, n: usize) {
    if let Err(e) = openai.try_wait_for_requests(n, WAIT).await {
        panic!("{e}\n----- troupe output -----\n{}", app.logs());
    }
}

fn assert_chained(casts: &[PublishedCast], first_parent: &str, bot: u64) {
    for (i, cast) in casts.iter().enumerate() {
        assert!(
            cast.text.len() <= 320,
            "cast {i} has {} bytes",
            cast.text.len()
        );
        let expected_parent = if i == 0 {
            first_parent
        } else {
            casts[i - 1].hash.as_str()
        };
        assert_eq!(
            cast.parent.as_deref(),
            Some(expected_parent),
            "cast {i} must reply to {expected_parent}: {casts:#?}"
        );
        if i > 0 {
            assert_eq!(cast.parent_author_fid, Some(bot), "cast {i}: {casts:#?}");
        }
        let idem = cast.idem.as_deref().unwrap_or_default();
        assert!(
            !idem.is_empty() && idem.len() <= 16,
            "cast {i} idem {idem:?}"
        );
    }
    let mut idems: Vec<_> = casts.iter().map(|c| c.idem.clone()).collect();
    idems.sort();
    idems.dedup();
    assert_eq!(
        idems.len(),
        casts.len(),
        "each chunk has its own idem: {casts:#?}"
    );
}

async fn a_mention_gets_a_reply(backend: Backend) {
    let neynar = FakeNeynar::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("The tide turns at noon today.");
    let app = spawn(backend, &neynar, &openai, &[]).await;

    let mention = neynar.mention(7, "alice", "@fern when does the tide turn?");
    let published = casts(&app, &neynar, 1).await;
    let reply = &published[0];
    assert_eq!(reply.text, "The tide turns at noon today.");
    assert_eq!(
        reply.parent.as_deref(),
        Some(mention.as_str()),
        "the reply must be under the mention"
    );
    assert_eq!(reply.parent_author_fid, Some(7));
    assert_eq!(reply.signer_uuid, neynar.signer_uuid());
    assert_eq!(reply.idem.as_deref().map(str::len), Some(16));

    let prompt = openai.requests()[0].prompt_text();
    assert!(
        prompt.contains("when does the tide turn?"),
        "the cast did not reach the model:\n{prompt}"
    );
    assert!(prompt.contains(BIO), "{prompt}");

    // The room is the thread: its memories hold the mention and the reply.
    let (status, memories) = app
        .get(&format!(
            "/api/agents/{AGENT}/rooms/farcaster:{mention}/memories"
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{memories}");
    for text in ["when does the tide turn?", "The tide turns at noon today."] {
        assert!(
            json_contains_text(&memories, text),
            "{text:?} not in {memories}"
        );
    }
    // Ready, with the connector's health check (a user lookup) passing.
    let (status, ready) = app.get("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{ready}");
    assert_eq!(
        ready["connectors"]["fern/farcaster"]["status"], "ok",
        "{ready}"
    );
    // Every call carried the key.
    assert!(
        neynar.requests().iter().all(|r| r.authorized),
        "{:#?}",
        neynar.requests()
    );
}

/// 96 words of 1- to 4-byte characters: 735 bytes, three casts at 320 bytes.
fn multibyte_answer() -> String {
    let words = ["été", "海の", "🌊波", "日本語", "ñandú", "€uro"];
    (0..96)
        .map(|i| words[i % words.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

fn rejoin(casts: &[PublishedCast]) -> Vec<String> {
    casts
        .iter()
        .flat_map(|c| {
            c.text
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

/// Waits until the casts, rejoined, are the whole `answer`.
async fn whole_answer(app: &TestApp, neynar: &FakeNeynar, answer: &str) -> Vec<PublishedCast> {
    let want = words(answer);
    let mut n = 1;
    loop {
        let published = casts(app, neynar, n).await;
        if rejoin(&published) == want {
            return published;
        }
        assert!(
            want.starts_with(&rejoin(&published)),
            "the casts are not the answer in order: {published:#?}"
        );
        n = published.len() + 1;
    }
}

async fn a_long_answer_is_chained(backend: Backend) {
    let neynar = FakeNeynar::start().await;
    let openai = FakeOpenAi::start().await;
    let answer = multibyte_answer();
    assert!(answer.len() >= 700 && answer.chars().count() < answer.len());
    openai.push_reply(answer.clone());
    let app = spawn(backend, &neynar, &openai, &[]).await;

    let mention = neynar.mention(7, "alice", "@fern tell me everything about waves");
    let published = whole_answer(&app, &neynar, &answer).await;
    assert!(published.len() >= 3, "{published:#?}");
    assert_chained(&published, &mention, neynar.bot_fid());
    // Every chunk is whole UTF-8 that the fake accepted; nothing was refused as too long.
    assert!(
        neynar.requests().iter().all(|r| r.status != 400),
        "{:#?}",
        neynar.requests()
    );
    assert_eq!(neynar.idem_hits(), 0);
}

async fn a_failed_chunk_is_retried(backend: Backend) {
    let neynar = FakeNeynar::start().await;
    let openai = FakeOpenAi::start().await;
    let answer = multibyte_answer();
    openai.push_reply(answer.clone());
    // The first chunk goes through; the second fails with a 502, so the outbox retries the
    // whole reply: the first chunk's idem must find the cast already made.
    neynar.push_failure_after(Route::Publish, 1, Failure::Status(502));
    let app = spawn(backend, &neynar, &openai, &[]).await;
    let mention = neynar.mention(7, "alice", "@fern tell me everything about waves");

    let published = whole_answer(&app, &neynar, &answer).await;
    assert_chained(&published, &mention, neynar.bot_fid());
    assert!(
        neynar.requests().iter().any(|r| r.status == 502),
        "the scripted failure was not used: {:#?}",
        neynar.requests()
    );
    assert_eq!(
        neynar.idem_hits(),
        1,
        "the retry did not re-send the first chunk with its idem"
    );
    assert_eq!(
        openai.request_count(),
        1,
        "the model was asked twice: {:#?}\n{}",
        openai
            .requests()
            .iter()
            .map(|r| r.last_user_message().map(str::to_string))
            .collect::<Vec<_>>(),
        app.logs()
    );
}

async fn rate_limits_are_waited_out(backend: Backend) {
    let neynar = FakeNeynar::start().await;
    let openai = FakeOpenAi::start().await;
    let answer = multibyte_answer();
    openai.push_reply(answer.clone());
    // The first publish and the first poll are answered 429 (with and without Retry-After).
    neynar.push_failure(
        Route::Publish,
        Failure::RateLimited {
            retry_after_secs: Some(0),
        },
    );
    neynar.push_failure(
        Route::Publish,
        Failure::RateLimited {
            retry_after_secs: None,
        },
    );
    neynar.push_failure(
        Route::Notifications,
        Failure::RateLimited {
            retry_after_secs: Some(1),
        },
    );
    let app = spawn(backend, &neynar, &openai, &[]).await;
    let mention = neynar.mention(7, "alice", "@fern tell me everything about waves");

    let published = whole_answer(&app, &neynar, &answer).await;
    assert_chained(&published, &mention, neynar.bot_fid());
    let limited = neynar.requests().iter().filter(|r| r.status == 429).count();
    assert_eq!(limited, 3, "{:#?}", neynar.requests());
}

async fn pages_are_followed(backend: Backend) {
    let neynar = FakeNeynar::start_with(troupe_e2e::fake_neynar::FakeNeynarConfig {
        max_page_size: 2,
        ..Default::default()
    })
    .await;
    let openai = FakeOpenAi::start().await;
    let app = spawn(backend, &neynar, &openai, &[]).await;
    let first = neynar.mention(7, "alice", "@fern first");
    let published = casts(&app, &neynar, 1).await;
    assert_eq!(published[0].parent.as_deref(), Some(first.as_str()));

    // Five new mentions at once: three pages of two; each gets its answer.
    let mut mentions = Vec::new();
    for i in 0..5 {
        mentions.push(neynar.mention(100 + i, &format!("user{i}"), &format!("@fern question {i}")));
    }
    let published = casts(&app, &neynar, 6).await;
    let mut parents: Vec<String> = published[1..]
        .iter()
        .filter_map(|c| c.parent.clone())
        .collect();
    parents.sort();
    mentions.sort();
    assert_eq!(parents, mentions, "{published:#?}");
    assert!(
        neynar
            .requests()
            .iter()
            .any(|r| r.path.contains("notifications")
                && r.query.as_deref().is_some_and(|q| q.contains("cursor="))),
        "the connector never followed a cursor: {:#?}",
        neynar.requests()
    );
}

async fn a_restart_does_not_answer_the_same_mention_again(backend: Backend) {
    let neynar = FakeNeynar::start().await;
    let openai = FakeOpenAi::start().await;
    let mut app = spawn(backend, &neynar, &openai, &[]).await;
    let first = neynar.mention(7, "alice", "@fern is the water cold?");
    let published = casts(&app, &neynar, 1).await;
    assert_eq!(published[0].parent.as_deref(), Some(first.as_str()));

    app.restart().await;
    // Two polls after the restart: the first one read the old mention again.
    let seen = neynar.polls();
    polls(&app, &neynar, seen + 2).await;
    // A new mention is answered, which shows the connector runs.
    let second = neynar.mention(8, "bob", "@fern and the wind?");
    let published = casts(&app, &neynar, 2).await;
    assert_eq!(
        published[1].parent.as_deref(),
        Some(second.as_str()),
        "{published:#?}"
    );
    let seen = neynar.polls();
    polls(&app, &neynar, seen + 2).await;
    let published = neynar.published();
    assert_eq!(
        published.len(),
        2,
        "the old mention was answered again: {published:#?}"
    );
    assert_eq!(
        openai.request_count(),
        2,
        "the model saw the old mention again"
    );
}

async fn bad_webhooks_are_refused(backend: Backend) {
    let neynar = FakeNeynar::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("Hello from the webhook.");
    let secret = "whsec-e2e";
    let app = spawn(
        backend,
        &neynar,
        &openai,
        &[("FARCASTER_NEYNAR_WEBHOOK_SECRET", secret)],
    )
    .await;
    let url = app.url(&format!("/webhooks/farcaster/{AGENT}"));
    let mention = neynar.mention(7, "alice", "@fern are you there?");
    let event = neynar.cast_created_event(&mention);

    let (status, body) = FakeNeynar::deliver_unsigned_webhook(&url, &event).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let (status, body) =
        FakeNeynar::deliver_badly_signed_webhook(&url, &"ab".repeat(64), &event).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let (status, body) = FakeNeynar::deliver_webhook(&url, "another-secret", &event).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");

    // The same event, signed right: taken, and answered once.
    let (status, body) = FakeNeynar::deliver_webhook(&url, secret, &event).await;
    assert_eq!(status, StatusCode::OK, "{body}\n{}", app.logs());
    let published = casts(&app, &neynar, 1).await;
    assert_eq!(published[0].parent.as_deref(), Some(mention.as_str()));
    assert_eq!(
        openai.request_count(),
        1,
        "a refused webhook reached the model"
    );
    // A redelivery is acknowledged and not answered again.
    let (status, body) = FakeNeynar::deliver_webhook(&url, secret, &event).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["accepted"], "duplicate", "{body}");
    // A cast that is not for the bot is acknowledged and dropped.
    let other = neynar.push_cast(NewCast::new(9, "carol", "just talking about fish"));
    let (status, body) =
        FakeNeynar::deliver_webhook(&url, secret, &neynar.cast_created_event(&other)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.get("ignored").is_some(), "{body}");
    // Webhook mode does not poll.
    assert_eq!(neynar.polls(), 0);
}

async fn dry_run_posts_nothing(backend: Backend) {
    let neynar = FakeNeynar::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("Dry answer one.");
    openai.push_reply("Dry answer two.");
    // Two mentions in one thread: the room handles them in order, so when the model sees the
    // second, the first reply has been delivered (or, here, not posted).
    let app = spawn(backend, &neynar, &openai, &[("FARCASTER_DRY_RUN", "true")]).await;
    let root = neynar.mention(7, "alice", "@fern first question");
    let _second = neynar.push_cast(
        NewCast::new(7, "alice", "@fern second question")
            .mentioning(neynar.bot_fid())
            .replying_to(&root),
    );

    model_requests(&app, &openai, 2).await;
    let second_prompt = openai.requests()[1].prompt_text();
    assert!(
        second_prompt.contains("Dry answer one."),
        "the first reply is not in the room's memory:\n{second_prompt}"
    );
    let (status, memories) = app
        .get(&format!(
            "/api/agents/{AGENT}/rooms/farcaster:{root}/memories"
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{memories}");
    assert!(
        json_contains_text(&memories, "Dry answer one."),
        "{memories}"
    );
    assert!(
        neynar.published().is_empty(),
        "dry run posted: {:#?}",
        neynar.published()
    );
    assert!(
        neynar.requests().iter().all(|r| r.method != "POST"),
        "dry run called publish: {:#?}",
        neynar.requests()
    );
    assert!(app.logs().contains("FARCASTER_DRY_RUN"), "{}", app.logs());
}

/// Bob casts; Alice replies to him mentioning Fern. Troupe never saw Bob's cast, but the
/// prompt shows it, from Neynar's conversation endpoint, before Alice's question.
async fn thread_context_reaches_the_model(backend: Backend) {
    let neynar = FakeNeynar::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("They do: it keeps them from drifting apart.");
    let app = spawn(backend, &neynar, &openai, &[]).await;

    let root = neynar.push_cast(NewCast::new(
        9,
        "bob",
        "Sea otters hold hands while they sleep.",
    ));
    let bot = neynar.bot_fid();
    let mention = neynar.push_cast(
        NewCast::new(7, "alice", "@fern is that true?")
            .replying_to(&root)
            .mentioning(bot),
    );
    let published = casts(&app, &neynar, 1).await;
    assert_eq!(published[0].parent.as_deref(), Some(mention.as_str()));

    let prompt = openai.last_prompt_text();
    let earlier = prompt
        .find("Sea otters hold hands while they sleep.")
        .unwrap_or_else(|| panic!("the earlier cast is not in the prompt:\n{prompt}"));
    let question = prompt
        .rfind("is that true?")
        .unwrap_or_else(|| panic!("the mention is not in the prompt:\n{prompt}"));
    assert!(earlier < question, "the thread comes first:\n{prompt}");
    assert!(prompt.contains("bob"), "{prompt}");
    let conversations: Vec<_> = neynar
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/cast/conversation"))
        .collect();
    assert_eq!(conversations.len(), 1, "{conversations:#?}");
    let query = conversations[0].query.clone().unwrap_or_default();
    for part in [
        format!("identifier={mention}"),
        "type=hash".to_string(),
        "reply_depth=0".to_string(),
        "include_chronological_parent_casts=true".to_string(),
    ] {
        assert!(query.contains(&part), "{part} not in {query}");
    }
    assert!(conversations[0].authorized);
}

/// Issue 30, finding 4: a thread belongs to whoever cast its root. Mallory (fid 43) replies
/// in Alice's thread: her `/forget`, `/mute 365d` and `/follow` are refused with a short
/// answer and change nothing, while her `/whoami` is answered. Alice's next question is
/// answered with her thread's memory intact, and her own `/mute` works. In a thread the
/// bot started, no cast steers.
async fn only_the_root_author_steers(backend: Backend) {
    let neynar = FakeNeynar::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("The tide turns at noon today.");
    openai.push_reply("Tomorrow it turns at one.");
    let app = spawn(backend, &neynar, &openai, &[]).await;
    let bot = neynar.bot_fid();

    let root = neynar.mention(7, "alice", "@fern when does the tide turn?");
    casts(&app, &neynar, 1).await;
    let mut pushed = Vec::new();
    for command in ["/forget", "/mute 365d", "/follow", "/whoami"] {
        pushed.push(
            neynar.push_cast(
                NewCast::new(43, "mallory", &format!("@fern {command}"))
                    .mentioning(bot)
                    .replying_to(&root),
            ),
        );
    }
    let published = casts(&app, &neynar, 5).await;
    for (i, cast) in published[1..4].iter().enumerate() {
        assert_eq!(
            cast.text,
            "Sorry, only the person who started this thread can change how I behave in it.",
            "refused: {published:#?}"
        );
        assert_eq!(cast.parent.as_deref(), Some(pushed[i].as_str()));
    }
    assert!(
        published[4].text.contains("Fern"),
        "a personal command still works: {published:#?}"
    );
    assert_eq!(openai.request_count(), 1, "commands call no model");

    // Alice's thread is neither forgotten nor muted: her next question is answered, and
    // the prompt still holds her first one.
    neynar.push_cast(
        NewCast::new(7, "alice", "@fern and tomorrow?")
            .mentioning(bot)
            .replying_to(&root),
    );
    let published = casts(&app, &neynar, 6).await;
    assert_eq!(published[5].text, "Tomorrow it turns at one.");
    let prompt = openai.last_prompt_text();
    assert!(
        prompt.contains("when does the tide turn?"),
        "the thread's memory survived Mallory's /forget:\n{prompt}"
    );
    let (_, rooms) = app.get(&format!("/api/agents/{AGENT}/rooms")).await;
    let thread = rooms["rooms"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["room"] == format!("farcaster:{root}")))
        .unwrap_or_else(|| panic!("Alice's thread is listed: {rooms}"));
    assert!(thread["mutedUntilMs"].is_null(), "not muted: {thread}");
    assert_eq!(thread["following"], false, "not followed: {thread}");
    assert!(thread["forgottenAtMs"].is_null(), "not forgotten: {thread}");
    // The owner steers her own thread.
    neynar.push_cast(
        NewCast::new(7, "alice", "@fern /mute")
            .mentioning(bot)
            .replying_to(&root),
    );
    let published = casts(&app, &neynar, 7).await;
    assert!(published[6].text.contains("quiet"), "{published:#?}");

    // A thread the bot started belongs to no one: Alice's /mute there is refused too.
    let post = neynar.push_cast(NewCast::new(
        bot,
        "fern",
        "Low tide at dawn: come and look.",
    ));
    neynar.push_cast(
        NewCast::new(7, "alice", "@fern /mute")
            .mentioning(bot)
            .replying_to(&post),
    );
    let published = casts(&app, &neynar, 8).await;
    assert!(
        published[7]
            .text
            .starts_with("Sorry, only the person who started this thread"),
        "{published:#?}"
    );
}
