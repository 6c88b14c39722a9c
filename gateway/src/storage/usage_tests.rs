//! The usage ledger on both backends: records add up in the rollups, concurrent writers
//! do not lose increments, a notice is first once per window, and old records are pruned.

use super::*;
use troupe_connectors::RoomId;

use super::test_support::{Kind, on_both_backends, run_with_store as run};

on_both_backends!(
    records_add_up_in_the_rollups,
    concurrent_records_lose_no_increment,
    a_notice_is_first_once_per_window,
    a_batch_sums_its_increments_per_rollup_row,
);

fn usage(agent: &AgentId, room: &RoomKey, user: &str, day: i64, tokens: i64) -> NewUsage {
    NewUsage {
        agent_id: agent.clone(),
        room_key: Some(room.clone()),
        user_key: Some(user.to_string()),
        provider: "openai".into(),
        model: "gpt-4o-mini".into(),
        purpose: "reply",
        prompt_tokens: tokens,
        completion_tokens: 1,
        cached_tokens: 0,
        estimated: false,
        cost_micros: 3,
        day,
        at_ms: day * 86_400_000,
    }
}

async fn records_add_up_in_the_rollups(store: Store) {
    let agent = AgentId::new("ada");
    let r1 = RoomKey::new(Platform::Discord, RoomId::new("1"));
    let r2 = RoomKey::new(Platform::Discord, RoomId::new("2"));
    store
        .usage_record(&usage(&agent, &r1, "discord:u1", 100, 10))
        .await
        .unwrap();
    store
        .usage_record(&usage(&agent, &r1, "discord:u2", 100, 20))
        .await
        .unwrap();
    store
        .usage_record(&usage(&agent, &r2, "discord:u1", 101, 30))
        .await
        .unwrap();
    let now = store
        .usage_now(&agent, 101, 90, Some(&r2), Some("discord:u1"))
        .await
        .unwrap();
    assert_eq!(
        now.persona_day,
        UsageTally {
            tokens: 31,
            micros: 3
        }
    );
    assert_eq!(
        now.persona_month,
        UsageTally {
            tokens: 63,
            micros: 9
        }
    );
    assert_eq!(now.room_day.tokens, 31);
    assert_eq!(now.user_day.tokens, 31);
    let by_room = store.usage_rollup(&agent, UsageBy::Room, 0).await.unwrap();
    let keys: Vec<(&str, i64)> = by_room.iter().map(|r| (r.key.as_str(), r.calls)).collect();
    assert_eq!(keys, [("discord:1", 2), ("discord:2", 1)]);
    let by_day = store.usage_rollup(&agent, UsageBy::Day, 0).await.unwrap();
    let days: Vec<(i64, i64)> = by_day.iter().map(|r| (r.day, r.prompt_tokens)).collect();
    assert_eq!(days, [(101, 30), (100, 30)]);
    let since = store
        .usage_rollup(&agent, UsageBy::User, 101)
        .await
        .unwrap();
    assert_eq!(since.len(), 1);
    assert_eq!(since[0].key, "discord:u1");
    assert_eq!(store.usage_records_count(&agent).await.unwrap(), 3);
    assert_eq!(store.usage_prune(101 * 86_400_000).await.unwrap(), 2);
    assert_eq!(store.usage_records_count(&agent).await.unwrap(), 1);
    // The rollups stay.
    assert_eq!(
        store
            .usage_rollup(&agent, UsageBy::Day, 0)
            .await
            .unwrap()
            .len(),
        2
    );
}

async fn concurrent_records_lose_no_increment(store: Store) {
    let agent = AgentId::new("ada");
    let room = RoomKey::new(Platform::Web, RoomId::new("r"));
    let mut writers = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let (store, agent, room) = (store.clone(), agent.clone(), room.clone());
        writers.spawn(async move {
            store
                .usage_record(&usage(&agent, &room, "web:u", 7, 5))
                .await
                .unwrap()
        });
    }
    while let Some(done) = writers.join_next().await {
        done.unwrap();
    }
    let now = store
        .usage_now(&agent, 7, 0, Some(&room), Some("web:u"))
        .await
        .unwrap();
    assert_eq!(now.room_day.tokens, 20 * 6);
    assert_eq!(now.persona_day.micros, 20 * 3);
}

async fn a_notice_is_first_once_per_window(store: Store) {
    let agent = AgentId::new("ada");
    assert!(
        store
            .usage_notice_first(&agent, "room_day", "web:r", 7, 1)
            .await
            .unwrap()
    );
    assert!(
        !store
            .usage_notice_first(&agent, "room_day", "web:r", 7, 2)
            .await
            .unwrap()
    );
    assert!(
        store
            .usage_notice_first(&agent, "room_day", "web:r", 8, 3)
            .await
            .unwrap()
    );
    assert!(
        store
            .usage_notice_first(&agent, "user_day", "web:r", 7, 4)
            .await
            .unwrap()
    );
}

async fn a_batch_sums_its_increments_per_rollup_row(store: Store) {
    let agent = AgentId::new("ada");
    let room = RoomKey::new(Platform::Web, RoomId::new("r"));
    // One batch touching the same rollup rows many times, across the statement's row cap.
    let batch: Vec<NewUsage> = (0..1200)
        .map(|i| {
            usage(
                &agent,
                &room,
                if i % 2 == 0 { "web:a" } else { "web:b" },
                9,
                1,
            )
        })
        .collect();
    store.usage_record_batch(&batch).await.unwrap();
    store.usage_record_batch(&batch[..10]).await.unwrap();
    let now = store
        .usage_now(&agent, 9, 0, Some(&room), Some("web:a"))
        .await
        .unwrap();
    assert_eq!(now.room_day.tokens, 1210 * 2);
    assert_eq!(now.user_day.tokens, 605 * 2);
    assert_eq!(store.usage_records_count(&agent).await.unwrap(), 1210);
}
