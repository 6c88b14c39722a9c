//! Two `troupe` replicas on one Postgres database, one Telegram bot in long-polling mode:
//! only the replica holding the bot's advisory lock polls, each message is answered once,
//! and when the leader is killed (SIGKILL, no goodbye) the other replica takes over.
//!
//! What shows who polls: each replica's `troupe_leader{receiver="telegram:<bot id>"}` gauge
//! on `/metrics`, and on the fake's side the `deleteWebhook` call that starts every polling
//! session, counted. Postgres only (`TROUPE_TEST_DATABASE_URL`; required under `CI=true`):
//! on SQLite there is one process per database and it always leads.

use std::time::Duration;

use serde_json::Value;
use troupe_e2e::fake_telegram::{FakeTelegram, tg};
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, eventually};

/// A hang guard on waiting for the gateway, not a timing assertion.
const WAIT: Duration = Duration::from_secs(60);

fn character(telegram: &FakeTelegram) -> Value {
    telegram.persona("Tess", "Tess keeps the night ferry's logbook.")
}

/// This replica's `troupe_leader` value for `receiver`, or `None` before it reports one.
async fn leads(app: &TestApp, receiver: &str) -> Option<bool> {
    let text = app
        .client()
        .get(app.url("/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let series = format!("troupe_leader{{receiver=\"{receiver}\"}}");
    text.lines()
        .find_map(|line| line.strip_prefix(series.as_str()))
        .map(|value| value.trim() == "1")
}

/// Sends a private message from Ann and returns its message id.
fn ask(telegram: &FakeTelegram, n: usize) -> i64 {
    telegram.push_message(tg::text(
        tg::private_chat(501, "Ann"),
        tg::user(501, "Ann"),
        &format!("question {n}"),
    ))
}

/// Waits for `n` replies; on failure, shows both replicas' output.
async fn wait_sent(telegram: &FakeTelegram, apps: [&TestApp; 2], n: usize) {
    if let Err(e) = telegram.try_wait_for_sent(n, WAIT).await {
        panic!(
            "{e}\n----- replica A -----\n{}\n----- replica B -----\n{}",
            apps[0].logs(),
            apps[1].logs()
        );
    }
}

#[tokio::test]
async fn one_replica_polls_telegram_and_the_other_takes_over_when_it_is_killed() {
    let Some(backend) = Backend::Postgres
        .or_skip("leader::one_replica_polls_telegram_and_the_other_takes_over_when_it_is_killed")
    else {
        return;
    };
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    let options = TestAppOptions::new(backend)
        .persona_file("tess.json", character(&telegram))
        .openai(&model)
        // A standby asks for the lock every second (the default is 5).
        .env("TROUPE_LEADER_RETRY_SECS", "1");
    let mut a = TestApp::spawn(options).await;
    let mut b = TestApp::spawn(a.replica_options()).await;
    let receiver = format!("telegram:{}", telegram.bot_id());

    // Both replicas report on the bot; exactly one leads.
    eventually(
        "both replicas report a role, one of them leader",
        WAIT,
        || async {
            let roles = (leads(&a, &receiver).await, leads(&b, &receiver).await);
            matches!(roles, (Some(x), Some(y)) if x != y)
        },
    )
    .await;
    let a_leads = leads(&a, &receiver).await == Some(true);
    let (leader, standby) = if a_leads {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };

    // One polling session was started, by the leader.
    telegram.wait_for_calls("getUpdates", 1, WAIT).await;
    assert_eq!(telegram.calls_to("deleteWebhook").len(), 1);
    assert!(leader.logs().contains("connected to Telegram"));
    assert!(!standby.logs().contains("connected to Telegram"));
    // A standby connector does not make the replica unready.
    let (status, body) = standby.get("/readyz").await;
    assert_eq!(status, 200, "{body}");
    let states: Vec<&str> = body["connectors"]
        .as_object()
        .map(|m| m.values().filter_map(|c| c["status"].as_str()).collect())
        .unwrap_or_default();
    assert!(states.contains(&"standby"), "the standby says so: {body}");
    let (_, body) = leader.get("/readyz").await;
    assert!(
        !body.to_string().contains("standby"),
        "the leader is not on standby: {body}"
    );

    // Messages are answered once: one model call and one reply each.
    let mut asked: Vec<i64> = (1..=3).map(|n| ask(&telegram, n)).collect();
    wait_sent(&telegram, [&*leader, &*standby], 3).await;
    // A later message is answered after the first three were: had any of them been
    // answered twice, the extra reply would be in by then (replies go out in order).
    asked.push(ask(&telegram, 4));
    wait_sent(&telegram, [&*leader, &*standby], 4).await;
    let sent = telegram.sent_messages();
    assert_eq!(sent.len(), 4, "{sent:?}");
    assert_eq!(model.request_count(), 4);
    for id in &asked {
        assert_eq!(
            sent.iter()
                .filter(|m| m.reply_to_message_id() == Some(*id))
                .count(),
            1,
            "message {id}: {sent:?}"
        );
    }

    // The leader dies without closing anything; its database session goes with it, and
    // the standby takes the lock and polls.
    leader.kill().await;
    eventually("the standby becomes the leader", WAIT, || async {
        leads(&*standby, &receiver).await == Some(true)
    })
    .await;
    telegram.wait_for_calls("deleteWebhook", 2, WAIT).await;
    assert!(standby.logs().contains("this replica leads"));

    let fifth = ask(&telegram, 5);
    wait_sent(&telegram, [&*leader, &*standby], 5).await;
    let sent = telegram.sent_messages();
    assert_eq!(sent[4].reply_to_message_id(), Some(fifth), "{sent:?}");
    assert_eq!(model.request_count(), 5);
}
