//! Storage of a shared room's floor (storage::arbiter), each body run against SQLite and
//! Postgres (see test_support).

#![allow(clippy::disallowed_methods)] // tests pick their database from the environment

use super::test_support::{Kind, on_both_backends, run_with_store as run};
use super::*;
use troupe_connectors::{MessageId, RoomId};

on_both_backends!(
    the_first_choice_for_a_message_is_everyones,
    the_floor_keeps_who_was_addressed_and_the_turn,
    a_present_persona_overhears_once_and_an_absent_one_not_at_all,
    the_floor_and_the_sender_are_read_at_once,
);

fn room(id: &str) -> RoomKey {
    RoomKey::new(Platform::Discord, RoomId::new(id))
}

async fn the_first_choice_for_a_message_is_everyones(store: Store) {
    let r = room("c1");
    let m = MessageId::new("m1");
    let (ada, bea) = (AgentId::new("ada"), AgentId::new("bea"));
    // Two personas, on two replicas maybe, each storing its own choice at once: one wins,
    // and both read the same winner.
    let (a, b) = tokio::join!(
        store.claim_message(&r, &m, &ada),
        store.claim_message(&r, &m, &bea)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.0, b.0, "one winner");
    assert!(a.1 ^ b.1, "exactly one stored its choice: {a:?} {b:?}");
    // Later readers see it too, whatever they would have chosen.
    let again = store.claim_message(&r, &m, &bea).await.unwrap();
    assert_eq!(again, (a.0.clone(), false));
    // Another message, or the same id in another room, is a choice of its own.
    let other = store
        .claim_message(&r, &MessageId::new("m2"), &bea)
        .await
        .unwrap();
    assert_eq!(other, (bea.clone(), true));
    let elsewhere = store.claim_message(&room("c2"), &m, &bea).await.unwrap();
    assert_eq!(elsewhere, (bea, true));
}

async fn the_floor_keeps_who_was_addressed_and_the_turn(store: Store) {
    let r = room("c1");
    assert_eq!(store.room_floor(&r).await.unwrap(), Floor::default());
    store.advance_turn(&r).await.unwrap();
    store.advance_turn(&r).await.unwrap();
    let ada = AgentId::new("ada");
    store.set_last_addressed(&r, &ada).await.unwrap();
    assert_eq!(
        store.room_floor(&r).await.unwrap(),
        Floor {
            last_addressed: Some(ada.clone()),
            turn: 2
        }
    );
    store.advance_turn(&r).await.unwrap();
    let bea = AgentId::new("bea");
    store.set_last_addressed(&r, &bea).await.unwrap();
    assert_eq!(
        store.room_floor(&r).await.unwrap(),
        Floor {
            last_addressed: Some(bea),
            turn: 3
        }
    );
    assert_eq!(
        store.room_floor(&room("c2")).await.unwrap(),
        Floor::default()
    );
}

async fn a_present_persona_overhears_once_and_an_absent_one_not_at_all(store: Store) {
    use troupe_connectors::{Inbound, RoomRef, UserId, UserRef};
    let r = RoomKey::new(Platform::Web, RoomId::new("deck"));
    let (ada, bea, cy) = (AgentId::new("ada"), AgentId::new("bea"), AgentId::new("cy"));
    // Bea talked in the room before; Cy never did.
    let msg = |id: &str| Inbound {
        id: MessageId::new(id),
        room: RoomRef::new(Platform::Web, RoomId::new("deck")),
        author: UserRef {
            id: UserId::new("sam"),
            name: "Sam".into(),
            is_bot: false,
            username: None,
        },
        text: "hello".into(),
        attachments: vec![],
        reply_to: None,
        is_direct: true,
        mentions_self: false,
        sent_at_ms: 1,
        client: None,
        revises: None,
    };
    let line = |text: &'static str, author: &'static str| NewMemory {
        author_id: author,
        author_name: author,
        text,
        from_agent: false,
        created_at_ms: 1,
    };
    for (agent, id) in [(&bea, "b1"), (&ada, "a1")] {
        let JournalInsert::Inserted(jid) = store.journal_insert(agent, &msg(id)).await.unwrap()
        else {
            panic!("journaled twice")
        };
        store
            .record_handled(HandledMessage {
                journal_id: jid,
                agent_id: agent,
                room: &r,
                room_name: None,
                inbound: line("hello", "Sam"),
                reply: None,
            })
            .await
            .unwrap();
    }
    let JournalInsert::Inserted(exchange) = store.journal_insert(&ada, &msg("a2")).await.unwrap()
    else {
        panic!("journaled twice")
    };
    let lines = [line("the tide?", "Sam"), line("At noon.", "Ada")];
    assert!(store.overhear(&bea, &r, exchange, &lines).await.unwrap());
    assert!(
        !store.overhear(&bea, &r, exchange, &lines).await.unwrap(),
        "once"
    );
    assert!(
        !store.overhear(&cy, &r, exchange, &lines).await.unwrap(),
        "absent"
    );
    let heard = store.recent_messages(&bea, &r, 10).await.unwrap();
    let texts: Vec<(&str, &str)> = heard
        .iter()
        .map(|m| (m.author_name.as_str(), m.text.as_str()))
        .collect();
    assert_eq!(
        texts,
        [("Sam", "hello"), ("Sam", "the tide?"), ("Ada", "At noon.")]
    );
    assert!(store.recent_messages(&cy, &r, 10).await.unwrap().is_empty());
}

/// `floor_and_sender` reads what `room_floor` and `sender_of` read, in one query.
async fn the_floor_and_the_sender_are_read_at_once(store: Store) {
    let r = room("c31");
    let (m, unknown) = (MessageId::new("m31"), MessageId::new("m32"));
    let ada = AgentId::new("ada");
    let nothing = store.floor_and_sender(&r, Some(&m)).await.unwrap();
    assert_eq!(nothing, (Floor::default(), None));
    store.note_sender(&r, &m, &ada).await.unwrap();
    store.set_last_addressed(&r, &ada).await.unwrap();
    store.advance_turn(&r).await.unwrap();
    let floor = store.room_floor(&r).await.unwrap();
    let sender = store.sender_of(&r, &m).await.unwrap();
    assert_eq!(
        store.floor_and_sender(&r, Some(&m)).await.unwrap(),
        (floor.clone(), sender)
    );
    assert_eq!(floor.turn, 1);
    assert_eq!(
        store.floor_and_sender(&r, Some(&unknown)).await.unwrap(),
        (floor.clone(), None)
    );
    assert_eq!(
        store.floor_and_sender(&r, None).await.unwrap(),
        (floor, None)
    );
}
