//! The scheduler under tokio's paused clock: rates are spaced, a 429 holds the whole
//! account, priorities go first and rooms take turns.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

fn limits(concurrency: usize, rpm: u32, tpm: u32) -> AccountLimits {
    AccountLimits {
        concurrency,
        requests_per_minute: rpm,
        tokens_per_minute: tpm,
    }
}

#[tokio::test(start_paused = true)]
async fn two_personas_on_one_key_share_its_requests_per_minute() {
    let scheduler = Scheduler::new(limits(0, 60, 0));
    // Two personas, one key: the same account.
    let a = scheduler.account(7, "openai:k");
    let b = scheduler.account(7, "openai:k");
    assert!(Arc::ptr_eq(&a, &b));
    assert!(!Arc::ptr_eq(&a, &scheduler.account(8, "openai:other")));
    let t0 = Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..6 {
        let account = if i % 2 == 0 { a.clone() } else { b.clone() };
        calls.spawn(async move {
            let _permit = account.acquire().await;
            Instant::now()
        });
    }
    let mut started: Vec<Duration> = Vec::new();
    while let Some(at) = calls.join_next().await {
        started.push(at.unwrap() - t0);
    }
    started.sort();
    // 60 a minute: one a second, together.
    for (i, at) in started.iter().enumerate() {
        assert!(
            *at >= Duration::from_secs(i as u64),
            "call {i} started at {at:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn after_a_429_no_call_goes_before_retry_after() {
    let scheduler = Scheduler::new(limits(0, 0, 0));
    let account = scheduler.account(1, "openai:k");
    drop(account.acquire().await);
    let t0 = Instant::now();
    account.back_off(Some(Duration::from_secs(3)));
    let other_persona = scheduler.account(1, "openai:k");
    drop(other_persona.acquire().await);
    assert!(Instant::now() - t0 >= Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn direct_messages_go_first_and_rooms_take_turns() {
    let scheduler = Scheduler::new(limits(1, 0, 0));
    let account = scheduler.account(1, "k");
    let held = account.acquire().await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut calls = tokio::task::JoinSet::new();
    let mut spawn = |name: &'static str, turn: Turn| {
        let (account, order) = (account.clone(), order.clone());
        calls.spawn(turn.scope(async move {
            let _permit = account.acquire().await;
            order.lock().unwrap().push(name);
        }));
    };
    // A flood in room A, then one message in room B, then a DM, then background work.
    for name in ["a1", "a2", "a3", "a4"] {
        spawn(name, Turn::new(Priority::Reply, &"room-a"));
        tokio::task::yield_now().await;
    }
    spawn("b1", Turn::new(Priority::Reply, &"room-b"));
    tokio::task::yield_now().await;
    spawn("memory", Turn::new(Priority::Background, &"room-a"));
    tokio::task::yield_now().await;
    spawn("dm", Turn::new(Priority::Direct, &"dm-c"));
    tokio::task::yield_now().await;
    drop(held);
    while calls.join_next().await.is_some() {}
    assert_eq!(
        *order.lock().unwrap(),
        ["dm", "a1", "b1", "a2", "a3", "a4", "memory"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_stops_waiting_frees_its_slot() {
    let scheduler = Scheduler::new(limits(1, 0, 0));
    let account = scheduler.account(1, "k");
    let held = account.acquire().await;
    let gave_up = tokio::time::timeout(Duration::from_secs(1), account.acquire()).await;
    assert!(gave_up.is_err());
    drop(held);
    // The abandoned waiter was granted and dropped: the slot is free again.
    let done = AtomicUsize::new(0);
    let _p = tokio::time::timeout(Duration::from_secs(1), account.acquire())
        .await
        .expect("the slot was freed");
    done.fetch_add(1, Ordering::SeqCst);
    assert_eq!(done.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn tokens_per_minute_hold_the_next_call_until_the_bucket_refills() {
    let scheduler = Scheduler::new(limits(0, 0, 600));
    let account = scheduler.account(1, "k");
    let t0 = Instant::now();
    let permit = account.acquire().await;
    // A call of 900 tokens leaves the bucket 300 short: 10 tokens a second refill it.
    permit.charge(900);
    drop(permit);
    drop(account.acquire().await);
    assert!(Instant::now() - t0 >= Duration::from_secs(30));
}
