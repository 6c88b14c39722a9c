//! The circuit breakers and the retry loop: one breaker per provider account (vendor, base
//! URL, key), shared by the personas on it. Bounded retries with backoff and jitter while
//! the circuit is closed; waiting (and telling the room once) while it is open; one probe
//! when it half-opens. See the module doc of `provider` and docs/architecture.md, "Faults".

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::watch;
use troupe_connectors::sync::Locked;
// The breaker's clock: tokio's, so a paused test clock drives it too.
use tokio::time::Instant as Moment;
use tokio_util::sync::CancellationToken;

use super::target::Target;
use super::{OutageNotice, ProviderError};
use crate::config::ProviderSettings;

/// One failed attempt, as the retry loop sees it.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) error: ProviderError,
    /// The provider may answer if asked again: a 5xx, a timeout, a 429, no connection.
    pub(super) transient: bool,
}

/// The circuit breakers, one per provider account (vendor, base URL and key), so personas
/// that share an account share what is known of its health. A cheap-to-clone handle; the
/// app holds one and closes it at shutdown.
#[derive(Clone)]
pub struct Breakers {
    settings: ProviderSettings,
    by_account: Arc<Mutex<HashMap<u64, Arc<Breaker>>>>,
    closing: CancellationToken,
    /// The model scheduler, whose accounts are keyed like the breakers (issue 16).
    scheduler: Option<crate::spend::Scheduler>,
}

impl Breakers {
    pub fn new(settings: ProviderSettings) -> Self {
        Breakers {
            settings,
            by_account: Default::default(),
            closing: CancellationToken::new(),
            scheduler: None,
        }
    }

    /// Puts every provider built with these breakers behind `scheduler`'s accounts.
    pub fn with_scheduler(mut self, scheduler: crate::spend::Scheduler) -> Self {
        self.scheduler = Some(scheduler);
        self
    }

    /// The hash that names `target`'s account (vendor, base URL, key): the maps hold no key.
    fn account_key(target: &Target) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (target.vendor.name(), &target.base_url, &target.api_key).hash(&mut h);
        h.finish()
    }

    /// The scheduler's account of `target`, when there is a scheduler.
    pub(super) fn account_for(
        &self,
        target: &Target,
    ) -> Option<Arc<crate::spend::scheduler::Account>> {
        let label = format!("{}:{}", target.vendor.name(), target.base_url);
        self.scheduler
            .as_ref()
            .map(|s| s.account(Self::account_key(target), &label))
    }

    /// The breaker of `target`'s account. The key is hashed so the map holds no copy of it.
    pub(super) fn for_target(&self, target: &Target) -> Arc<Breaker> {
        let mut map = self.by_account.locked();
        map.entry(Self::account_key(target))
            .or_insert_with(|| {
                Arc::new(Breaker::new(
                    format!("{}:{}", target.vendor.name(), target.base_url),
                    self.settings.clone(),
                    self.closing.clone(),
                ))
            })
            .clone()
    }

    /// Ends every wait for a provider to come back: at shutdown a waiting message fails
    /// now (it is driven again at the next start) instead of holding the drain.
    pub fn close(&self) {
        self.closing.cancel();
    }
}

/// The breaker's state machine, without clocks or locks: every transition takes `now`, so
/// tests drive it with made-up instants.
#[derive(Debug)]
struct Circuit {
    threshold: u32,
    cooldown: Duration,
    state: CircuitState,
    /// Outages so far; the current one's number while open or half-open.
    outages: u64,
    /// Notice keys already told of the current outage.
    noticed: HashSet<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CircuitState {
    /// Calls go through; `failures` in a row so far.
    Closed { failures: u32 },
    /// Calls wait until `until`, when one of them probes.
    Open { until: Moment },
    /// One probe is in flight; the others wait for its outcome.
    HalfOpen,
}

/// What a call may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admit {
    Call,
    /// Go, as the one probe of a half-open circuit.
    Probe,
    /// Wait (until the cool-down ends, or the probe's outcome when `None`).
    Wait {
        until: Option<Moment>,
        outage: u64,
    },
}

/// What a recorded outcome changed, for the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    None,
    Opened { outage: u64 },
    Closed { outage: u64 },
}

impl Circuit {
    fn new(threshold: u32, cooldown: Duration) -> Self {
        Circuit {
            threshold: threshold.max(1),
            cooldown,
            state: CircuitState::Closed { failures: 0 },
            outages: 0,
            noticed: HashSet::new(),
        }
    }

    fn admit(&mut self, now: Moment) -> Admit {
        match self.state {
            CircuitState::Closed { .. } => Admit::Call,
            CircuitState::Open { until } if now >= until => {
                self.state = CircuitState::HalfOpen;
                Admit::Probe
            }
            CircuitState::Open { until } => Admit::Wait {
                until: Some(until),
                outage: self.outages,
            },
            CircuitState::HalfOpen => Admit::Wait {
                until: None,
                outage: self.outages,
            },
        }
    }

    /// The provider answered (with a completion, or with an error that is not its trouble).
    fn succeeded(&mut self) -> Change {
        let was_down = !matches!(self.state, CircuitState::Closed { .. });
        self.state = CircuitState::Closed { failures: 0 };
        if was_down {
            self.noticed.clear();
            Change::Closed {
                outage: self.outages,
            }
        } else {
            Change::None
        }
    }

    /// A failure that may pass.
    fn failed(&mut self, now: Moment) -> Change {
        match self.state {
            CircuitState::Closed { failures } if failures + 1 >= self.threshold => self.open(now),
            CircuitState::Closed { failures } => {
                self.state = CircuitState::Closed {
                    failures: failures + 1,
                };
                Change::None
            }
            // The probe failed: the same outage goes on, for another cool-down.
            CircuitState::HalfOpen => {
                self.state = CircuitState::Open {
                    until: now + self.cooldown,
                };
                Change::None
            }
            // A call let through before the circuit opened: nothing new.
            CircuitState::Open { .. } => Change::None,
        }
    }

    /// A call used up its retries: open, whatever the count.
    fn trip(&mut self, now: Moment) -> Change {
        match self.state {
            CircuitState::Closed { .. } => self.open(now),
            _ => Change::None,
        }
    }

    /// The probe went away without an outcome (its caller was cancelled): the next call
    /// probes at once.
    fn probe_abandoned(&mut self, now: Moment) {
        if self.state == CircuitState::HalfOpen {
            self.state = CircuitState::Open { until: now };
        }
    }

    fn open(&mut self, now: Moment) -> Change {
        self.outages += 1;
        self.noticed.clear();
        self.state = CircuitState::Open {
            until: now + self.cooldown,
        };
        Change::Opened {
            outage: self.outages,
        }
    }

    /// The current outage's number, while the circuit is not closed.
    fn outage(&self) -> Option<u64> {
        match self.state {
            CircuitState::Closed { .. } => None,
            _ => Some(self.outages),
        }
    }

    /// Whether `key` is to be told of the current outage: true once per outage.
    fn first_notice(&mut self, key: &str) -> bool {
        self.outage().is_some() && self.noticed.insert(key.to_string())
    }
}

/// One account's breaker: the circuit behind a lock, a signal for its waiters, and the
/// retry loop every call of the account goes through.
pub(super) struct Breaker {
    /// `openai:http://…`, for the logs (never the key).
    label: String,
    settings: ProviderSettings,
    circuit: Mutex<Circuit>,
    /// Bumped on every change of state, to wake the waiting calls.
    changed: watch::Sender<u64>,
    closing: CancellationToken,
    /// Probes so far, in flight now, and the most in flight at once (unit tests).
    #[cfg(test)]
    probes_seen: std::sync::atomic::AtomicUsize,
    #[cfg(test)]
    probes_now: std::sync::atomic::AtomicUsize,
    #[cfg(test)]
    most_probes: std::sync::atomic::AtomicUsize,
}

/// Held by the probe; if the probe is dropped before its outcome is recorded, another call
/// may probe.
struct ProbeGuard<'a>(&'a Breaker);

impl<'a> ProbeGuard<'a> {
    fn new(breaker: &'a Breaker) -> Self {
        #[cfg(test)]
        {
            use std::sync::atomic::Ordering::SeqCst;
            breaker.probes_seen.fetch_add(1, SeqCst);
            let now = breaker.probes_now.fetch_add(1, SeqCst) + 1;
            breaker.most_probes.fetch_max(now, SeqCst);
        }
        ProbeGuard(breaker)
    }
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        #[cfg(test)]
        self.0
            .probes_now
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.0.lock().probe_abandoned(Moment::now());
        self.0.bump();
    }
}

impl Breaker {
    fn new(label: String, settings: ProviderSettings, closing: CancellationToken) -> Self {
        Breaker {
            label,
            circuit: Mutex::new(Circuit::new(
                settings.breaker_failures,
                settings.breaker_cooldown,
            )),
            settings,
            changed: watch::Sender::new(0),
            closing,
            #[cfg(test)]
            probes_seen: Default::default(),
            #[cfg(test)]
            probes_now: Default::default(),
            #[cfg(test)]
            most_probes: Default::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Circuit> {
        self.circuit.locked()
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Applies an outcome to the circuit, logs what changed and wakes the waiters.
    fn record(&self, apply: impl FnOnce(&mut Circuit) -> Change) {
        let change = apply(&mut self.lock());
        match change {
            Change::None => {}
            Change::Opened { outage } => {
                crate::metrics::error("provider_circuit_open");
                tracing::warn!(provider = %self.label, outage,
                    cool_down_ms = self.settings.breaker_cooldown.as_millis() as u64,
                    "the model provider keeps failing: circuit open, calls wait for it");
            }
            Change::Closed { outage } => {
                tracing::info!(provider = %self.label, outage,
                    "the model provider answers again: circuit closed");
            }
        }
        self.bump();
    }

    /// Waits until a call may go: `Ok(Some(guard))` when it goes as the probe, `Err(())`
    /// when the outage wait ran out or the app is closing.
    async fn admit(
        &self,
        notice: Option<&dyn OutageNotice>,
        give_up_at: Moment,
    ) -> Result<Option<ProbeGuard<'_>>, ()> {
        loop {
            // Subscribed before looking, so a change between the look and the wait wakes it.
            let mut changed = self.changed.subscribe();
            let now = Moment::now();
            let admit = self.lock().admit(now);
            let (until, outage) = match admit {
                Admit::Call => return Ok(None),
                Admit::Probe => {
                    tracing::info!(provider = %self.label, "probing the model provider");
                    return Ok(Some(ProbeGuard::new(self)));
                }
                Admit::Wait { until, outage } => (until, outage),
            };
            if let Some(notice) = notice {
                let first = self.lock().first_notice(&notice.key());
                if first {
                    tracing::info!(provider = %self.label, outage, "telling the room the model is unreachable");
                    notice.send().await;
                }
            }
            if now >= give_up_at || self.closing.is_cancelled() {
                return Err(());
            }
            let wake = until.map_or(give_up_at, |u| u.min(give_up_at));
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => {}
                _ = changed.changed() => {}
                _ = self.closing.cancelled() => return Err(()),
            }
        }
    }

    /// Runs one call through the breaker: bounded retries with backoff while the circuit is
    /// closed, waiting while it is open, the probe when it half-opens.
    pub(super) async fn call<T, F, Fut>(
        &self,
        notice: Option<&dyn OutageNotice>,
        mut attempt: F,
    ) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut + Send,
        Fut: std::future::Future<Output = Result<T, Failure>> + Send,
    {
        let s = &self.settings;
        // Only a call with someone to tell waits out an outage: a message from a platform
        // room. A caller waiting on the line (the HTTP API, `troupe chat`) and background
        // memory work get the provider's error once the retries are spent or the circuit is
        // open; their message stays journaled, and a repost drives it again.
        let give_up_at = if notice.is_some() {
            Moment::now() + s.outage_wait
        } else {
            Moment::now()
        };
        let mut retries_left = s.retries;
        let mut backoff = s.backoff;
        let mut last: Option<ProviderError> = None;
        let unavailable = |last: Option<ProviderError>| {
            last.unwrap_or_else(|| {
                ProviderError::Upstream("the model provider is unavailable".into())
            })
        };
        loop {
            let probe = match self.admit(notice, give_up_at).await {
                Ok(probe) => probe,
                Err(()) => return Err(unavailable(last)),
            };
            let result = attempt().await;
            let now = Moment::now();
            let failure = match result {
                Ok(completion) => {
                    self.record(Circuit::succeeded);
                    drop(probe);
                    return Ok(completion);
                }
                Err(f) if !f.transient => {
                    // The provider answered: it is up, and this request is what it refused.
                    self.record(Circuit::succeeded);
                    drop(probe);
                    return Err(f.error);
                }
                Err(f) => f,
            };
            self.record(|c| c.failed(now));
            drop(probe);
            tracing::warn!(provider = %self.label, error = %failure.error, retries_left, "model call failed");
            let retry_after = match failure.error {
                ProviderError::RateLimited { retry_after } => retry_after,
                _ => None,
            };
            last = Some(failure.error);
            if self.lock().outage().is_some() {
                // Open: wait for the provider rather than retry.
                continue;
            }
            if retries_left == 0 {
                self.record(|c| c.trip(now));
                continue;
            }
            retries_left -= 1;
            let wait = retry_after
                .map(|d| d.min(s.backoff_max))
                .unwrap_or_else(|| jitter(backoff));
            backoff = (backoff * 2).min(s.backoff_max);
            if now + wait >= give_up_at {
                return Err(unavailable(last));
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.closing.cancelled() => return Err(unavailable(last)),
            }
        }
    }
}

/// Half of `wait` fixed, half random: retries of many calls that failed together spread out.
fn jitter(wait: Duration) -> Duration {
    let half = wait / 2;
    let spread = half.as_millis() as u64;
    half + Duration::from_millis(if spread == 0 {
        0
    } else {
        rand::random_range(0..=spread)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Completion;
    use crate::provider::target::Vendor;
    use async_trait::async_trait;

    fn at(base: Moment, ms: u64) -> Moment {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn the_circuit_opens_after_k_failures_in_a_row_and_a_probe_closes_it() {
        let t0 = Moment::now();
        let mut c = Circuit::new(3, Duration::from_millis(100));
        assert_eq!(c.failed(at(t0, 0)), Change::None);
        assert_eq!(c.failed(at(t0, 1)), Change::None);
        assert_eq!(c.admit(at(t0, 1)), Admit::Call);
        assert_eq!(c.failed(at(t0, 2)), Change::Opened { outage: 1 });
        // Open: calls wait for the cool-down.
        assert_eq!(
            c.admit(at(t0, 50)),
            Admit::Wait {
                until: Some(at(t0, 102)),
                outage: 1
            }
        );
        // After it, exactly one call probes; the rest wait for its outcome.
        assert_eq!(c.admit(at(t0, 102)), Admit::Probe);
        assert_eq!(
            c.admit(at(t0, 103)),
            Admit::Wait {
                until: None,
                outage: 1
            }
        );
        assert_eq!(c.succeeded(), Change::Closed { outage: 1 });
        assert_eq!(c.admit(at(t0, 104)), Admit::Call);
        assert_eq!(c.outage(), None);
    }

    #[test]
    fn a_success_between_failures_resets_the_count() {
        let t0 = Moment::now();
        let mut c = Circuit::new(2, Duration::from_millis(100));
        for i in 0..10 {
            assert_eq!(c.failed(at(t0, i)), Change::None);
            assert_eq!(c.succeeded(), Change::None);
        }
        assert_eq!(c.admit(at(t0, 20)), Admit::Call);
    }

    #[test]
    fn a_failed_probe_reopens_the_same_outage_and_each_room_hears_once() {
        let t0 = Moment::now();
        let mut c = Circuit::new(1, Duration::from_millis(10));
        assert_eq!(c.failed(t0), Change::Opened { outage: 1 });
        assert!(c.first_notice("ada/room-1"));
        assert!(!c.first_notice("ada/room-1"));
        assert!(c.first_notice("ada/room-2"));
        assert_eq!(c.admit(at(t0, 10)), Admit::Probe);
        // The probe fails: still outage 1, for another cool-down, no new notices.
        assert_eq!(c.failed(at(t0, 11)), Change::None);
        assert_eq!(
            c.admit(at(t0, 12)),
            Admit::Wait {
                until: Some(at(t0, 21)),
                outage: 1
            }
        );
        assert!(!c.first_notice("ada/room-1"));
        // An abandoned probe lets the next call probe at once.
        assert_eq!(c.admit(at(t0, 21)), Admit::Probe);
        c.probe_abandoned(at(t0, 22));
        assert_eq!(c.admit(at(t0, 22)), Admit::Probe);
        assert_eq!(c.succeeded(), Change::Closed { outage: 1 });
        // No notices while closed; the next outage is told again.
        assert!(!c.first_notice("ada/room-1"));
        assert_eq!(c.trip(at(t0, 30)), Change::Opened { outage: 2 });
        assert!(c.first_notice("ada/room-1"));
    }

    fn fast_settings() -> ProviderSettings {
        ProviderSettings {
            retries: 2,
            backoff: Duration::from_millis(1),
            backoff_max: Duration::from_millis(4),
            breaker_failures: 10,
            breaker_cooldown: Duration::from_millis(20),
            outage_wait: Duration::from_secs(30),
        }
    }

    fn completion(text: &str) -> Completion {
        Completion {
            text: text.into(),
            prompt_tokens: None,
            completion_tokens: None,
            cached_tokens: None,
        }
    }

    fn server_error() -> Failure {
        Failure {
            error: ProviderError::Upstream("500 Internal Server Error".into()),
            transient: true,
        }
    }

    /// A provider that fails `fail` times (transiently), then answers; it counts attempts
    /// and the most attempts in flight at once.
    #[derive(Default)]
    struct Flaky {
        fail: std::sync::atomic::AtomicUsize,
        attempts: std::sync::atomic::AtomicUsize,
        in_flight: std::sync::atomic::AtomicUsize,
        most_in_flight: std::sync::atomic::AtomicUsize,
    }

    impl Flaky {
        fn failing(n: usize) -> Arc<Self> {
            let f = Flaky::default();
            f.fail.store(n, std::sync::atomic::Ordering::SeqCst);
            Arc::new(f)
        }
        async fn attempt(&self) -> Result<Completion, Failure> {
            use std::sync::atomic::Ordering::SeqCst;
            self.attempts.fetch_add(1, SeqCst);
            let now = self.in_flight.fetch_add(1, SeqCst) + 1;
            self.most_in_flight.fetch_max(now, SeqCst);
            tokio::task::yield_now().await;
            self.in_flight.fetch_sub(1, SeqCst);
            let left = self.fail.load(SeqCst);
            if left > 0 {
                self.fail.store(left - 1, SeqCst);
                Err(server_error())
            } else {
                Ok(completion("back"))
            }
        }
        fn attempts(&self) -> usize {
            self.attempts.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    #[derive(Default)]
    struct Notices(Mutex<Vec<String>>, String);

    #[async_trait]
    impl OutageNotice for Notices {
        fn key(&self) -> String {
            self.1.clone()
        }
        async fn send(&self) {
            self.0.lock().unwrap().push(self.1.clone());
        }
    }

    #[tokio::test]
    async fn retries_are_bounded_then_the_call_waits_for_the_provider_and_is_answered() {
        let breakers = Breakers::new(fast_settings());
        let breaker = Breaker::new("test".into(), fast_settings(), breakers.closing.clone());
        // 3 attempts (2 retries) trip the circuit; two failed probes; the third answers.
        let flaky = Flaky::failing(5);
        let notices = Notices(Mutex::default(), "ada/room".into());
        let result = breaker
            .call(Some(&notices), || {
                let flaky = flaky.clone();
                async move { flaky.attempt().await }
            })
            .await;
        assert_eq!(result.unwrap().text, "back");
        assert_eq!(flaky.attempts(), 6);
        // The room heard once, though the call waited through three cool-downs.
        assert_eq!(notices.0.lock().unwrap().len(), 1);
        assert_eq!(breaker.lock().outage(), None);
    }

    #[tokio::test]
    async fn an_error_that_is_not_transient_is_not_retried() {
        let breaker = Breaker::new("test".into(), fast_settings(), CancellationToken::new());
        let attempts = std::sync::atomic::AtomicUsize::new(0);
        let result: Result<(), ProviderError> = breaker
            .call(None, || {
                attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async {
                    Err(Failure {
                        error: ProviderError::Upstream("400 Bad Request".into()),
                        transient: false,
                    })
                }
            })
            .await;
        assert!(matches!(result, Err(ProviderError::Upstream(_))));
        assert_eq!(attempts.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn while_open_only_one_probe_runs_and_every_waiting_call_is_answered() {
        let settings = ProviderSettings {
            breaker_failures: 1,
            retries: 0,
            ..fast_settings()
        };
        let breaker = Arc::new(Breaker::new(
            "test".into(),
            settings,
            CancellationToken::new(),
        ));
        // The provider is down when the calls come: the circuit is open, the next three
        // probes fail.
        breaker.record(|c| c.trip(Moment::now()));
        let flaky = Flaky::failing(3);
        let notices = Arc::new(Notices(Mutex::default(), "ada/room".into()));
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let (breaker, flaky, notices) = (breaker.clone(), flaky.clone(), notices.clone());
            calls.spawn(async move {
                breaker
                    .call(Some(notices.as_ref()), || {
                        let flaky = flaky.clone();
                        async move { flaky.attempt().await }
                    })
                    .await
            });
        }
        while let Some(done) = calls.join_next().await {
            assert_eq!(done.unwrap().unwrap().text, "back");
        }
        assert_eq!(notices.0.lock().unwrap().len(), 1, "one notice per room");
        // Four probes, one at a time, then the seven other calls once the circuit closed.
        assert_eq!(flaky.attempts(), 4 + 7);
        assert_eq!(
            breaker
                .probes_seen
                .load(std::sync::atomic::Ordering::SeqCst),
            3 + 1,
            "three failed probes and the one that closed the circuit"
        );
        assert_eq!(
            breaker
                .most_probes
                .load(std::sync::atomic::Ordering::SeqCst),
            1
        );
    }

    #[tokio::test]
    async fn without_a_room_to_tell_an_open_circuit_fails_at_once() {
        let settings = ProviderSettings {
            breaker_failures: 1,
            breaker_cooldown: Duration::from_secs(3600),
            ..fast_settings()
        };
        let breaker = Breaker::new("test".into(), settings, CancellationToken::new());
        breaker.record(|c| c.trip(Moment::now()));
        let result = tokio::time::timeout(
            Duration::from_secs(10),
            breaker.call(None, || async { Ok(completion("never")) }),
        )
        .await
        .expect("an HTTP caller does not wait out an outage");
        assert!(result.is_err(), "{result:?}");
    }

    #[tokio::test]
    async fn closing_ends_the_wait_for_an_open_circuit() {
        let settings = ProviderSettings {
            breaker_failures: 1,
            breaker_cooldown: Duration::from_secs(3600),
            ..fast_settings()
        };
        let closing = CancellationToken::new();
        let breaker = Arc::new(Breaker::new("test".into(), settings, closing.clone()));
        breaker.record(|c| c.trip(Moment::now()));
        let waiting = {
            let breaker = breaker.clone();
            tokio::spawn(async move {
                let notices = Notices::default();
                breaker
                    .call(Some(&notices), || async { Ok(completion("never")) })
                    .await
            })
        };
        // It waits (the cool-down is an hour) until the app closes.
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        closing.cancel();
        let result = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("closing ends the wait")
            .unwrap();
        assert!(result.is_err());
    }

    #[test]
    fn jitter_stays_between_half_and_all_of_the_wait() {
        for _ in 0..100 {
            let j = jitter(Duration::from_millis(100));
            assert!(
                j >= Duration::from_millis(50) && j <= Duration::from_millis(100),
                "{j:?}"
            );
        }
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn accounts_share_a_breaker_and_others_do_not() {
        let breakers = Breakers::new(fast_settings());
        let target = |key: &str| Target {
            vendor: Vendor::OpenAi,
            base_url: "http://127.0.0.1:9/v1".into(),
            api_key: Some(key.into()),
            model: "m".into(),
        };
        let a = breakers.for_target(&target("k1"));
        assert!(Arc::ptr_eq(&a, &breakers.for_target(&target("k1"))));
        assert!(!Arc::ptr_eq(&a, &breakers.for_target(&target("k2"))));
        assert!(!a.label.contains("k1"), "the label holds no key");
    }
}
