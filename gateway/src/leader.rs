//! Leadership between replicas: which process runs a receiver that its platform allows only
//! once at a time (Telegram's `getUpdates`, Farcaster's notification polling, one Discord
//! shard).
//!
//! On Postgres, leadership of a named receiver is a session advisory lock
//! (`pg_try_advisory_lock`) taken on a connection of its own, outside the pool, and held for
//! as long as the receiver runs: pooled connections are shared and recycled, and a session
//! lock belongs to the connection that took it. When the process dies its socket closes and
//! the server releases the lock; a replica on standby asks again every
//! `TROUPE_LEADER_RETRY_SECS` and takes over. The leader checks its lock connection as often;
//! a failed or hung check cancels the receiver's token before anything else, so a replica
//! that lost the database stops polling instead of running beside the new leader.
//!
//! On SQLite there is one process per database file, so it leads everything at once.
//!
//! It owns the lock keys and the connections that hold them; it knows nothing of platforms:
//! the receiver's name (`telegram:<bot id>`) comes from `Connector::receiving`.

use std::collections::BTreeMap;
use std::future::Future;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use troupe_connectors::sync::Locked;

use serde::Serialize;
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// How long a lock connection may take to answer `SELECT 1` before the leader assumes it is
/// gone. Longer than any healthy round trip, short enough that a replica cut off from the
/// database stops its receiver well before a takeover could be noticed by users.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// This replica's part in one named receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// It holds the lock: the receiver runs here.
    Leader,
    /// Another replica holds it (or the database cannot be reached): waiting to take over.
    Standby,
}

/// Decides, per named receiver, whether it runs in this process. A cheap-to-clone handle.
#[derive(Clone)]
pub struct Elector {
    inner: Arc<Inner>,
}

struct Inner {
    /// `None` on SQLite: every receiver runs here.
    postgres: Option<PgConnectOptions>,
    retry: Duration,
    roles: Mutex<BTreeMap<String, Role>>,
    /// The connector (`<agent>/<platform>`) each receiver belongs to, for health reports.
    owners: Mutex<BTreeMap<String, String>>,
}

/// Why a term of leadership ended.
enum TermEnd {
    /// The work returned by itself (the connector stopped or failed).
    WorkEnded,
    /// The lock connection failed a check: the work was stopped.
    Lost,
    /// Shutdown.
    Shutdown,
}

impl Elector {
    /// Leadership over the database at `database_url`: advisory locks on Postgres, trivial
    /// on SQLite. `retry` is how often a standby asks for the lock and how often a leader
    /// checks that it still holds it.
    pub(crate) fn for_database(database_url: &str, retry: Duration) -> anyhow::Result<Elector> {
        let postgres = if database_url.starts_with("postgres://")
            || database_url.starts_with("postgresql://")
        {
            let options = PgConnectOptions::from_str(database_url).map_err(|e| {
                anyhow::anyhow!(
                    "TROUPE_DATABASE_URL {} is not a Postgres URL: {e}",
                    crate::config::redact_url(database_url)
                )
            })?;
            // Named in pg_stat_activity, so an operator can see who holds which lock.
            Some(options.application_name("troupe-leader"))
        } else {
            None
        };
        Ok(Elector {
            inner: Arc::new(Inner {
                postgres,
                retry: retry.max(Duration::from_millis(100)),
                roles: Mutex::new(BTreeMap::new()),
                owners: Mutex::new(BTreeMap::new()),
            }),
        })
    }

    /// Every receiver this process runs or waits to run, with its role.
    pub fn roles(&self) -> BTreeMap<String, Role> {
        self.lock_roles().clone()
    }

    /// Says that `receiver` receives for the connector `connector_id` (`<agent>/<platform>`).
    pub(crate) fn attach(&self, receiver: &str, connector_id: &str) {
        self.inner
            .owners
            .locked()
            .insert(receiver.to_string(), connector_id.to_string());
    }

    /// The role of each connector with a led receiver, by `<agent>/<platform>`: `Leader`
    /// when any of its receivers (Discord shards) runs here, else `Standby`. Connectors
    /// that receive everywhere are not listed. This is what `/readyz` can show as
    /// `standby`.
    pub fn connector_roles(&self) -> BTreeMap<String, Role> {
        let owners = self.inner.owners.locked().clone();
        let mut by_connector = BTreeMap::new();
        for (receiver, role) in self.roles() {
            let Some(connector) = owners.get(&receiver) else {
                continue;
            };
            let entry = by_connector
                .entry(connector.clone())
                .or_insert(Role::Standby);
            if role == Role::Leader {
                *entry = Role::Leader;
            }
        }
        by_connector
    }

    /// Runs `work` whenever this process leads `name`, until `shutdown`. `work` gets a token
    /// that is cancelled when leadership is lost (or at shutdown) and must return promptly
    /// then. When `work` returns by itself, leadership is given up and this returns: the
    /// receiver ended for a reason a takeover would not fix here.
    ///
    /// `slots`, when given, caps how many receivers sharing it this process leads at once
    /// (a Discord shard budget); a permit is taken before asking for the lock.
    pub(crate) async fn lead<F, Fut>(
        &self,
        name: &str,
        shutdown: &CancellationToken,
        slots: Option<Arc<Semaphore>>,
        mut work: F,
    ) where
        F: FnMut(CancellationToken) -> Fut,
        Fut: Future<Output = ()>,
    {
        let Some(options) = self.inner.postgres.clone() else {
            self.set_role(name, Role::Leader);
            work(shutdown.child_token()).await;
            self.forget(name);
            return;
        };
        let key = lock_key(name);
        let mut conn: Option<PgConnection> = None;
        let mut announced: Option<Role> = None;
        loop {
            if shutdown.is_cancelled() {
                break;
            }
            let permit = match &slots {
                None => None,
                Some(slots) => match slots.clone().try_acquire_owned() {
                    Ok(permit) => Some(permit),
                    // At the cap: another receiver of the budget would have to end first.
                    Err(_) => {
                        self.standby(name, &mut announced, None);
                        if !self.wait_retry(shutdown).await {
                            break;
                        }
                        continue;
                    }
                },
            };
            match try_lock(&options, &mut conn, key).await {
                Ok(true) => {
                    let Some(held) = conn.take() else { continue };
                    match self.term(name, held, shutdown, permit, &mut work).await {
                        TermEnd::WorkEnded => {
                            self.forget(name);
                            return;
                        }
                        // The term already said why; no "standing by" line on top of it.
                        TermEnd::Lost => announced = Some(Role::Standby),
                        TermEnd::Shutdown => break,
                    }
                }
                Ok(false) => self.standby(name, &mut announced, None),
                Err(e) => {
                    conn = None;
                    self.standby(name, &mut announced, Some(&e));
                }
            }
            if !self.wait_retry(shutdown).await {
                break;
            }
        }
        if let Some(c) = conn {
            let _ = c.close().await;
        }
        self.forget(name);
    }

    /// One term of leadership: runs the work while checking the lock connection.
    async fn term<F, Fut>(
        &self,
        name: &str,
        mut held: PgConnection,
        shutdown: &CancellationToken,
        permit: Option<OwnedSemaphorePermit>,
        work: &mut F,
    ) -> TermEnd
    where
        F: FnMut(CancellationToken) -> Fut,
        Fut: Future<Output = ()>,
    {
        self.set_role(name, Role::Leader);
        tracing::info!(receiver = name, "this replica leads; starting the receiver");
        let lost = shutdown.child_token();
        let running = work(lost.clone());
        tokio::pin!(running);
        let mut checks = tokio::time::interval(self.inner.retry);
        checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        checks.tick().await;
        let end = loop {
            tokio::select! {
                () = &mut running => {
                    break if shutdown.is_cancelled() { TermEnd::Shutdown } else { TermEnd::WorkEnded };
                }
                _ = checks.tick() => {
                    let check = tokio::time::timeout(
                        CHECK_TIMEOUT,
                        sqlx::query("SELECT 1").execute(&mut held),
                    )
                    .await;
                    let failure = match check {
                        Ok(Ok(_)) => continue,
                        Ok(Err(e)) => e.to_string(),
                        Err(_) => format!("no answer within {CHECK_TIMEOUT:?}"),
                    };
                    // Stop first: another replica may take the lock as soon as the server
                    // drops this session.
                    lost.cancel();
                    tracing::error!(receiver = name, error = %failure,
                        "lost the leadership connection; stopping the receiver");
                    running.as_mut().await;
                    break TermEnd::Lost;
                }
            }
        };
        self.set_role(name, Role::Standby);
        drop(permit);
        match end {
            // The work ended on its own, or at shutdown: hand the lock over at once rather
            // than when the socket closes.
            TermEnd::WorkEnded | TermEnd::Shutdown => {
                let _ = held.close().await;
            }
            // The connection is already broken; dropping it closes the socket.
            TermEnd::Lost => drop(held),
        }
        end
    }

    /// Records standby, logging only when the role changes.
    fn standby(&self, name: &str, announced: &mut Option<Role>, error: Option<&sqlx::Error>) {
        self.set_role(name, Role::Standby);
        match error {
            Some(e) => tracing::warn!(receiver = name, error = %e,
                "cannot ask the database for leadership; the receiver stays off"),
            None if *announced != Some(Role::Standby) => tracing::info!(
                receiver = name,
                retry_secs = self.inner.retry.as_secs_f64(),
                "another replica leads; standing by"
            ),
            None => {}
        }
        *announced = Some(Role::Standby);
    }

    /// Waits one retry period; `false` when shutdown came first.
    async fn wait_retry(&self, shutdown: &CancellationToken) -> bool {
        tokio::select! {
            () = shutdown.cancelled() => false,
            () = tokio::time::sleep(self.inner.retry) => true,
        }
    }

    fn set_role(&self, name: &str, role: Role) {
        metrics::gauge!("troupe_leader", "receiver" => name.to_string()).set(match role {
            Role::Leader => 1.0,
            Role::Standby => 0.0,
        });
        self.lock_roles().insert(name.to_string(), role);
    }

    fn forget(&self, name: &str) {
        metrics::gauge!("troupe_leader", "receiver" => name.to_string()).set(0.0);
        self.lock_roles().remove(name);
    }

    fn lock_roles(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Role>> {
        self.inner.roles.locked()
    }
}

/// Asks for the lock on the standby connection, opening it when needed. The connection is
/// kept between attempts so that a standby costs one idle session, not one per attempt.
async fn try_lock(
    options: &PgConnectOptions,
    conn: &mut Option<PgConnection>,
    key: i64,
) -> Result<bool, sqlx::Error> {
    if conn.is_none() {
        *conn = Some(PgConnection::connect_with(options).await?);
    }
    let Some(c) = conn.as_mut() else {
        return Ok(false);
    };
    tokio::time::timeout(
        CHECK_TIMEOUT,
        sqlx::query_scalar::<_, bool>("SELECT pg_try_advisory_lock($1)")
            .bind(key)
            .fetch_one(c),
    )
    .await
    .unwrap_or(Err(sqlx::Error::PoolTimedOut))
}

/// The advisory lock key of a receiver name: FNV-1a over `troupe:<name>`. Written out
/// rather than taken from `std::hash`, whose output may change between Rust releases: two
/// replicas built apart (a rolling upgrade) must agree on every key.
pub(crate) fn lock_key(name: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in b"troupe:".iter().chain(name.as_bytes()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::disallowed_methods)] // tests pick their database from the environment

    use super::*;
    use tokio::sync::watch;

    /// The Postgres server of `TROUPE_TEST_DATABASE_URL`; under `CI=true` its absence fails.
    fn postgres_url() -> Option<String> {
        // libtest names the thread after the test: the note says which was skipped.
        let thread = std::thread::current();
        troupe_e2e::env::postgres_url(thread.name().unwrap_or("a leader test"))
    }

    /// A receiver name no other test run uses, so parallel runs never share a lock.
    fn unique_name() -> String {
        format!("test:{}", uuid::Uuid::new_v4().simple())
    }

    #[test]
    fn keys_are_stable_and_distinct() {
        // Pinned: a change here would let two versions of troupe lead the same bot at once.
        assert_eq!(lock_key("telegram:123"), lock_key("telegram:123"));
        assert_ne!(lock_key("telegram:123"), lock_key("telegram:124"));
        assert_eq!(
            lock_key(""),
            i64::from_ne_bytes(0xcce8_b247_ae29_715au64.to_ne_bytes())
        );
    }

    #[tokio::test]
    async fn on_sqlite_every_receiver_leads() {
        let elector = Elector::for_database("sqlite://data/x.db", Duration::from_secs(1)).unwrap();
        let shutdown = CancellationToken::new();
        let (ran_tx, mut ran) = watch::channel(false);
        let probe = elector.clone();
        elector
            .lead("telegram:1", &shutdown, None, |_stop| {
                let ran_tx = ran_tx.clone();
                let roles = probe.roles();
                async move {
                    assert_eq!(roles.get("telegram:1"), Some(&Role::Leader));
                    let _ = ran_tx.send(true);
                }
            })
            .await;
        assert!(*ran.borrow_and_update());
        assert!(elector.roles().is_empty());
    }

    #[test]
    fn connector_roles_sum_up_the_receivers() {
        let elector = Elector::for_database("sqlite://data/x.db", Duration::from_secs(1)).unwrap();
        elector.attach("discord:7:shard-0-of-2", "tess/discord");
        elector.attach("discord:7:shard-1-of-2", "tess/discord");
        elector.attach("telegram:9", "tess/telegram");
        elector.set_role("discord:7:shard-0-of-2", Role::Standby);
        elector.set_role("discord:7:shard-1-of-2", Role::Leader);
        elector.set_role("telegram:9", Role::Standby);
        let roles = elector.connector_roles();
        assert_eq!(roles.get("tess/discord"), Some(&Role::Leader));
        assert_eq!(roles.get("tess/telegram"), Some(&Role::Standby));
        assert_eq!(roles.len(), 2);
    }

    #[test]
    fn a_bad_postgres_url_is_an_error_without_the_password() {
        let err = match Elector::for_database(
            "postgres://u:hunter2@host:notaport/db",
            Duration::from_secs(1),
        ) {
            Ok(_) => panic!("a malformed URL was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("TROUPE_DATABASE_URL"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }

    /// Two sessions ask for one lock: one wins; when its session ends, the other wins.
    #[tokio::test]
    async fn the_lock_has_one_holder_until_its_session_ends() {
        let Some(url) = postgres_url() else { return };
        let key = lock_key(&unique_name());
        let options = PgConnectOptions::from_str(&url).unwrap();
        let (mut a, mut b) = (None, None);
        assert!(try_lock(&options, &mut a, key).await.unwrap());
        assert!(!try_lock(&options, &mut b, key).await.unwrap());
        // Asking again from the other session still fails while the first one lives.
        assert!(!try_lock(&options, &mut b, key).await.unwrap());
        // The holder's session ends (as when its process dies): the lock becomes free once
        // the server has ended that backend, which `close` does not wait for. Polled, with
        // a hang guard; the delay is not asserted.
        a.take().unwrap().close().await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !try_lock(&options, &mut b, key).await.unwrap() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the lock was never released"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        b.take().unwrap().close().await.unwrap();
    }

    /// Two electors for one receiver: exactly one runs the work; when the leader's lock
    /// session is killed on the server (a crash, a network cut), the leader stops its work
    /// and a new term starts, here or in the other elector.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lost_session_stops_the_work_and_a_new_term_starts() {
        let Some(url) = postgres_url() else { return };
        let name = unique_name();
        let retry = Duration::from_millis(200);
        let shutdown = CancellationToken::new();
        // Terms running now, and terms started so far.
        let (running_tx, mut running) = watch::channel(0usize);
        let (started_tx, mut started) = watch::channel(0usize);
        let mut tasks = Vec::new();
        for _ in 0..2 {
            let elector = Elector::for_database(&url, retry).unwrap();
            let (running_tx, started_tx) = (running_tx.clone(), started_tx.clone());
            let (name, shutdown) = (name.clone(), shutdown.clone());
            tasks.push(tokio::spawn(async move {
                elector
                    .lead(&name, &shutdown, None, |stop| {
                        let (running_tx, started_tx) = (running_tx.clone(), started_tx.clone());
                        async move {
                            running_tx.send_modify(|n| *n += 1);
                            started_tx.send_modify(|n| *n += 1);
                            stop.cancelled().await;
                            running_tx.send_modify(|n| *n -= 1);
                        }
                    })
                    .await;
            }));
        }
        let wait = Duration::from_secs(30);
        tokio::time::timeout(wait, started.wait_for(|n| *n >= 1))
            .await
            .unwrap()
            .unwrap();
        // One session holds the lock, and one term runs.
        let mut admin = PgConnection::connect(&url).await.unwrap();
        let holders = || {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM pg_locks
                 WHERE locktype = 'advisory' AND granted
                   AND ((classid::bigint << 32) | objid::bigint) = $1",
            )
            .bind(lock_key(&name))
        };
        assert_eq!(holders().fetch_one(&mut admin).await.unwrap(), 1);
        assert_eq!(*running.borrow(), 1);
        assert_eq!(*started.borrow(), 1);

        // End the leader's session from the server side.
        let terminated: i64 = sqlx::query_scalar(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_locks
             WHERE locktype = 'advisory' AND granted
               AND ((classid::bigint << 32) | objid::bigint) = $1",
        )
        .bind(lock_key(&name))
        .fetch_one(&mut admin)
        .await
        .unwrap();
        assert_eq!(terminated, 1);

        // A new term starts (the lost one was stopped: every start after the first follows
        // a stop or a takeover by the other elector).
        tokio::time::timeout(wait, started.wait_for(|n| *n >= 2))
            .await
            .unwrap()
            .unwrap();
        // And it settles to one term again: the old leader noticed and stopped its work.
        tokio::time::timeout(wait, running.wait_for(|n| *n == 1))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(holders().fetch_one(&mut admin).await.unwrap(), 1);
        shutdown.cancel();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*running.borrow(), 0);
        // At shutdown the lock is handed back (closed sessions end just after; polled).
        let deadline = tokio::time::Instant::now() + wait;
        while holders().fetch_one(&mut admin).await.unwrap() != 0 {
            assert!(tokio::time::Instant::now() < deadline, "the lock was kept");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A slot budget caps how many receivers one process leads.
    #[tokio::test]
    async fn slots_cap_the_receivers_led() {
        let Some(url) = postgres_url() else { return };
        let elector = Elector::for_database(&url, Duration::from_millis(100)).unwrap();
        let slots = Arc::new(Semaphore::new(1));
        let shutdown = CancellationToken::new();
        let (count_tx, mut count) = watch::channel(0usize);
        let mut tasks = Vec::new();
        for _ in 0..2 {
            let (elector, slots, shutdown) = (elector.clone(), slots.clone(), shutdown.clone());
            let count_tx = count_tx.clone();
            let name = unique_name();
            tasks.push(tokio::spawn(async move {
                elector
                    .lead(&name, &shutdown, Some(slots), |stop| {
                        let count_tx = count_tx.clone();
                        async move {
                            count_tx.send_modify(|n| *n += 1);
                            stop.cancelled().await;
                        }
                    })
                    .await;
            }));
        }
        tokio::time::timeout(Duration::from_secs(30), count.wait_for(|n| *n >= 1))
            .await
            .unwrap()
            .unwrap();
        // Both names are free, yet only one is led; the other waits for a slot.
        let roles = elector.roles();
        assert_eq!(
            roles.values().filter(|r| **r == Role::Leader).count(),
            1,
            "{roles:?}"
        );
        assert_eq!(*count.borrow(), 1);
        shutdown.cancel();
        for t in tasks {
            t.await.unwrap();
        }
    }
}
