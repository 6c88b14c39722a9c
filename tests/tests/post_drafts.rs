//! Approval before posting (issue 47, docs/posts.md "Approval"), end to end: the real
//! `troupe run` against the fake Discord, Telegram, Neynar and OpenAI. A schedule with
//! `approve: true` sends nothing until its draft is approved (API, console, an owner's
//! DM); an edited draft goes out as edited, without its room-control marker and within
//! its length; a rejected or expired one never; two replicas approving at once send it
//! once. Waits are on the fakes' notifications and the drafts' own states, never a sleep.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use troupe_e2e::browser::Browser;
use troupe_e2e::fake_discord::{APPLICATION_ID, FakeDiscord, TOKEN};
use troupe_e2e::fake_neynar::FakeNeynar;
use troupe_e2e::fake_telegram::{FakeTelegram, tg};
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, eventually, persona_json};

/// A hang guard on waiting for the gateway, not a timing assertion.
const WAIT: Duration = Duration::from_secs(60);
const CHANNEL: &str = "410000000000000001";

/// Dot on Discord with `posts` as its schedules.
fn dot(discord: &FakeDiscord, posts: Value) -> Value {
    let mut character = persona_json("Dot", "Dot keeps a channel informed.");
    character["clients"] = json!(["discord"]);
    character["settings"]["secrets"] = json!({
        "DISCORD_API_TOKEN": TOKEN,
        "DISCORD_API_URL": discord.url(),
        "DISCORD_APPLICATION_ID": APPLICATION_ID,
    });
    character["settings"]["troupe"] = json!({"posts": posts});
    character
}

/// A schedule that drafts once at start, and waits for approval.
fn approved(room: &str, extra: Value) -> Value {
    let mut s = json!({"room": room, "every": "1h", "immediately": true, "approve": true});
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            s[k] = v;
        }
    }
    s
}

/// The persona's drafts, as the API lists them.
async fn drafts(app: &TestApp, agent: &str) -> Vec<Value> {
    let (status, body) = app.get(&format!("/api/agents/{agent}/posts/drafts")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["drafts"].as_array().cloned().unwrap_or_default()
}

/// Waits until the persona has a draft of `schedule` in `state`; that draft.
async fn draft_of(app: &TestApp, agent: &str, schedule: &str, state: &str) -> Value {
    let found = std::sync::Mutex::new(None);
    eventually(&format!("a {state} draft of {schedule}"), WAIT, || async {
        let draft = drafts(app, agent)
            .await
            .into_iter()
            .find(|d| d["scheduleId"] == schedule && d["state"] == state);
        let there = draft.is_some();
        *found.lock().unwrap() = draft;
        there
    })
    .await;
    found.into_inner().unwrap().unwrap()
}

async fn decide(app: &TestApp, agent: &str, id: i64, verb: &str) -> (StatusCode, Value) {
    let path = format!("/api/agents/{agent}/posts/drafts/{id}/{verb}");
    app.post_json(&path, &json!({}), None).await
}

async fn edit(app: &TestApp, agent: &str, id: i64, text: &str) -> (StatusCode, Value) {
    let url = app.url(&format!("/api/agents/{agent}/posts/drafts/{id}"));
    let response = app
        .client()
        .put(url)
        .json(&json!({"text": text}))
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn id(draft: &Value) -> i64 {
    draft["id"].as_i64().unwrap()
}

#[tokio::test]
async fn drafts_wait_then_go_out_as_edited_once_and_rejected_or_expired_ones_never() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    for text in [
        "The harbour opens at nine today.",
        "Rain later; bring the boats in early.",
        "Fresh mackerel at the quay until noon.",
    ] {
        openai.push_reply(text);
    }
    let room = format!("discord:{CHANNEL}");
    let schedules = json!([
        approved(&room, json!({"maxLength": 80})),
        approved(&room, json!({})),
        approved(&room, json!({"expireAfter": "1s"})),
    ]);
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("dot.json", dot(&discord, schedules))
            .openai(&openai),
    )
    .await;
    let first = draft_of(&app, "Dot", "file:0", "draft").await;
    let second = draft_of(&app, "Dot", "file:1", "draft").await;
    // The third expires unapproved, and cannot be approved then.
    let third = draft_of(&app, "Dot", "file:2", "expired").await;
    assert_eq!(decide(&app, "Dot", id(&third), "approve").await.0, 409);
    assert!(
        discord.sent_messages().is_empty(),
        "nothing is sent before an approval"
    );

    // An edit over the schedule's length is refused; one with a marker loses it.
    let (status, body) = edit(&app, "Dot", id(&first), &"tide ".repeat(20)).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("at most 80"), "{body}");
    let (status, body) = edit(
        &app,
        "Dot",
        id(&first),
        "High tide at six. [[action: mute]]",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["text"], "High tide at six.");
    assert_eq!(
        body["draftedText"], first["text"],
        "the model's text is kept"
    );

    let (status, body) = decide(&app, "Dot", id(&first), "approve").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "queued");
    let sent = app.expect(discord.try_wait_for_sent(1, WAIT).await);
    assert_eq!(sent[0].channel, CHANNEL);
    assert_eq!(sent[0].content, "High tide at six.");
    // Approved already: 409, nothing more sent; the edit's marker did not mute the room.
    assert_eq!(decide(&app, "Dot", id(&first), "approve").await.0, 409);
    assert_eq!(edit(&app, "Dot", id(&first), "again").await.0, 409);

    let (status, body) = decide(&app, "Dot", id(&second), "reject").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "rejected");
    assert_eq!(decide(&app, "Dot", id(&second), "approve").await.0, 409);
    assert_eq!(decide(&app, "Dot", 999_999, "approve").await.0, 404);

    // A later chat message is answered: the room was never muted by the edited marker.
    let (_, rooms) = app.get("/api/agents/Dot/rooms").await;
    assert!(!rooms.to_string().contains("\"muted\":true"), "{rooms}");
    assert_eq!(
        discord.sent_messages().len(),
        1,
        "{:#?}",
        discord.sent_messages()
    );
    // The runs, as `GET …/posts` lists them, once a scheduler's look marked the expiry.
    eventually("the runs queued, rejected and expired", WAIT, || async {
        let (_, listed) = app.get("/api/agents/Dot/posts").await;
        let states: Vec<String> = (listed["recent"].as_array().cloned().unwrap_or_default())
            .iter()
            .filter_map(|r| r["state"].as_str().map(str::to_string))
            .collect();
        ["queued", "rejected", "expired"]
            .iter()
            .all(|s| states.iter().any(|t| t == s))
    })
    .await;
    assert_eq!(discord.sent_messages().len(), 1);
}

/// Two replicas on one Postgres, two approvals of one draft at once: one 200, one 409,
/// and one cast.
#[tokio::test]
async fn two_replicas_approving_at_once_send_the_draft_once() {
    let test = "two_replicas_approving_at_once_send_the_draft_once";
    let Some(nats) = troupe_e2e::env::nats_url(test) else {
        return;
    };
    if Backend::Postgres.or_skip(test).is_none() {
        return;
    }
    let neynar = FakeNeynar::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("Low tide: the pools are full of hermit crabs.");
    let mut fern = neynar.persona("Fern", "Fern is a tide-pool naturalist.");
    fern["settings"]["troupe"] = json!({"posts": [approved("farcaster:feed", json!({}))]});
    let options = TestAppOptions::new(Backend::Postgres)
        .persona_file("fern.json", fern)
        .openai(&openai)
        .env("TROUPE_BUS_URL", &nats)
        .env(
            "TROUPE_BUS_PREFIX",
            &format!("drafts{}", std::process::id()),
        );
    let a = TestApp::spawn(options).await;
    let b = TestApp::spawn(a.replica_options()).await;
    let draft = draft_of(&a, "Fern", "file:0", "draft").await;
    assert!(neynar.published().is_empty());
    let (one, two) = tokio::join!(
        decide(&a, "Fern", id(&draft), "approve"),
        decide(&b, "Fern", id(&draft), "approve"),
    );
    let mut statuses = [one.0.as_u16(), two.0.as_u16()];
    statuses.sort();
    assert_eq!(statuses, [200, 409], "{one:?} {two:?}");
    let casts = neynar.wait_for_casts(1, WAIT).await;
    assert_eq!(
        casts[0].text,
        "Low tide: the pools are full of hermit crabs."
    );
    // Both answers are in: the winner delivered before answering, the loser queued nothing.
    assert_eq!(neynar.published().len(), 1, "{:#?}", neynar.published());
    assert_eq!(openai.request_count(), 1, "one draft, composed once");
}

const OWNER: i64 = 9;

fn dm(user: i64, text: &str) -> Value {
    tg::text(
        tg::private_chat(user, "Owner"),
        tg::user(user, "Owner"),
        text,
    )
}

#[tokio::test]
async fn an_owner_lists_and_approves_a_draft_from_a_telegram_dm() {
    let telegram = FakeTelegram::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("Ferry timetable: summer hours start Monday.");
    let mut tess = telegram.persona("Tess", "Tess runs the island's noticeboard.");
    tess["settings"]["troupe"] = json!({
        "owners": [format!("telegram:{OWNER}")],
        "posts": [approved("telegram:-100777", json!({}))],
    });
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("tess.json", tess)
            .openai(&openai),
    )
    .await;
    let draft = draft_of(&app, "Tess", "file:0", "draft").await;
    let n = id(&draft);
    // The owner is told at once, unasked, in a DM: the draft and how to decide it.
    let sent = app.expect(telegram.try_wait_for_sent(1, WAIT).await);
    assert_eq!(sent[0].chat_id, OWNER);
    for expected in [format!("/approve-post {n}"), "summer hours".into()] {
        assert!(sent[0].text.contains(&expected), "{}", sent[0].text);
    }
    telegram.push_message(dm(OWNER, "/drafts"));
    let sent = app.expect(telegram.try_wait_for_sent(2, WAIT).await);
    assert_eq!(sent[1].chat_id, OWNER);
    assert!(
        sent[1].text.contains(&format!("/approve-post {n}")),
        "{}",
        sent[1].text
    );
    assert!(sent[1].text.contains("summer hours"), "{}", sent[1].text);

    telegram.push_message(dm(OWNER, &format!("/approve-post {n}")));
    let sent = app.expect(telegram.try_wait_for_sent(4, WAIT).await);
    let post = sent
        .iter()
        .find(|m| m.chat_id == -100777)
        .expect("the post");
    assert_eq!(post.text, "Ferry timetable: summer hours start Monday.");
    let answer = sent.iter().rfind(|m| m.chat_id == OWNER).unwrap();
    assert!(answer.text.contains("approved"), "{}", answer.text);
    telegram.push_message(dm(OWNER, &format!("/reject-post {n}")));
    let sent = app.expect(telegram.try_wait_for_sent(5, WAIT).await);
    assert!(
        sent[4].text.contains("already approved"),
        "{}",
        sent[4].text
    );
    assert_eq!(
        sent.iter()
            .filter(|m| m.text.contains("waits for your approval"))
            .count(),
        1,
        "told once"
    );
    assert_eq!(openai.request_count(), 1, "the commands make no model call");
}

/// A Discord owner's user id: no message of theirs names a DM channel yet.
const DISCORD_OWNER: &str = "730000000000000009";

#[tokio::test]
async fn a_discord_owner_is_told_of_a_draft_in_a_dm_the_bot_opens() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("The wiki moved to the new server.");
    let mut character = dot(
        &discord,
        json!([approved(&format!("discord:{CHANNEL}"), json!({}))]),
    );
    character["settings"]["troupe"]["owners"] = json!([format!("discord:{DISCORD_OWNER}")]);
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("dot.json", character)
            .openai(&openai),
    )
    .await;
    let n = id(&draft_of(&app, "Dot", "file:0", "draft").await);
    let sent = app.expect(discord.try_wait_for_sent(1, WAIT).await);
    let dm = discord
        .dm_opened_with(DISCORD_OWNER)
        .expect("the bot opened a DM with the owner");
    assert_eq!(sent[0].channel, dm);
    for expected in [format!("/approve-post {n}"), "wiki moved".into()] {
        assert!(sent[0].content.contains(&expected), "{}", sent[0].content);
    }
    assert!(
        sent.iter().all(|m| m.channel != CHANNEL),
        "nothing is posted before an approval"
    );
}

#[tokio::test]
async fn a_draft_edited_and_approved_in_the_console_goes_out_as_edited() {
    let Some(browser) = Browser::start("post_drafts::console").await else {
        return;
    };
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("The harbour opens at nine today.");
    let schedules = json!([approved(&format!("discord:{CHANNEL}"), json!({}))]);
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("dot.json", dot(&discord, schedules))
            .openai(&openai),
    )
    .await;
    let n = id(&draft_of(&app, "Dot", "file:0", "draft").await);
    browser.goto("about:blank").await;
    browser.goto(&app.url("/#/posts?agent=dot")).await;
    let text = format!("#draft-text-{n}");
    browser
        .wait_for("the draft", &format!("!!document.querySelector('{text}')"))
        .await;
    assert!(
        discord.sent_messages().is_empty(),
        "nothing before the approval"
    );
    browser
        .run(
            "const t = document.querySelector(arguments[0]); t.value = arguments[1];",
            json!([text, "Harbour opens at nine; the ferry at ten."]),
        )
        .await;
    browser.click(&format!("#draft-approve-{n}")).await;
    let sent = app.expect(discord.try_wait_for_sent(1, WAIT).await);
    assert_eq!(sent[0].content, "Harbour opens at nine; the ferry at ten.");
    browser
        .wait_for(
            "the draft gone from the page",
            &format!("!document.querySelector('{text}')"),
        )
        .await;
    assert_eq!(discord.sent_messages().len(), 1);
    browser.quit().await;
}
