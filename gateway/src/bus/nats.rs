//! The NATS JetStream bus: several replicas share the work, each message is handled by one.
//!
//! Layout on the server, all named from `TROUPE_BUS_PREFIX` (`p` below):
//! - one stream `p_inbound` on the subjects `p.inbound.<partition>`, with work-queue
//!   retention (a message is gone once acknowledged) and a dedupe window;
//! - per partition one durable pull consumer `p_p<partition>` with `max_ack_pending = 1`,
//!   which every replica pulls from.
//!
//! A room's order key (agent and room) hashes, with a hash that is the same in every process,
//! onto one of `TROUPE_BUS_PARTITIONS` partitions. Since a partition's consumer hands out one
//! message at a time cluster-wide, and the next only after the previous one is acknowledged,
//! the messages of a room are handled one after the other, in publication order, whichever
//! replica takes each. Rooms on different partitions run concurrently.
//!
//! A message is acknowledged after `Handler::handle` returned, that is after the reply and
//! its outbox entry were committed. While a handler runs (a slow model call), the replica
//! sends in-progress acks every third of the ack wait; a replica that dies stops sending
//! them, and NATS hands the message to another replica when the ack wait runs out. That copy
//! is flagged a redelivery, so the agent looks at the journal before answering.
//!
//! Each publication carries `Nats-Msg-Id: <installation id>.<journal id>.<attempt>`: a replay
//! at start (every replica replays) or a republished duplicate is dropped by JetStream within
//! the dedupe window, while a retry of a failed message (a higher attempt) goes through. The
//! installation id is the database's (made by its migration): journal ids start again at 1
//! in a fresh database, and without it a deployment on a reset database, or another one
//! sharing the NATS server and the prefix, had its messages dropped as duplicates of the
//! earlier one's, journaled and never answered.
//!
//! A first publication (not a redelivery) that JetStream still calls a duplicate would leave
//! a journaled message unanswered, so it is published again under an id of its own (logged):
//! the journal, not the dedupe window, is what keeps it from being answered twice.
//!
//! Outcomes cross replicas on core NATS, and only where someone waits for them (the HTTP API
//! posts to one replica, another may answer). Each bus has a replica id of its own; a
//! publication says in `answer_to` whether a caller waits on its journal id, and on which
//! replica. The replica that handles it publishes the outcome on
//! `p.outcome.<replica>.<journal id>`, which only that replica listens to, and publishes
//! nothing when nobody waits or the caller waits on the handling replica itself (its
//! waiter is completed in memory). Before this, every outcome went to every replica, each
//! of which parsed it and mostly found nobody waiting for it.
//!
//! A caller that starts waiting on a message already published (a client posting a
//! message again to another replica while the first is still on it) publishes it again,
//! as before; a copy that JetStream drops as a duplicate is then published under an id of
//! its own, so that a copy naming this caller's replica is handled (after the first, in the
//! room's lane, and answered from the journal) and its outcome comes back here.
//!
//! A publication without `answer_to` comes from an older release: its outcome goes to
//! `p.outcome.<journal id>`, where older replicas listen, and every replica listens there
//! too for the outcomes older replicas send (a rolling upgrade mixes both).
//!
//! Acknowledgements are not awaited on the server: an ack is queued on the client's one
//! connection, whose writer sends whatever is queued in one write, so the acks of many
//! partitions go out together. The lanes stay one message deep (`max_ack_pending = 1`):
//! that is the room order, and a batch of a lane could only be pulled by giving it up
//! (another replica could take a later message of a room while the batch still holds an
//! earlier one).

use async_nats::jetstream::{self, AckKind, consumer::pull, stream};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use troupe_connectors::sync::Locked;
use troupe_connectors::{AgentId, Inbound};

use super::{Bus, BusError, Delivery, Envelope, Handler};
use crate::config::{NatsSettings, redact_url};
use crate::outcome::{Outcome, OutcomeRelay, Waiters};
use crate::storage::JournalId;

/// How often the cached depth (messages in the stream) is refreshed.
const DEPTH_EVERY: Duration = Duration::from_secs(1);
/// How long to wait before pulling again after the consumer could not be reached.
const RETRY_PULL: Duration = Duration::from_millis(500);

/// The envelope as it travels; `Envelope` itself stays free of serde. The field names and
/// their order are the wire format that replicas of other releases read: the agent's id is a
/// plain string (`AgentId` serializes as one), under `agent_id`.
#[derive(serde::Serialize, serde::Deserialize)]
struct Wire {
    journal_id: i64,
    agent_id: AgentId,
    inbound: Inbound,
    redelivery: bool,
    attempt: u32,
    /// Who waits for the outcome; absent from older releases (see the module comment).
    /// Older replicas ignore the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    answer_to: Option<AnswerTo>,
}

/// Where the outcome of a publication is wanted.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum AnswerTo {
    /// Nobody waited when it was published (a connector's message, a replay at start).
    Nobody,
    /// A caller waits on the replica with this id.
    Replica(String),
}

/// Outcomes to relay, by journal id, to the subject of the replica that waits for them:
/// filled by `handle_one` for the message it hands to the agent, emptied by the relay
/// when the agent completes it (or by `handle_one` when it did not).
type RelayTargets = Arc<Mutex<HashMap<JournalId, String>>>;

fn lock(targets: &RelayTargets) -> std::sync::MutexGuard<'_, HashMap<JournalId, String>> {
    targets.locked()
}

/// A bus whose queue lives in NATS JetStream. A cheap handle on shared state.
pub struct NatsBus {
    shared: Arc<Shared>,
}

struct Shared {
    client: async_nats::Client,
    js: jetstream::Context,
    stream: stream::Stream,
    prefix: String,
    /// The database's installation id, the first part of every `Nats-Msg-Id`.
    installation: String,
    /// This bus's own id among the replicas, where outcomes for its callers are sent.
    replica: String,
    relay_targets: RelayTargets,
    partitions: u32,
    ack_wait: Duration,
    handler: Arc<dyn Handler>,
    waiters: Waiters,
    /// Messages in the stream (queued or unacknowledged, cluster-wide), last we asked.
    depth: AtomicUsize,
    /// Messages this replica is handling now.
    in_hand: AtomicUsize,
    stop: CancellationToken,
    tracker: TaskTracker,
    /// The outcome publisher stops after the handlers, so their last outcomes still go out.
    relay_stop: CancellationToken,
    relay_tracker: TaskTracker,
    started: std::sync::atomic::AtomicBool,
}

impl NatsBus {
    /// Connects, and creates (or updates) the stream and the partition consumers. Does not
    /// consume yet: `start` does, once the agents are loaded.
    pub async fn connect(
        url: &str,
        settings: &NatsSettings,
        installation: String,
        handler: Arc<dyn Handler>,
        waiters: Waiters,
    ) -> anyhow::Result<NatsBus> {
        let shown = redact_url(url);
        let client = connect_client(url, &shown).await?;
        let js = jetstream::new(client.clone());
        let stream = ensure_stream(&js, settings, &shown).await?;
        ensure_consumers(&stream, settings, &shown).await?;
        let shared = Arc::new(Shared {
            client,
            js,
            stream,
            prefix: settings.prefix.clone(),
            installation,
            replica: uuid::Uuid::new_v4().simple().to_string(),
            relay_targets: RelayTargets::default(),
            partitions: settings.partitions,
            ack_wait: settings.ack_wait,
            handler,
            waiters,
            depth: AtomicUsize::new(0),
            in_hand: AtomicUsize::new(0),
            stop: CancellationToken::new(),
            tracker: TaskTracker::new(),
            relay_stop: CancellationToken::new(),
            relay_tracker: TaskTracker::new(),
            started: Default::default(),
        });
        shared.refresh_depth().await;
        shared.relay_outcomes();
        tracing::info!(
            url = %shown,
            stream = %stream_name(&shared.prefix),
            partitions = shared.partitions,
            ack_wait_secs = shared.ack_wait.as_secs(),
            "NATS JetStream bus ready"
        );
        Ok(NatsBus { shared })
    }
}

/// The client's one connection to the server (`shown`: the URL without its password).
async fn connect_client(url: &str, shown: &str) -> anyhow::Result<async_nats::Client> {
    async_nats::ConnectOptions::new()
        .name("troupe")
        .connection_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect to NATS at {shown} (TROUPE_BUS_URL): {e}"))
}

/// The work-queue stream of the prefix, created or updated to `settings`.
async fn ensure_stream(
    js: &jetstream::Context,
    settings: &NatsSettings,
    shown: &str,
) -> anyhow::Result<stream::Stream> {
    let prefix = &settings.prefix;
    js.get_or_create_stream(stream::Config {
        name: stream_name(prefix),
        subjects: vec![format!("{prefix}.inbound.*")],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        duplicate_window: settings.dedupe_window,
        ..Default::default()
    })
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "NATS at {shown}: cannot create the JetStream stream {} (is JetStream enabled, `nats-server -js`?): {e}",
            stream_name(prefix)
        )
    })
}

/// One durable consumer per partition, the lanes every replica pulls from.
async fn ensure_consumers(
    stream: &stream::Stream,
    settings: &NatsSettings,
    shown: &str,
) -> anyhow::Result<()> {
    let prefix = &settings.prefix;
    for partition in 0..settings.partitions {
        stream
            .create_consumer(consumer_config(prefix, partition, settings.ack_wait))
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "NATS at {shown}: cannot create the consumer {}: {e}",
                    consumer_name(prefix, partition)
                )
            })?;
    }
    Ok(())
}

fn stream_name(prefix: &str) -> String {
    format!("{prefix}_inbound")
}

fn consumer_name(prefix: &str, partition: u32) -> String {
    format!("{prefix}_p{partition}")
}

fn consumer_config(prefix: &str, partition: u32, ack_wait: Duration) -> pull::Config {
    let name = consumer_name(prefix, partition);
    pull::Config {
        durable_name: Some(name.clone()),
        name: Some(name),
        description: Some("troupe: one ordered lane of rooms".into()),
        filter_subject: format!("{prefix}.inbound.{partition}"),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait,
        // One message of the lane in flight cluster-wide: this is what keeps rooms in order.
        max_ack_pending: 1,
        // Unlimited: the journal, not the bus, decides when a message is given up.
        max_deliver: -1,
        ..Default::default()
    }
}

/// The partition of an order key, by [`stable_hash`].
pub(crate) fn partition_of(order_key: &str, partitions: u32) -> u32 {
    (stable_hash(order_key.as_bytes()) % u64::from(partitions.max(1))) as u32
}

/// FNV-1a, 64 bits: the same in every process and release (std's `DefaultHasher` promises
/// neither), for whatever must agree across replicas and re-drives.
pub(crate) fn stable_hash(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The `Nats-Msg-Id` of a publication: the same for a replay of one attempt of one
/// database's entry, different for any other database.
fn message_id(installation: &str, journal_id: JournalId, attempt: u32) -> String {
    format!("{installation}.{}.{attempt}", journal_id.0)
}

/// Hands outcomes someone waits for to the publishing task; `announce` is called from
/// synchronous code.
struct Relay {
    tx: mpsc::UnboundedSender<(JournalId, String, Vec<u8>)>,
    targets: RelayTargets,
}

impl OutcomeRelay for Relay {
    fn announce(&self, id: JournalId, outcome: &Outcome) {
        // Nobody elsewhere waits for it: no bytes made, nothing sent.
        let Some(subject) = lock(&self.targets).remove(&id) else {
            return;
        };
        let _ = self.tx.send((id, subject, outcome.to_wire()));
    }
}

/// Where the outcome of a message goes, seen from replica `me`: `None` when nobody waits
/// for it elsewhere.
fn relay_subject(
    prefix: &str,
    me: &str,
    id: JournalId,
    answer_to: Option<&AnswerTo>,
) -> Option<String> {
    match answer_to {
        // An older release's publication: its replicas listen on the old subject.
        None => Some(format!("{prefix}.outcome.{}", id.0)),
        Some(AnswerTo::Nobody) => None,
        // The caller waits here: `Waiters::complete` hands it the outcome in memory.
        Some(AnswerTo::Replica(r)) if r.as_str() == me => None,
        Some(AnswerTo::Replica(r)) if is_token(r) => Some(format!("{prefix}.outcome.{r}.{}", id.0)),
        Some(AnswerTo::Replica(r)) => {
            tracing::warn!(journal_id = id.0, replica = %r, "ignoring a malformed replica id");
            None
        }
    }
}

/// Whether a replica id can be a subject token (ours are hex; a message could say anything).
fn is_token(replica: &str) -> bool {
    !replica.is_empty() && replica.bytes().all(|b| b.is_ascii_alphanumeric())
}

impl Shared {
    /// Publishes to the stream and waits for JetStream's acknowledgement, which says
    /// whether it took the message as a duplicate.
    async fn send(
        &self,
        subject: String,
        payload: Bytes,
        id: &str,
        trace: Option<&str>,
    ) -> Result<jetstream::publish::PublishAck, BusError> {
        let mut message = jetstream::message::PublishMessage::build()
            .payload(payload)
            .message_id(id);
        // W3C trace context, as OpenTelemetry's messaging conventions carry it.
        if let Some(traceparent) = trace {
            message = message.header("traceparent", traceparent);
        }
        let published = async {
            self.js
                .send_publish(subject, message)
                .await
                .map_err(|e| e.to_string())?
                .await
                .map_err(|e| e.to_string())
        }
        .await;
        published.map_err(|e| {
            crate::metrics::error("bus");
            BusError::Backend(format!("NATS publish: {e}"))
        })
    }

    async fn refresh_depth(&self) {
        match self.stream.get_info().await {
            Ok(info) => self
                .depth
                .store(info.state.messages as usize, Ordering::Relaxed),
            Err(e) => tracing::debug!(error = %e, "cannot read the stream's depth"),
        }
    }

    /// Outcomes someone waits for on another replica go out from here from now on, by
    /// [`announce`](Self::announce); they come in once `start` listens.
    fn relay_outcomes(self: &Arc<Self>) {
        let (tx, rx) = mpsc::unbounded_channel();
        self.waiters.relay_to(Arc::new(Relay {
            tx,
            targets: self.relay_targets.clone(),
        }));
        self.relay_tracker.spawn(self.clone().announce(rx));
    }

    /// Publishes outcomes for callers waiting on other replicas.
    async fn announce(
        self: Arc<Self>,
        mut rx: mpsc::UnboundedReceiver<(JournalId, String, Vec<u8>)>,
    ) {
        loop {
            let next = tokio::select! {
                biased;
                next = rx.recv() => next,
                // Every handler has finished: publish what is queued, then stop.
                _ = self.relay_stop.cancelled() => rx.try_recv().ok(),
            };
            let Some((id, subject, bytes)) = next else {
                return;
            };
            if let Err(e) = self.client.publish(subject, Bytes::from(bytes)).await {
                crate::metrics::error("bus");
                tracing::warn!(error = %e, journal_id = id.0, "cannot relay an outcome");
            }
        }
    }

    /// Completes local waiters with outcomes other replicas relay.
    async fn listen(
        self: Arc<Self>,
        mut outcomes: impl futures::Stream<Item = async_nats::Message> + Unpin,
    ) {
        loop {
            let message = tokio::select! {
                _ = self.stop.cancelled() => return,
                m = outcomes.next() => match m {
                    Some(m) => m,
                    None => return,
                },
            };
            let id = message
                .subject
                .as_str()
                .rsplit('.')
                .next()
                .and_then(|id| id.parse::<i64>().ok());
            match (id, Outcome::from_wire(&message.payload)) {
                (Some(id), Some(outcome)) => self.waiters.complete_relayed(JournalId(id), &outcome),
                _ => tracing::warn!(subject = %message.subject, "ignoring a malformed outcome"),
            }
        }
    }

    async fn depth_loop(self: Arc<Self>) {
        loop {
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tokio::time::sleep(DEPTH_EVERY) => self.refresh_depth().await,
            }
        }
    }

    /// Pulls one partition until stopped; a message in hand is finished first.
    async fn pull(self: Arc<Self>, partition: u32) {
        let name = consumer_name(&self.prefix, partition);
        loop {
            let consumer: Result<jetstream::consumer::PullConsumer, _> =
                self.stream.get_consumer(&name).await;
            let messages = match consumer {
                Ok(c) => c.messages().await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let mut messages = match messages {
                Ok(m) => m,
                Err(e) => {
                    crate::metrics::error("bus");
                    tracing::warn!(consumer = %name, error = %e, "cannot pull; retrying");
                    tokio::select! {
                        _ = self.stop.cancelled() => return,
                        _ = tokio::time::sleep(RETRY_PULL) => continue,
                    }
                }
            };
            loop {
                let next = tokio::select! {
                    _ = self.stop.cancelled() => return,
                    next = messages.next() => next,
                };
                match next {
                    Some(Ok(message)) => self.handle_one(message).await,
                    Some(Err(e)) => {
                        crate::metrics::error("bus");
                        tracing::warn!(consumer = %name, error = %e, "pulling failed; pulling again");
                        break;
                    }
                    None => break,
                }
            }
        }
    }

    async fn handle_one(&self, message: jetstream::Message) {
        let delivered = message.info().map(|i| i.delivered).unwrap_or(1);
        let wire: Wire = match serde_json::from_slice(&message.payload) {
            Ok(w) => w,
            Err(e) => {
                // Not ours, or from an incompatible version: retrying cannot help.
                crate::metrics::error("bus");
                tracing::error!(subject = %message.subject, error = %e, "dropping a malformed bus message");
                if let Err(e) = message.ack_with(AckKind::Term).await {
                    tracing::warn!(error = %e, "cannot drop the malformed message");
                }
                return;
            }
        };
        let journal_id = JournalId(wire.journal_id);
        let relay = relay_subject(
            &self.prefix,
            &self.replica,
            journal_id,
            wire.answer_to.as_ref(),
        );
        let relayed = relay.is_some();
        if let Some(subject) = relay {
            lock(&self.relay_targets).insert(journal_id, subject);
        }
        let envelope = Envelope {
            journal_id,
            agent: wire.agent_id,
            inbound: wire.inbound,
            // The wire keeps the flag older replicas read (`redelivery`); NATS counts its own.
            delivery: if wire.redelivery || delivered > 1 {
                Delivery::Again
            } else {
                Delivery::First
            },
            attempt: wire.attempt,
            trace: message
                .headers
                .as_ref()
                .and_then(|h| h.get("traceparent"))
                .map(|v| v.as_str().to_string()),
        };
        self.in_hand.fetch_add(1, Ordering::Relaxed);
        let handled = self.handler.handle(envelope);
        tokio::pin!(handled);
        // Tell NATS we are alive while the handler runs, so a slow model call is not
        // handed to another replica.
        let mut alive = tokio::time::interval(self.ack_wait / 3);
        alive.tick().await;
        loop {
            tokio::select! {
                _ = &mut handled => break,
                _ = alive.tick() => {
                    if let Err(e) = message.ack_with(AckKind::Progress).await {
                        crate::metrics::error("bus");
                        tracing::warn!(error = %e, "cannot extend the ack wait");
                    }
                }
            }
        }
        if relayed {
            // Handled without an outcome (the agent always gives one; this is a guard).
            lock(&self.relay_targets).remove(&journal_id);
        }
        // The reply is in the outbox (or the failure in the journal): the message is done.
        if let Err(e) = message.ack().await {
            crate::metrics::error("bus");
            tracing::warn!(error = %e, "cannot acknowledge a handled message; NATS will redeliver it and the journal will skip it");
        }
        self.in_hand.fetch_sub(1, Ordering::Relaxed);
    }
}

#[async_trait]
impl Bus for NatsBus {
    async fn publish(&self, envelope: Envelope) -> Result<(), BusError> {
        if self.shared.stop.is_cancelled() {
            return Err(BusError::Closed);
        }
        let partition = partition_of(envelope.order_key().as_str(), self.shared.partitions);
        let subject = format!("{}.inbound.{partition}", self.shared.prefix);
        let id = message_id(
            &self.shared.installation,
            envelope.journal_id,
            envelope.attempt,
        );
        let journal_id = envelope.journal_id;
        let redelivery = envelope.delivery.is_again();
        let trace = envelope.trace;
        // Ingress registers a caller's waiter before it publishes.
        let waited = self.shared.waiters.is_waited(journal_id);
        let wire = Wire {
            journal_id: envelope.journal_id.0,
            agent_id: envelope.agent,
            inbound: envelope.inbound,
            redelivery,
            attempt: envelope.attempt,
            answer_to: Some(if waited {
                AnswerTo::Replica(self.shared.replica.clone())
            } else {
                AnswerTo::Nobody
            }),
        };
        let payload =
            Bytes::from(serde_json::to_vec(&wire).map_err(|e| BusError::Backend(e.to_string()))?);
        let mut ack = self
            .shared
            .send(subject.clone(), payload.clone(), &id, trace.as_deref())
            .await?;
        if ack.duplicate && (!redelivery || waited) {
            // This process journaled it just now and expects it handled: a duplicate here is
            // an id that collides with another publication (not a replay), and dropping it
            // would leave the message unanswered. Or a caller here waits on a message that
            // is already on the bus, whose publication may not name this replica: the
            // outcome would not come back. An id of its own gets it through; the journal
            // still keeps it from being answered twice.
            let fresh = format!("{id}.{}", uuid::Uuid::new_v4().simple());
            if redelivery {
                tracing::debug!(
                    journal_id = journal_id.0,
                    "a caller waits on a message already on the bus; publishing a copy that answers it as {fresh}"
                );
            } else {
                crate::metrics::error("bus_duplicate");
                tracing::warn!(
                    journal_id = journal_id.0,
                    nats_msg_id = %id,
                    "JetStream took a new message for a duplicate; publishing it again as {fresh}"
                );
            }
            ack = self
                .shared
                .send(subject, payload, &fresh, trace.as_deref())
                .await?;
            if ack.duplicate {
                crate::metrics::error("bus");
                return Err(BusError::Backend(format!(
                    "NATS publish: JetStream refused journal entry {} as a duplicate twice",
                    journal_id.0
                )));
            }
        }
        Ok(())
    }

    fn depth(&self) -> usize {
        self.shared.depth.load(Ordering::Relaxed)
    }

    async fn close(&self) {
        self.shared.stop.cancel();
        self.shared.tracker.close();
        self.shared.tracker.wait().await;
        self.shared.relay_stop.cancel();
        self.shared.relay_tracker.close();
        self.shared.relay_tracker.wait().await;
        if let Err(e) = self.shared.client.flush().await {
            tracing::debug!(error = %e, "NATS flush at shutdown failed");
        }
    }

    fn describe(&self) -> &'static str {
        "nats-jetstream"
    }

    async fn start(&self) -> Result<(), BusError> {
        if self.shared.started.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let shared = &self.shared;
        let subscribe = |subject: String| async move {
            shared
                .client
                .subscribe(subject)
                .await
                .map_err(|e| BusError::Backend(format!("NATS subscribe: {e}")))
        };
        let mine = subscribe(format!("{}.outcome.{}.*", shared.prefix, shared.replica)).await?;
        // Outcomes from replicas of older releases (see the module comment).
        let legacy = subscribe(format!("{}.outcome.*", shared.prefix)).await?;
        shared
            .tracker
            .spawn(shared.clone().listen(futures::stream::select(mine, legacy)));
        shared.tracker.spawn(shared.clone().depth_loop());
        for partition in 0..shared.partitions {
            shared.tracker.spawn(shared.clone().pull(partition));
        }
        Ok(())
    }

    fn is_shared(&self) -> bool {
        true
    }

    async fn health(&self) -> Result<(), BusError> {
        match self.shared.client.connection_state() {
            async_nats::connection::State::Connected => Ok(()),
            other => Err(BusError::Backend(format!("NATS connection is {other:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_stable_and_spread() {
        // A fixed value: a change here would move rooms between partitions during a
        // rolling upgrade, and reorder the messages queued at that moment.
        assert_eq!(partition_of("a\u{1f}web:1", 64), 28);
        let mut seen = std::collections::HashSet::new();
        for room in 0..200 {
            let p = partition_of(&format!("agent\u{1f}web:room-{room}"), 16);
            assert!(p < 16);
            seen.insert(p);
        }
        assert_eq!(
            seen.len(),
            16,
            "200 rooms should touch every one of 16 partitions"
        );
        assert_eq!(partition_of("anything", 1), 0);
    }

    /// The message every wire test carries.
    fn inbound() -> Inbound {
        use troupe_connectors::{Platform, RoomId, RoomRef, UserRef};
        Inbound::said(
            "m1",
            RoomRef::new(Platform::Web, RoomId::new("r1")),
            UserRef::person("u", "U"),
            "hi",
        )
        .direct()
    }

    fn wire(answer_to: Option<AnswerTo>) -> Wire {
        Wire {
            journal_id: 7,
            agent_id: AgentId::new("ada"),
            inbound: inbound(),
            redelivery: false,
            attempt: 1,
            answer_to,
        }
    }

    #[test]
    fn the_envelope_on_the_wire_keeps_its_form() {
        let inbound_json = serde_json::to_string(&inbound()).unwrap();
        let wire = wire(None);
        // What replicas of earlier releases, whose agent id was a `String`, send and read.
        assert_eq!(
            serde_json::to_string(&wire).unwrap(),
            format!(
                r#"{{"journal_id":7,"agent_id":"ada","inbound":{inbound_json},"redelivery":false,"attempt":1}}"#
            )
        );
    }

    #[test]
    fn who_waits_travels_with_the_envelope_and_older_envelopes_still_read() {
        let read = |json: &str| serde_json::from_str::<Wire>(json).map(|w| w.answer_to);
        let older = serde_json::to_string(&wire(None)).unwrap();
        let base = older.strip_suffix('}').unwrap();
        // From a release before `answer_to`.
        assert_eq!(read(&older).unwrap(), None);
        assert_eq!(
            serde_json::to_string(&wire(Some(AnswerTo::Nobody))).unwrap(),
            format!(r#"{base},"answer_to":"nobody"}}"#)
        );
        assert_eq!(
            read(&format!(r#"{base},"answer_to":"nobody"}}"#)).unwrap(),
            Some(AnswerTo::Nobody)
        );
        assert_eq!(
            read(&format!(r#"{base},"answer_to":{{"replica":"ab12"}}}}"#)).unwrap(),
            Some(AnswerTo::Replica("ab12".into()))
        );
    }

    #[test]
    fn an_outcome_goes_only_where_a_caller_waits() {
        let id = JournalId(9);
        let at = |to: Option<AnswerTo>| relay_subject("p", "me", id, to.as_ref());
        assert_eq!(at(Some(AnswerTo::Nobody)), None);
        // Waited on the handling replica: completed in memory, nothing on the wire.
        assert_eq!(at(Some(AnswerTo::Replica("me".into()))), None);
        assert_eq!(
            at(Some(AnswerTo::Replica("other1".into()))).as_deref(),
            Some("p.outcome.other1.9")
        );
        // An older replica's message: its callers listen on the old subject.
        assert_eq!(at(None).as_deref(), Some("p.outcome.9"));
        // A replica id that is not one subject token is not published to.
        assert_eq!(at(Some(AnswerTo::Replica("a.*".into()))), None);
        assert_eq!(at(Some(AnswerTo::Replica(String::new()))), None);
    }

    #[test]
    fn a_replay_has_the_id_of_its_attempt() {
        assert_eq!(message_id("ab12", JournalId(7), 1), "ab12.7.1");
        assert_ne!(
            message_id("ab12", JournalId(7), 1),
            message_id("ab12", JournalId(7), 2)
        );
    }

    #[test]
    fn two_databases_never_share_an_id() {
        // Issue 12, #11: journal ids restart at 1 in a fresh database.
        assert_ne!(
            message_id("ab12", JournalId(1), 1),
            message_id("cd34", JournalId(1), 1)
        );
    }
}
