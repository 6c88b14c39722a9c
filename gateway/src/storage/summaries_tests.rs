//! Storage of room summaries and user facts, each body run against SQLite (a fresh file)
//! and Postgres (a fresh database, when `TROUPE_TEST_DATABASE_URL` is set; with `CI=true`
//! and no URL the Postgres variants fail rather than pass silently).

#![allow(clippy::disallowed_methods)] // tests pick their database from the environment

use super::*;
use troupe_connectors::{MessageId, Platform, RoomId, RoomRef, UserId, UserRef};

/// The agent of these bodies, and of `rooms_tests`' (which says its messages with [`say`]).
pub(super) static AGENT: std::sync::LazyLock<AgentId> =
    std::sync::LazyLock::new(|| AgentId::new("rosa"));

/// The room most bodies write in.
static R1: std::sync::LazyLock<RoomKey> = std::sync::LazyLock::new(|| key_of("web:r1"));

/// A room key, as stored.
fn key_of(s: &str) -> RoomKey {
    s.parse().expect("a room key")
}

use super::test_support::{Kind, on_both_backends, run_with_store as run};

on_both_backends!(
    a_summary_only_moves_forward,
    room_messages_after_a_position,
    a_users_messages_across_rooms_of_one_platform,
    facts_are_deduplicated_capped_and_move_the_position,
    racing_extractions_store_one,
    a_rooms_facts_are_about_its_users,
    a_fact_is_deleted_by_its_id,
    a_told_fact_is_its_speakers_only,
);

/// Journals and records one message of `author` in `room` (with a reply from the agent
/// when `reply`); returns the id of the inbound message in room memory.
pub(super) async fn say(
    store: &Store,
    platform: Platform,
    room: &str,
    author: &str,
    text: &str,
    reply: bool,
) -> i64 {
    let id = uuid::Uuid::new_v4().to_string();
    let msg = Inbound {
        id: MessageId::new(id.clone()),
        room: RoomRef::new(platform, RoomId::new(room)),
        author: UserRef {
            id: UserId::new(author),
            name: format!("{author} name"),
            is_bot: false,
            username: None,
        },
        text: text.to_string(),
        attachments: Vec::new(),
        reply_to: None,
        is_direct: true,
        mentions_self: false,
        sent_at_ms: 1_000,
        client: None,
        revises: None,
    };
    let JournalInsert::Inserted(jid) = store.journal_insert(&AGENT, &msg).await.unwrap() else {
        panic!("{id} was already journaled")
    };
    let key = msg.room.key();
    let reply = reply.then(|| {
        (
            NewMemory {
                author_id: AGENT.as_str(),
                author_name: "Rosa",
                text: "noted",
                from_agent: true,
                created_at_ms: 1_001,
            },
            Outbound {
                key: format!("reply:{id}"),
                room: msg.room.clone(),
                text: "noted".into(),
                reply_to: Some(msg.id.clone()),
                replaces: Vec::new(),
            },
        )
    });
    store
        .record_handled(HandledMessage {
            journal_id: jid,
            agent_id: &AGENT,
            room: &key,
            room_name: None,
            inbound: NewMemory {
                author_id: author,
                author_name: &msg.author.name,
                text,
                from_agent: false,
                created_at_ms: 1_000,
            },
            reply,
        })
        .await
        .unwrap();
    let recent = store.recent_messages(&AGENT, &key, 2).await.unwrap();
    recent
        .iter()
        .find(|m| !m.from_agent && m.text == text)
        .map(|m| m.id)
        .expect("the message is in room memory")
}

fn who(platform: Platform, user_id: &UserId) -> FactSubject<'_> {
    FactSubject {
        agent_id: &AGENT,
        platform,
        user_id,
    }
}

fn facts<'a>(facts: &'a [String], through: i64, keep: i64, now_ms: i64) -> NewFacts<'a> {
    NewFacts {
        facts,
        room: &R1,
        through_message_id: through,
        keep,
        now_ms,
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// R1's summary, if one was written.
async fn summary_of_r1(store: &Store) -> Option<ConversationSummary> {
    store.room_summary(&AGENT, &R1).await.unwrap()
}

/// Offers R1 a summary through message `through`, written at `at_ms`; whether it was taken.
async fn summarize_r1(store: &Store, summary: &str, through: i64, at_ms: i64) -> bool {
    store
        .put_room_summary(&AGENT, &R1, summary, through, at_ms)
        .await
        .unwrap()
}

async fn a_summary_only_moves_forward(store: Store) {
    assert_eq!(summary_of_r1(&store).await, None);
    assert!(summarize_r1(&store, "first", 5, 10).await);
    let got = summary_of_r1(&store).await.unwrap();
    assert_eq!(
        got,
        ConversationSummary {
            summary: "first".into(),
            through_message_id: 5,
            updated_at_ms: 10
        }
    );
    // Behind or level: refused, nothing changes.
    for through in [3, 5] {
        assert!(!summarize_r1(&store, "stale", through, 20).await);
    }
    assert_eq!(summary_of_r1(&store).await.unwrap(), got);
    assert!(summarize_r1(&store, "second", 9, 30).await);
    let got = summary_of_r1(&store).await.unwrap();
    assert_eq!(
        (got.summary.as_str(), got.through_message_id),
        ("second", 9)
    );
    // Per room and per agent.
    assert_eq!(
        store.room_summary(&AGENT, &key_of("web:r2")).await.unwrap(),
        None
    );
    assert_eq!(
        store
            .room_summary(&AgentId::new("other"), &R1)
            .await
            .unwrap(),
        None
    );
}

async fn room_messages_after_a_position(store: Store) {
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(say(&store, Platform::Web, "r1", "sam", &format!("m{i}"), true).await);
        say(
            &store,
            Platform::Web,
            "r2",
            "sam",
            &format!("other {i}"),
            false,
        )
        .await;
    }
    // Five exchanges: ten messages in r1.
    assert_eq!(
        store
            .count_room_messages_after(&AGENT, &key_of("web:r1"), 0)
            .await
            .unwrap(),
        10
    );
    assert_eq!(
        store
            .count_room_messages_after(&AGENT, &key_of("web:r1"), ids[2])
            .await
            .unwrap(),
        5
    );
    let page = store
        .room_messages_after(&AGENT, &key_of("web:r1"), ids[1], 3)
        .await
        .unwrap();
    let texts: Vec<&str> = page.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["noted", "m2", "noted"]);
    assert!(page.windows(2).all(|w| w[0].id < w[1].id));
    assert!(
        store
            .room_messages_after(&AGENT, &key_of("web:r1"), ids[4] + 1, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn a_users_messages_across_rooms_of_one_platform(store: Store) {
    let first = say(&store, Platform::Telegram, "a", "42", "t1", true).await;
    say(&store, Platform::Telegram, "b", "42", "t2", true).await;
    say(&store, Platform::Discord, "a", "42", "d1", true).await;
    say(&store, Platform::Telegram, "a", "43", "someone else", true).await;
    say(&store, Platform::Telegram, "b", "42", "t3", false).await;
    let u42 = UserId::new("42");
    let tg = who(Platform::Telegram, &u42);
    // Their own messages only (not the replies), in any Telegram room, not Discord's.
    assert_eq!(store.count_user_messages_after(tg, 0).await.unwrap(), 3);
    assert_eq!(store.count_user_messages_after(tg, first).await.unwrap(), 2);
    let texts = |ms: Vec<MemoryMessage>| ms.into_iter().map(|m| m.text).collect::<Vec<_>>();
    assert_eq!(
        texts(store.user_messages_after(tg, 0, 10).await.unwrap()),
        ["t1", "t2", "t3"]
    );
    // The newest ones when there are more than asked for, still oldest first.
    assert_eq!(
        texts(store.user_messages_after(tg, 0, 2).await.unwrap()),
        ["t2", "t3"]
    );
    assert_eq!(
        store
            .count_user_messages_after(who(Platform::Discord, &u42), 0)
            .await
            .unwrap(),
        1
    );
}

async fn facts_are_deduplicated_capped_and_move_the_position(store: Store) {
    let sam_id = UserId::new("sam");
    let sam = who(Platform::Web, &sam_id);
    assert_eq!(store.fact_progress(sam).await.unwrap(), 0);
    let first = strings(&["keeps bees", "lives in Oslo"]);
    assert!(
        store
            .record_user_facts(sam, facts(&first, 10, 50, 100))
            .await
            .unwrap()
    );
    assert_eq!(store.fact_progress(sam).await.unwrap(), 10);
    assert_eq!(
        store.user_facts(sam, 50).await.unwrap(),
        ["lives in Oslo", "keeps bees"]
    );
    // The same batch again (a position that does not advance) writes nothing.
    let again = strings(&["would be new"]);
    assert!(
        !store
            .record_user_facts(sam, facts(&again, 10, 50, 150))
            .await
            .unwrap()
    );
    assert_eq!(store.user_facts(sam, 50).await.unwrap().len(), 2);
    // A known fact is not stored twice; with a cap of two, the oldest goes.
    let second = strings(&["keeps bees", "is a nurse"]);
    assert!(
        store
            .record_user_facts(sam, facts(&second, 12, 2, 200))
            .await
            .unwrap()
    );
    assert_eq!(
        store.user_facts(sam, 50).await.unwrap(),
        ["is a nurse", "lives in Oslo"]
    );
    assert_eq!(store.user_facts(sam, 1).await.unwrap(), ["is a nurse"]);
    // An empty extraction still moves the position.
    assert!(
        store
            .record_user_facts(sam, facts(&[], 20, 2, 300))
            .await
            .unwrap()
    );
    assert_eq!(store.fact_progress(sam).await.unwrap(), 20);
    // Scoped by platform and by agent.
    assert!(
        store
            .user_facts(who(Platform::Telegram, &sam_id), 50)
            .await
            .unwrap()
            .is_empty()
    );
    let other_agent = FactSubject {
        agent_id: &AgentId::new("other"),
        ..sam
    };
    assert!(store.user_facts(other_agent, 50).await.unwrap().is_empty());
    assert_eq!(store.fact_progress(other_agent).await.unwrap(), 0);
}

async fn racing_extractions_store_one(store: Store) {
    let sam_id = UserId::new("sam");
    let sam = who(Platform::Web, &sam_id);
    let a = strings(&["fact from a"]);
    let b = strings(&["fact from b"]);
    let (ra, rb) = tokio::join!(
        store.record_user_facts(sam, facts(&a, 7, 50, 100)),
        store.record_user_facts(sam, facts(&b, 7, 50, 100)),
    );
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert!(
        ra ^ rb,
        "exactly one extraction of the batch is stored: {ra} {rb}"
    );
    assert_eq!(store.user_facts(sam, 50).await.unwrap().len(), 1);
}

async fn a_rooms_facts_are_about_its_users(store: Store) {
    say(&store, Platform::Web, "r1", "sam", "hi", true).await;
    say(&store, Platform::Web, "r2", "ann", "hello", true).await;
    say(&store, Platform::Web, "r2", "sam", "me too", true).await;
    let (sam, ann) = (strings(&["sam keeps bees"]), strings(&["ann is a pilot"]));
    for (user, learned) in [("sam", &sam), ("ann", &ann)] {
        let new = NewFacts {
            room: &key_of("web:r2"),
            ..facts(learned, 1, 50, 100)
        };
        assert!(
            store
                .record_user_facts(who(Platform::Web, &UserId::new(user)), new)
                .await
                .unwrap()
        );
    }
    // r1 only heard from sam: only sam's facts, learned in r2, with sam's name.
    let r1 = store
        .room_user_facts(&AGENT, &key_of("web:r1"))
        .await
        .unwrap();
    assert_eq!(
        r1,
        [RoomUserFact {
            user_id: "sam".into(),
            user_name: "sam name".into(),
            fact: "sam keeps bees".into(),
            room: key_of("web:r2"),
            created_at_ms: 100,
        }]
    );
    let r2 = store
        .room_user_facts(&AGENT, &key_of("web:r2"))
        .await
        .unwrap();
    let users: Vec<&str> = r2.iter().map(|f| f.user_id.as_str()).collect();
    assert_eq!(users, ["ann", "sam"]);
    assert!(
        store
            .room_user_facts(&AGENT, &key_of("web:empty"))
            .await
            .unwrap()
            .is_empty()
    );
}

/// The console's facts by id (storage/fact_ids.rs): the same facts as the memories route,
/// and deleting one removes only it, only for its agent.
async fn a_fact_is_deleted_by_its_id(store: Store) {
    say(&store, Platform::Web, "r1", "sam", "hi", true).await;
    let learned = strings(&["sam keeps bees", "sam flies kites"]);
    assert!(
        store
            .record_user_facts(
                who(Platform::Web, &UserId::new("sam")),
                facts(&learned, 1, 50, 100)
            )
            .await
            .unwrap()
    );
    let listed = store.room_facts_with_ids(&AGENT, &R1).await.unwrap();
    let plain = store.room_user_facts(&AGENT, &R1).await.unwrap();
    let mut with_ids: Vec<&str> = listed.iter().map(|f| f.fact.as_str()).collect();
    let mut without: Vec<&str> = plain.iter().map(|f| f.fact.as_str()).collect();
    with_ids.sort();
    without.sort();
    assert_eq!(with_ids, without);
    let bees = listed
        .iter()
        .find(|f| f.fact == "sam keeps bees")
        .unwrap()
        .id;
    // Another agent cannot delete it.
    assert!(
        !store
            .delete_fact(&AgentId::new("other"), bees)
            .await
            .unwrap()
    );
    assert!(store.delete_fact(&AGENT, bees).await.unwrap());
    assert!(!store.delete_fact(&AGENT, bees).await.unwrap());
    let left = store.room_facts_with_ids(&AGENT, &R1).await.unwrap();
    let left: Vec<&str> = left.iter().map(|f| f.fact.as_str()).collect();
    assert_eq!(left, ["sam flies kites"]);
}

/// Facts told through the memory tools (storage/told_facts.rs): about one user, capped
/// with the learned ones, not moving the extraction position, and forgotten by words for
/// that user only.
async fn a_told_fact_is_its_speakers_only(store: Store) {
    let (sam, kim) = (UserId::new("sam"), UserId::new("kim"));
    let (sam_w, kim_w) = (who(Platform::Web, &sam), who(Platform::Web, &kim));
    assert!(
        store
            .remember_user_fact(sam_w, "Keeps bees", &R1, 2, 10)
            .await
            .unwrap()
    );
    assert!(
        !store
            .remember_user_fact(sam_w, "Keeps bees", &R1, 2, 11)
            .await
            .unwrap()
    );
    store
        .remember_user_fact(kim_w, "keeps bees too", &R1, 2, 12)
        .await
        .unwrap();
    store
        .remember_user_fact(sam_w, "flies kites", &R1, 2, 13)
        .await
        .unwrap();
    store
        .remember_user_fact(sam_w, "likes rain", &R1, 2, 14)
        .await
        .unwrap();
    assert_eq!(
        store.user_facts(sam_w, 10).await.unwrap(),
        ["likes rain", "flies kites"],
        "the newest two are kept"
    );
    assert_eq!(store.fact_progress(sam_w).await.unwrap(), 0);
    // Words of a fact forget it, for this user only; an exact reading wins over words.
    assert_eq!(
        store.forget_user_fact(sam_w, "KITES").await.unwrap(),
        ["flies kites"]
    );
    assert!(
        store
            .forget_user_fact(sam_w, "bees")
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.user_facts(kim_w, 10).await.unwrap(),
        ["keeps bees too"]
    );
    assert!(
        store
            .forget_user_fact(kim_w, "  ")
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .forget_user_fact(kim_w, "Keeps Bees Too")
            .await
            .unwrap(),
        ["keeps bees too"]
    );
}
