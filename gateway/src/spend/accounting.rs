//! Accounting: turns one model call into a usage record and its rollups.
//!
//! Tokens come from the provider's usage when it reports them. When it does not (some
//! OpenAI-compatible servers, a stream cut short), they are estimated from the text, one
//! token per four characters (the rule of thumb for English with cl100k-like vocabularies;
//! the record is flagged `estimated`). The cost comes from the persona's price table. The
//! records are written in batches by the [`Ledger`] task, each batch with its rollup
//! increments in one transaction (`Store::usage_record_batch`), and the `/metrics`
//! counters are raised per persona, provider and purpose. At a graceful stop the ledger
//! writes everything queued before the process exits ([`Ledger::close`]).

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Meter, Purpose, Who, user_key};
use crate::storage::{NewUsage, Store};

/// What one call used: the provider's counts when given, and the text sizes for estimating
/// the ones it did not give.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    pub prompt: Option<u32>,
    pub completion: Option<u32>,
    pub cached: Option<u32>,
    pub prompt_chars: usize,
    pub completion_chars: usize,
}

/// One token per this many characters, when the provider reports no usage.
const CHARS_PER_TOKEN: usize = 4;

fn estimate(chars: usize) -> u64 {
    chars.div_ceil(CHARS_PER_TOKEN) as u64
}

/// A second of transcribed audio counts as this many prompt tokens, so that the price
/// table (dollars per million tokens) prices audio too: `whisper-1` at $10 per million is
/// OpenAI's $0.006 a minute (docs/spend.md).
pub const AUDIO_TOKENS_PER_SECOND: u64 = 10;

/// Speech runs at about this many characters of transcript a second (150 words a
/// minute): the estimate of a transcription's length when the provider reports none.
const TRANSCRIPT_CHARS_PER_SECOND: usize = 15;

impl Tokens {
    /// A transcription's use, in audio seconds ([`AUDIO_TOKENS_PER_SECOND`] prompt tokens
    /// each, rounded up to the second): the duration the provider reported, else estimated
    /// from the transcript's length (at least one second; the record says `estimated`).
    pub fn audio(seconds: Option<f64>, transcript_chars: usize) -> Tokens {
        let estimated = || {
            transcript_chars
                .div_ceil(TRANSCRIPT_CHARS_PER_SECOND)
                .max(1)
        };
        match seconds.filter(|s| s.is_finite() && *s >= 0.0) {
            Some(s) => {
                let tokens = (s.ceil() as u64).saturating_mul(AUDIO_TOKENS_PER_SECOND);
                Tokens {
                    prompt: Some(u32::try_from(tokens).unwrap_or(u32::MAX)),
                    completion: Some(0),
                    ..Tokens::default()
                }
            }
            None => Tokens {
                prompt: None,
                completion: Some(0),
                prompt_chars: estimated() * AUDIO_TOKENS_PER_SECOND as usize * CHARS_PER_TOKEN,
                ..Tokens::default()
            },
        }
    }
}

/// Raw records are pruned at most this often.
const PRUNE_EVERY_MS: i64 = 3_600_000;

pub(super) async fn record(
    meter: &Meter,
    who: Who<'_>,
    purpose: Purpose,
    model: &super::ModelRef,
    tokens: Tokens,
) {
    let (vendor, model) = (model.vendor.as_str(), model.model.as_str());
    let estimated = tokens.prompt.is_none() || tokens.completion.is_none();
    let prompt = tokens
        .prompt
        .map_or_else(|| estimate(tokens.prompt_chars), u64::from);
    let completion = tokens
        .completion
        .map_or_else(|| estimate(tokens.completion_chars), u64::from);
    let cached = tokens.cached.map_or(0, u64::from).min(prompt);
    let cost = meter
        .conf
        .prices
        .cost_micros(vendor, model, prompt, cached, completion);
    crate::metrics::model_usage(
        &meter.agent_id,
        vendor,
        purpose.as_str(),
        prompt,
        completion,
        cached,
        cost,
    );
    let inner = &meter.spend.inner;
    let now = inner.clock.now_ms();
    let usage = crate::storage::NewUsage {
        agent_id: meter.agent_id.clone(),
        room_key: who.room.cloned(),
        user_key: who.user.map(|(p, u)| user_key(p, u)),
        provider: vendor.to_string(),
        model: model.to_string(),
        purpose: purpose.as_str(),
        prompt_tokens: prompt as i64,
        completion_tokens: completion as i64,
        cached_tokens: cached as i64,
        estimated,
        cost_micros: cost,
        day: super::clock::day_of(now),
        at_ms: now,
    };
    // With a budget to check, the next call must see this one: wait for the write. Without,
    // the record joins the next batch and the caller goes on.
    inner.ledger.write(usage, meter.conf.budgets.any()).await;
    prune(meter, now);
}

/// Records waiting for the ledger's task, at most; past it `write` waits (backpressure).
const LEDGER_CAPACITY: usize = 10_000;
/// Records written in one transaction, at most.
const LEDGER_BATCH: usize = 512;
/// How long records nobody waits for gather before they are written.
const LEDGER_GATHER: std::time::Duration = std::time::Duration::from_millis(50);

/// A queued record, and who waits for it to be written (when a budget needs it).
type Entry = (NewUsage, Option<tokio::sync::oneshot::Sender<()>>);

/// The writer of usage records: a task that writes whatever has queued up since its last
/// write in one transaction (`Store::usage_record_batch`), so accounting costs a reply no
/// write of its own. A graceful stop loses nothing: [`Ledger::close`] (the app calls it
/// once its agents have finished) writes every queued record, without waiting for more to
/// gather, and returns when they are in (issue 30, finding 9: three replies and a SIGTERM
/// lost all three). Only a crash or a kill loses what is queued (at most one batch); a
/// failed write is logged and counted, and its calls are missing from the budgets
/// (docs/spend.md).
pub(super) struct Ledger {
    queue: tokio::sync::mpsc::Sender<Entry>,
    /// Cancelled by `close`: the task stops taking records, writes the queued ones and ends.
    closing: CancellationToken,
    /// The task, for `close` to wait on.
    task: TaskTracker,
}

impl Ledger {
    pub(super) fn spawn(store: Store) -> Ledger {
        let (queue, rx) = tokio::sync::mpsc::channel(LEDGER_CAPACITY);
        let closing = CancellationToken::new();
        let task = TaskTracker::new();
        task.spawn(run_ledger(store, rx, closing.clone()));
        task.close();
        Ledger {
            queue,
            closing,
            task,
        }
    }

    /// Writes every record queued so far and stops taking new ones (a later `record` is
    /// logged as not recorded); returns once they are written or their write failed.
    pub(super) async fn close(&self) {
        self.closing.cancel();
        self.task.wait().await;
    }

    /// Queues `usage`; with `wait`, returns once it is written (or failed).
    async fn write(&self, usage: NewUsage, wait: bool) {
        let (done, written) = if wait {
            let (tx, rx) = tokio::sync::oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        if self.queue.send((usage, done)).await.is_err() {
            tracing::warn!("the usage ledger has stopped; a model call is not recorded");
            return;
        }
        if let Some(written) = written {
            let _ = written.await;
        }
    }
}

/// The ledger's task: batches until `closing`, then the rest of the queue.
async fn run_ledger(
    store: Store,
    mut rx: tokio::sync::mpsc::Receiver<Entry>,
    closing: CancellationToken,
) {
    let mut batch: Vec<Entry> = Vec::with_capacity(LEDGER_BATCH);
    loop {
        tokio::select! {
            // Records first: a stop that comes with records queued still writes them here
            // or below. `recv_many` is cancel-safe: losing the race takes nothing.
            biased;
            taken = rx.recv_many(&mut batch, LEDGER_BATCH) => {
                if taken == 0 {
                    return;
                }
            }
            () = closing.cancelled() => break,
        }
        // Nobody waits for these: let more gather, so that a busy gateway writes a few
        // large batches rather than one per reply (the SQLite connection is shared with the
        // message path). A stop cuts the gathering short.
        if batch.iter().all(|(_, waiter)| waiter.is_none()) && batch.len() < LEDGER_BATCH {
            tokio::select! {
                () = tokio::time::sleep(LEDGER_GATHER) => {}
                () = closing.cancelled() => {}
            }
            while batch.len() < LEDGER_BATCH {
                match rx.try_recv() {
                    Ok(entry) => batch.push(entry),
                    Err(_) => break,
                }
            }
        }
        write_batch(&store, &mut batch).await;
    }
    // Closing: no record is taken from now on, and every one queued before is written.
    rx.close();
    let mut written = 0;
    while rx.recv_many(&mut batch, LEDGER_BATCH).await > 0 {
        written += batch.len();
        write_batch(&store, &mut batch).await;
    }
    tracing::debug!(
        records = written,
        "the usage ledger wrote its queue and stopped"
    );
}

/// Writes `batch` (and empties it) in one transaction, then wakes whoever waits for it.
async fn write_batch(store: &Store, batch: &mut Vec<Entry>) {
    let (records, waiters): (Vec<NewUsage>, Vec<_>) = batch.drain(..).unzip();
    if let Err(error) = store.usage_record_batch(&records).await {
        crate::metrics::error("storage");
        tracing::warn!(%error, records = records.len(), "could not record model calls' usage");
    }
    for waiter in waiters.into_iter().flatten() {
        let _ = waiter.send(());
    }
}

/// Deletes raw records past the retention, in the background, at most hourly per process.
fn prune(meter: &Meter, now: i64) {
    let inner = &meter.spend.inner;
    let last = inner
        .pruned_at_ms
        .load(std::sync::atomic::Ordering::Relaxed);
    if now - last < PRUNE_EVERY_MS
        || inner
            .pruned_at_ms
            .compare_exchange(
                last,
                now,
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
            )
            .is_err()
    {
        return;
    }
    let store = inner.store.clone();
    let before = now - i64::from(inner.settings.retention_days) * 86_400_000;
    tokio::spawn(async move {
        match store.usage_prune(before).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(deleted = n, "pruned old usage records"),
            Err(error) => tracing::warn!(%error, "could not prune old usage records"),
        }
    });
}
