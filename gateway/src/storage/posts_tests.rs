//! Post schedules on both backends: one claimer per run however many try, a restart keeps
//! the next run, a dead claimer's run is taken over (and given up after its attempts), and
//! a run is queued once, by the claimer that still holds it.

use super::*;
use troupe_connectors::{RoomId, RoomRef};

use super::test_support::{Kind, on_both_backends, run_with_store as run};

on_both_backends!(
    one_claimer_wins_each_run,
    a_restart_keeps_the_next_run_and_a_change_starts_over,
    a_dead_claimers_run_is_taken_over_then_given_up,
    only_the_holder_queues_the_post_once,
    ten_approvals_of_one_draft_queue_it_once,
    a_draft_expires_and_a_rejected_one_stays_rejected,
);

fn room() -> RoomKey {
    RoomKey::new(Platform::Discord, RoomId::new("42"))
}

async fn put(store: &Store, spec: &str, first: i64) {
    let room = room();
    store
        .posts_put_schedule(
            &AgentId::new("ada"),
            &NewSchedule {
                id: "file:0",
                source: ScheduleSource::File,
                room: &room,
                spec,
                first_run_ms: first,
            },
        )
        .await
        .unwrap();
}

async fn one_claimer_wins_each_run(store: Store) {
    put(&store, r#"{"room":"discord:42","every":"10s"}"#, 1_000).await;
    assert!(store.posts_due(999, 10).await.unwrap().is_empty());
    let due = store.posts_due(5_000, 10).await.unwrap();
    assert_eq!(due.len(), 1);
    // Ten claimers read the same due row; one claims it.
    let mut tries = Vec::new();
    for _ in 0..10 {
        let (store, s) = (store.clone(), due[0].clone());
        tries.push(tokio::spawn(async move {
            store.posts_claim(&s, 15_000, 5_000, 60_000).await.unwrap()
        }));
    }
    let mut won = Vec::new();
    for t in tries {
        won.extend(t.await.unwrap());
    }
    assert_eq!(won.len(), 1, "{won:?}");
    assert_eq!(won[0].run_at_ms, 1_000);
    let s = &store.posts_schedules(&AgentId::new("ada")).await.unwrap()[0];
    assert_eq!((s.next_run_ms, s.last_run_ms), (15_000, Some(1_000)));
    assert_eq!(store.posts_next_due().await.unwrap(), Some(15_000));
}

async fn a_restart_keeps_the_next_run_and_a_change_starts_over(store: Store) {
    let spec = r#"{"room":"discord:42","every":"10s"}"#;
    put(&store, spec, 1_000).await;
    put(&store, spec, 9_000).await;
    let agent = AgentId::new("ada");
    assert_eq!(
        store.posts_schedules(&agent).await.unwrap()[0].next_run_ms,
        1_000
    );
    put(&store, r#"{"room":"discord:42","every":"20s"}"#, 9_000).await;
    assert_eq!(
        store.posts_schedules(&agent).await.unwrap()[0].next_run_ms,
        9_000
    );
    // POST_IMMEDIATELY at a start: only when the last run is old enough.
    assert!(
        store
            .posts_run_now(&agent, "file:0", 5_000, 10_000)
            .await
            .unwrap()
    );
    let s = store.posts_due(5_000, 1).await.unwrap().remove(0);
    store
        .posts_claim(&s, 25_000, 5_000, 60_000)
        .await
        .unwrap()
        .unwrap();
    assert!(
        !store
            .posts_run_now(&agent, "file:0", 6_000, 10_000)
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .posts_retain(&agent, ScheduleSource::File, &[])
            .await
            .unwrap(),
        1
    );
    assert!(store.posts_schedules(&agent).await.unwrap().is_empty());
}

/// A schedule every 10 s in discord:42, due at 1 s, its run claimed then for `lease_ms`.
async fn claimed(store: &Store, lease_ms: i64) -> ClaimedRun {
    put(store, r#"{"room":"discord:42","every":"10s"}"#, 1_000).await;
    let s = store.posts_due(1_000, 1).await.unwrap().remove(0);
    store
        .posts_claim(&s, 11_000, 1_000, lease_ms)
        .await
        .unwrap()
        .unwrap()
}

async fn a_dead_claimers_run_is_taken_over_then_given_up(store: Store) {
    let run = claimed(&store, 100).await;
    assert!(
        store
            .posts_take_over(1_050, 100, 10)
            .await
            .unwrap()
            .is_empty(),
        "lease holds"
    );
    let mut now = 1_100;
    let mut holder = run;
    for attempt in 2..=RUN_ATTEMPTS {
        let taken = store.posts_take_over(now, 100, 10).await.unwrap();
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].attempts, attempt);
        // The old holder can no longer settle it.
        assert!(
            !store
                .posts_end(&holder, RunEnd::Skipped, None, "late")
                .await
                .unwrap()
        );
        holder = taken[0].clone();
        now += 100;
    }
    assert!(
        store
            .posts_take_over(now, 100, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let recent = store
        .posts_recent(&AgentId::new("ada"), 10, RecentRuns::All)
        .await
        .unwrap();
    assert_eq!(recent[0].state, RunState::Failed);
}

async fn only_the_holder_queues_the_post_once(store: Store) {
    let run = claimed(&store, 60_000).await;
    let post = Outbound {
        key: "ada:post:file:0:1000".into(),
        room: RoomRef::new(Platform::Discord, RoomId::new("42")),
        text: "a thought".into(),
        reply_to: None,
        replaces: Vec::new(),
    };
    let id = store
        .posts_queue(&run, &post)
        .await
        .unwrap()
        .expect("queued");
    assert!(
        store.posts_queue(&run, &post).await.unwrap().is_none(),
        "not twice"
    );
    let claimed = store
        .outbox_claim_one(id, now_ms(), 1_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.outbound, post);
    let agent = AgentId::new("ada");
    let posted = store
        .posts_recent(&agent, 10, RecentRuns::Posted)
        .await
        .unwrap();
    assert_eq!(posted.len(), 1);
    assert_eq!(posted[0].text.as_deref(), Some("a thought"));
    assert_eq!(posted[0].state, RunState::Queued);
}

fn post_of(d: &Draft) -> Outbound {
    Outbound {
        key: format!("ada:post:{}:{}", d.schedule_id, d.run_at_ms),
        room: RoomRef::new(Platform::Discord, RoomId::new("42")),
        text: d.text.clone().unwrap_or_default(),
        reply_to: None,
        replaces: Vec::new(),
    }
}

/// Issue 47: a held draft, edited, then approved by ten callers at once: one outbox entry,
/// with the edited text; the others are conflicts.
async fn ten_approvals_of_one_draft_queue_it_once(store: Store) {
    let run = claimed(&store, 60_000).await;
    let now = now_ms();
    // The owners' notice is queued with the hold, once.
    let notice = Outbound {
        key: "ada:draft:1:telegram:9".into(),
        room: RoomRef::new(troupe_connectors::Platform::Telegram, RoomId::new("9")),
        text: "a draft waits".into(),
        reply_to: None,
        replaces: Vec::new(),
    };
    let told = store
        .posts_hold(
            &run,
            "a thought",
            now + 60_000,
            std::slice::from_ref(&notice),
        )
        .await
        .unwrap()
        .expect("held");
    assert_eq!(told.len(), 1);
    let entry = store.outbox_claim_one(told[0], now, 60_000).await.unwrap();
    assert_eq!(entry.map(|e| e.outbound.text), Some("a draft waits".into()));
    assert!(
        store
            .posts_hold(&run, "again", now + 60_000, &[notice])
            .await
            .unwrap()
            .is_none(),
        "held once, told once"
    );
    let agent = AgentId::new("ada");
    let edited = store
        .draft_edit(&agent, run.id, "a better thought", now)
        .await
        .unwrap();
    assert_eq!(edited, Decided::Done(None));
    let mut tries = Vec::new();
    for _ in 0..10 {
        let (store, agent) = (store.clone(), agent.clone());
        tries.push(tokio::spawn(async move {
            store
                .draft_approve(&agent, run.id, "api", now, post_of)
                .await
                .unwrap()
        }));
    }
    let mut queued = Vec::new();
    for t in tries {
        match t.await.unwrap() {
            Decided::Done(Some(id)) => queued.push(id),
            other => assert_eq!(other, Decided::Conflict(RunState::Queued)),
        }
    }
    assert_eq!(queued.len(), 1, "{queued:?}");
    let entry = store
        .outbox_claim_one(queued[0], now_ms(), 1_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(entry.outbound.text, "a better thought");
    let d = store.draft(&agent, run.id).await.unwrap().unwrap();
    assert_eq!(d.drafted_text.as_deref(), Some("a thought"));
    assert_eq!(d.decided_by.as_deref(), Some("api"));
}

async fn a_draft_expires_and_a_rejected_one_stays_rejected(store: Store) {
    let run = claimed(&store, 60_000).await;
    let agent = AgentId::new("ada");
    assert!(
        store
            .posts_hold(&run, "a thought", 5_000, &[])
            .await
            .unwrap()
            .is_some()
    );
    // Past its expiry: listed expired, and neither approved nor edited.
    assert_eq!(
        store.drafts(&agent, 6_000, 10).await.unwrap()[0].state,
        RunState::Expired
    );
    let approved = store
        .draft_approve(&agent, run.id, "api", 6_000, post_of)
        .await
        .unwrap();
    assert_eq!(approved, Decided::Conflict(RunState::Expired));
    assert_eq!(store.drafts_expire(6_000).await.unwrap(), 1);
    assert_eq!(
        store.draft_edit(&agent, run.id, "x", 4_000).await.unwrap(),
        Decided::Conflict(RunState::Expired)
    );
    assert_eq!(
        store
            .draft_approve(&agent, 999, "api", 1, post_of)
            .await
            .unwrap(),
        Decided::NotFound
    );
    // Another run, rejected: never approved after.
    let s = store.posts_due(20_000, 1).await.unwrap().remove(0);
    let second = store
        .posts_claim(&s, 30_000, 20_000, 60_000)
        .await
        .unwrap()
        .unwrap();
    assert!(
        store
            .posts_hold(&second, "b thought", 90_000, &[])
            .await
            .unwrap()
            .is_some()
    );
    let rejected = store
        .draft_reject(&agent, second.id, "telegram:9", 21_000)
        .await
        .unwrap();
    assert_eq!(rejected, Decided::Done(None));
    let again = store
        .draft_approve(&agent, second.id, "api", 21_000, post_of)
        .await
        .unwrap();
    assert_eq!(again, Decided::Conflict(RunState::Rejected));
}
