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
    assert_eq!(
        texts, drafts,
        "each run casts its own draft, once, in order"
    );
    assert!(
        casts.iter().all(|c| c.parent.is_none()),
        "top-level casts: {casts:#?}\n{}",
        app.logs()
    );
    let first = &openai.requests()[0];
    let prompt = first.prompt_text();
    assert!(
        prompt.contains(EXAMPLE),
        "the post examples are in the prompt:\n{prompt}"
    );
    assert!(prompt.contains("write in the present tense"), "{prompt}");
    // The second draft's prompt lists the first post as one not to repeat.
    let second = openai.requests()[1].prompt_text();
    assert!(second.contains(drafts[0]), "{second}");
    assert!(
        app.logs().contains("will post: farcaster:feed every 2s-4s"),
        "{}",
        app.logs()
    );
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
    assert_eq!(
        kept[0]["text"], "Kelp forests grow half a metre a day.",
        "{body}"
    );
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
    let schedule =
        json!([{"room": format!("discord:{CHANNEL}"), "every": "10s", "prompt": "the day's news"}]);
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
    assert!(
        prompt.contains("the day's news"),
        "the schedule's prompt:\n{prompt}"
    );
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
    assert_eq!(
        discord.sent_messages().len(),
        1,
        "{:#?}",
        discord.sent_messages()
    );
    assert_eq!(
        openai.request_count(),
        1,
        "a muted room costs no model call"
    );
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
        runs_in(&posts(&app, "Dot").await, "skipped")
            .iter()
            .any(|r| {
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
        rows.iter()
            .any(|r| r["key"] == "post" && r["tokens"] == 100),
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
    let (status, bad) = app
        .post_json(
            "/api/agents/Dot/posts",
            &json!({"room": "telegram:-100200", "every": "1h"}),
            None,
        )
        .await;
    assert_eq!(status, 400, "Dot does not run on Telegram: {bad}");
    let (status, added) = app
        .post_json(
            "/api/agents/Dot/posts",
            &json!({"room": format!("discord:{CHANNEL}"), "at": "09:00", "timezone": "Europe/Berlin"}),
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

/// Distinct drafts: no two share enough words to look like a repeat.
fn distinct_drafts(n: usize) -> Vec<String> {
    const WORDS: &[&str] = &[
        "barnacles",
        "kelp",
        "anemone",
        "limpet",
        "urchin",
        "periwinkle",
        "sculpin",
        "mussel",
        "whelk",
        "nudibranch",
        "chiton",
        "shrimp",
        "sponge",
        "eelgrass",
        "gull",
        "plover",
        "heron",
        "otter",
        "seal",
        "cormorant",
        "driftwood",
        "pebble",
        "sandbar",
        "estuary",
    ];
    (0..n)
        .map(|i| {
            let a = WORDS[i % WORDS.len()];
            let b = WORDS[(i * 7 + 3) % WORDS.len()];
            format!("Note {i}: {a} beside {b}.")
        })
        .collect()
}

/// Five runs across two replicas on Postgres and NATS, one killed after the second:
/// every cast is a different run's, none is cast twice, and the runs go on.
#[tokio::test]
async fn two_replicas_post_each_run_once_even_when_one_is_killed() {
    let test = "two_replicas_post_each_run_once_even_when_one_is_killed";
    let Some(nats) = troupe_e2e::env::nats_url(test) else {
        return;
    };
    if Backend::Postgres.or_skip(test).is_none() {
        return;
    }
    let neynar = FakeNeynar::start().await;
    let openai = FakeOpenAi::start().await;
    for d in distinct_drafts(40) {
        openai.push_reply(d);
    }
    let settings = [
        ("ENABLE_POST", "true"),
        ("POST_IMMEDIATELY", "true"),
        ("POST_INTERVAL_MIN", "2s"),
        ("POST_INTERVAL_MAX", "2s"),
    ];
    let options = TestAppOptions::new(Backend::Postgres)
        .persona_file("fern.json", fern(&neynar, &settings))
        .openai(&openai)
        .env("TROUPE_BUS_URL", &nats)
        .env("TROUPE_BUS_PREFIX", &format!("posts{}", std::process::id()));
    let a = TestApp::spawn(options).await;
    let mut b = TestApp::spawn(a.replica_options()).await;
    if let Err(e) = neynar.try_wait_for_casts(2, WAIT).await {
        panic!(
            "{e}\n----- a -----\n{}\n----- b -----\n{}",
            a.logs(),
            b.logs()
        );
    }
    b.kill().await;
    let casts = match neynar.try_wait_for_casts(5, WAIT).await {
        Ok(c) => c,
        Err(e) => panic!(
            "{e}\n----- a -----\n{}\n----- b -----\n{}",
            a.logs(),
            b.logs()
        ),
    };
    let mut texts: Vec<&str> = casts.iter().map(|c| c.text.as_str()).collect();
    texts.sort();
    texts.dedup();
    assert_eq!(
        texts.len(),
        casts.len(),
        "a post was cast twice: {casts:#?}"
    );
    // One model call per cast at most: no run was composed twice by the two replicas.
    let body = posts(&a, "Fern").await;
    let queued = runs_in(&body, "queued");
    let mut run_times: Vec<i64> = queued
        .iter()
        .filter_map(|r| r["runAtMs"].as_i64())
        .collect();
    let n = run_times.len();
    run_times.sort();
    run_times.dedup();
    assert_eq!(run_times.len(), n, "a run was queued twice: {body}");
    assert!(n >= 5, "{body}");
}

/// Down for five intervals, then started: one catch-up post, then the schedule again.
#[tokio::test]
async fn a_gateway_that_was_down_posts_one_catch_up_not_five() {
    let neynar = FakeNeynar::start().await;
    let openai = FakeOpenAi::start().await;
    for d in distinct_drafts(20) {
        openai.push_reply(d);
    }
    let settings = [
        ("ENABLE_POST", "true"),
        ("POST_INTERVAL_MIN", "10s"),
        ("POST_INTERVAL_MAX", "10s"),
    ];
    let mut app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("fern.json", fern(&neynar, &settings))
            .openai(&openai),
    )
    .await;
    eventually("the schedule is stored", WAIT, || async {
        !posts(&app, "Fern").await["schedules"]
            .as_array()
            .is_none_or(|s| s.is_empty())
    })
    .await;
    app.stop().await;
    // Five intervals pass while it is down: the stored next run is moved 50 s back, as
    // the clock would have moved on (the test does not wait them out).
    let url = app.database_url().to_string();
    let mut db = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    sqlx::query("UPDATE post_schedules SET next_run_ms = next_run_ms - 50000")
        .execute(&mut db)
        .await
        .unwrap();
    drop(db);
    app.start_again().await;
    if let Err(e) = neynar.try_wait_for_casts(1, WAIT).await {
        panic!("{e}\n----- troupe output -----\n{}", app.logs());
    }
    let body = posts(&app, "Fern").await;
    let next = body["schedules"][0]["nextRunMs"].as_i64().unwrap();
    let first = &runs_in(&body, "queued")[0];
    assert!(
        next > first["createdAtMs"].as_i64().unwrap(),
        "the next run is after the catch-up, not another missed one: {body}"
    );
    // The next regular run comes one interval later: by then, two casts, not six.
    if let Err(e) = neynar.try_wait_for_casts(2, WAIT).await {
        panic!("{e}\n----- troupe output -----\n{}", app.logs());
    }
    assert_eq!(neynar.published().len(), 2, "{:#?}", neynar.published());
    assert_eq!(runs_in(&posts(&app, "Fern").await, "queued").len(), 2);
}

/// With a small model set, summaries and facts reach the model under its name, replies
/// under the large one's; spend shows the split by model.
#[tokio::test]
async fn background_work_goes_to_the_small_model_and_replies_to_the_large() {
    use troupe_e2e::fake_openai::{FACTS_TASK, SUMMARY_TASK};
    let openai = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona("Ada", "Ada keeps the harbour log.")
            .openai(&openai)
            .env("OPENAI_SMALL_MODEL", "gpt-4o-nano")
            .env("OPENAI_LARGE_MODEL", "gpt-4o")
            .env("TROUPE_HISTORY_LIMIT", "4")
            .env("TROUPE_MEMORY_SUMMARY_EVERY", "2")
            .env("TROUPE_MEMORY_FACTS_EVERY", "1"),
    )
    .await;
    for text in ["I am Sam and I sail.", "High tide when?", "And the wind?"] {
        let (status, body) = app
            .post_message(
                "Ada",
                &json!({"roomId": "harbour", "userId": "u-sam", "userName": "Sam", "text": text}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let is_task = |r: &troupe_e2e::fake_openai::ChatRequestRecord, task: &str| {
        r.system_prompt().is_some_and(|s| s.starts_with(task))
    };
    openai
        .wait_for_matching(1, WAIT, move |r| is_task(r, SUMMARY_TASK))
        .await;
    openai
        .wait_for_matching(1, WAIT, move |r| is_task(r, FACTS_TASK))
        .await;
    for r in openai.requests() {
        let background = is_task(&r, SUMMARY_TASK) || is_task(&r, FACTS_TASK);
        let want = if background { "gpt-4o-nano" } else { "gpt-4o" };
        assert_eq!(r.model, want, "request {} went to {}", r.index, r.model);
    }
    eventually("spend shows both models", WAIT, || async {
        let (_, usage) = app.get("/api/agents/Ada/usage?by=model").await;
        let keys: Vec<String> = usage["rows"]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .filter_map(|r| r["key"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        keys.contains(&"openai:gpt-4o-nano".to_string())
            && keys.contains(&"openai:gpt-4o".to_string())
    })
    .await;
}

/// A Telegram group gets the scheduled post, as a plain message (no reply).
#[tokio::test]
async fn a_telegram_group_schedule_posts() {
    use troupe_e2e::fake_telegram::FakeTelegram;
    let telegram = FakeTelegram::start().await;
    let openai = FakeOpenAi::start().await;
    openai.push_reply("Ferry timetable: summer hours start Monday.");
    let mut character = telegram.persona("Tess", "Tess runs the island's noticeboard.");
    character["settings"]["troupe"] =
        json!({"posts": [{"room": "telegram:-100777", "every": "10s"}]});
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("tess.json", character)
            .openai(&openai),
    )
    .await;
    let sent = match telegram.try_wait_for_sent(1, WAIT).await {
        Ok(s) => s,
        Err(e) => panic!("{e}\n----- troupe output -----\n{}", app.logs()),
    };
    assert_eq!(sent[0].chat_id, -100777);
    assert_eq!(sent[0].text, "Ferry timetable: summer hours start Monday.");
    assert!(sent[0].reply_to_message_id().is_none());
}
