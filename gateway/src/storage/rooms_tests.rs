//! Storage of room controls and forgetting (storage::rooms), each body run against SQLite
//! and Postgres (see test_support).

#![allow(clippy::disallowed_methods)] // tests pick their database from the environment

use super::test_support::{Ctx, Kind, on_both_backends, run};
use super::*;
use troupe_connectors::{MessageId, RoomId, RoomRef, UserId, UserRef};

// The agent and the way to say a message in a room are those of the summaries' tests:
// forgetting is about what they store.
use super::summaries_tests::{AGENT, say};

on_both_backends!(
    controls_change_one_at_a_time_and_survive_a_reconnect,
    forgetting_a_room_empties_its_memory_only,
    forgetting_a_user_drops_their_facts_on_every_room,
    a_command_closes_its_entry_without_memory,
    a_bot_streak_counts_bots_and_a_human_ends_it,
    a_troupes_controls_are_read_at_once_in_its_order,
);

fn room(id: &str) -> RoomKey {
    RoomKey::new(Platform::Telegram, RoomId::new(id))
}

async fn controls_change_one_at_a_time_and_survive_a_reconnect(ctx: Ctx) {
    let store = ctx.store;
    let r1 = room("-1");
    assert_eq!(
        store.room_state(&AGENT, &r1).await.unwrap(),
        RoomState::default()
    );
    store
        .set_room_control(&AGENT, &r1, RoomControl::Follow(true), "telegram:7")
        .await
        .unwrap();
    store
        .set_room_control(&AGENT, &r1, RoomControl::Mute(Some(i64::MAX)), "telegram:7")
        .await
        .unwrap();
    let state = store.room_state(&AGENT, &r1).await.unwrap();
    assert!(state.following, "muting kept following");
    assert!(state.muted_at(now_ms()));
    // Another connection (a restart, another replica) sees the same.
    let again = Store::connect(&ctx.url).await.unwrap();
    assert_eq!(again.room_state(&AGENT, &r1).await.unwrap(), state);
    again
        .set_room_control(&AGENT, &r1, RoomControl::Mute(None), "telegram:7")
        .await
        .unwrap();
    let state = store.room_state(&AGENT, &r1).await.unwrap();
    assert!(!state.muted_at(now_ms()));
    assert!(state.following);
    // Another agent's view of the room is its own.
    let other = AgentId::new("other");
    assert_eq!(
        store.room_state(&other, &r1).await.unwrap(),
        RoomState::default()
    );
    let listed = store.room_states(&AGENT).await.unwrap();
    assert_eq!(listed, vec![(r1, state)]);
}

async fn forgetting_a_room_empties_its_memory_only(ctx: Ctx) {
    let store = ctx.store;
    say(
        &store,
        Platform::Telegram,
        "-1",
        "sam",
        "my cat is called Tom",
        false,
    )
    .await;
    say(&store, Platform::Telegram, "-2", "sam", "elsewhere", false).await;
    store
        .put_room_summary(&AGENT, &room("-1"), "sam has a cat", 1, 5)
        .await
        .unwrap();
    let gone = store
        .forget_room(&AGENT, &room("-1"), "telegram:sam")
        .await
        .unwrap();
    assert_eq!(gone, 1);
    assert!(
        store
            .recent_messages(&AGENT, &room("-1"), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .room_summary(&AGENT, &room("-1"))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        store
            .recent_messages(&AGENT, &room("-2"), 10)
            .await
            .unwrap()
            .len(),
        1
    );
    let state = store.room_state(&AGENT, &room("-1")).await.unwrap();
    assert!(state.forgotten_at_ms.is_some());
}

async fn forgetting_a_user_drops_their_facts_on_every_room(ctx: Ctx) {
    let store = ctx.store;
    let sam = UserId::new("sam");
    let ann = UserId::new("ann");
    let r1 = room("-1");
    for user in [&sam, &ann] {
        let who = FactSubject {
            agent_id: &AGENT,
            platform: Platform::Telegram,
            user_id: user,
        };
        let facts = vec![format!("{user} keeps bees")];
        store
            .record_user_facts(
                who,
                NewFacts {
                    facts: &facts,
                    room: &r1,
                    through_message_id: 1,
                    keep: 10,
                    now_ms: 1,
                },
            )
            .await
            .unwrap();
    }
    let sam_who = FactSubject {
        agent_id: &AGENT,
        platform: Platform::Telegram,
        user_id: &sam,
    };
    assert_eq!(store.forget_user_facts(sam_who).await.unwrap(), 1);
    assert!(store.user_facts(sam_who, 10).await.unwrap().is_empty());
    let ann_who = FactSubject {
        user_id: &ann,
        ..sam_who
    };
    assert_eq!(store.user_facts(ann_who, 10).await.unwrap().len(), 1);
}

async fn a_command_closes_its_entry_without_memory(ctx: Ctx) {
    let store = ctx.store;
    let msg = Inbound {
        id: MessageId::new("cmd-1"),
        room: RoomRef::new(Platform::Telegram, RoomId::new("-1")),
        author: UserRef {
            id: UserId::new("sam"),
            name: "Sam".into(),
            is_bot: false,
            username: None,
        },
        text: "/mute".into(),
        attachments: vec![],
        reply_to: None,
        is_direct: false,
        mentions_self: false,
        sent_at_ms: 1_000,
        client: None,
        revises: None,
    };
    let JournalInsert::Inserted(jid) = store.journal_insert(&AGENT, &msg).await.unwrap() else {
        panic!("journaled twice")
    };
    let answer = Outbound {
        key: "rosa:cmd".into(),
        room: msg.room.clone(),
        text: "Okay, quiet.".into(),
        reply_to: Some(msg.id.clone()),
        replaces: Vec::new(),
    };
    let queued = store.record_command(jid, &AGENT, &answer).await.unwrap();
    assert!(queued.is_some());
    assert_eq!(
        store.record_command(jid, &AGENT, &answer).await.unwrap(),
        None
    );
    assert_eq!(store.replies_for(jid).await.unwrap(), vec![answer]);
    assert!(
        store
            .recent_messages(&AGENT, &msg.room.key(), 10)
            .await
            .unwrap()
            .is_empty()
    );
    let JournalInsert::Duplicate(_, JournalState::Done) =
        store.journal_insert(&AGENT, &msg).await.unwrap()
    else {
        panic!("the command's entry is not done")
    };
}

async fn a_bot_streak_counts_bots_and_a_human_ends_it(ctx: Ctx) {
    let store = ctx.store;
    let r1 = room("-1");
    // A human in a room nobody steered writes nothing.
    assert_eq!(
        store
            .bump_bot_streak(&AGENT, &r1, Speaker::Person)
            .await
            .unwrap(),
        0
    );
    assert!(store.room_states(&AGENT).await.unwrap().is_empty());
    for n in 1..=3 {
        assert_eq!(
            store
                .bump_bot_streak(&AGENT, &r1, Speaker::Bot)
                .await
                .unwrap(),
            n
        );
    }
    store
        .set_room_control(&AGENT, &r1, RoomControl::Follow(true), "x")
        .await
        .unwrap();
    assert_eq!(
        store
            .bump_bot_streak(&AGENT, &r1, Speaker::Bot)
            .await
            .unwrap(),
        4
    );
    assert_eq!(
        store
            .bump_bot_streak(&AGENT, &r1, Speaker::Person)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .bump_bot_streak(&AGENT, &r1, Speaker::Bot)
            .await
            .unwrap(),
        1
    );
    assert!(store.room_state(&AGENT, &r1).await.unwrap().following);
}

/// `room_states_of` reads what `room_state` reads, for several personas in one query: in
/// the order asked, with the defaults for a persona nobody steered there, and nothing of
/// another room.
async fn a_troupes_controls_are_read_at_once_in_its_order(ctx: Ctx) {
    let store = ctx.store;
    let (r1, r2) = (room("-31"), room("-32"));
    let (ada, bo, cy) = (AgentId::new("ada"), AgentId::new("bo"), AgentId::new("cy"));
    store
        .set_room_control(&ada, &r1, RoomControl::Follow(true), "telegram:7")
        .await
        .unwrap();
    store
        .set_room_control(&cy, &r1, RoomControl::Mute(Some(i64::MAX)), "telegram:7")
        .await
        .unwrap();
    store
        .set_room_control(&bo, &r2, RoomControl::Follow(true), "telegram:7")
        .await
        .unwrap();
    let asked = [cy.clone(), bo.clone(), ada.clone()];
    let states = store.room_states_of(&r1, &asked).await.unwrap();
    let mut one_by_one = Vec::new();
    for agent in &asked {
        one_by_one.push(store.room_state(agent, &r1).await.unwrap());
    }
    assert_eq!(states, one_by_one);
    assert!(states[0].muted_at(now_ms()) && !states[0].following);
    assert_eq!(
        states[1],
        RoomState::default(),
        "bo follows another room only"
    );
    assert!(states[2].following);
    assert!(store.room_states_of(&r1, &[]).await.unwrap().is_empty());
}
