//! What runs beside the app's work and how it ends: the minute's housekeeping of the rate
//! limiters, giving the allocator's free pages back (`App::release_memory_with`), and the
//! drain at shutdown (`App::run_until_stopped` spawns the first two and runs the last).

use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::Agents;
use crate::ingress::Ingress;
use crate::limits::RateLimiter;
use crate::provider;

const MINUTE: Duration = Duration::from_secs(60);

/// Every minute until `stop`: forgets the rate limiters' idle entries.
pub(crate) async fn housekeeping(
    limiter: RateLimiter,
    api_budget: crate::limits::ApiBudget,
    stop: CancellationToken,
) {
    every(MINUTE, MINUTE, stop, || {
        limiter.housekeep();
        api_budget.housekeep();
    })
    .await
}

/// Gives the allocator's free pages back (`App::release_memory_with`): a second after the
/// start, whose work (migrations, character files, the keyword index's first sync, the
/// connectors' first connections) allocates and frees a few MiB, then once a minute. The
/// allocator returns freed pages by itself only when later allocations come along to notice
/// (jemalloc's decay): an idle gateway kept them (2.4 MiB at ready, docs/benchmarks.md),
/// and a quiet one kept what its last burst freed. A background thread of the allocator's
/// would do the same, at the price of wake-ups on the message path (issue 48).
pub(crate) async fn release_memory(release: fn(), stop: CancellationToken) {
    every(Duration::from_secs(1), MINUTE, stop, release).await
}

/// Runs `work` once `first` has passed, then every `period`, until `stop`.
async fn every(first: Duration, period: Duration, stop: CancellationToken, mut work: impl FnMut()) {
    let mut wait = first;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {
                work();
                wait = period;
            }
        }
    }
}

/// What shutting down closes, in order, once `shutdown` is cancelled.
pub(crate) struct Drain {
    pub(crate) ingress: Ingress,
    pub(crate) breakers: provider::Breakers,
    pub(crate) spend: crate::spend::Spend,
    pub(crate) agents: Agents,
}

impl Drain {
    /// Stops taking work and lets the tasks finish the messages in hand.
    pub(crate) async fn run(
        self,
        tasks: TaskTracker,
        http_task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    ) -> anyhow::Result<()> {
        tracing::info!("shutting down: finishing the messages in hand");
        self.breakers.close();
        self.ingress.bus().close().await;
        tasks.close();
        tasks.wait().await;
        // A reply may have started its room's summary or its sender's facts: their model
        // calls are recorded too.
        for agent in self.agents.all() {
            agent.finish_upkeep().await;
        }
        // The agents are done: no model call is left to record, so the usage ledger
        // writes what it still holds before the process exits (issue 30, finding 9).
        self.spend.close().await;
        if let Some(task) = http_task {
            task.await??;
        }
        Ok(())
    }
}
