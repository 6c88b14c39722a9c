//! Keeping connectors' receive loops running (issue 30, finding 11), and what each loop
//! last did, for `/readyz`.
//!
//! A connector's `run` is one long task. Before this module, a panic inside it (teloxide
//! `unwrap`s on some updates) ended the task: nothing was logged through tracing, nothing
//! polled again, and `/readyz` still said ok. Now [`supervise`] runs `run` under
//! `catch_unwind`: a panic is logged with its message and the loop is started again after
//! a backoff (1 s, 2 s … 60 s; a run that lasted longer than the longest wait starts the
//! count afresh). An error from `run` (a refused token) is logged and ends the loop, as
//! before; both are kept in a [`LoopStatus`] that `/readyz` reads by connector name
//! (`agent/platform`), and a loop that failed, or waits to restart, makes the replica
//! not ready.
//!
//! It does not decide which replica runs a receiver (that is `leader`), nor how a
//! connector skips a poisoned update (the connector knows its platform's ids).

use futures::FutureExt;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use troupe_connectors::sync::Locked;
use troupe_connectors::{Connector, InboundSink, panic_message};

/// The longest wait before a panicked loop is started again.
const MAX_RESTART_WAIT: Duration = Duration::from_secs(60);

/// What one receive loop is doing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum LoopState {
    /// Not started yet: serving has not begun, or another replica leads the receiver.
    #[default]
    Waiting,
    Running,
    /// `run` panicked; it is started again at `at`.
    Restarting {
        panic: String,
        at: Instant,
    },
    /// `run` gave up (`ConnectorError`): nothing receives until the persona is reloaded.
    Failed(String),
    /// `run` returned although nobody asked it to stop.
    Ended,
    /// Stopped because it was asked to (shutdown, a reload, leadership lost).
    Stopped,
}

/// One receive loop's state, and the panics it has had since it was spawned.
#[derive(Debug, Default)]
pub(crate) struct LoopStatus {
    inner: Mutex<(LoopState, u32)>,
}

impl LoopStatus {
    fn set(&self, state: LoopState) {
        self.inner.locked().0 = state;
    }

    fn panicked(&self, panic: String, at: Instant) -> u32 {
        let mut inner = self.inner.locked();
        inner.1 += 1;
        inner.0 = LoopState::Restarting { panic, at };
        inner.1
    }

    /// The state, and the panics so far.
    pub(crate) fn get(&self) -> (LoopState, u32) {
        self.inner.locked().clone()
    }

    /// Why this loop makes the replica not ready; `None` when it does not.
    pub(crate) fn problem(&self) -> Option<String> {
        let (state, panics) = self.get();
        match state {
            LoopState::Waiting | LoopState::Running | LoopState::Stopped => None,
            LoopState::Restarting { panic, at } => Some(format!(
                "the receive loop panicked ({panics} time(s); last: {panic}); restarting in {}s",
                at.saturating_duration_since(Instant::now()).as_secs()
            )),
            LoopState::Failed(error) => Some(format!("the receive loop stopped: {error}")),
            LoopState::Ended => Some("the receive loop stopped without being asked to".into()),
        }
    }
}

/// Every receive loop of this replica, by connector name (`agent/platform`; a sharded
/// Discord account has one loop per shard). A cheap-to-clone handle.
#[derive(Clone, Default)]
pub(crate) struct Receivers {
    by_connector: Arc<Mutex<HashMap<String, Vec<Arc<LoopStatus>>>>>,
}

impl Receivers {
    /// `count` fresh statuses for `connector`, replacing the loops of an earlier build
    /// (a reload stops those; what they report no longer matters).
    pub(crate) fn replace(&self, connector: &str, count: usize) -> Vec<Arc<LoopStatus>> {
        let fresh: Vec<_> = (0..count).map(|_| Arc::default()).collect();
        self.by_connector
            .locked()
            .insert(connector.to_string(), fresh.clone());
        fresh
    }

    /// The loops of `connector`, none when it has no receiver here.
    pub(crate) fn of(&self, connector: &str) -> Vec<Arc<LoopStatus>> {
        self.by_connector
            .locked()
            .get(connector)
            .cloned()
            .unwrap_or_default()
    }
}

/// The wait before start number `panics + 1`: 1 s, 2 s, 4 s … 60 s.
fn restart_wait(panics: u32) -> Duration {
    Duration::from_secs(1u64 << panics.clamp(1, 7).saturating_sub(1)).min(MAX_RESTART_WAIT)
}

/// Runs `connector`'s receive loop until `stop`, starting it again after a panic.
pub(crate) async fn supervise(
    connector: Arc<dyn Connector>,
    sink: Arc<dyn InboundSink>,
    stop: CancellationToken,
    status: Arc<LoopStatus>,
) {
    let mut panics = 0u32;
    loop {
        tracing::info!("connector starting");
        status.set(LoopState::Running);
        let started = Instant::now();
        // `AssertUnwindSafe`: after a panic the connector is only used through its own
        // locks, which recover from poisoning; a fresh `run` starts from its saved position.
        let outcome = AssertUnwindSafe(connector.run(sink.clone(), stop.clone()))
            .catch_unwind()
            .await;
        match outcome {
            Ok(Ok(())) if stop.is_cancelled() => {
                tracing::info!("connector stopped");
                status.set(LoopState::Stopped);
                return;
            }
            Ok(Ok(())) => {
                tracing::error!("connector's receive loop returned without being asked to stop");
                status.set(LoopState::Ended);
                return;
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, "connector failed");
                status.set(LoopState::Failed(e.to_string()));
                return;
            }
            Err(payload) => {
                if started.elapsed() > MAX_RESTART_WAIT {
                    panics = 0;
                }
                panics += 1;
                let wait = restart_wait(panics);
                let panic = panic_message(payload.as_ref());
                let total = status.panicked(panic.clone(), Instant::now() + wait);
                tracing::error!(%panic, panics = total, restart_in = ?wait,
                    "connector's receive loop panicked; starting it again");
                tokio::select! {
                    _ = stop.cancelled() => {
                        status.set(LoopState::Stopped);
                        return;
                    }
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use std::sync::atomic::{AtomicU32, Ordering};
    use troupe_connectors::{
        Accepted, ConnectorError, Delivery, Inbound, Outbound, Platform, SinkError,
    };

    /// Panics on its first `run`, then waits for shutdown.
    #[derive(Default)]
    struct PanicsOnce {
        runs: AtomicU32,
        second_run: tokio::sync::Notify,
    }

    #[async_trait]
    impl Connector for PanicsOnce {
        fn platform(&self) -> Platform {
            Platform::Telegram
        }
        async fn run(
            &self,
            _sink: Arc<dyn InboundSink>,
            shutdown: CancellationToken,
        ) -> Result<(), ConnectorError> {
            if self.runs.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("poisoned update");
            }
            self.second_run.notify_one();
            shutdown.cancelled().await;
            Ok(())
        }
        async fn send(&self, _reply: &Outbound) -> Result<Delivery, ConnectorError> {
            Ok(Delivery::default())
        }
    }

    struct NoSink;
    #[async_trait]
    impl InboundSink for NoSink {
        async fn accept(&self, _m: Inbound) -> Result<Accepted, SinkError> {
            Ok(Accepted::New)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_loop_is_reported_and_started_again() {
        let connector = Arc::new(PanicsOnce::default());
        let status = Receivers::default().replace("tess/telegram", 1).remove(0);
        let stop = CancellationToken::new();
        let task = tokio::spawn(supervise(
            connector.clone(),
            Arc::new(NoSink),
            stop.clone(),
            status.clone(),
        ));
        connector.second_run.notified().await;
        assert_eq!(connector.runs.load(Ordering::SeqCst), 2);
        assert_eq!(status.get(), (LoopState::Running, 1));
        assert_eq!(status.problem(), None);
        stop.cancel();
        task.await.unwrap();
        assert_eq!(status.get().0, LoopState::Stopped);
    }

    #[test]
    fn a_failed_or_restarting_loop_is_a_problem() {
        let status = LoopStatus::default();
        assert_eq!(status.problem(), None);
        status.panicked("boom".into(), Instant::now());
        assert!(
            status
                .problem()
                .unwrap()
                .contains("panicked (1 time(s); last: boom)")
        );
        status.set(LoopState::Failed("bad token".into()));
        assert!(status.problem().unwrap().contains("bad token"));
        assert_eq!(restart_wait(1), Duration::from_secs(1));
        assert_eq!(restart_wait(40), MAX_RESTART_WAIT);
    }
}
