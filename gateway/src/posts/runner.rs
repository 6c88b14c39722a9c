//! The scheduler loop: every replica runs one. It takes over runs whose claimer died, then
//! claims the due ones (`storage::posts`: one winner per run), and for each run it holds:
//! checks the room's mute and the persona's budget, composes the post with the model (the
//! scheduler's background turn, counted as purpose `post`), checks it against the
//! persona's recent posts (one rewrite, then skip), and queues it in the outbox in the
//! same transaction that settles the run. The outbox sends it, once.
//!
//! The loop waits until the next run is due, or `POLL` at most (a schedule added through
//! another replica), or a wake from this replica's API.

use std::time::Duration;
use troupe_connectors::Platform;

use super::compose::{self, PostInput};
use super::schedule::{Schedule, Spec};
use super::{LEASE_MS, Posts};
use crate::agent::Mind;
use crate::spend::{Admission, Meter, Purpose, Who};
use crate::storage::{ClaimedRun, RecentRuns, RoomContext, RoomReads, RunEnd, StoredSchedule};

/// The longest wait between two looks at the schedules.
const POLL: Duration = Duration::from_secs(5);
/// Runs claimed or taken over per look.
const BATCH: i64 = 16;

pub(super) struct Runner {
    pub(super) posts: Posts,
}

/// What a run that may post goes on with: the persona, its meter, and its room's controls,
/// recent messages and summary.
type Admitted = (std::sync::Arc<Mind>, Option<Meter>, RoomContext);

/// How a run ended, for the log.
enum Outcome {
    Queued,
    Ended(RunEnd, Option<String>, String),
}

impl Runner {
    pub(super) async fn run(self, shutdown: tokio_util::sync::CancellationToken) {
        loop {
            if let Err(error) = self.tick().await {
                tracing::warn!(%error, "posts: could not read or claim the schedules; trying again");
            }
            let wait = match self.posts.store.posts_next_due().await {
                Ok(Some(at)) => {
                    let ms = (at - crate::clock::now_ms()).clamp(0, POLL.as_millis() as i64);
                    Duration::from_millis(ms as u64)
                }
                _ => POLL,
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.posts.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One look: runs to take over, then runs due.
    async fn tick(&self) -> anyhow::Result<()> {
        let store = &self.posts.store;
        let now = crate::clock::now_ms();
        let expired = store.drafts_expire(now).await?;
        if expired > 0 {
            tracing::info!(
                expired,
                "posts: drafts not approved in time expired; never sent"
            );
        }
        for run in store.posts_take_over(now, LEASE_MS, BATCH).await? {
            tracing::info!(schedule = %run.schedule_id, persona = %run.agent_id, attempt = run.attempts,
                "posts: taking over a run whose claimer stopped");
            let schedule = store
                .posts_schedules(&run.agent_id)
                .await?
                .into_iter()
                .find(|s| s.id == run.schedule_id);
            let spec = schedule.and_then(|s| parse(&s).ok());
            self.fire(&run, spec.as_ref()).await;
        }
        for stored in store.posts_due(now, BATCH).await? {
            let schedule = parse(&stored);
            // A schedule that no longer parses (a zone gone from the system's tzdb) waits
            // a day, so that it does not spin; its run is recorded failed.
            let next = match &schedule {
                Ok(s) => s.next_after(now),
                Err(_) => now + 86_400_000,
            };
            let Some(run) = store.posts_claim(&stored, next, now, LEASE_MS).await? else {
                continue; // another replica has it
            };
            self.fire(&run, schedule.as_ref().ok()).await;
        }
        Ok(())
    }

    /// Makes one run's post, and records what came of it.
    async fn fire(&self, run: &ClaimedRun, schedule: Option<&Schedule>) {
        let outcome = match schedule {
            None => Ok(Outcome::Ended(
                RunEnd::Failed,
                None,
                "the schedule does not parse".into(),
            )),
            Some(schedule) => self.post(run, schedule).await,
        };
        let store = &self.posts.store;
        let settled = match outcome {
            Ok(Outcome::Queued) => return,
            Ok(Outcome::Ended(end, text, reason)) => {
                tracing::info!(schedule = %run.schedule_id, persona = %run.agent_id, room = %run.room,
                    ?end, "posts: {reason}");
                store.posts_end(run, end, text.as_deref(), &reason).await
            }
            Err(error) => {
                tracing::warn!(schedule = %run.schedule_id, persona = %run.agent_id, %error,
                    "posts: the post failed");
                store
                    .posts_end(run, RunEnd::Failed, None, &error.to_string())
                    .await
            }
        };
        if let Err(error) = settled {
            // The lease runs out and another look takes the run over.
            tracing::warn!(%error, "posts: could not record how a run ended");
        }
    }

    /// The run's post: checked (`admit`), drafted (`write`), then kept (dry run) or queued.
    async fn post(&self, run: &ClaimedRun, schedule: &Schedule) -> anyhow::Result<Outcome> {
        let (mind, meter, room) = match self.admit(run).await? {
            Ok(admitted) => admitted,
            Err(outcome) => return Ok(outcome),
        };
        let feed = run.room.platform == Platform::Farcaster;
        let text = match self
            .write(run, schedule, &mind, meter.as_ref(), room)
            .await?
        {
            Ok(text) => text,
            Err(outcome) => return Ok(outcome),
        };
        if feed && super::settings::of(&mind.persona, &self.posts.env).farcaster_dry_run {
            tracing::info!(persona = %run.agent_id, room = %run.room, chars = text.chars().count(),
                "FARCASTER_DRY_RUN: not casting the post; it is kept for the console and GET /api/agents/{{agent}}/posts");
            return Ok(Outcome::Ended(
                RunEnd::DryRun,
                Some(text),
                "FARCASTER_DRY_RUN".into(),
            ));
        }
        match schedule.approval {
            Some(within) => self.hold(run, text, within, &mind.access.owners).await,
            None => self.queue(run, text).await,
        }
    }

    /// The post kept as a draft until an operator approves it, or it expires; the
    /// persona's owners are told in a DM (`drafts::notices`), once, with the hold.
    async fn hold(
        &self,
        run: &ClaimedRun,
        text: String,
        within: Duration,
        owners: &[String],
    ) -> anyhow::Result<Outcome> {
        let expires = crate::clock::now_ms() + within.as_millis() as i64;
        let notices = crate::drafts::notices(run, &text, expires, owners);
        let store = &self.posts.store;
        match store.posts_hold(run, &text, expires, &notices).await? {
            Some(told) => {
                tracing::info!(persona = %run.agent_id, room = %run.room, schedule = %run.schedule_id,
                    draft = run.id, owners = told.len(), "posts: a draft waits for approval");
                for id in told {
                    if let Err(error) = self.posts.outbox.deliver(id).await {
                        tracing::warn!(%error, "posts: telling an owner about a draft failed; the outbox retries it");
                    }
                }
            }
            None => {
                tracing::warn!(schedule = %run.schedule_id, "posts: the run was taken over while composing; not keeping it here");
            }
        }
        Ok(Outcome::Queued)
    }

    /// Whether the run may post: its persona is loaded, its room is not muted, its budget
    /// has room for background work. The persona, its meter and what the room holds when
    /// it may; how the run ends when it may not.
    async fn admit(&self, run: &ClaimedRun) -> anyhow::Result<Result<Admitted, Outcome>> {
        let skipped = |reason: &str| Ok(Err(Outcome::Ended(RunEnd::Skipped, None, reason.into())));
        let Some(agent) = self.posts.agents.by_id(&run.agent_id) else {
            return skipped("the persona is not loaded");
        };
        let reads = if run.room.platform == Platform::Farcaster {
            RoomReads::Controls
        } else {
            RoomReads::WindowAndSummary {
                limit: compose::ROOM_WINDOW,
            }
        };
        let store = &self.posts.store;
        let room = store.room_context(&run.agent_id, &run.room, reads).await?;
        if room.state.muted_at(crate::clock::now_ms()) {
            return skipped("the room is muted");
        }
        let meter = agent.meter();
        if let Some(meter) = &meter {
            let who = Who {
                room: Some(&run.room),
                user: None,
            };
            if let Admission::Over { scope, .. } = meter.admit(who, Purpose::Post).await? {
                return skipped(&format!(
                    "over the persona's background share of its {} budget",
                    scope.as_str()
                ));
            }
        }
        Ok(Ok((agent.mind(), meter, room)))
    }

    /// The post's text: a draft, rewritten once when it is too close to a recent post.
    async fn write(
        &self,
        run: &ClaimedRun,
        schedule: &Schedule,
        mind: &Mind,
        meter: Option<&Meter>,
        room: RoomContext,
    ) -> anyhow::Result<Result<String, Outcome>> {
        let ended = |end, reason: &str| Ok(Err(Outcome::Ended(end, None, reason.to_string())));
        let recent: Vec<String> = (self.posts.store)
            .posts_recent(&run.agent_id, compose::RECENT_POSTS, RecentRuns::Posted)
            .await?
            .into_iter()
            .filter_map(|p| p.text)
            .collect();
        let messages: Vec<(String, String)> = (room.recent.unwrap_or_default().into_iter())
            .map(|m| (m.author_name, m.text))
            .collect();
        let summary = room.summary.flatten();
        let mut input = PostInput {
            platform: run.room.platform,
            prompt: schedule.prompt.as_deref(),
            max_length: crate::drafts::max_length(schedule.max_length, run.room.platform),
            recent_posts: &recent,
            room_messages: &messages,
            summary: summary.as_deref(),
            rewrite_of: None,
        };
        let first = self.draft(mind, meter, run, &input).await?;
        let text = if compose::too_close(&first, &recent) {
            input.rewrite_of = Some(&first);
            let second = self.draft(mind, meter, run, &input).await?;
            if compose::too_close(&second, &recent) {
                return ended(RunEnd::Skipped, "too close to a recent post, twice");
            }
            second
        } else {
            first
        };
        if text.is_empty() {
            return ended(RunEnd::Failed, "the model wrote nothing");
        }
        Ok(Ok(text))
    }

    /// The post into the outbox, with the run settled, then sent.
    async fn queue(&self, run: &ClaimedRun, text: String) -> anyhow::Result<Outcome> {
        let post = crate::drafts::outbound(
            &run.agent_id,
            &run.schedule_id,
            run.run_at_ms,
            &run.room,
            text,
        );
        let Some(outbox_id) = self.posts.store.posts_queue(run, &post).await? else {
            tracing::warn!(schedule = %run.schedule_id, "posts: the run was taken over while composing; not posting it here");
            return Ok(Outcome::Queued);
        };
        tracing::info!(persona = %run.agent_id, room = %run.room, schedule = %run.schedule_id,
            "posts: queued a post");
        // A failed send stays in the outbox, which retries it.
        if let Err(error) = self.posts.outbox.deliver(outbox_id).await {
            tracing::warn!(%error, "posts: the first delivery failed; the outbox retries it");
        }
        Ok(Outcome::Queued)
    }

    /// One model call for a draft, on the background turn, counted as purpose `post`.
    async fn draft(
        &self,
        mind: &Mind,
        meter: Option<&Meter>,
        run: &ClaimedRun,
        input: &PostInput<'_>,
    ) -> anyhow::Result<String> {
        let prompt = compose::compose(&mind.persona, input);
        let request = crate::provider::Request {
            purpose: Purpose::Post,
            parts: crate::provider::Parts::Chat(&prompt),
            tools: None,
            live: None,
            notice: None,
            payer: crate::provider::Payer {
                turn: crate::spend::Turn::new(crate::spend::Priority::Background, &run.room),
                meter,
                who: Who {
                    room: Some(&run.room),
                    user: None,
                },
            },
        };
        let result = mind.background().call(request).await.map(|r| r.completion);
        Ok(compose::finish(&result?.text, input.max_length))
    }
}

fn parse(stored: &StoredSchedule) -> Result<Schedule, String> {
    serde_json::from_value::<Spec>(stored.spec.clone())
        .map_err(|e| e.to_string())
        .and_then(|spec| spec.parse().map_err(|e| e.to_string()))
}
