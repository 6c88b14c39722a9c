//! Storage behaviour, one test body per behaviour, run against SQLite (a fresh file in a
//! temporary directory) and against Postgres (a fresh database per test) when
//! `TROUPE_TEST_DATABASE_URL` is set. With `CI=true` and no Postgres URL, the Postgres
//! variants fail rather than pass silently.

#![allow(clippy::disallowed_methods)] // tests pick databases and fixtures from the environment

use super::test_support::{Ctx, Kind, on_both_backends, run, with_database};
use super::*;
use std::collections::{HashMap, HashSet};
use troupe_connectors::{Platform, RoomId, RoomRef, UserRef};

static AGENT: std::sync::LazyLock<AgentId> = std::sync::LazyLock::new(|| AgentId::new("eliza"));

/// A room key, as stored.
fn key_of(s: &str) -> RoomKey {
    s.parse().expect("a room key")
}

on_both_backends!(
    connect_and_agents,
    duplicate_journal_insert,
    concurrent_duplicate_inserts,
    record_handled_is_idempotent,
    concurrent_record_handled,
    record_handled_without_reply,
    record_handled_unknown_journal,
    recent_messages_ordering_and_limit,
    rooms_are_isolated,
    journal_unfinished_and_fail,
    outbox_claim_lease_retry_delivered,
    outbox_give_up_and_claim_limit,
    concurrent_claimers_never_share,
    corrupt_json_is_reported,
    batch_of_journal_inserts_with_duplicates,
    concurrent_journal_inserts_with_duplicates,
    batch_of_record_handled_for_one_entry,
    batch_with_a_bad_request,
    batch_of_every_kind,
    a_reply_recorded_delivered,
    room_context_reads,
    connector_state_is_scoped_and_overwritten,
    dedupe_is_per_room_and_web_caller,
    batch_dedupe_is_per_room,
    attempts_are_counted_before_handling,
    give_up_apologises_once_per_room,
    installation_id_is_stable_and_per_database,
    a_user_name_follows_the_newest_sighting,
    a_room_row_moves_once_a_minute_and_the_listing_stays_exact,
);

// ---- fixtures ----

pub(super) fn inbound(
    platform: Platform,
    room: &str,
    id: &str,
    author: &str,
    text: &str,
    at: i64,
) -> Inbound {
    let mut room = RoomRef::new(platform, RoomId::new(room));
    room.name = Some(format!("#{}", room.id));
    Inbound::said(
        id,
        room,
        UserRef::person(author, author.to_uppercase()),
        text,
    )
    .mentioning_self()
    .at(at)
}

fn outbound_for(msg: &Inbound, text: &str) -> Outbound {
    Outbound {
        key: format!("reply:{}", msg.id),
        room: msg.room.clone(),
        text: text.to_string(),
        reply_to: Some(msg.id.clone()),
        replaces: Vec::new(),
    }
}

fn handled<'a>(
    journal_id: JournalId,
    agent: &'a AgentId,
    key: &'a RoomKey,
    msg: &'a Inbound,
    reply: Option<(&'a str, &'a Outbound)>,
) -> HandledMessage<'a> {
    HandledMessage {
        journal_id,
        agent_id: agent,
        room: key,
        room_name: msg.room.name.as_deref(),
        inbound: NewMemory {
            author_id: msg.author.id.as_str(),
            author_name: &msg.author.name,
            text: &msg.text,
            from_agent: false,
            created_at_ms: msg.sent_at_ms,
        },
        reply: reply.map(|(text, outbound)| {
            let memory = NewMemory {
                author_id: agent.as_str(),
                author_name: agent.as_str(),
                text,
                from_agent: true,
                created_at_ms: msg.sent_at_ms + 1,
            };
            (memory, outbound.clone())
        }),
    }
}

/// Journals `msg` for `agent` and records it as handled, with a reply when `reply` is set.
pub(super) async fn exchange(
    store: &Store,
    agent: &AgentId,
    msg: &Inbound,
    reply: Option<&str>,
) -> (JournalId, Option<OutboxId>) {
    let JournalInsert::Inserted(jid) = store.journal_insert(agent, msg).await.unwrap() else {
        panic!("{} was already journaled", msg.id)
    };
    let key = msg.room.key();
    let outbound = reply.map(|text| outbound_for(msg, text));
    let reply = reply.zip(outbound.as_ref());
    let outbox = store
        .record_handled(handled(jid, agent, &key, msg, reply))
        .await
        .unwrap();
    (jid, outbox)
}

fn texts(messages: &[MemoryMessage]) -> Vec<&str> {
    messages.iter().map(|m| m.text.as_str()).collect()
}

// ---- behaviours ----

async fn connect_and_agents(ctx: Ctx) {
    let store = ctx.store;
    store.ping().await.unwrap();
    let expected = if ctx.url.starts_with("sqlite:") {
        Backend::Sqlite
    } else {
        Backend::Postgres
    };
    assert_eq!(store.backend(), expected);
    store.upsert_agent(&AGENT, "Eliza").await.unwrap();
    store.upsert_agent(&AGENT, "Eliza 2").await.unwrap();
    let name: String = with_pool!(store, pool => {
        sqlx::query_scalar("SELECT name FROM agents WHERE id = $1")
            .bind(&*AGENT)
            .fetch_one(pool)
            .await
            .unwrap()
    });
    assert_eq!(name, "Eliza 2");
    // Connecting again to a migrated database applies nothing and succeeds.
    Store::connect(&ctx.url)
        .await
        .unwrap()
        .ping()
        .await
        .unwrap();
}

async fn duplicate_journal_insert(ctx: Ctx) {
    let store = ctx.store;
    let msg = inbound(Platform::Discord, "c1", "m1", "ann", "hello", 1_000);
    let JournalInsert::Inserted(id) = store.journal_insert(&AGENT, &msg).await.unwrap() else {
        panic!("first insert must insert");
    };
    assert_eq!(
        store.journal_insert(&AGENT, &msg).await.unwrap(),
        JournalInsert::Duplicate(id, JournalState::Pending)
    );

    let entry = store.journal_get(id).await.unwrap().expect("entry");
    assert_eq!(entry.inbound, msg);
    assert_eq!(entry.agent_id, *AGENT);
    assert_eq!(entry.state, JournalState::Pending);
    // The insert counts the first attempt (the poison-message rule, storage::journal).
    assert_eq!(entry.attempts, 1);
    let looked_up = store
        .journal_lookup(&AGENT, &msg)
        .await
        .unwrap()
        .expect("lookup");
    assert_eq!(looked_up.id, id);
    let on_telegram = inbound(Platform::Telegram, "c1", "m1", "ann", "hello", 1_000);
    assert!(
        store
            .journal_lookup(&AGENT, &on_telegram)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .journal_get(JournalId(id.0 + 1000))
            .await
            .unwrap()
            .is_none()
    );

    // The same platform message id on another platform, or for another agent, is new.
    let other_platform = inbound(Platform::Telegram, "c1", "m1", "ann", "hello", 1_000);
    assert!(matches!(
        store.journal_insert(&AGENT, &other_platform).await.unwrap(),
        JournalInsert::Inserted(other) if other != id
    ));
    assert!(matches!(
        store.journal_insert(&AgentId::new("other-agent"), &msg).await.unwrap(),
        JournalInsert::Inserted(other) if other != id
    ));

    // Once handled, a duplicate reports the new state.
    let key = msg.room.key();
    store
        .record_handled(handled(id, &AGENT, &key, &msg, None))
        .await
        .unwrap();
    assert_eq!(
        store.journal_insert(&AGENT, &msg).await.unwrap(),
        JournalInsert::Duplicate(id, JournalState::Done)
    );
}

async fn concurrent_duplicate_inserts(ctx: Ctx) {
    let msg = inbound(Platform::Farcaster, "0xroot", "0xcast", "bob", "gm", 5);
    let attempts = (0..8).map(|_| {
        let store = ctx.store.clone();
        let msg = msg.clone();
        tokio::spawn(async move { store.journal_insert(&AGENT, &msg).await.unwrap() })
    });
    let outcomes: Vec<JournalInsert> = futures::future::join_all(attempts)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let inserted: Vec<JournalId> = outcomes
        .iter()
        .filter_map(|o| match o {
            JournalInsert::Inserted(id) => Some(*id),
            JournalInsert::Duplicate(..) => None,
        })
        .collect();
    assert_eq!(inserted.len(), 1, "exactly one insert wins: {outcomes:?}");
    for outcome in &outcomes {
        match outcome {
            JournalInsert::Inserted(id) | JournalInsert::Duplicate(id, _) => {
                assert_eq!(*id, inserted[0])
            }
        }
    }
}

async fn record_handled_is_idempotent(ctx: Ctx) {
    let store = ctx.store;
    let msg = inbound(Platform::Discord, "c1", "m1", "ann", "hi there", 1_000);
    let JournalInsert::Inserted(jid) = store.journal_insert(&AGENT, &msg).await.unwrap() else {
        panic!("insert");
    };
    let key = msg.room.key();
    let outbound = outbound_for(&msg, "hello ann");
    let first = store
        .record_handled(handled(
            jid,
            &AGENT,
            &key,
            &msg,
            Some(("hello ann", &outbound)),
        ))
        .await
        .unwrap()
        .expect("an outbox id for a reply");
    // A re-drive after a crash: same journal entry, same (or even a different) reply.
    let second = store
        .record_handled(handled(
            jid,
            &AGENT,
            &key,
            &msg,
            Some(("hello again", &outbound)),
        ))
        .await
        .unwrap();
    assert_eq!(second, Some(first));

    let memory = store.recent_messages(&AGENT, &key, 50).await.unwrap();
    assert_eq!(texts(&memory), ["hi there", "hello ann"]);
    assert_eq!(
        memory.iter().map(|m| m.from_agent).collect::<Vec<_>>(),
        [false, true]
    );
    assert_eq!(memory[0].author_id, "ann");
    assert_eq!(memory[0].author_name, "ANN");
    assert_eq!(memory[0].room.to_string(), "discord:c1");
    assert_eq!(memory[0].created_at_ms, 1_000);
    assert_eq!(
        store.replies_for(jid).await.unwrap(),
        vec![outbound.clone()]
    );
    let entry = store.journal_get(jid).await.unwrap().unwrap();
    assert_eq!(entry.state, JournalState::Done);

    let claimed = store.outbox_claim(10, 1_000_000, 30_000).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, first);
    assert_eq!(claimed[0].journal_id, Some(jid));
    assert_eq!(claimed[0].agent_id, *AGENT);
    assert_eq!(claimed[0].outbound, outbound);

    let rooms = store.rooms(&AGENT).await.unwrap();
    assert_eq!(rooms.len(), 1);
    assert_eq!(rooms[0].message_count, 2);
}

async fn concurrent_record_handled(ctx: Ctx) {
    let msg = inbound(Platform::Discord, "c1", "m1", "ann", "hi", 1_000);
    let JournalInsert::Inserted(jid) = ctx.store.journal_insert(&AGENT, &msg).await.unwrap() else {
        panic!("insert");
    };
    // Two drivers of the same entry at once (a re-drive racing the original worker).
    let drivers = (0..4).map(|_| {
        let store = ctx.store.clone();
        let msg = msg.clone();
        tokio::spawn(async move {
            let key = msg.room.key();
            let outbound = outbound_for(&msg, "hello");
            store
                .record_handled(handled(jid, &AGENT, &key, &msg, Some(("hello", &outbound))))
                .await
                .unwrap()
        })
    });
    let outcomes: Vec<Option<OutboxId>> = futures::future::join_all(drivers)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert!(
        outcomes.iter().all(|o| o.is_some() && *o == outcomes[0]),
        "{outcomes:?}"
    );
    let memory = ctx
        .store
        .recent_messages(&AGENT, &key_of("discord:c1"), 10)
        .await
        .unwrap();
    assert_eq!(texts(&memory), ["hi", "hello"]);
    assert_eq!(ctx.store.replies_for(jid).await.unwrap().len(), 1);
}

async fn record_handled_without_reply(ctx: Ctx) {
    let store = ctx.store;
    let msg = inbound(
        Platform::Telegram,
        "-100",
        "7",
        "cat",
        "just chatting",
        2_000,
    );
    let (jid, outbox) = exchange(&store, &AGENT, &msg, None).await;
    assert_eq!(outbox, None);
    let key = msg.room.key();
    assert_eq!(
        store
            .record_handled(handled(jid, &AGENT, &key, &msg, None))
            .await
            .unwrap(),
        None
    );
    let memory = store
        .recent_messages(&AGENT, &key_of("telegram:-100"), 10)
        .await
        .unwrap();
    assert_eq!(texts(&memory), ["just chatting"]);
    assert!(store.replies_for(jid).await.unwrap().is_empty());
    assert!(
        store
            .outbox_claim(10, i64::MAX / 2, 1)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.journal_get(jid).await.unwrap().unwrap().state,
        JournalState::Done
    );
}

async fn record_handled_unknown_journal(ctx: Ctx) {
    let msg = inbound(Platform::Web, "r", "x", "dan", "hey", 1);
    let key = msg.room.key();
    let err = ctx
        .store
        .record_handled(handled(JournalId(424_242), &AGENT, &key, &msg, None))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StorageError::Database(sqlx::Error::RowNotFound)),
        "{err:?}"
    );
    // Nothing was written.
    assert!(ctx.store.rooms(&AGENT).await.unwrap().is_empty());
}

async fn recent_messages_ordering_and_limit(ctx: Ctx) {
    let store = ctx.store;
    for i in 0..5 {
        let msg = inbound(
            Platform::Discord,
            "c1",
            &format!("m{i}"),
            "ann",
            &format!("q{i}"),
            1_000 + i * 10,
        );
        exchange(&store, &AGENT, &msg, Some(&format!("a{i}"))).await;
    }
    let all = store
        .recent_messages(&AGENT, &key_of("discord:c1"), 100)
        .await
        .unwrap();
    assert_eq!(
        texts(&all),
        ["q0", "a0", "q1", "a1", "q2", "a2", "q3", "a3", "q4", "a4"]
    );
    assert!(all.windows(2).all(|w| w[0].id < w[1].id));
    let last3 = store
        .recent_messages(&AGENT, &key_of("discord:c1"), 3)
        .await
        .unwrap();
    assert_eq!(texts(&last3), ["a3", "q4", "a4"]);
    assert!(
        store
            .recent_messages(&AGENT, &key_of("discord:c1"), 0)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .recent_messages(&AGENT, &key_of("discord:c1"), -1)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn rooms_are_isolated(ctx: Ctx) {
    let store = ctx.store;
    let a = inbound(
        Platform::Discord,
        "general",
        "1",
        "ann",
        "in general",
        1_000,
    );
    let b = inbound(
        Platform::Telegram,
        "general",
        "1",
        "bob",
        "in telegram",
        2_000,
    );
    let c = inbound(Platform::Discord, "random", "2", "cat", "in random", 1_500);
    exchange(&store, &AGENT, &a, Some("reply general")).await;
    exchange(&store, &AGENT, &b, None).await;
    exchange(&store, &AGENT, &c, Some("reply random")).await;
    // Another persona in the same Discord channel keeps its own memory.
    exchange(&store, &AgentId::new("trump"), &a, Some("other persona")).await;

    let general = store
        .recent_messages(&AGENT, &key_of("discord:general"), 10)
        .await
        .unwrap();
    assert_eq!(texts(&general), ["in general", "reply general"]);
    let telegram = store
        .recent_messages(&AGENT, &key_of("telegram:general"), 10)
        .await
        .unwrap();
    assert_eq!(texts(&telegram), ["in telegram"]);
    let other = store
        .recent_messages(&AgentId::new("trump"), &key_of("discord:general"), 10)
        .await
        .unwrap();
    assert_eq!(texts(&other), ["in general", "other persona"]);
    assert!(
        store
            .recent_messages(&AgentId::new("nobody"), &key_of("discord:general"), 10)
            .await
            .unwrap()
            .is_empty()
    );

    let rooms = store.rooms(&AGENT).await.unwrap();
    let keys: Vec<String> = rooms.iter().map(|r| r.room.to_string()).collect();
    let listed: Vec<(&str, &str, Option<&str>, i64, i64)> = rooms
        .iter()
        .zip(&keys)
        .map(|(r, key)| {
            (
                key.as_str(),
                r.platform.as_str(),
                r.name.as_deref(),
                r.message_count,
                r.last_active_ms,
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("telegram:general", "telegram", Some("#general"), 1, 2_000),
            ("discord:random", "discord", Some("#random"), 2, 1_501),
            ("discord:general", "discord", Some("#general"), 2, 1_001),
        ]
    );
    assert_eq!(store.rooms(&AgentId::new("trump")).await.unwrap().len(), 1);
    assert!(
        store
            .rooms(&AgentId::new("nobody"))
            .await
            .unwrap()
            .is_empty()
    );
}

async fn journal_unfinished_and_fail(ctx: Ctx) {
    let store = ctx.store;
    assert_eq!(store.journal_newest().await.unwrap(), None);
    let msgs: Vec<Inbound> = (0..4)
        .map(|i| {
            inbound(
                Platform::Web,
                "r",
                &format!("{i}"),
                "eve",
                &format!("t{i}"),
                i,
            )
        })
        .collect();
    let mut ids = Vec::new();
    for m in &msgs {
        let JournalInsert::Inserted(id) = store.journal_insert(&AGENT, m).await.unwrap() else {
            panic!("insert");
        };
        ids.push(id);
    }
    let key = msgs[1].room.key();
    store
        .record_handled(handled(ids[1], &AGENT, &key, &msgs[1], None))
        .await
        .unwrap();
    store.journal_fail(ids[2], "model timed out").await.unwrap();
    assert_eq!(
        store.journal_begin(ids[2], 5).await.unwrap(),
        Attempt::Started { attempts: 2 }
    );
    store
        .journal_fail(ids[2], "model timed out again")
        .await
        .unwrap();
    // Done is final: failing it afterwards changes nothing.
    store.journal_fail(ids[1], "late failure").await.unwrap();

    let page = |after: Option<JournalId>, limit: i64| UnfinishedPage {
        after,
        through: ids[3],
        max_attempts: 5,
        limit,
    };
    let unfinished = store.journal_unfinished(&page(None, 10)).await.unwrap();
    let summary: Vec<(JournalId, JournalState, i32, Option<&str>)> = unfinished
        .iter()
        .map(|e| (e.id, e.state, e.attempts, e.last_error.as_deref()))
        .collect();
    assert_eq!(
        summary,
        [
            (ids[0], JournalState::Pending, 1, None),
            (
                ids[2],
                JournalState::Failed,
                2,
                Some("model timed out again")
            ),
            (ids[3], JournalState::Pending, 1, None),
        ]
    );
    assert_eq!(unfinished[1].inbound, msgs[2]);
    let ids_in = |page: UnfinishedPage| {
        let store = store.clone();
        async move {
            let entries = store.journal_unfinished(&page).await.unwrap();
            entries.iter().map(|e| e.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(ids_in(page(None, 2)).await, [ids[0], ids[2]]);
    // The next page starts after the last entry of this one.
    assert_eq!(ids_in(page(Some(ids[2]), 2)).await, [ids[3]]);
    // Nothing past `through`.
    let upto = UnfinishedPage {
        through: ids[2],
        ..page(None, 10)
    };
    assert_eq!(ids_in(upto).await, [ids[0], ids[2]]);
    // With two attempts allowed, the failed entry that had two is given up: skipped.
    let given_up = UnfinishedPage {
        max_attempts: 2,
        ..page(None, 10)
    };
    assert_eq!(ids_in(given_up).await, [ids[0], ids[3]]);
    assert_eq!(store.journal_newest().await.unwrap(), Some(ids[3]));
    let done = store.journal_get(ids[1]).await.unwrap().unwrap();
    assert_eq!(
        (done.state, done.attempts, done.last_error),
        (JournalState::Done, 1, None)
    );

    // A failed entry that is handled on a later try becomes done and leaves the list.
    let key = msgs[2].room.key();
    store
        .record_handled(handled(ids[2], &AGENT, &key, &msgs[2], None))
        .await
        .unwrap();
    let after = store.journal_unfinished(&page(None, 10)).await.unwrap();
    assert_eq!(
        after.iter().map(|e| e.id).collect::<Vec<_>>(),
        [ids[0], ids[3]]
    );
}

async fn outbox_claim_lease_retry_delivered(ctx: Ctx) {
    let store = ctx.store;
    let msg = inbound(Platform::Discord, "c1", "m1", "ann", "ping", 1);
    let (_, outbox) = exchange(&store, &AGENT, &msg, Some("pong")).await;
    let id = outbox.unwrap();

    let first = store.outbox_claim(10, 1_000, 500).await.unwrap();
    assert_eq!(
        first.iter().map(|e| (e.id, e.attempts)).collect::<Vec<_>>(),
        [(id, 1)]
    );
    assert_eq!(first[0].outbound.text, "pong");
    // Claimed until 1_500: nobody else gets it before then.
    assert!(store.outbox_claim(10, 1_499, 500).await.unwrap().is_empty());
    assert!(
        store
            .outbox_claim_one(id, 1_499, 500)
            .await
            .unwrap()
            .is_none()
    );
    // The claimer crashed: the lease expires and the entry is claimed again.
    let again = store
        .outbox_claim_one(id, 1_500, 500)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((again.id, again.attempts), (id, 2));

    // A retry releases the claim and waits for not_before.
    store
        .outbox_retry(id, 5_000, "429 Too Many Requests")
        .await
        .unwrap();
    assert!(store.outbox_claim(10, 4_999, 500).await.unwrap().is_empty());
    assert!(
        store
            .outbox_claim_one(id, 4_999, 500)
            .await
            .unwrap()
            .is_none()
    );
    let last_error: Option<String> = with_pool!(store, pool => {
        sqlx::query_scalar("SELECT last_error FROM outbox WHERE id = $1")
            .bind(id.0)
            .fetch_one(pool)
            .await
            .unwrap()
    });
    assert_eq!(last_error.as_deref(), Some("429 Too Many Requests"));
    let third = store.outbox_claim(10, 5_000, 500).await.unwrap();
    assert_eq!(
        third.iter().map(|e| (e.id, e.attempts)).collect::<Vec<_>>(),
        [(id, 3)]
    );

    store
        .outbox_delivered(id, &["111".to_string(), "112".to_string()])
        .await
        .unwrap();
    assert!(
        store
            .outbox_claim(10, i64::MAX / 2, 500)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .outbox_claim_one(id, i64::MAX / 2, 500)
            .await
            .unwrap()
            .is_none()
    );
    // A late retry from a worker whose lease had expired does not undo the delivery.
    store.outbox_retry(id, 0, "late").await.unwrap();
    assert!(
        store
            .outbox_claim(10, i64::MAX / 2, 500)
            .await
            .unwrap()
            .is_empty()
    );
    let (state, ids): (String, String) = with_pool!(store, pool => {
        sqlx::query_as(
            "SELECT state, CAST(platform_ids AS TEXT) FROM outbox WHERE id = $1",
        )
        .bind(id.0)
        .fetch_one(pool)
        .await
        .unwrap()
    });
    assert_eq!(state, "delivered");
    let ids: Vec<String> = serde_json::from_str(&ids).unwrap();
    assert_eq!(ids, ["111", "112"]);
}

async fn outbox_give_up_and_claim_limit(ctx: Ctx) {
    let store = ctx.store;
    let mut outbox = Vec::new();
    for i in 0..5 {
        let msg = inbound(Platform::Telegram, "chat", &format!("{i}"), "fay", "q", i);
        outbox.push(exchange(&store, &AGENT, &msg, Some("a")).await.1.unwrap());
    }
    store
        .outbox_give_up(outbox[0], "403 Forbidden")
        .await
        .unwrap();
    let claimed = store.outbox_claim(3, 100, 1_000).await.unwrap();
    assert_eq!(
        claimed.iter().map(|e| e.id).collect::<Vec<_>>(),
        outbox[1..4],
        "oldest first, failed skipped, limit respected"
    );
    let rest = store.outbox_claim(3, 100, 1_000).await.unwrap();
    assert_eq!(rest.iter().map(|e| e.id).collect::<Vec<_>>(), [outbox[4]]);
    assert!(
        store
            .outbox_claim_one(outbox[0], 100, 1_000)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .outbox_claim(0, 10_000, 1_000)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn concurrent_claimers_never_share(ctx: Ctx) {
    const ENTRIES: usize = 60;
    for i in 0..ENTRIES {
        let msg = inbound(
            Platform::Discord,
            "busy",
            &format!("{i}"),
            "gus",
            "q",
            i as i64,
        );
        exchange(&ctx.store, &AGENT, &msg, Some("a")).await;
    }
    // Two handles with their own pools, as two replicas would have.
    let other = Store::connect(&ctx.url).await.unwrap();
    let claimers = [ctx.store.clone(), other.clone(), ctx.store.clone(), other]
        .into_iter()
        .map(|store| {
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let batch = store.outbox_claim(4, 1_000, 60_000).await.unwrap();
                    if batch.is_empty() {
                        return mine;
                    }
                    mine.extend(batch.into_iter().map(|e| e.id));
                    tokio::task::yield_now().await;
                }
            })
        });
    let results: Vec<Vec<OutboxId>> = futures::future::join_all(claimers)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let total: usize = results.iter().map(Vec::len).sum();
    let distinct: HashSet<OutboxId> = results.iter().flatten().copied().collect();
    assert_eq!(
        total,
        ENTRIES,
        "claims per claimer: {:?}",
        results.iter().map(Vec::len).collect::<Vec<_>>()
    );
    assert_eq!(distinct.len(), ENTRIES, "an entry was claimed twice");
}

async fn corrupt_json_is_reported(ctx: Ctx) {
    let store = ctx.store;
    let msg = inbound(Platform::Discord, "c1", "m1", "ann", "ping", 1);
    let (jid, outbox) = exchange(&store, &AGENT, &msg, Some("pong")).await;
    // Valid JSON of the wrong shape: Postgres' JSONB would refuse malformed text.
    let wrong = sqlx::types::Json(serde_json::json!({ "not": "a message" }));
    with_pool!(store, pool => {
        sqlx::query("UPDATE journal SET inbound = $1 WHERE id = $2")
            .bind(&wrong)
            .bind(jid.0)
            .execute(pool)
            .await
            .unwrap();
        sqlx::query("UPDATE outbox SET outbound = $1 WHERE id = $2")
            .bind(&wrong)
            .bind(outbox.unwrap().0)
            .execute(pool)
            .await
            .unwrap();
    });
    let err = store.journal_get(jid).await.unwrap_err();
    let StorageError::Corrupt(what) = &err else {
        panic!("expected Corrupt, got {err:?}");
    };
    assert!(what.contains(&format!("journal row {}", jid.0)), "{what}");
    assert!(matches!(
        store.journal_lookup(&AGENT, &msg).await,
        Err(StorageError::Corrupt(_))
    ));
    assert!(matches!(
        store.replies_for(jid).await,
        Err(StorageError::Corrupt(what)) if what.contains("outbox row")
    ));
    assert!(matches!(
        store.outbox_claim(10, 1_000, 1_000).await,
        Err(StorageError::Corrupt(_))
    ));
}

// ---- SQLite only ----

#[tokio::test]
async fn sqlite_creates_directories_and_survives_reconnect() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("data").join("troupe.db");
    let url = format!("sqlite://{}", path.display());
    let msg = inbound(Platform::Discord, "c1", "m1", "ann", "remember me", 1_000);
    let jid = {
        let store = Store::connect(&url).await.unwrap();
        let mode: String = with_pool!(store, pool => {
            sqlx::query_scalar("PRAGMA journal_mode").fetch_one(pool).await.unwrap()
        });
        assert_eq!(mode, "wal");
        let foreign_keys: i64 = with_pool!(store, pool => {
            sqlx::query_scalar("PRAGMA foreign_keys").fetch_one(pool).await.unwrap()
        });
        assert_eq!(foreign_keys, 1);
        let (jid, _) = exchange(&store, &AGENT, &msg, Some("I will")).await;
        store.close().await;
        jid
    };
    assert!(path.exists());

    let store = Store::connect(&url).await.unwrap();
    assert_eq!(
        store.journal_insert(&AGENT, &msg).await.unwrap(),
        JournalInsert::Duplicate(jid, JournalState::Done)
    );
    let memory = store
        .recent_messages(&AGENT, &key_of("discord:c1"), 10)
        .await
        .unwrap();
    assert_eq!(texts(&memory), ["remember me", "I will"]);
    assert_eq!(store.replies_for(jid).await.unwrap().len(), 1);
    assert_eq!(store.outbox_claim(10, 1_000, 1_000).await.unwrap().len(), 1);
}

/// In-memory SQLite too: it is not run on a path production never takes, since it lives
/// in one connection and the engine needs one of its own (issue 31).
#[tokio::test]
async fn unsupported_urls_are_refused() {
    for url in [
        "mysql://root@localhost/db",
        "troupe.db",
        "",
        "postgres:/nope",
        "sqlite::memory:",
        "sqlite://:memory:",
        "sqlite:file:scratch?mode=memory",
    ] {
        assert!(
            matches!(Store::connect(url).await, Err(StorageError::UnsupportedUrl(u)) if u == url),
            "{url}"
        );
    }
}

#[test]
fn test_database_urls_keep_server_and_options() {
    assert_eq!(
        with_database("postgres://postgres@127.0.0.1:5432/test", "x"),
        "postgres://postgres@127.0.0.1:5432/x"
    );
    assert_eq!(
        with_database("postgresql://u:p@h/test?sslmode=disable", "x"),
        "postgresql://u:p@h/x?sslmode=disable"
    );
    assert_eq!(
        with_database("postgres://h:5432", "x"),
        "postgres://h:5432/x"
    );
}

// ---- batching (the engine on SQLite, the writer on Postgres) ----

/// Writes these requests as one batch on the backend's write path, the one production
/// takes: the engine on SQLite (calls queued together), the writer's batch on Postgres.
async fn write_kinds(
    store: &Store,
    journal: Vec<writer::JournalReq>,
    handled: Vec<writer::HandledReq>,
    delivered: Vec<writer::DeliveredReq>,
) -> writer::Together {
    match (&store.hot, &store.pool) {
        (HotPath::Engine(engine), _) => {
            engine::write_kinds(engine, journal, handled, delivered).await
        }
        (HotPath::Writer(_), Pool::Postgres(pool)) => {
            writer::write_kinds(pool, journal, handled, delivered).await
        }
        (HotPath::Writer(_), Pool::Sqlite(_)) => unreachable!("a SQLite store has its engine"),
    }
}

fn journal_req(msg: &Inbound) -> writer::JournalReq {
    writer::JournalReq {
        agent_id: AGENT.clone(),
        message_id: msg.id.as_str().to_string(),
        room: msg.room.key(),
        caller: dedupe_caller(msg).to_string(),
        inbound_json: serde_json::to_string(msg).unwrap(),
        now: 1,
    }
}

async fn batch_of_journal_inserts_with_duplicates(ctx: Ctx) {
    let m = |id| inbound(Platform::Discord, "c1", id, "ann", "hi", 1_000);
    let JournalInsert::Inserted(old) = ctx.store.journal_insert(&AGENT, &m("old")).await.unwrap()
    else {
        panic!("insert")
    };
    ctx.store.journal_fail(old, "boom").await.unwrap();
    let reqs: Vec<_> = ["a", "b", "a", "old", "b"]
        .map(|id| journal_req(&m(id)))
        .into();
    let results: Vec<JournalInsert> = write_kinds(&ctx.store, reqs, Vec::new(), Vec::new())
        .await
        .journal
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let (JournalInsert::Inserted(a), JournalInsert::Inserted(b)) = (results[0], results[1]) else {
        panic!("{results:?}")
    };
    assert_ne!(a, b);
    assert_eq!(
        results[2..],
        [
            JournalInsert::Duplicate(a, JournalState::Pending),
            JournalInsert::Duplicate(old, JournalState::Failed),
            JournalInsert::Duplicate(b, JournalState::Pending),
        ]
    );
}

async fn concurrent_journal_inserts_with_duplicates(ctx: Ctx) {
    // 16 messages, each posted 4 times at once: they queue up and share batches.
    let posts = (0..64).map(|n| {
        let store = ctx.store.clone();
        let msg = inbound(
            Platform::Telegram,
            "g",
            &format!("m{}", n % 16),
            "bo",
            "yo",
            5,
        );
        tokio::spawn(async move { (n % 16, store.journal_insert(&AGENT, &msg).await.unwrap()) })
    });
    let mut by_message: HashMap<usize, Vec<JournalInsert>> = HashMap::new();
    for post in futures::future::join_all(posts).await {
        let (n, outcome) = post.unwrap();
        by_message.entry(n).or_default().push(outcome);
    }
    let mut ids = HashSet::new();
    for (n, outcomes) in by_message {
        let inserted: Vec<JournalId> = outcomes
            .iter()
            .filter_map(|o| match o {
                JournalInsert::Inserted(id) => Some(*id),
                JournalInsert::Duplicate(..) => None,
            })
            .collect();
        assert_eq!(inserted.len(), 1, "message {n}: {outcomes:?}");
        for o in &outcomes {
            let (JournalInsert::Inserted(id) | JournalInsert::Duplicate(id, _)) = o;
            assert_eq!(*id, inserted[0]);
        }
        ids.insert(inserted[0]);
    }
    assert_eq!(ids.len(), 16);
}

async fn batch_of_record_handled_for_one_entry(ctx: Ctx) {
    let store = &ctx.store;
    let m1 = inbound(Platform::Discord, "c1", "m1", "ann", "one", 1_000);
    let m2 = inbound(Platform::Discord, "c1", "m2", "bob", "two", 2_000);
    let mut jids = Vec::new();
    for m in [&m1, &m2] {
        let JournalInsert::Inserted(jid) = store.journal_insert(&AGENT, m).await.unwrap() else {
            panic!("insert")
        };
        jids.push(jid);
    }
    let key = m1.room.key();
    let (o1, o1b) = (outbound_for(&m1, "first"), outbound_for(&m1, "second"));
    let reqs = vec![
        memory::owned(
            handled(jids[0], &AGENT, &key, &m1, Some(("first", &o1))),
            &ReplyStart::Claimed { lease_ms: 60_000 },
        )
        .unwrap(),
        memory::owned(
            handled(jids[0], &AGENT, &key, &m1, Some(("second", &o1b))),
            &ReplyStart::Claimed { lease_ms: 60_000 },
        )
        .unwrap(),
        memory::owned(
            handled(jids[1], &AGENT, &key, &m2, None),
            &ReplyStart::Pending,
        )
        .unwrap(),
        memory::owned(
            handled(jids[1], &AGENT, &key, &m2, None),
            &ReplyStart::Pending,
        )
        .unwrap(),
    ];
    let results: Vec<Option<RecordedReply>> = write_kinds(store, Vec::new(), reqs, Vec::new())
        .await
        .handled
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let Some(RecordedReply::Claimed(entry)) = &results[0] else {
        panic!("{results:?}")
    };
    assert_eq!(entry.attempts, 1);
    assert_eq!(entry.outbound, o1);
    assert_eq!(entry.journal_id, Some(jids[0]));
    assert!(matches!(results[1], Some(RecordedReply::Queued(id)) if id == entry.id));
    assert!(results[2].is_none() && results[3].is_none());
    let memory = store
        .recent_messages(&AGENT, &key_of("discord:c1"), 10)
        .await
        .unwrap();
    assert_eq!(texts(&memory), ["one", "first", "two"]);
    assert_eq!(store.replies_for(jids[0]).await.unwrap(), vec![o1]);
    // Claimed for the caller: neither the worker nor `outbox_claim_one` takes it now.
    let now = now_ms();
    assert!(store.outbox_claim(10, now, 1_000).await.unwrap().is_empty());
    assert!(
        store
            .outbox_claim_one(entry.id, now, 1_000)
            .await
            .unwrap()
            .is_none()
    );
    // Once the lease is over, it is due again, as its second attempt.
    let later = store.outbox_claim(10, now + 120_000, 1_000).await.unwrap();
    assert_eq!(later.len(), 1);
    assert_eq!(later[0].attempts, 2);
    for jid in jids {
        assert_eq!(
            store.journal_get(jid).await.unwrap().unwrap().state,
            JournalState::Done
        );
    }
    let rooms = store.rooms(&AGENT).await.unwrap();
    assert_eq!(rooms.len(), 1);
    assert_eq!(rooms[0].last_active_ms, 2_000);
}

async fn batch_with_a_bad_request(ctx: Ctx) {
    let store = &ctx.store;
    let good = inbound(Platform::Discord, "c1", "good", "ann", "fine", 1_000);
    // Postgres refuses a NUL in text, which fails the whole statement; SQLite stores it, so
    // there the bad request names a journal entry that does not exist.
    let mut bad = inbound(Platform::Discord, "c1", "bad", "bob", "nul \0 here", 2_000);
    let JournalInsert::Inserted(good_id) = store.journal_insert(&AGENT, &good).await.unwrap()
    else {
        panic!("insert")
    };
    let bad_id = match store.backend() {
        Backend::Postgres => {
            bad.text = "fine in JSON".into();
            let JournalInsert::Inserted(id) = store.journal_insert(&AGENT, &bad).await.unwrap()
            else {
                panic!("insert")
            };
            bad.text = "nul \0 here".into();
            id
        }
        Backend::Sqlite => JournalId(999_999),
    };
    let key = good.room.key();
    let out = outbound_for(&good, "ok");
    let reqs = vec![
        memory::owned(
            handled(good_id, &AGENT, &key, &good, Some(("ok", &out))),
            &ReplyStart::Pending,
        )
        .unwrap(),
        memory::owned(
            handled(bad_id, &AGENT, &key, &bad, None),
            &ReplyStart::Pending,
        )
        .unwrap(),
    ];
    let results = write_kinds(store, Vec::new(), reqs, Vec::new())
        .await
        .handled;
    assert!(
        matches!(results[0], Ok(Some(RecordedReply::Queued(_)))),
        "{results:?}"
    );
    assert!(results[1].is_err(), "{results:?}");
    let memory = store
        .recent_messages(&AGENT, &key_of("discord:c1"), 10)
        .await
        .unwrap();
    assert_eq!(texts(&memory), ["fine", "ok"]);
    if store.backend() == Backend::Postgres {
        let entry = store.journal_get(bad_id).await.unwrap().unwrap();
        assert_eq!(entry.state, JournalState::Pending, "rolled back");
    }
}

/// A reply that left in band (the HTTP API) is written delivered by the transaction that
/// records it: nothing for the delivery worker, and a re-drive finds it delivered. Through
/// the store (the engine on SQLite, the writer on Postgres) and through a batch of either.
async fn a_reply_recorded_delivered(ctx: Ctx) {
    let store = &ctx.store;
    let row = |outbox: OutboxId| async move {
        let row: (String, i64, Option<i64>, String, Option<i64>) = with_pool!(store, pool => {
            sqlx::query_as(
                "SELECT state, CAST(attempts AS BIGINT), claimed_until_ms,
                        CAST(platform_ids AS TEXT), delivered_at_ms
                 FROM outbox WHERE id = $1",
            )
            .bind(outbox.0)
            .fetch_one(pool)
            .await
            .unwrap()
        });
        row
    };
    let in_band = |ids: &[&str]| ReplyStart::Delivered {
        platform_ids: ids.iter().map(|s| s.to_string()).collect(),
    };
    let (m1, m2) = (
        inbound(Platform::Web, "r1", "m1", "ann", "hi", 1_000),
        inbound(Platform::Web, "r2", "m2", "bob", "yo", 2_000),
    );
    let mut jids = Vec::new();
    for m in [&m1, &m2] {
        let JournalInsert::Inserted(jid) = store.journal_insert(&AGENT, m).await.unwrap() else {
            panic!("insert")
        };
        jids.push(jid);
    }
    let (k1, k2) = (m1.room.key(), m2.room.key());
    let (o1, o2) = (outbound_for(&m1, "hello"), outbound_for(&m2, "hey"));

    let recorded = store
        .record_handled_as(
            handled(jids[0], &AGENT, &k1, &m1, Some(("hello", &o1))),
            &in_band(&["reply:m1"]),
        )
        .await
        .unwrap();
    let Some(RecordedReply::Delivered(id1)) = recorded else {
        panic!("recorded delivered, got {recorded:?}")
    };
    let (state, attempts, claimed, ids, at) = row(id1).await;
    assert_eq!((state.as_str(), attempts, claimed), ("delivered", 1, None));
    assert_eq!(
        serde_json::from_str::<Vec<String>>(&ids).unwrap(),
        ["reply:m1"]
    );
    assert!(at.is_some(), "a delivery time");
    assert_eq!(
        texts(&store.recent_messages(&AGENT, &k1, 10).await.unwrap()),
        ["hi", "hello"]
    );
    assert_eq!(
        store.journal_get(jids[0]).await.unwrap().unwrap().state,
        JournalState::Done
    );

    // A re-drive of the same entry writes nothing and finds the reply, already delivered.
    let again = store
        .record_handled_as(
            handled(jids[0], &AGENT, &k1, &m1, Some(("hello", &o1))),
            &in_band(&["other"]),
        )
        .await
        .unwrap();
    assert!(
        matches!(again, Some(RecordedReply::Queued(id)) if id == id1),
        "{again:?}"
    );
    assert!(
        store
            .outbox_claim_one(id1, i64::MAX / 2, 60_000)
            .await
            .unwrap()
            .is_none()
    );

    // Through a batch of the backend's write path (the engine's, the writer's).
    let reqs = vec![
        memory::owned(
            handled(jids[1], &AGENT, &k2, &m2, Some(("hey", &o2))),
            &in_band(&["reply:m2", "2"]),
        )
        .unwrap(),
    ];
    let results = write_kinds(store, Vec::new(), reqs, Vec::new())
        .await
        .handled;
    let [Ok(Some(RecordedReply::Delivered(id2)))] = results[..] else {
        panic!("recorded delivered by the writer, got {results:?}")
    };
    let (state, attempts, claimed, ids, at) = row(id2).await;
    assert_eq!((state.as_str(), attempts, claimed), ("delivered", 1, None));
    assert_eq!(
        serde_json::from_str::<Vec<String>>(&ids).unwrap(),
        ["reply:m2", "2"]
    );
    assert!(at.is_some(), "a delivery time");
    // Neither is left for the delivery worker.
    assert!(
        store
            .outbox_claim(10, i64::MAX / 2, 60_000)
            .await
            .unwrap()
            .is_empty()
    );
}

/// What a reply reads of its room before the model, in one call: on the SQLite engine, on
/// the pool (Postgres), alike.
async fn room_context_reads(ctx: Ctx) {
    let store = &ctx.store;
    let quiet = inbound(Platform::Discord, "quiet", "q0", "ann", "-", 0)
        .room
        .key();
    let at = |ctx: RoomContext| (ctx.state, ctx.recent.map(|m| m.len()), ctx.summary);
    // A room nobody spoke in: the defaults, no messages, no summary read.
    let read = store
        .room_context(&AGENT, &quiet, RoomReads::WindowAndSummary { limit: 3 })
        .await
        .unwrap();
    assert_eq!(at(read), (RoomState::default(), Some(0), None));
    let read = store
        .room_context(&AGENT, &quiet, RoomReads::Controls)
        .await
        .unwrap();
    assert_eq!(at(read), (RoomState::default(), None, None));

    let msgs: Vec<Inbound> = (0..4)
        .map(|i| {
            inbound(
                Platform::Discord,
                "c1",
                &format!("m{i}"),
                "ann",
                &format!("t{i}"),
                i,
            )
        })
        .collect();
    let key = msgs[0].room.key();
    exchange(store, &AGENT, &msgs[0], Some("r0")).await;
    store
        .set_room_control(&AGENT, &key, RoomControl::Mute(Some(i64::MAX)), "ann")
        .await
        .unwrap();
    store
        .set_room_control(&AGENT, &key, RoomControl::Follow(true), "ann")
        .await
        .unwrap();
    store
        .put_room_summary(&AGENT, &key, "they said hi", 1, 5)
        .await
        .unwrap();
    let steered = RoomState {
        muted_until_ms: Some(i64::MAX),
        following: true,
        forgotten_at_ms: None,
    };
    // Two messages in a window of three: not full, so no summary, even when asked.
    let read = store
        .room_context(&AGENT, &key, RoomReads::WindowAndSummary { limit: 3 })
        .await
        .unwrap();
    assert_eq!(texts(read.recent.as_deref().unwrap()), ["t0", "r0"]);
    assert_eq!(at(read), (steered.clone(), Some(2), None));
    for m in &msgs[1..] {
        exchange(store, &AGENT, m, None).await;
    }
    // Full: the last three, oldest first, with the summary when asked for.
    let read = store
        .room_context(&AGENT, &key, RoomReads::WindowAndSummary { limit: 3 })
        .await
        .unwrap();
    assert_eq!(texts(read.recent.as_deref().unwrap()), ["t1", "t2", "t3"]);
    assert!(
        read.recent
            .as_ref()
            .unwrap()
            .iter()
            .all(|m| m.room == key && !m.from_agent)
    );
    assert_eq!(
        at(read),
        (steered.clone(), Some(3), Some(Some("they said hi".into())))
    );
    let read = store
        .room_context(&AGENT, &key, RoomReads::Window { limit: 3 })
        .await
        .unwrap();
    assert_eq!(at(read), (steered.clone(), Some(3), None));
    // Full, asked for, and the room has none.
    let other = RoomKey::new(Platform::Discord, RoomId::new("c2"));
    let read = store
        .room_context(&AGENT, &other, RoomReads::WindowAndSummary { limit: 0 })
        .await
        .unwrap();
    assert_eq!(at(read), (RoomState::default(), Some(0), Some(None)));
}

/// A writer batch holding every kind (a journal insert, a handled message, a delivered
/// mark): on Postgres one transaction. When one request fails it, each kind is written
/// apart and only that request fails.
async fn batch_of_every_kind(ctx: Ctx) {
    let store = &ctx.store;
    let delivered = |outbox: OutboxId, ids: &[&str]| writer::DeliveredReq {
        outbox_id: outbox.0,
        platform_ids_json: serde_json::to_string(ids).unwrap(),
        now: 9_000,
    };
    let platform_ids = |outbox: OutboxId| async move {
        let (state, ids): (String, String) = with_pool!(store, pool => {
            sqlx::query_as("SELECT state, CAST(platform_ids AS TEXT) FROM outbox WHERE id = $1")
                .bind(outbox.0)
                .fetch_one(pool)
                .await
                .unwrap()
        });
        (state, serde_json::from_str::<Vec<String>>(&ids).unwrap())
    };
    // Handled earlier, its reply now delivered; journaled earlier, now handled; new.
    let sent = inbound(Platform::Discord, "c1", "sent", "ann", "ping", 1_000);
    let (_, sent_reply) = exchange(store, &AGENT, &sent, Some("pong")).await;
    let sent_reply = sent_reply.unwrap();
    let asked = inbound(Platform::Discord, "c1", "asked", "bob", "how?", 2_000);
    let JournalInsert::Inserted(asked_id) = store.journal_insert(&AGENT, &asked).await.unwrap()
    else {
        panic!("insert")
    };
    let fresh = inbound(Platform::Discord, "c2", "fresh", "cy", "hello", 3_000);
    let key = asked.room.key();
    let answer = outbound_for(&asked, "like this");
    let writer::Together {
        journal: j,
        handled: h,
        delivered: d,
    } = write_kinds(
        store,
        vec![journal_req(&fresh)],
        vec![
            memory::owned(
                handled(asked_id, &AGENT, &key, &asked, Some(("like this", &answer))),
                &ReplyStart::Pending,
            )
            .unwrap(),
        ],
        // Two marks for one entry (a lease ran out mid-send): the later one's ids stay.
        vec![
            delivered(sent_reply, &["7"]),
            delivered(sent_reply, &["8", "9"]),
        ],
    )
    .await;
    let [Ok(JournalInsert::Inserted(fresh_id))] = j[..] else {
        panic!("{j:?}")
    };
    let [Ok(Some(RecordedReply::Queued(answer_id)))] = h[..] else {
        panic!("{h:?}")
    };
    assert!(matches!(d[..], [Ok(()), Ok(())]), "{d:?}");
    assert_eq!(
        platform_ids(sent_reply).await,
        (
            "delivered".to_string(),
            vec!["8".to_string(), "9".to_string()]
        )
    );
    assert_eq!(
        store.journal_get(asked_id).await.unwrap().unwrap().state,
        JournalState::Done
    );
    assert_eq!(
        store.journal_get(fresh_id).await.unwrap().unwrap().state,
        JournalState::Pending
    );
    let memory = store.recent_messages(&AGENT, &key, 10).await.unwrap();
    assert_eq!(texts(&memory), ["ping", "pong", "how?", "like this"]);

    // A batch with a bad handled message: Postgres refuses a NUL in text, which fails the
    // whole transaction; SQLite stores it, so there the bad request names a journal entry
    // that does not exist. The other kinds are written all the same.
    let mut bad = inbound(Platform::Discord, "c2", "bad", "dee", "fine in JSON", 4_000);
    let bad_id = match store.backend() {
        Backend::Postgres => {
            let JournalInsert::Inserted(id) = store.journal_insert(&AGENT, &bad).await.unwrap()
            else {
                panic!("insert")
            };
            id
        }
        Backend::Sqlite => JournalId(999_999),
    };
    bad.text = "nul \0 here".into();
    let bad_key = bad.room.key();
    let later = inbound(Platform::Discord, "c3", "later", "eve", "hey", 5_000);
    let writer::Together {
        journal: j,
        handled: h,
        delivered: d,
    } = write_kinds(
        store,
        vec![journal_req(&later), journal_req(&fresh)],
        vec![
            memory::owned(
                handled(bad_id, &AGENT, &bad_key, &bad, None),
                &ReplyStart::Pending,
            )
            .unwrap(),
        ],
        vec![delivered(answer_id, &["10"])],
    )
    .await;
    assert!(
        matches!(
            j[..],
            [
                Ok(JournalInsert::Inserted(_)),
                Ok(JournalInsert::Duplicate(id, JournalState::Pending))
            ] if id == fresh_id
        ),
        "{j:?}"
    );
    assert!(matches!(h[..], [Err(_)]), "{h:?}");
    assert!(matches!(d[..], [Ok(())]), "{d:?}");
    assert_eq!(
        platform_ids(answer_id).await,
        ("delivered".to_string(), vec!["10".to_string()])
    );
    if store.backend() == Backend::Postgres {
        let entry = store.journal_get(bad_id).await.unwrap().unwrap();
        assert_eq!(entry.state, JournalState::Pending, "rolled back");
    }
}

async fn connector_state_is_scoped_and_overwritten(ctx: Ctx) {
    let store = ctx.store;
    assert_eq!(
        store
            .connector_state_get(&AgentId::new("a"), Platform::Telegram, "offset")
            .await
            .unwrap(),
        None
    );
    store
        .connector_state_put(&AgentId::new("a"), Platform::Telegram, "offset", "10")
        .await
        .unwrap();
    store
        .connector_state_put(&AgentId::new("a"), Platform::Telegram, "offset", "11")
        .await
        .unwrap();
    store
        .connector_state_put(&AgentId::new("b"), Platform::Telegram, "offset", "99")
        .await
        .unwrap();
    store
        .connector_state_put(&AgentId::new("a"), Platform::Discord, "offset", "7")
        .await
        .unwrap();
    let get = |agent: &'static str, platform| {
        let store = store.clone();
        async move {
            store
                .connector_state_get(&AgentId::new(agent), platform, "offset")
                .await
                .unwrap()
        }
    };
    assert_eq!(get("a", Platform::Telegram).await.as_deref(), Some("11"));
    assert_eq!(get("b", Platform::Telegram).await.as_deref(), Some("99"));
    assert_eq!(get("a", Platform::Discord).await.as_deref(), Some("7"));
    // It survives a reconnect.
    let again = Store::connect(&ctx.url).await.unwrap();
    assert_eq!(
        again
            .connector_state_get(&AgentId::new("a"), Platform::Telegram, "offset")
            .await
            .unwrap()
            .as_deref(),
        Some("11")
    );
}

// ---- the journal's dedupe key, attempts and give-ups (issue 12: #2, #7, #11) ----

async fn dedupe_is_per_room_and_web_caller(ctx: Ctx) {
    let store = ctx.store;
    // #7: one `messageId` in two Web rooms, and from two callers of one Web room: three
    // messages. The same caller repeating it in its room is the duplicate.
    let a = inbound(Platform::Web, "room-a", "m-1", "ann", "from a", 1);
    let b = inbound(Platform::Web, "room-b", "m-1", "bob", "from b", 2);
    let a_by_bob = inbound(Platform::Web, "room-a", "m-1", "bob", "bob in a", 3);
    let mut ids = Vec::new();
    for m in [&a, &b, &a_by_bob] {
        let JournalInsert::Inserted(id) = store.journal_insert(&AGENT, m).await.unwrap() else {
            panic!("{} in {} must be a new message", m.id, m.room.key());
        };
        ids.push(id);
    }
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 3);
    assert_eq!(
        store.journal_insert(&AGENT, &a).await.unwrap(),
        JournalInsert::Duplicate(ids[0], JournalState::Pending)
    );
    for (m, id) in [(&a, ids[0]), (&b, ids[1]), (&a_by_bob, ids[2])] {
        let entry = store
            .journal_lookup(&AGENT, m)
            .await
            .unwrap()
            .expect("entry");
        assert_eq!(entry.id, id);
        assert_eq!(entry.inbound.text, m.text);
        assert!(same_dedupe_key(&entry, &AGENT, m));
    }
    let entry_a = store.journal_get(ids[0]).await.unwrap().unwrap();
    assert!(!same_dedupe_key(&entry_a, &AGENT, &b));
    assert!(!same_dedupe_key(&entry_a, &AGENT, &a_by_bob));
    assert!(!same_dedupe_key(&entry_a, &AgentId::new("other-agent"), &a));

    // On a platform the platform assigns ids and authors: the room scopes, the author does
    // not (a redelivered event is the same message whoever it names).
    let d = inbound(Platform::Discord, "c1", "42", "ann", "hi", 4);
    let d_other_room = inbound(Platform::Discord, "c2", "42", "ann", "hi", 4);
    let d_other_author = inbound(Platform::Discord, "c1", "42", "zed", "hi", 4);
    let JournalInsert::Inserted(d_id) = store.journal_insert(&AGENT, &d).await.unwrap() else {
        panic!("insert");
    };
    assert!(matches!(
        store.journal_insert(&AGENT, &d_other_room).await.unwrap(),
        JournalInsert::Inserted(other) if other != d_id
    ));
    assert_eq!(
        store.journal_insert(&AGENT, &d_other_author).await.unwrap(),
        JournalInsert::Duplicate(d_id, JournalState::Pending)
    );
}

async fn batch_dedupe_is_per_room(ctx: Ctx) {
    // The writer's multi-row insert and its duplicate lookup use the whole key too.
    let reqs: Vec<_> = [
        inbound(Platform::Web, "room-a", "m-1", "ann", "a", 1),
        inbound(Platform::Web, "room-b", "m-1", "ann", "b", 1),
        inbound(Platform::Web, "room-a", "m-1", "ann", "a again", 1),
        inbound(Platform::Web, "room-a", "m-1", "bob", "bob", 1),
    ]
    .iter()
    .map(journal_req)
    .collect();
    let results: Vec<JournalInsert> = write_kinds(&ctx.store, reqs, Vec::new(), Vec::new())
        .await
        .journal
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let [
        JournalInsert::Inserted(a),
        JournalInsert::Inserted(b),
        again,
        JournalInsert::Inserted(bob),
    ] = results[..]
    else {
        panic!("{results:?}")
    };
    assert_eq!(again, JournalInsert::Duplicate(a, JournalState::Pending));
    assert_eq!([a, b, bob].iter().collect::<HashSet<_>>().len(), 3);
}

async fn attempts_are_counted_before_handling(ctx: Ctx) {
    let store = ctx.store;
    let msg = inbound(Platform::Telegram, "5", "5:1", "ann", "poison", 1);
    let JournalInsert::Inserted(id) = store.journal_insert(&AGENT, &msg).await.unwrap() else {
        panic!("insert");
    };
    // #2: the insert counted the first handling; a crash in it leaves the entry pending
    // with that attempt counted, and each drive again counts before it starts.
    assert_eq!(store.journal_get(id).await.unwrap().unwrap().attempts, 1);
    assert_eq!(
        store.journal_begin(id, 3).await.unwrap(),
        Attempt::Started { attempts: 2 }
    );
    assert_eq!(
        store.journal_begin(id, 3).await.unwrap(),
        Attempt::Started { attempts: 3 }
    );
    // At the limit it is not counted again, and is reported exhausted while still pending
    // (the last attempt never finished).
    for _ in 0..2 {
        assert_eq!(
            store.journal_begin(id, 3).await.unwrap(),
            Attempt::Exhausted {
                attempts: 3,
                state: JournalState::Pending,
                last_error: None
            }
        );
    }
    // A failure does not count again: the attempt was counted when it began.
    store.journal_fail(id, "model said no").await.unwrap();
    assert_eq!(
        store.journal_begin(id, 3).await.unwrap(),
        Attempt::Exhausted {
            attempts: 3,
            state: JournalState::Failed,
            last_error: Some("model said no".into())
        }
    );
    // Raising the limit lets a failed entry run again.
    assert_eq!(
        store.journal_begin(id, 4).await.unwrap(),
        Attempt::Started { attempts: 4 }
    );

    // A handled entry is never counted: its replies stand.
    let other = inbound(Platform::Telegram, "5", "5:2", "ann", "fine", 2);
    let (done, _) = exchange(&store, &AGENT, &other, Some("ok")).await;
    assert_eq!(store.journal_begin(done, 3).await.unwrap(), Attempt::Done);
    assert_eq!(store.journal_get(done).await.unwrap().unwrap().attempts, 1);

    // Two replicas beginning the last attempt at once: one gets it.
    let racy = inbound(Platform::Telegram, "5", "5:3", "ann", "race", 3);
    let JournalInsert::Inserted(racy) = store.journal_insert(&AGENT, &racy).await.unwrap() else {
        panic!("insert");
    };
    let begins = (0..4).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { store.journal_begin(racy, 2).await.unwrap() })
    });
    let started = futures::future::join_all(begins)
        .await
        .into_iter()
        .filter(|r| matches!(r, Ok(Attempt::Started { .. })))
        .count();
    assert_eq!(started, 1);
    assert!(matches!(
        store.journal_begin(JournalId(racy.0 + 1000), 2).await,
        Err(StorageError::Database(sqlx::Error::RowNotFound))
    ));
}

async fn give_up_apologises_once_per_room(ctx: Ctx) {
    let store = ctx.store;
    let m = |room: &str, id: &str| inbound(Platform::Telegram, room, id, "ann", "poison", 1);
    let sorry = |msg: &Inbound| Outbound {
        key: format!("sorry:{}", msg.id),
        room: msg.room.clone(),
        text: "Sorry.".into(),
        reply_to: Some(msg.id.clone()),
        replaces: Vec::new(),
    };
    let msgs = [m("7", "7:1"), m("7", "7:2"), m("8", "8:1")];
    let mut ids = Vec::new();
    for msg in &msgs {
        let JournalInsert::Inserted(id) = store.journal_insert(&AGENT, msg).await.unwrap() else {
            panic!("insert");
        };
        ids.push(id);
    }
    let hour = 3_600_000;
    let first = store
        .journal_give_up(
            ids[0],
            "gave up after 2 attempts",
            Some(&sorry(&msgs[0])),
            hour,
        )
        .await
        .unwrap();
    assert!(first.first);
    let apology = first.apology.expect("the room's first give-up apologises");
    // Giving the same entry up again (another replica, a restart) changes nothing.
    let again = store
        .journal_give_up(ids[0], "gave up", Some(&sorry(&msgs[0])), hour)
        .await
        .unwrap();
    assert_eq!(
        again,
        GaveUp {
            first: false,
            apology: None
        }
    );
    // A second poison message of the same room within the quiet time: failed, no apology.
    let second = store
        .journal_give_up(ids[1], "gave up", Some(&sorry(&msgs[1])), hour)
        .await
        .unwrap();
    assert_eq!(
        second,
        GaveUp {
            first: true,
            apology: None
        }
    );
    // Another room gets its own.
    let other_room = store
        .journal_give_up(ids[2], "gave up", Some(&sorry(&msgs[2])), hour)
        .await
        .unwrap();
    assert!(other_room.apology.is_some());

    for id in &ids {
        let entry = store.journal_get(*id).await.unwrap().unwrap();
        assert_eq!(entry.state, JournalState::Failed);
        assert!(entry.last_error.unwrap().starts_with("gave up"));
    }
    // Failed for good: not among what a start drives again once out of attempts, and the
    // apology is not the message's reply (a duplicate must not return it).
    assert!(store.replies_for(ids[0]).await.unwrap().is_empty());
    let claimed = store.outbox_claim(10, now_ms(), 1_000).await.unwrap();
    assert_eq!(claimed.len(), 2, "{claimed:?}");
    assert_eq!(claimed[0].id, apology);
    assert_eq!(claimed[0].outbound, sorry(&msgs[0]));
    assert_eq!(claimed[0].journal_id, None);

    // A done entry is never given up.
    let fine = m("9", "9:1");
    let (done, _) = exchange(&store, &AGENT, &fine, Some("ok")).await;
    let nothing = store
        .journal_give_up(done, "gave up", Some(&sorry(&fine)), hour)
        .await
        .unwrap();
    assert!(!nothing.first && nothing.apology.is_none());
    assert_eq!(
        store.journal_get(done).await.unwrap().unwrap().state,
        JournalState::Done
    );

    // After the quiet time the room may be told again (quiet_ms 0: at once).
    let later = m("7", "7:3");
    let JournalInsert::Inserted(later_id) = store.journal_insert(&AGENT, &later).await.unwrap()
    else {
        panic!("insert");
    };
    let told = store
        .journal_give_up(later_id, "gave up", Some(&sorry(&later)), 0)
        .await
        .unwrap();
    assert!(told.apology.is_some());
}

async fn installation_id_is_stable_and_per_database(ctx: Ctx) {
    // #11: the id the NATS dedupe ids carry. Stable across connections to one database…
    let id = ctx.store.installation_id().await.unwrap();
    assert_eq!(id.len(), 32, "{id}");
    assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    let again = Store::connect(&ctx.url).await.unwrap();
    assert_eq!(again.installation_id().await.unwrap(), id);
    again.close().await;
    // …and not shared with a fresh one, whose journal ids start at 1 again.
    let dir = tempfile::tempdir().unwrap();
    let fresh = Store::connect(&format!(
        "sqlite://{}",
        dir.path().join("fresh.db").display()
    ))
    .await
    .unwrap();
    assert_ne!(fresh.installation_id().await.unwrap(), id);
}

#[tokio::test]
async fn sqlite_migration_0005_keeps_existing_rows_and_references() {
    // A database made by the migrations before 0005, with a handled message (memory and an
    // outbox row that reference its journal row) and a pending one.
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("old.db").display());
    {
        let options = sqlx::sqlite::SqliteConnectOptions::from_str(&url)
            .unwrap()
            .create_if_missing(true)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .unwrap();
        let mut before = sqlx::migrate!("../migrations/sqlite");
        before.migrations = before
            .migrations
            .iter()
            .filter(|m| m.version < 5)
            .cloned()
            .collect::<Vec<_>>()
            .into();
        before.run(&pool).await.unwrap();
        let web = inbound(Platform::Web, "r1", "m-1", "ann", "hello", 1);
        let tg = inbound(Platform::Telegram, "5", "5:1", "bob", "hi", 2);
        for (id, msg, state) in [(1, &web, "done"), (2, &tg, "pending")] {
            sqlx::query(
                "INSERT INTO journal (id, agent_id, platform, platform_message_id, room, inbound,
                     state, attempts, created_at_ms, updated_at_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, 0, 1, 1)",
            )
            .bind(id)
            .bind(&*AGENT)
            .bind(msg.platform().as_str())
            .bind(msg.id.as_str())
            .bind(msg.room.key().to_string())
            .bind(serde_json::to_string(msg).unwrap())
            .bind(state)
            .execute(&pool)
            .await
            .unwrap();
        }
        sqlx::query(
            "INSERT INTO messages (agent_id, room, journal_id, author_id, author_name, text,
                 from_agent, created_at_ms) VALUES ($1, 'web:r1', 1, 'ann', 'ANN', 'hello', 0, 1)",
        )
        .bind(&*AGENT)
        .execute(&pool)
        .await
        .unwrap();
        let reply = outbound_for(&web, "hi ann");
        sqlx::query(
            "INSERT INTO outbox (agent_id, journal_id, outbound, created_at_ms, updated_at_ms)
             VALUES ($1, 1, $2, 1, 1)",
        )
        .bind(&*AGENT)
        .bind(serde_json::to_string(&reply).unwrap())
        .execute(&pool)
        .await
        .unwrap();
        pool.close().await;
    }

    let store = Store::connect(&url).await.unwrap();
    // The references survived the rebuild (a DROP with foreign keys on would have nulled them).
    let refs: Vec<(Option<i64>,)> = with_pool!(store, pool => {
        sqlx::query_as("SELECT journal_id FROM messages UNION ALL SELECT journal_id FROM outbox")
            .fetch_all(pool).await.unwrap()
    });
    assert_eq!(refs, [(Some(1),), (Some(1),)]);
    let foreign_keys: i64 = with_pool!(store, pool => {
        sqlx::query_scalar("PRAGMA foreign_keys").fetch_one(pool).await.unwrap()
    });
    assert_eq!(
        foreign_keys, 1,
        "the migration must turn foreign keys back on"
    );
    let web = inbound(Platform::Web, "r1", "m-1", "ann", "hello", 1);
    assert_eq!(
        store.journal_insert(&AGENT, &web).await.unwrap(),
        JournalInsert::Duplicate(JournalId(1), JournalState::Done),
        "the Web row got its caller from its inbound"
    );
    assert_eq!(store.replies_for(JournalId(1)).await.unwrap().len(), 1);
    let tg = inbound(Platform::Telegram, "5", "5:1", "bob", "hi", 2);
    assert_eq!(
        store.journal_insert(&AGENT, &tg).await.unwrap(),
        JournalInsert::Duplicate(JournalId(2), JournalState::Pending)
    );
    // New rows continue after the old ids, and the indexes are there.
    let fresh = inbound(Platform::Web, "r2", "m-1", "ann", "new", 3);
    assert_eq!(
        store.journal_insert(&AGENT, &fresh).await.unwrap(),
        JournalInsert::Inserted(JournalId(3))
    );
    let indexes: Vec<(String,)> = with_pool!(store, pool => {
        sqlx::query_as("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'journal' ORDER BY name")
            .fetch_all(pool).await.unwrap()
    });
    // `journal_unfinished` replaced `journal_by_state` (0011).
    assert!(
        indexes.iter().any(|(n,)| n == "journal_unfinished")
            && !indexes.iter().any(|(n,)| n == "journal_by_state"),
        "{indexes:?}"
    );
    assert_eq!(store.installation_id().await.unwrap().len(), 32);
}

/// `users`: a newer name replaces the old one, a late message does not roll it back, and a
/// sighting that changes nothing within a minute writes nothing (`upsert_user_conflict!`).
async fn a_user_name_follows_the_newest_sighting(ctx: Ctx) {
    let store = ctx.store;
    let said = |id: &str, name: &str, at: i64| {
        let mut msg = inbound(Platform::Telegram, "chat", id, "u1", "hi", at);
        msg.author = UserRef::person("u1", name);
        msg
    };
    let seen = || async {
        let row: (String, i64) = with_pool!(store, pool => {
            sqlx::query_as(
                "SELECT name, last_seen_ms FROM users WHERE platform = 'telegram' AND user_id = 'u1'",
            )
            .fetch_one(pool)
            .await
            .unwrap()
        });
        row
    };
    let steps: [(&str, &str, i64, (&str, i64)); 5] = [
        ("1", "Ann", 1_000, ("Ann", 1_000)),
        ("2", "Ann", 2_000, ("Ann", 1_000)), // nothing changed within a minute
        ("3", "Bea", 3_000, ("Bea", 3_000)), // a new name
        ("4", "Ann", 2_500, ("Bea", 3_000)), // a late message: no roll back
        ("5", "Bea", 63_000, ("Bea", 63_000)), // a minute on: the time moves
    ];
    for (id, name, at, (want_name, want_at)) in steps {
        exchange(&store, &AGENT, &said(id, name, at), None).await;
        assert_eq!(
            seen().await,
            (want_name.to_string(), want_at),
            "after message {id}"
        );
    }
}

/// `rooms`: a message writes its room's row only when the room is new, its name changed,
/// or its time is a minute old (`upsert_room_conflict!`); the listing still shows each
/// room's newest activity, and orders by it (`Store::rooms`). A late message rolls
/// neither back, and a message without a name keeps the room's.
async fn a_room_row_moves_once_a_minute_and_the_listing_stays_exact(ctx: Ctx) {
    let store = ctx.store;
    let said = |room: &str, id: &str, name: Option<&str>, at: i64| {
        let mut msg = inbound(Platform::Telegram, room, id, "u1", "hi", at);
        msg.room.name = name.map(str::to_string);
        msg
    };
    let row = |room: &'static str| {
        let store = &store;
        async move {
            let row: (Option<String>, i64) = with_pool!(store, pool => {
                sqlx::query_as("SELECT name, last_active_ms FROM rooms WHERE room = $1")
                    .bind(format!("telegram:{room}"))
                    .fetch_one(pool)
                    .await
                    .unwrap()
            });
            row
        }
    };
    let listed = || async {
        let rooms = store.rooms(&AGENT).await.unwrap();
        rooms
            .into_iter()
            .map(|r| (r.room.to_string(), r.last_active_ms))
            .collect::<Vec<_>>()
    };
    let name = |n: &str| Some(n.to_string());
    /// A message, then what the room's row and the listing say after it.
    struct Step {
        id: &'static str,
        name: Option<&'static str>,
        at: i64,
        replied: bool,
        row: (Option<&'static str>, i64),
        listed: i64,
    }
    let step = |id, name, at, replied, row, listed| Step {
        id,
        name,
        at,
        replied,
        row,
        listed,
    };
    let steps = [
        step("1", Some("#a"), 1_000, true, (Some("#a"), 1_001), 1_001), // new: written
        step("2", Some("#a"), 2_000, false, (Some("#a"), 1_001), 2_000), // nothing new: listed only
        step("3", None, 2_500, true, (Some("#a"), 1_001), 2_501), // no name: the room keeps its own
        step("4", Some("#b"), 3_000, false, (Some("#b"), 3_000), 3_000), // renamed: written
        step("5", Some("#b"), 2_800, true, (Some("#b"), 3_000), 3_000), // late: no roll back
        step("6", Some("#b"), 63_000, false, (Some("#b"), 63_000), 63_000), // a minute on
    ];
    for s in steps {
        let msg = said("a", s.id, s.name, s.at);
        exchange(&store, &AGENT, &msg, s.replied.then_some("ok")).await;
        let (want_name, want_at) = s.row;
        assert_eq!(
            row("a").await,
            (want_name.map(str::to_string), want_at),
            "the row after message {}",
            s.id
        );
        assert_eq!(
            listed().await,
            [("telegram:a".to_string(), s.listed)],
            "the listing after message {}",
            s.id
        );
    }
    // Room b is written at 70,000; room a's newer message at 80,000 leaves a's row at
    // 63,000, and the listing still puts a first.
    exchange(&store, &AGENT, &said("b", "7", Some("#b2"), 70_000), None).await;
    exchange(&store, &AGENT, &said("a", "8", Some("#b"), 80_000), None).await;
    assert_eq!(row("a").await, (name("#b"), 63_000));
    assert_eq!(
        listed().await,
        [
            ("telegram:a".to_string(), 80_000),
            ("telegram:b".to_string(), 70_000)
        ]
    );
}
