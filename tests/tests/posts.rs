//! End-to-end tests of autonomous posts (issue 34, docs/posts.md): the real `troupe run`
//! against the fake Neynar, Discord and OpenAI. Casts and messages are waited for on the
//! fakes' change notifications; rows the gateway writes in the background (a skipped or
//! dry-run post) are read through `GET /api/agents/{agent}/posts`.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use troupe_e2e::fake_discord::{APPLICATION_ID, FakeDiscord, TOKEN};
use troupe_e2e::fake_neynar::FakeNeynar;
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, eventually, persona_json};

const WAIT: Duration = Duration::from_secs(60);
const EXAMPLE: &str = "Low tide is the library of the sea: read it slowly.";

/// Fern on Farcaster with posting settings `extra`.
fn fern(neynar: &FakeNeynar, extra: &[(&str, &str)]) -> Value {
    let mut character = persona_json("Fern", "Fern is a tide-pool naturalist.");
    character["clients"] = json!(["farcaster"]);
    character["postExamples"] = json!([EXAMPLE]);
    character["style"]["post"] = json!(["write in the present tense"]);
    let mut secrets = json!({
        "FARCASTER_FID": neynar.bot_fid().to_string(),
        "FARCASTER_NEYNAR_API_KEY": neynar.api_key(),
        "FARCASTER_NEYNAR_SIGNER_UUID": neynar.signer_uuid(),
        "NEYNAR_API_URL": neynar.url(),
        "FARCASTER_POLL_INTERVAL": "60",
    });
    for (k, v) in extra {
        secrets[*k] = json!(v);
    }
    character["settings"]["secrets"] = secrets;
    character
}

async fn posts(app: &TestApp, agent: &str) -> Value {
    let (status, body) = app.get(&format!("/api/agents/{agent}/posts")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

fn runs_in(body: &Value, state: &str) -> Vec<Value> {
    body["recent"]
        .as_array()
        .map(|r| r.iter().filter(|p| p["state"] == state).cloned().collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn farcaster_casts_arrive_on_schedule_from_the_post_examples() {
    let neynar = FakeNeynar::start().await;
    let openai = FakeOpenAi::start().await;
    let drafts = [
        "Anemones close at noon and open again with the tide.",
        "A hermit crab tries three shells before it settles.",
        "Sea stars walk on hundreds of tiny water-filled feet.",
    ];
    for d in drafts {
        openai.push_reply(d);
    }
    let settings = [
        ("ENABLE_POST", "true"),
        ("POST_IMMEDIATELY", "true"),
        ("POST_INTERVAL_MIN", "2s"),
        ("POST_INTERVAL_MAX", "4s"),
    ];
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("fern.json", fern(&neynar, &settings))
            .openai(&openai),
    )
    .await;
    let casts = match neynar.try_wait_for_casts(3, WAIT).await {
        Ok(c) => c,
        Err(e) => panic!("{e}\n----- troupe output -----\n{}", app.logs()),
    };
    let texts: Vec<&str> = casts.iter().map(|c| c.text.as_str()).collect();
    assert_eq!(texts, drafts, "each run casts its own draft, once, in order");
    assert!(casts.iter().all(|c| c.parent.is_none()), "top-level casts: {casts:#?}");
    let first = &openai.requests()[0];
    let prompt = first.prompt_text();
    assert!(prompt.contains(EXAMPLE), "the post examples are in the prompt:\n{prompt}");
    assert!(prompt.contains("write in the present tense"), "{prompt}");
    // The second draft's prompt lists the first post as one not to repeat.
    let second = openai.requests()[1].prompt_text();
    assert!(second.contains(drafts[0]), "{second}");
    assert!(app.logs().contains("will post: farcaster:feed every 2s-4s"), "{}", app.logs());
    let body = posts(&app, "Fern").await;
    assert_eq!(body["schedules"][0]["id"], "farcaster", "{body}");
    assert!(runs_in(&body, "queued").len() >= 3, "{body}");
}

#[tokio::test]
async fn dry_run_casts_nothing_and_keeps_the_posts_for_the_console() {
    let neynar = FakeNeynar::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("Kelp forests grow half a metre a day.");
    let settings = [
        ("ENABLE_POST", "true"),
        ("POST_IMMEDIATELY", "true"),
        ("FARCASTER_DRY_RUN", "true"),
    ];
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("fern.json", fern(&neynar, &settings))
            .openai(&openai),
    )
    .await;
    eventually("a dry-run post is listed", WAIT, || async {
        !runs_in(&posts(&app, "Fern").await, "dry_run").is_empty()
    })
    .await;
    let body = posts(&app, "Fern").await;
    let kept = runs_in(&body, "dry_run");
    assert_eq!(kept[0]["text"], "Kelp forests grow half a metre a day.", "{body}");
    assert!(neynar.published().is_empty(), "{:#?}", neynar.published());
    assert!(app.logs().contains("FARCASTER_DRY_RUN"), "{}", app.logs());
}

const CHANNEL: &str = "410000000000000001";

/// Dot on Discord, with `posts` as its schedules and `spend` as its budgets.
fn dot(discord: &FakeDiscord, posts: Value, spend: Option<Value>) -> Value {
    let mut character = persona_json("Dot", "Dot keeps a channel informed.");
    character["clients"] = json!(["discord"]);
    character["postExamples"] = json!(["Morning: the kettle is on and the news is in."]);
    character["settings"]["secrets"] = json!({
        "DISCORD_API_TOKEN": TOKEN,
        "DISCORD_API_URL": discord.url(),
        "DISCORD_APPLICATION_ID": APPLICATION_ID,
    });
    character["settings"]["troupe"] = json!({"posts": posts});
    if let Some(spend) = spend {
        character["settings"]["spend"] = spend;
    }
    character
}

async fn dot_app(discord: &FakeDiscord, openai: &FakeOpenAi, spend: Option<Value>) -> TestApp {
    let schedule = json!([{"room": format!("discord:{CHANNEL}"), "every": "10s", "prompt": "the day's news"}]);
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("dot.json", dot(discord, schedule, spend))
            .openai(openai),
    )
    .await;
    if let Err(e) = discord.try_wait_for_ready(1, WAIT).await {
        panic!("{e}\n----- troupe output -----\n{}", app.logs());
    }
    app
}

#[tokio::test]
async fn a_discord_schedule_posts_and_a_mute_stops_it() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("The harbour opens at nine today.");
    openai.push_reply("Rain later; bring the boats in early.");
    let app = dot_app(&discord, &openai, None).await;
    let sent = match discord.try_wait_for_sent(1, WAIT).await {
        Ok(s) => s,
        Err(e) => panic!("{e}\n----- troupe output -----\n{}", app.logs()),
    };
    assert_eq!(sent[0].channel, CHANNEL);
    assert_eq!(sent[0].content, "The harbour opens at nine today.");
    assert!(sent[0].reply_to.is_none(), "a post answers nothing");
    let prompt = openai.requests()[0].prompt_text();
    assert!(prompt.contains("the day's news"), "the schedule's prompt:\n{prompt}");
    let (status, answer) = app
        .post_json(
            &format!("/api/agents/Dot/rooms/discord:{CHANNEL}/commands"),
            &json!({"command": "/mute"}),
            None,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    eventually("a run is skipped in the muted room", WAIT, || async {
        runs_in(&posts(&app, "Dot").await, "skipped")
            .iter()
            .any(|r| r["reason"] == "the room is muted")
    })
    .await;
    assert_eq!(discord.sent_messages().len(), 1, "{:#?}", discord.sent_messages());
    assert_eq!(openai.request_count(), 1, "a muted room costs no model call");
}

#[tokio::test]
async fn a_persona_over_its_budget_stops_posting() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    // Every call uses 100 tokens; posts stop at the background share (0.8) of 100.
    openai.set_usage(80, 20);
    openai.push_reply("The first and only post of the day.");
    let spend = json!({"personaPerDay": "100 tokens"});
    let app = dot_app(&discord, &openai, Some(spend)).await;
    if let Err(e) = discord.try_wait_for_sent(1, WAIT).await {
        panic!("{e}\n----- troupe output -----\n{}", app.logs());
    }
    eventually("the next run is skipped over budget", WAIT, || async {
        runs_in(&posts(&app, "Dot").await, "skipped").iter().any(|r| {
            r["reason"]
                .as_str()
                .is_some_and(|s| s.contains("background share"))
        })
    })
    .await;
    assert_eq!(openai.request_count(), 1);
    assert_eq!(discord.sent_messages().len(), 1);
    let (status, usage) = app.get("/api/agents/Dot/usage?by=purpose").await;
    assert_eq!(status, 200, "{usage}");
    let rows = usage["rows"].as_array().cloned().unwrap_or_default();
    assert!(
        rows.iter().any(|r| r["key"] == "post" && r["tokens"] == 100),
        "spend counts the post as purpose post: {usage}"
    );
}

#[tokio::test]
async fn schedules_are_added_listed_and_removed_through_the_api() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    let app = dot_app(&discord, &openai, None).await;
    let (status, bad) = app
        .post_json(
            "/api/agents/Dot/posts",
            &json!({"room": "discord:1", "every": "5s"}),
            None,
        )
        .await;
    assert_eq!(status, 400, "{bad}");
    assert!(bad.to_string().contains("at least 10s"), "{bad}");
    let (status, added) = app
        .post_json(
            "/api/agents/Dot/posts",
            &json!({"room": "telegram:-100200", "at": "09:00", "timezone": "Europe/Berlin"}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{added}");
    let id = added["id"].as_str().unwrap().to_string();
    let listed = posts(&app, "Dot").await;
    assert_eq!(listed["schedules"].as_array().unwrap().len(), 2, "{listed}");
    let delete = |path: String| {
        let client = app.client().clone();
        let url = app.url(&path);
        async move { client.delete(url).send().await.unwrap().status() }
    };
    assert_eq!(delete(format!("/api/agents/Dot/posts/{id}")).await, 204);
    assert_eq!(delete(format!("/api/agents/Dot/posts/{id}")).await, 404);
    assert_eq!(delete("/api/agents/Dot/posts/file:0".into()).await, 409);
}
