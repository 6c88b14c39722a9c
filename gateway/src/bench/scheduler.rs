//! `troupe bench --scheduler`: what the model scheduler costs per call, and whether a flood
//! in one room delays a DM in another (issue 16, docs/benchmarks.md).
//!
//! Overhead: acquiring and releasing an account's permit, nobody waiting (the path every
//! call takes when limits are not hit), against a same-run reference, a tokio semaphore's
//! acquire and release (what every call paid before the scheduler).
//!
//! Fairness: one call in flight per account, each call holding it for `CALL`; room A queues
//! 200 replies, then a DM arrives in room B and an ordinary reply in room C. We count the
//! calls that start between a message's arrival and its own start: its wait in turns of the
//! model. The reference is the same flood through a FIFO semaphore.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::spend::{AccountLimits, Priority, Scheduler, Turn};

const OVERHEAD_CALLS: u32 = 200_000;
const FLOOD: usize = 200;
const CALL: Duration = Duration::from_millis(2);

pub async fn run() -> anyhow::Result<ExitCode> {
    crate::metrics::install();
    let (scheduled, reference) = overhead().await;
    println!(
        "scheduler overhead per call (acquire + release, nobody waiting), {OVERHEAD_CALLS} calls:"
    );
    println!(
        "  scheduler {:>8.0} ns   semaphore (reference) {:>8.0} ns   ratio {:.1}x",
        scheduled,
        reference,
        scheduled / reference
    );
    println!(
        "  target: under 20 µs: {}",
        if scheduled < 20_000.0 {
            "met"
        } else {
            "NOT met"
        }
    );

    let fair = flood(true).await;
    let fifo = flood(false).await;
    println!("a flood of {FLOOD} replies in room A, then a DM in room B and a reply in room C");
    println!("(one call in flight, each {CALL:?}); turns waited = calls started before it:");
    println!(
        "  scheduler: DM {} turns ({:?}), room C {} turns ({:?})",
        fair.dm_turns, fair.dm_wait, fair.other_turns, fair.other_wait
    );
    println!(
        "  FIFO (reference): DM {} turns ({:?}), room C {} turns ({:?})",
        fifo.dm_turns, fifo.dm_wait, fifo.other_turns, fifo.other_wait
    );
    Ok(ExitCode::SUCCESS)
}

/// Nanoseconds per acquire-and-release: the scheduler's fast path, and the reference.
async fn overhead() -> (f64, f64) {
    let scheduler = Scheduler::new(AccountLimits {
        concurrency: 64,
        requests_per_minute: 0,
        tokens_per_minute: 0,
    });
    let account = scheduler.account(1, "bench");
    let turn = Turn::new(Priority::Reply, &"room");
    let semaphore = tokio::sync::Semaphore::new(64);
    // Warm up both.
    for _ in 0..10_000 {
        drop(turn.scope(account.acquire()).await);
        drop(semaphore.acquire().await);
    }
    let started = Instant::now();
    for _ in 0..OVERHEAD_CALLS {
        let permit = turn.scope(account.acquire()).await;
        permit.charge(100);
        drop(permit);
    }
    let scheduled = started.elapsed().as_nanos() as f64 / f64::from(OVERHEAD_CALLS);
    let started = Instant::now();
    for _ in 0..OVERHEAD_CALLS {
        drop(semaphore.acquire().await);
    }
    let reference = started.elapsed().as_nanos() as f64 / f64::from(OVERHEAD_CALLS);
    (scheduled, reference)
}

struct Flood {
    dm_turns: usize,
    dm_wait: Duration,
    other_turns: usize,
    other_wait: Duration,
}

/// The flood, through the scheduler (`fair`) or a FIFO semaphore.
async fn flood(fair: bool) -> Flood {
    let scheduler = Scheduler::new(AccountLimits {
        concurrency: 1,
        ..AccountLimits::default()
    });
    let account = scheduler.account(1, "bench");
    let fifo = Arc::new(tokio::sync::Semaphore::new(1));
    let started_calls = Arc::new(AtomicUsize::new(0));
    let call = {
        let (account, fifo, started_calls) = (account.clone(), fifo.clone(), started_calls.clone());
        move |turn: Turn| {
            let (account, fifo, started_calls) =
                (account.clone(), fifo.clone(), started_calls.clone());
            async move {
                let arrived = Instant::now();
                let before = started_calls.load(Ordering::SeqCst);
                let (_permit, _fifo_permit) = if fair {
                    (Some(turn.scope(account.acquire()).await), None)
                } else {
                    (None, Some(fifo.acquire_owned().await))
                };
                let turns = started_calls.fetch_add(1, Ordering::SeqCst) - before;
                let waited = arrived.elapsed();
                tokio::time::sleep(CALL).await;
                (turns, waited)
            }
        }
    };
    let mut flood = tokio::task::JoinSet::new();
    for _ in 0..FLOOD {
        flood.spawn(call(Turn::new(Priority::Reply, &"room-a")));
    }
    // Let the flood queue up, and a few of its calls run.
    tokio::time::sleep(CALL * 5).await;
    let dm = tokio::spawn(call(Turn::new(Priority::Direct, &"room-b")));
    let other = tokio::spawn(call(Turn::new(Priority::Reply, &"room-c")));
    let (dm_turns, dm_wait) = dm.await.unwrap_or_default();
    let (other_turns, other_wait) = other.await.unwrap_or_default();
    while flood.join_next().await.is_some() {}
    Flood {
        dm_turns,
        dm_wait,
        other_turns,
        other_wait,
    }
}
