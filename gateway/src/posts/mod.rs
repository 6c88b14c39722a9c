//! Autonomous posts (issue 34, docs/posts.md): personas that post on their own schedule,
//! once per run however many replicas run, within their budgets, and never into a muted
//! room.
//!
//! - `schedule`: what a schedule is (`every`/`jitter`/`at`/`timezone`, Farcaster's
//!   interval), parsed once; the next run after a moment;
//! - `settings`: the schedules a persona's settings ask for (Farcaster's elizaOS names,
//!   `settings.troupe.posts`);
//! - `compose`: the post's prompt, and the similarity check a draft passes;
//! - `runner`: the loop that claims due runs in the database, composes, and queues each
//!   post in the outbox (`storage::posts` keeps the claims).
//!
//! [`Posts`] is the handle the app, the HTTP API and the CLI use: it stores a persona's
//! schedules when the persona loads, and adds or removes the API's.

pub mod compose;
mod runner;
pub mod schedule;
pub mod settings;

use std::sync::Arc;
use tokio::sync::Notify;
use troupe_connectors::AgentId;

use crate::agent::Agents;
use crate::outbox::Outbox;
use crate::persona::{Env, Persona};
use crate::storage::{NewSchedule, ScheduleSource, Store, StoredSchedule};
use schedule::{Spec, SpecError};

/// How long a claim on a run lasts: composing (one or two model calls) must finish within
/// it, or another replica takes the run over.
pub const LEASE_MS: i64 = 120_000;

/// The longest number of API schedules one persona may have.
pub const API_SCHEDULES_MAX: usize = 50;

/// The app's handle on autonomous posts. Cheap to clone.
#[derive(Clone)]
pub struct Posts {
    store: Store,
    agents: Agents,
    outbox: Outbox,
    env: Arc<Env>,
    /// Wakes the runner when a schedule was added, so it does not wait for its next poll.
    wake: Arc<Notify>,
}

/// Why an API schedule was refused.
#[derive(Debug, thiserror::Error)]
pub enum AddError {
    #[error("{0}")]
    Invalid(#[from] SpecError),
    #[error("this persona has {API_SCHEDULES_MAX} schedules already; delete one first")]
    TooMany,
    #[error(transparent)]
    Storage(#[from] crate::storage::StorageError),
}

impl Posts {
    pub fn new(store: &Store, agents: &Agents, outbox: &Outbox, env: &Env) -> Posts {
        Posts {
            store: store.clone(),
            agents: agents.clone(),
            outbox: outbox.clone(),
            env: Arc::new(env.clone()),
            wake: Arc::new(Notify::new()),
        }
    }

    /// Stores the schedules a persona's settings ask for (and drops the ones they no longer
    /// name), logs where it will post and what in its settings is wrong. A schedule that
    /// did not change keeps its next run; `POST_IMMEDIATELY` brings it forward to now when
    /// the last post is at least one interval old, so a restart does not post every time.
    pub async fn load_persona(&self, persona: &Persona) -> anyhow::Result<()> {
        let wanted = settings::of(persona, &self.env);
        for problem in &wanted.problems {
            tracing::warn!(persona = %persona.id, "posts: {problem}");
        }
        match wanted.describe() {
            Some(where_) => tracing::info!(persona = %persona.id, "will post: {where_}"),
            None => tracing::debug!(persona = %persona.id, "posts nothing on its own"),
        }
        let now = crate::clock::now_ms();
        for source in [ScheduleSource::Env, ScheduleSource::File] {
            let keep: Vec<String> = wanted
                .wanted
                .iter()
                .filter(|w| w.source == source)
                .map(|w| w.id.clone())
                .collect();
            self.store.posts_retain(&persona.id, source, &keep).await?;
        }
        for w in &wanted.wanted {
            let parsed = w.spec.parse()?;
            let spec = serde_json::to_string(&w.spec)?;
            self.store
                .posts_put_schedule(
                    &persona.id,
                    &NewSchedule {
                        id: &w.id,
                        source: w.source,
                        room: &parsed.room,
                        spec: &spec,
                        first_run_ms: parsed.first_run(now),
                    },
                )
                .await?;
            if parsed.immediately {
                self.store
                    .posts_run_now(&persona.id, &w.id, now, parsed.min_gap_ms())
                    .await?;
            }
        }
        self.wake.notify_one();
        Ok(())
    }

    /// Adds a schedule through the API; returns it as stored. The room must be on a
    /// platform the persona runs on: a schedule posts only through its own connectors.
    pub async fn add(&self, persona: &Persona, spec: Spec) -> Result<StoredSchedule, AddError> {
        let agent = &persona.id;
        let parsed = spec.parse()?;
        settings::runs_on(persona, &parsed.room)?;
        let existing = self.store.posts_schedules(agent).await?;
        let api = existing.iter().filter(|s| s.source == ScheduleSource::Api);
        if api.count() >= API_SCHEDULES_MAX {
            return Err(AddError::TooMany);
        }
        let id = format!("api:{}", uuid::Uuid::new_v4().simple());
        let json = serde_json::to_string(&spec).map_err(|e| SpecError(e.to_string()))?;
        let now = crate::clock::now_ms();
        self.store
            .posts_put_schedule(
                agent,
                &NewSchedule {
                    id: &id,
                    source: ScheduleSource::Api,
                    room: &parsed.room,
                    spec: &json,
                    first_run_ms: parsed.first_run(now),
                },
            )
            .await?;
        self.wake.notify_one();
        let stored = self.store.posts_schedules(agent).await?;
        stored
            .into_iter()
            .find(|s| s.id == id)
            .ok_or_else(|| AddError::Invalid(SpecError("the schedule went away".into())))
    }

    /// Approves draft `id` of `agent` (issue 47): queued in the outbox once, then sent.
    pub async fn approve_draft(
        &self,
        agent: &AgentId,
        id: i64,
        by: &str,
    ) -> anyhow::Result<crate::storage::Decided> {
        crate::drafts::approve(&self.store, &self.outbox, agent, id, by).await
    }

    /// Removes an API schedule; `Ok(false)` when there is none of that id. Schedules from
    /// a file or the environment are changed there, not here.
    pub async fn remove(&self, agent: &AgentId, id: &str) -> Result<Removed, AddError> {
        let existing = self.store.posts_schedules(agent).await?;
        match existing.iter().find(|s| s.id == id) {
            None => Ok(Removed::NotFound),
            Some(s) if s.source != ScheduleSource::Api => Ok(Removed::NotFromApi(s.source)),
            Some(_) => {
                self.store.posts_delete_schedule(agent, id).await?;
                Ok(Removed::Gone)
            }
        }
    }

    /// Runs the scheduler until `shutdown`.
    pub async fn run(self, shutdown: tokio_util::sync::CancellationToken) {
        runner::Runner { posts: self }.run(shutdown).await
    }
}

/// What `Posts::remove` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    Gone,
    NotFound,
    /// The schedule comes from the character file or the environment.
    NotFromApi(ScheduleSource),
}
