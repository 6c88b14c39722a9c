//! The exchange an edit or a delete refers to (`revisions`), on both backends.

use super::test_support::{Kind, on_both_backends, run_with_store as run};
use super::*;
use troupe_connectors::{Change, MessageId, Revision, RoomId, RoomRef, UserId, UserRef};

on_both_backends!(an_exchange_is_found_by_its_message_and_dropped_from_memory);

fn said(id: &str, text: &str, revises: Option<Revision>) -> Inbound {
    Inbound {
        id: MessageId::new(id),
        room: RoomRef::new(Platform::Discord, RoomId::new("41")),
        author: UserRef {
            id: UserId::new("5"),
            name: "Ann".into(),
            is_bot: false,
            username: None,
        },
        text: text.into(),
        attachments: Vec::new(),
        reply_to: None,
        is_direct: false,
        mentions_self: true,
        sent_at_ms: 1_000,
        client: None,
        revises,
    }
}

async fn journaled(store: &Store, agent: &AgentId, m: &Inbound) -> JournalId {
    match store.journal_insert(agent, m).await.unwrap() {
        JournalInsert::Inserted(id) => id,
        other => panic!("journaled before: {other:?}"),
    }
}

/// Records `m` handled, with `reply` delivered as the platform messages `ids`.
async fn answered(
    store: &Store,
    agent: &AgentId,
    jid: JournalId,
    m: &Inbound,
    reply: &str,
    ids: &[&str],
) {
    let room = m.room.key();
    let outbound = Outbound {
        key: format!("{agent}:{}", jid.0),
        room: m.room.clone(),
        text: reply.into(),
        reply_to: Some(m.id.clone()),
        replaces: Vec::new(),
    };
    let handled = HandledMessage {
        journal_id: jid,
        agent_id: agent,
        room: &room,
        room_name: None,
        inbound: NewMemory {
            author_id: "5",
            author_name: "Ann",
            text: &m.text,
            from_agent: false,
            created_at_ms: m.sent_at_ms,
        },
        reply: Some((
            NewMemory {
                author_id: agent.as_str(),
                author_name: "Dot",
                text: reply,
                from_agent: true,
                created_at_ms: m.sent_at_ms + 1,
            },
            outbound,
        )),
    };
    let start = ReplyStart::Delivered {
        platform_ids: ids.iter().map(|s| s.to_string()).collect(),
    };
    store.record_handled_as(handled, &start).await.unwrap();
}

async fn an_exchange_is_found_by_its_message_and_dropped_from_memory(store: Store) {
    let agent = AgentId::new("dot");
    let question = said("7", "when does the tide turn?", None);
    let other = said("8", "and the lamp?", None);
    let q = journaled(&store, &agent, &question).await;
    answered(&store, &agent, q, &question, "at six", &["70", "71"]).await;
    let o = journaled(&store, &agent, &other).await;
    answered(&store, &agent, o, &other, "at dusk", &["80"]).await;
    let edit = said(
        "7:edit:2000",
        "when does the tide come in?",
        Some(Revision {
            of: MessageId::new("7"),
            change: Change::Edit {
                original_sent_at_ms: 1_000,
            },
            reply: Vec::new(),
        }),
    );
    let e = journaled(&store, &agent, &edit).await;
    let room = question.room.key();

    let exchange = store
        .exchange_of(&agent, &room, &MessageId::new("7"), e)
        .await
        .unwrap();
    assert_eq!(exchange.entries, 1);
    assert!(exchange.answered);
    assert_eq!(
        exchange.reply,
        vec![MessageId::new("70"), MessageId::new("71")]
    );
    let unknown = store
        .exchange_of(&agent, &room, &MessageId::new("9"), e)
        .await
        .unwrap();
    assert_eq!(unknown, Exchange::default());

    let removed = store
        .drop_exchange(&agent, &room, &MessageId::new("7"), e)
        .await
        .unwrap();
    assert_eq!(removed, 2, "the question and its reply");
    let left: Vec<String> = store
        .recent_messages(&agent, &room, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.text)
        .collect();
    assert_eq!(left, ["and the lamp?", "at dusk"]);

    // The edit's own answer, then a second edit: both entries are the exchange now.
    answered(&store, &agent, e, &edit, "at seven", &["70", "71"]).await;
    let again = store
        .exchange_of(&agent, &room, &MessageId::new("7"), JournalId(i64::MAX))
        .await
        .unwrap();
    assert_eq!(again.entries, 2);
    assert_eq!(
        again.reply,
        vec![MessageId::new("70"), MessageId::new("71")]
    );

    store.journal_done(e).await.unwrap();
    let entry = store
        .journal_get(e)
        .await
        .unwrap()
        .expect("the edit's entry");
    assert_eq!(entry.state, JournalState::Done);
}
