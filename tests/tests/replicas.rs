//! Two `troupe` replicas on one Postgres database and one NATS JetStream server.
//!
//! The HTTP API of both replicas takes 1,000 messages over 50 rooms (each room a
//! conversation, its messages posted alternately to the two replicas). Whichever replica
//! pulls a message from NATS handles it, and the waiting replica gets the outcome over NATS.
//! What is asserted is read where a reply lands: the outbox (one row per answered message)
//! and the fake model (one call per message), not just the HTTP answers.
//!
//! Phase 1: both replicas run; every message gets exactly one reply, each room's replies
//! are recorded in the room's order, and both replicas handled messages.
//! Phase 2: one replica is SIGKILLed mid-run. Its callers post again to the survivor (as
//! a client would); what it held is redelivered by NATS after the ack wait. Nothing is
//! lost and nothing is answered twice.
//!
//! Needs `TROUPE_TEST_DATABASE_URL` and `TROUPE_TEST_NATS_URL`: skipped with a note without
//! them, failed under `CI=true`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use sqlx::Connection;
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, eventually, try_post_message};

const AGENT: &str = "Ada";
const BIO: &str = "Ada keeps the lighthouse log and answers every message, briefly.";
const ROOMS: usize = 50;
const PER_ROOM: usize = 20;
/// A hang guard, not a timing assertion.
const WAIT: Duration = Duration::from_secs(180);

/// Two replicas on a fresh database and the bus prefix `prefix`.
async fn two_replicas(nats: &str, prefix: &str, model: &FakeOpenAi) -> (TestApp, TestApp) {
    let options = TestAppOptions::new(Backend::Postgres)
        .persona(AGENT, BIO)
        .openai(model)
        .env("TROUPE_BUS_URL", nats)
        .env("TROUPE_BUS_PREFIX", prefix)
        .env("TROUPE_BUS_PARTITIONS", "16")
        // Short, so that what the killed replica held comes back soon.
        .env("TROUPE_BUS_ACK_WAIT_SECS", "2")
        // The test measures delivery, not the rate limits.
        .env("TROUPE_RATE_USER_PER_MIN", "0")
        .env("TROUPE_RATE_ROOM_PER_MIN", "0")
        .env("TROUPE_RATE_AGENT_PER_MIN", "0")
        .env("TROUPE_RATE_API_PER_MIN", "0");
    let a = TestApp::spawn(options).await;
    let b = TestApp::spawn(a.replica_options()).await;
    (a, b)
}

fn message_id(phase: &str, room: usize, n: usize) -> String {
    format!("{phase}-r{room}-m{n:02}")
}

/// Posts one message to `url`; on a connection error or a 5xx (the replica died, or the
/// outcome was lost with it) posts the same message id to `fallback`, as a client would.
/// Returns the reply texts.
async fn post(
    client: &reqwest::Client,
    urls: [&str; 2],
    first: usize,
    dead: &AtomicBool,
    body: &serde_json::Value,
) -> Vec<String> {
    let mut target = if dead.load(Ordering::SeqCst) {
        0
    } else {
        first
    };
    for _attempt in 0..5 {
        if let Some(replies) = try_post_message(client, urls[target], body).await {
            return replies;
        }
        // Only replica 1 is ever killed: go to replica 0.
        target = 0;
    }
    panic!("no replica answered {body}");
}

/// Runs `ROOMS` conversations of `PER_ROOM` messages at once, alternating replicas;
/// `on_reply` sees the running count of answered messages.
async fn converse(
    a: &TestApp,
    b_url: String,
    phase: &'static str,
    dead: Arc<AtomicBool>,
    answered: Arc<AtomicUsize>,
) {
    let urls = [
        a.url(&format!("/api/agents/{AGENT}/messages")),
        format!("{b_url}/api/agents/{AGENT}/messages"),
    ];
    let mut tasks = tokio::task::JoinSet::new();
    for room in 0..ROOMS {
        let urls = urls.clone();
        let client = a.client().clone();
        let dead = dead.clone();
        let answered = answered.clone();
        tasks.spawn(async move {
            for n in 0..PER_ROOM {
                let body = json!({
                    "roomId": format!("room-{room}"),
                    "userId": format!("user-{room}"),
                    "userName": format!("User {room}"),
                    "messageId": message_id(phase, room, n),
                    "text": format!("{phase} room {room} message {n}"),
                });
                let replies = post(
                    &client,
                    [urls[0].as_str(), urls[1].as_str()],
                    (room + n) % 2,
                    &dead,
                    &body,
                )
                .await;
                assert_eq!(replies.len(), 1, "{body}: {replies:?}");
                answered.fetch_add(1, Ordering::SeqCst);
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("a conversation failed");
    }
}

/// Per message id of `phase`: (journal state, outbox rows, first outbox id).
async fn outbox_by_message(
    database_url: &str,
    phase: &str,
) -> HashMap<String, (String, i64, Option<i64>)> {
    let mut conn = sqlx::PgConnection::connect(database_url)
        .await
        .expect("connect to the test database");
    let rows: Vec<(String, String, i64, Option<i64>)> = sqlx::query_as(
        "SELECT j.platform_message_id, j.state, COUNT(o.id), MIN(o.id)
         FROM journal j LEFT JOIN outbox o ON o.journal_id = j.id
         WHERE j.platform_message_id LIKE $1
         GROUP BY j.id, j.platform_message_id, j.state",
    )
    .bind(format!("{phase}-%"))
    .fetch_all(&mut conn)
    .await
    .expect("read the journal and the outbox");
    let _ = conn.close().await;
    rows.into_iter()
        .map(|(m, s, n, first)| (m, (s, n, first)))
        .collect()
}

/// Every message of `phase` is done with exactly one outbox row.
fn assert_exactly_one_reply_each(rows: &HashMap<String, (String, i64, Option<i64>)>, phase: &str) {
    assert_eq!(rows.len(), ROOMS * PER_ROOM, "{phase}: journaled messages");
    for room in 0..ROOMS {
        for n in 0..PER_ROOM {
            let id = message_id(phase, room, n);
            let (state, replies, _) = rows
                .get(&id)
                .unwrap_or_else(|| panic!("{id} is not in the journal"));
            assert_eq!(state, "done", "{id}");
            assert_eq!(*replies, 1, "{id} has {replies} replies in the outbox");
        }
    }
}

/// How many messages a replica's log says it answered.
fn answered_in(logs: &str) -> usize {
    logs.lines()
        .filter(|l| l.contains("model answered"))
        .count()
}

#[tokio::test]
async fn two_replicas_answer_each_message_once_in_order_even_when_one_is_killed() {
    let test = "two_replicas_answer_each_message_once_in_order_even_when_one_is_killed";
    let Some(nats) = troupe_e2e::env::nats_url(test) else {
        return;
    };
    if Backend::Postgres.or_skip(test).is_none() {
        return;
    }
    let model = FakeOpenAi::start().await;
    let prefix = format!("e2e{}", uuid::Uuid::new_v4().simple());
    let (a, mut b) = two_replicas(&nats, &prefix, &model).await;

    // Phase 1: both replicas up.
    let dead = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    converse(&a, b.url(""), "one", dead.clone(), answered.clone()).await;
    let rows = outbox_by_message(a.database_url(), "one").await;
    assert_exactly_one_reply_each(&rows, "one");
    for room in 0..ROOMS {
        let ids: Vec<i64> = (0..PER_ROOM)
            .map(|n| rows[&message_id("one", room, n)].2.expect("an outbox row"))
            .collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "room {room}: replies recorded out of order: {ids:?}"
        );
    }
    // Background memory upkeep (summaries, facts) also calls the model; only replies count.
    assert_eq!(
        model.requests().iter().filter(|r| r.is_reply()).count(),
        ROOMS * PER_ROOM,
        "one model call per message: no message was handled twice"
    );
    let (by_a, by_b) = (answered_in(&a.logs()), answered_in(&b.logs()));
    assert_eq!(by_a + by_b, ROOMS * PER_ROOM);
    assert!(
        by_a > 0 && by_b > 0,
        "both replicas take work: {by_a} and {by_b}"
    );
    eprintln!("phase one: replica a answered {by_a}, replica b {by_b}");

    // Phase 2: replica b is killed once a third of the messages are answered.
    let answered = Arc::new(AtomicUsize::new(0));
    let run = converse(&a, b.url(""), "two", dead.clone(), answered.clone());
    let killer = async {
        eventually("a third of phase two is answered", WAIT, || {
            let answered = answered.clone();
            async move { answered.load(Ordering::SeqCst) >= ROOMS * PER_ROOM / 3 }
        })
        .await;
        b.kill().await;
        dead.store(true, Ordering::SeqCst);
        answered.load(Ordering::SeqCst)
    };
    let (at_kill, ()) = tokio::join!(killer, run);
    assert!(
        at_kill < ROOMS * PER_ROOM,
        "the kill came after the run ({at_kill} answered)"
    );
    eprintln!("phase two: replica b killed after {at_kill} answers");
    let rows = outbox_by_message(a.database_url(), "two").await;
    assert_exactly_one_reply_each(&rows, "two");
    let before = by_a;
    let after = answered_in(&a.logs());
    // What was left at the kill, less what the killed replica had recorded but not yet
    // reported (at most one message per conversation), came from the survivor's model calls.
    assert!(
        after - before + ROOMS >= ROOMS * PER_ROOM - at_kill,
        "the survivor answered what was left ({} after {at_kill} of {})",
        after - before,
        ROOMS * PER_ROOM
    );
    // Nothing is left behind on the bus.
    eventually("the survivor's bus is empty", WAIT, || async {
        let (_, body) = a.get("/readyz").await;
        body["bus"]["depth"] == json!(0) && body["bus"]["kind"] == json!("nats-jetstream")
    })
    .await;
    // A graceful stop finishes and leaves the bus (it does not wait on NATS forever).
    let mut a = a;
    let status = a.stop().await;
    assert!(status.success(), "the survivor exited with {status}");
}
