//! The application as a value: `App::build(config)` wires storage, personas, agents, the
//! bus, the outbox and the HTTP API; `run_until_stopped(shutdown)` serves until the token is
//! cancelled, then drains. Tests and benchmarks build the same value.
//!
//! This is the topology: the one place that knows which connector feeds which agent. `App`'s
//! parts are grouped by what they serve (issue 45): the HTTP socket, the message path (store,
//! journal and bus, agents, outbox, connectors, limits), the models (providers, breakers,
//! spend), the personas' other work (knowledge, posts, file changes) and the connectors'
//! receiving loops.

use anyhow::Context;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use troupe_connectors::sync::Locked;

use crate::agent::{Agent, Agents, Dispatcher, Mind};
use crate::bus::{Bus, InProcessBus};
use crate::config::Config;
use crate::http::{self, AppState};
use crate::ingress::{Ingress, Waiters};
use crate::knowledge::Knowledge;
use crate::leader::Elector;
use crate::lifecycle::{Drain, housekeeping, release_memory};
use crate::limits::RateLimiter;
use crate::outbox::Outbox;
use crate::persona::{self, Loaded, Persona, PersonaEvent};
use crate::provider::{self, ModelProvider};
use crate::registry::Connectors;
use crate::storage::Store;
use crate::web::WebConnector;
use tracing::Instrument;
use troupe_connectors::registry;
use troupe_connectors::{
    AgentId, Built, Connector, ConnectorSettings, InboundSink, Lookup, Platform, Receiving, Shard,
};

/// Builds the model provider for a persona, with the app's circuit breakers; `troupe bench`
/// swaps in an instant one.
pub type ProviderFactory =
    Arc<dyn Fn(&Persona, &Config, &provider::Breakers) -> Arc<dyn ModelProvider> + Send + Sync>;

pub fn default_provider_factory() -> ProviderFactory {
    Arc::new(
        |persona: &Persona, config: &Config, breakers: &provider::Breakers| {
            provider::for_persona(
                persona,
                &config.env,
                config.agent.model_timeout,
                config.agent.model_concurrency,
                breakers,
            )
        },
    )
}

/// Everything that runs, built but not yet serving, grouped by what it serves.
pub struct App {
    config: Arc<Config>,
    /// The HTTP API's socket, bound by `build` (`troupe chat` and `troupe bench` have none).
    http: Http,
    /// What every message crosses, from the journal through its agent to the outbox.
    pub path: MessagePath,
    /// What personas think with: their model providers and the accounts they share.
    models: Models,
    /// What personas do besides answering: their documents, their posts, their files.
    personas: PersonaWork,
    /// The platform connectors' receiving loops: which run here, and how they stop.
    loops: Loops,
    /// How to give the allocator's free pages back (`release_memory_with`).
    release_memory: Option<fn()>,
}

/// The HTTP API's socket, until serving starts.
struct Http {
    listener: Option<TcpListener>,
    /// The address bound, with the real port when 0 was asked for.
    addr: Option<SocketAddr>,
}

/// The message path: the handles every message crosses, shared with the agents and the API.
pub struct MessagePath {
    pub store: Store,
    /// The journal and the bus: where a message enters.
    pub ingress: Ingress,
    pub agents: Agents,
    /// Where replies leave, retried until the platform accepts them.
    pub outbox: Outbox,
    /// The running connectors; filled in here, read by the outbox, the agents and the API.
    pub connectors: Connectors,
    limiter: RateLimiter,
    /// Whoever waits on a message's outcome (the HTTP API, `troupe chat`).
    waiters: Waiters,
}

impl MessagePath {
    /// Opens the database, and builds the journal, the bus, the agents' registry and the
    /// outbox over it.
    async fn open(config: &Config) -> anyhow::Result<MessagePath> {
        let store = Store::connect(&config.database_url)
            .await
            .with_context(|| {
                format!(
                    "cannot open the database {}",
                    crate::config::redact_url(&config.database_url)
                )
            })?;
        let agents = Agents::default();
        let waiters = Waiters::default();
        let connectors = Connectors::default();
        let outbox = Outbox::new(store.clone(), connectors.clone());
        let dispatcher = Arc::new(Dispatcher {
            agents: agents.clone(),
            store: store.clone(),
            waiters: waiters.clone(),
        });
        let bus: Arc<dyn Bus> = match &config.bus_url {
            None => Arc::new(InProcessBus::new(
                config.agent.bus_capacity,
                config.agent.turns_in_flight,
                dispatcher,
            )),
            Some(url) => Arc::new(
                crate::bus::nats::NatsBus::connect(
                    url,
                    &config.nats,
                    store.installation_id().await?,
                    dispatcher,
                    waiters.clone(),
                )
                .await?,
            ),
        };
        let ingress = Ingress::new(store.clone(), bus, waiters.clone());
        Ok(MessagePath {
            limiter: RateLimiter::new(&config.limits),
            store,
            agents,
            ingress,
            outbox,
            connectors,
            waiters,
        })
    }
}

/// What personas think with.
struct Models {
    /// Builds each persona's provider (`troupe bench` swaps in an instant one).
    providers: ProviderFactory,
    /// One circuit breaker per provider account; closed at shutdown so no message waits on
    /// a provider that is down while the app drains.
    breakers: provider::Breakers,
    /// Usage accounting and budgets, shared by every agent (issue 16).
    spend: crate::spend::Spend,
}

/// What personas bring besides their messages.
struct PersonaWork {
    /// Their documents: in, indexed, and searched for the prompt.
    knowledge: Knowledge,
    /// Autonomous posts: the personas' schedules and the loop that runs them (issue 34).
    posts: crate::posts::Posts,
    /// Changes to the personas directory since it was loaded; taken when serving starts.
    events: Option<tokio::sync::mpsc::Receiver<PersonaEvent>>,
    /// Who is let in: pairing codes and approvals, on the spend clock (issue 44).
    access: crate::access::Access,
    /// Platform tokens the console connected, outside character files (issue 47).
    secrets: crate::secrets_file::SecretsFile,
    /// The console's requests to restart a persona's connectors; taken when serving starts.
    reconnect: crate::connect::Reconnect,
    reconnects: Option<crate::connect::Requests>,
}

/// The platform connectors' receiving loops.
struct Loops {
    /// Stops one agent's platform connectors (on reload or removal).
    running: std::sync::Mutex<HashMap<AgentId, CancellationToken>>,
    /// The parent of every connector's token, cancelled at shutdown.
    root: CancellationToken,
    /// Where connector tasks run, once serving has started.
    serving: std::sync::Mutex<Option<TaskTracker>>,
    /// Connector tasks built before serving started.
    pending: std::sync::Mutex<Vec<PendingTask>>,
    /// Which once-only receivers (polling, Discord shards) run in this replica.
    elector: Elector,
    /// What each receive loop is doing, for `/readyz` (see supervise.rs).
    receivers: crate::supervise::Receivers,
    /// Discord bots several personas share (issue 46).
    shared: crate::shared_bots::SharedBots,
}

type PendingTask = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// One receiving loop to run: a connector and, when replicas must not run it twice, the
/// name it is elected under.
struct ReceiverRun {
    connector: Arc<dyn Connector>,
    leader: Option<String>,
}

/// Builds a persona's connector of `platform`; `None` (logged) when its credentials are
/// missing or wrong, so that the persona's other platforms still start.
fn build_connector(
    persona: &Persona,
    platform: Platform,
    lookup: Lookup<'_>,
    settings: &ConnectorSettings,
    env: &persona::Env,
) -> Option<Arc<dyn Connector>> {
    // Several bots for the persona (elizaOS 2.x `settings.telegram.accounts`, issue 46).
    let built = match persona.telegram_accounts(env) {
        Some(specs) if platform == Platform::Telegram => {
            registry::build_accounts(platform, &specs, lookup, settings)
        }
        _ => registry::build(platform, lookup, settings),
    };
    match built {
        Ok(Built::Ready(c)) => Some(c),
        Ok(Built::NotConfigured(why)) => {
            tracing::warn!(persona = %persona.id, %platform, "not connecting: {why}");
            None
        }
        Err(e) => {
            tracing::error!(persona = %persona.id, %platform, error = %e, "cannot build the connector");
            None
        }
    }
}

/// Builds the connector that receives on one shard; `None` (logged) when it cannot be.
fn build_shard(
    persona: &Persona,
    platform: Platform,
    lookup: Lookup<'_>,
    settings: &ConnectorSettings,
    shard: Shard,
) -> Option<Arc<dyn Connector>> {
    match registry::build_shard(platform, lookup, settings, shard) {
        Ok(Built::Ready(c)) => Some(c),
        Ok(Built::NotConfigured(_)) => None,
        Err(e) => {
            tracing::error!(persona = %persona.id, %platform, shard = shard.id,
                error = %e, "cannot build the shard's connector");
            None
        }
    }
}

impl App {
    /// Builds the app and binds the HTTP listener.
    pub async fn build(config: Config) -> anyhow::Result<App> {
        crate::metrics::install();
        let mut app = Self::build_headless(config, default_provider_factory()).await?;
        let addr = app.config.http_addr;
        app.listen(addr)
            .await
            .with_context(|| format!("cannot listen on {addr} (TROUPE_HTTP_ADDR)"))?;
        Ok(app)
    }

    /// Has `release` give the allocator's free pages back to the kernel while the app runs
    /// (`release_memory`): `troupe run` passes jemalloc's purge (src/main.rs).
    pub fn release_memory_with(&mut self, release: fn()) {
        self.release_memory = Some(release);
    }

    /// Binds the HTTP listener of a headless app on `addr` (`troupe bench --http` serves
    /// its own model this way); returns the address, with the real port when 0 was asked for.
    pub async fn listen(&mut self, addr: SocketAddr) -> anyhow::Result<SocketAddr> {
        let listener = TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        self.http.addr = Some(bound);
        self.http.listener = Some(listener);
        Ok(bound)
    }

    /// Builds everything but the HTTP listener (for `troupe chat` and `troupe bench`).
    pub async fn build_headless(
        mut config: Config,
        providers: ProviderFactory,
    ) -> anyhow::Result<App> {
        // The console's stored tokens join the snapshot before anything reads it.
        let (secrets, warning) = crate::secrets_file::SecretsFile::open(&config.secrets_file)?;
        if let Some(warning) = warning {
            tracing::warn!("{warning}");
        }
        config.env = secrets.overlay(&config.env);
        let (reconnect, reconnects) = crate::connect::Reconnect::channel();
        let config = Arc::new(config);
        let path = MessagePath::open(&config).await?;
        let knowledge = Knowledge::from_settings(path.store.clone(), &config.knowledge);
        let elector = Elector::for_database(&config.database_url, config.replicas.leader_retry)?;
        // One scheduler account per provider key, shared like the breakers (issue 16).
        let scheduler = crate::spend::Scheduler::new(config.spend.account);
        let breakers = provider::Breakers::new(config.provider.clone()).with_scheduler(scheduler);
        let spend = crate::spend::Spend::new(path.store.clone(), config.spend.clone());
        knowledge.account_with(spend.clone());
        let posts = crate::posts::Posts::new(&path.store, &path.agents, &path.outbox, &config.env);
        let access = crate::access::Access::new(
            path.store.clone(),
            crate::spend::clock::SpendClock::system(config.spend.clock_offset_secs),
        );
        let app = App {
            http: Http {
                listener: None,
                addr: None,
            },
            path,
            models: Models {
                providers,
                breakers,
                spend,
            },
            personas: PersonaWork {
                knowledge,
                posts,
                events: None,
                access,
                secrets,
                reconnect,
                reconnects: Some(reconnects),
            },
            loops: Loops {
                running: Default::default(),
                root: CancellationToken::new(),
                serving: Default::default(),
                pending: Default::default(),
                elector,
                receivers: Default::default(),
                shared: Default::default(),
            },
            config,
            release_memory: None,
        };
        app.load_personas().await?;
        // Watch from right after loading, so an edit made while the rest starts is seen.
        let mut app = app;
        app.personas.events = Some(persona::watch(
            app.config.personas_dir.clone(),
            app.config.env.clone(),
            app.config.persona_load_options(),
            app.loops.root.child_token(),
        ));
        Ok(app)
    }

    /// The address the HTTP API listens on (with the real port when 0 was asked for).
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.addr
    }

    async fn load_personas(&self) -> anyhow::Result<()> {
        for var in crate::tools::policy::floor_in_allow_list(&self.config.tools) {
            tracing::warn!(
                "TROUPE_MCP_ENV lists `{var}`, which a character may never set: it {}",
                crate::tools::floor::env_floor(var).unwrap_or_default()
            );
        }
        let dir = &self.config.personas_dir;
        let (loaded, problems) = persona::load_dir(dir, &self.config.persona_load_options());
        for problem in &problems {
            tracing::error!("{problem}");
        }
        if loaded.is_empty() {
            tracing::warn!(
                dir = %dir.display(),
                "no persona loaded: put elizaOS character files (*.json) in TROUPE_PERSONAS"
            );
        }
        crate::connect::claims_are_unique(&loaded, &self.config.env)?;
        for l in loaded {
            self.upsert_persona(l).await?;
        }
        Ok(())
    }

    /// What a persona thinks with: its model provider, its small and vision models (when it
    /// names them) and its tools, each refusal or limit logged once here.
    async fn mind_for(&self, persona: Persona) -> Mind {
        let provider = (self.models.providers)(&persona, &self.config, &self.models.breakers);
        if let Some(reason) = provider.unavailable() {
            tracing::warn!(persona = %persona.id, "{reason}");
        }
        // elizaOS's small model, for background work, when the persona names one.
        let small = crate::provider::small_for_persona(
            &persona,
            &self.config.env,
            self.config.agent.model_timeout,
            self.config.agent.model_concurrency,
            &self.models.breakers,
        );
        if let Some(small) = &small {
            tracing::info!(persona = %persona.id, model = %small.describe(), "background work uses the small model");
        }
        // A vision model describes images for a text-only persona (media::vision); an
        // unknown or unconfigured imageVisionModelProvider is logged, as modelProvider is.
        let vision = crate::provider::vision_for_persona(
            &persona,
            &self.config.env,
            self.config.agent.model_timeout,
            self.config.agent.model_concurrency,
            &self.models.breakers,
        )
        .unwrap_or_else(|reason| {
            tracing::warn!(persona = %persona.id, "{reason}; images are not described for it");
            None
        });
        // Its MCP servers connect in the background: the persona (and the gateway) answer
        // at once, and a server's tools are offered when it answers (issue 43).
        let tools = crate::tools::Toolbox::start(
            &persona,
            &self.config.tools,
            &self.config.knowledge.fetch,
        )
        .map(Arc::new);
        if tools.is_some() && !provider.offers(crate::provider::Feature::Tools) {
            tracing::warn!(persona = %persona.id, "settings.mcp: this persona's model provider does not call tools; its tools will not be offered");
        }
        // Voice notes are heard, and answered by voice, on the persona's own provider.
        let speaking = crate::media::speech::speaking(&persona, &self.config.env, &*provider);
        let access = crate::access::Rules::of(&persona, &self.config.env);
        for problem in &access.problems {
            tracing::warn!(persona = %persona.id, "{problem}");
        }
        let dms_open = persona
            .platforms()
            .into_iter()
            .filter_map(|p| access.on(p))
            .any(|on| on.dm == crate::access::DmPolicy::Open);
        if let Some(w) =
            crate::access::cli::open_tools_warning(&persona, &access, dms_open, &self.config)
        {
            tracing::warn!("{w}");
        }
        Mind {
            access,
            speaking,
            persona,
            provider,
            small,
            vision,
            tools,
        }
    }

    /// Adds a persona, or swaps in a new version of one that runs.
    async fn upsert_persona(&self, loaded: Loaded) -> anyhow::Result<()> {
        for w in &loaded.warnings {
            tracing::warn!("{w}");
        }
        let persona = loaded.persona;
        let persona_for_connectors = persona.clone();
        self.path
            .store
            .upsert_agent(&persona.id, &persona.name)
            .await?;
        // The character's `knowledge` entries, before the persona answers anything.
        self.personas.knowledge.load_character(&persona).await;
        if let Err(e) = self.models.spend.check(&persona) {
            tracing::warn!(persona = %persona.id, "settings.spend: {e}; using the config's budgets and prices");
        }
        let mind = self.mind_for(persona).await;
        match self.path.agents.by_id(&mind.persona.id) {
            Some(agent) => {
                tracing::info!(persona = %mind.persona.id, model = %mind.provider.describe(), "persona reloaded");
                agent.reload(mind);
            }
            None => {
                tracing::info!(persona = %mind.persona.id, model = %mind.provider.describe(), "persona loaded");
                let id = mind.persona.id.clone();
                let agent = Agent::new(
                    mind,
                    self.path.store.clone(),
                    self.path.outbox.clone(),
                    self.path.connectors.clone(),
                    self.path.limiter.clone(),
                    self.path.waiters.clone(),
                    self.config.agent.clone(),
                )
                .with_knowledge(self.personas.knowledge.clone())
                .with_fetch(&self.config.knowledge.fetch)
                .with_spend(self.models.spend.clone())
                .with_access(self.personas.access.clone())
                .with_troupe(&self.path.agents);
                self.path.agents.insert(Arc::new(agent));
                self.path.connectors.insert(&id, Arc::new(WebConnector));
            }
        }
        // Its schedules are stored once it can answer: a run due now finds its agent.
        if let Err(e) = self
            .personas
            .posts
            .load_persona(&persona_for_connectors)
            .await
        {
            tracing::error!(persona = %persona_for_connectors.id, error = %e, "cannot store the persona's post schedules");
        }
        self.start_connectors(&persona_for_connectors);
        Ok(())
    }

    /// (Re)starts the platform connectors of a persona. Connectors are built here, and run
    /// once serving has started; a reload stops the old ones first. Restarting is safe: a
    /// connector acknowledges its platform only after the journal has a message.
    fn start_connectors(&self, persona: &Persona) {
        self.stop_connectors(persona);
        let token = self.loops.root.child_token();
        // With the secrets file as it is now: the console may have changed it (issue 47).
        let env = self.personas.secrets.overlay(&self.config.env);
        let lookup_persona = persona.clone();
        let lookup_env = env.clone();
        let lookup = move |key: &str| lookup_persona.secret(key, &lookup_env);
        for platform in persona.platforms_in(&env) {
            if platform == Platform::Web {
                continue;
            }
            // The file's own endpoint with the operator's token: not connected, and said so
            // (issue 30, finding 1); the lookup already withholds the token.
            if let Some(w) = persona.withheld_on(platform, &env).first() {
                tracing::error!(persona = %persona.id, %platform, "not connecting: {}", w.message());
                continue;
            }
            if persona.joins_shared_bot(platform, &env) {
                self.join_shared_bot(persona, platform, &lookup);
                continue;
            }
            let settings = self.connector_settings(persona, platform);
            let Some(connector) = build_connector(persona, platform, &lookup, &settings, &env)
            else {
                continue;
            };
            self.path.connectors.insert(&persona.id, connector.clone());
            let receivers = self.receivers(persona, platform, connector, &lookup, &settings);
            self.spawn_receivers(persona, platform, receivers, &token);
        }
        self.lock_running().insert(persona.id.clone(), token);
    }

    /// Puts the persona on the `platform` bot it shares with others (issue 46): its
    /// connector answers as itself (Discord webhooks, a Telegram prefix); the bot's one
    /// connection starts with its first persona, under leader election by the bot's account
    /// when its receiving allows one at a time, as a bot of its own does (a Telegram
    /// webhook runs everywhere).
    fn join_shared_bot(&self, persona: &Persona, platform: Platform, lookup: Lookup<'_>) {
        let sink = self.path.ingress.sink_for(&persona.id);
        let Some((connector, started)) = self.loops.shared.join(
            persona,
            platform,
            lookup,
            (&self.path.store, &self.loops.root),
            sink,
        ) else {
            return;
        };
        self.path.connectors.insert(&persona.id, connector);
        if let Some(started) = started {
            let connector_id = format!("{}/{platform}", started.bot.account());
            let status = self.loops.receivers.replace(&connector_id, 1).remove(0);
            let connector = started.bot.receiver();
            let leader = connector.receiving().leader();
            let receiver = ReceiverRun { connector, leader };
            let task = self.receiver_task(
                receiver,
                started.bot.sink(),
                &connector_id,
                &started.stop,
                &None,
                status,
            );
            self.schedule(task);
        }
    }

    /// Cancels the persona's running connectors and leaves it only its Web connector.
    fn stop_connectors(&self, persona: &Persona) {
        if let Some(old) = self.lock_running().remove(&persona.id) {
            old.cancel();
        }
        self.loops.shared.leave(&persona.id);
        self.path.connectors.remove_agent(&persona.id);
        self.path
            .connectors
            .insert(&persona.id, Arc::new(WebConnector));
    }

    /// What a connector of `platform` is told about the persona it serves.
    fn connector_settings(&self, persona: &Persona, platform: Platform) -> ConnectorSettings {
        let agent = AgentId::from(persona.id.as_str());
        let switches = persona.switches(platform);
        ConnectorSettings {
            state: self.connector_state(&agent, platform),
            agent_id: agent,
            persona_name: persona.name.clone(),
            allowed_rooms: switches.allowed_rooms.clone(),
            only_join_allowed: switches.only_join_allowed_groups,
        }
    }

    /// The receiving loops to run for one built connector. Receivers a platform allows once
    /// per account run under leader election, so that replicas on one Postgres never run
    /// two (see leader.rs); webhooks run everywhere. The connector says which it is, from
    /// the settings it parsed.
    fn receivers(
        &self,
        persona: &Persona,
        platform: Platform,
        connector: Arc<dyn Connector>,
        lookup: Lookup<'_>,
        settings: &ConnectorSettings,
    ) -> Vec<ReceiverRun> {
        match connector.receiving() {
            Receiving::Everywhere => vec![ReceiverRun {
                connector,
                leader: None,
            }],
            Receiving::OneAtATime { name } => vec![ReceiverRun {
                connector,
                leader: Some(name),
            }],
            Receiving::Sharded { name } => {
                let shards = self.config.replicas.discord_shards;
                if shards.total == 1 {
                    return vec![ReceiverRun {
                        connector,
                        leader: Some(name),
                    }];
                }
                (shards.first..=shards.last)
                    .filter_map(|id| {
                        let shard = Shard {
                            id,
                            total: shards.total,
                        };
                        build_shard(persona, platform, lookup, settings, shard).map(|connector| {
                            ReceiverRun {
                                connector,
                                leader: Some(format!("{name}:shard-{id}-of-{}", shards.total)),
                            }
                        })
                    })
                    .collect()
            }
        }
    }

    /// Runs each receiver in its own span, under `token`: now if serving has started, else
    /// when it starts.
    fn spawn_receivers(
        &self,
        persona: &Persona,
        platform: Platform,
        receivers: Vec<ReceiverRun>,
        token: &CancellationToken,
    ) {
        let sink = self.path.ingress.sink_for(&persona.id);
        let connector_id = format!("{}/{platform}", persona.id);
        // A cap on the shards one replica runs, shared by this persona's shards.
        let slots = match self.config.replicas.discord_shards_per_replica {
            0 => None,
            n => Some(Arc::new(tokio::sync::Semaphore::new(n as usize))),
        }
        .filter(|_| platform == Platform::Discord);
        let statuses = self.loops.receivers.replace(&connector_id, receivers.len());
        for (receiver, status) in receivers.into_iter().zip(statuses) {
            let task =
                self.receiver_task(receiver, sink.clone(), &connector_id, token, &slots, status);
            self.schedule(task);
        }
    }

    /// The task that runs one receiver until `stop`: directly, or while this replica leads
    /// the receiver's name.
    fn receiver_task(
        &self,
        receiver: ReceiverRun,
        sink: Arc<dyn InboundSink>,
        connector_id: &str,
        stop: &CancellationToken,
        slots: &Option<Arc<tokio::sync::Semaphore>>,
        status: Arc<crate::supervise::LoopStatus>,
    ) -> PendingTask {
        let stop = stop.clone();
        let span = tracing::info_span!("connector", connector_id = %connector_id);
        let connector = receiver.connector;
        // A panic is logged and the loop started again (issue 30, finding 11).
        let run_once = move |stop: CancellationToken| {
            crate::supervise::supervise(connector.clone(), sink.clone(), stop, status.clone())
        };
        match receiver.leader {
            None => Box::pin(async move { run_once(stop).await }.instrument(span)),
            Some(name) => {
                let elector = self.loops.elector.clone();
                elector.attach(&name, connector_id);
                let slots = slots.clone();
                Box::pin(
                    async move { elector.lead(&name, &stop, slots, run_once).await }
                        .instrument(span),
                )
            }
        }
    }

    /// Spawns `task` on the serving tracker, or keeps it for `run_until_stopped` when
    /// serving has not started yet.
    fn schedule(&self, task: PendingTask) {
        let serving = self.loops.serving.locked().clone();
        match serving {
            Some(tracker) => {
                tracker.spawn(task);
            }
            None => self.loops.pending.locked().push(task),
        }
    }

    /// Where a connector keeps its position: the `connector_state` table. The journal
    /// already guarantees nothing is answered twice; this saves re-reading after a restart.
    fn connector_state(
        &self,
        agent_id: &AgentId,
        platform: Platform,
    ) -> Arc<dyn troupe_connectors::ConnectorState> {
        Arc::new(crate::storage::StoredState {
            store: self.path.store.clone(),
            agent_id: agent_id.clone(),
            platform,
        })
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, HashMap<AgentId, CancellationToken>> {
        self.loops.running.locked()
    }

    fn remove_persona_from(&self, source: &std::path::Path) {
        for agent in self.path.agents.all() {
            if agent.mind().persona.source == source {
                tracing::info!(persona = %agent.id, "persona file removed; stopping it");
                self.path.agents.remove(&agent.id);
                if let Some(token) = self.lock_running().remove(&agent.id) {
                    token.cancel();
                }
                self.loops.shared.leave(&agent.id);
                self.path.connectors.remove_agent(&agent.id);
            }
        }
    }

    /// Serves until `shutdown` is cancelled, then stops taking work and drains.
    pub async fn run_until_stopped(mut self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let tasks = TaskTracker::new();
        *self.loops.serving.locked() = Some(tasks.clone());
        let root = self.loops.root.clone();
        let stop_connectors = shutdown.clone();
        tasks.spawn(async move {
            stop_connectors.cancelled().await;
            root.cancel();
        });
        // What a previous run left unfinished goes on the bus first, before any connector
        // runs and journals something new that the replay would then publish again.
        self.replay_unfinished().await?;
        let pending = std::mem::take(&mut *self.loops.pending.locked());
        for task in pending {
            tasks.spawn(task);
        }
        tasks.spawn(self.path.outbox.clone().run(shutdown.child_token()));
        tasks.spawn(self.personas.posts.clone().run(shutdown.child_token()));
        // The keyword index: built from the database now when missing or behind, then
        // following it (changes made through other replicas).
        tasks.spawn(
            self.personas
                .knowledge
                .clone()
                .follow(shutdown.child_token()),
        );
        // The local model, when it is asked for, missing, and TROUPE_MODELS_AUTO_PULL allows.
        if self.personas.knowledge.wants_model_pull() {
            tasks.spawn(
                self.personas
                    .knowledge
                    .clone()
                    .pull_model_in_background(shutdown.child_token()),
            );
        }
        // Vectors an upload left unfinished at the last stop.
        self.personas.knowledge.resume_embedding();
        let budget = crate::limits::ApiBudget::new(self.config.http.api_per_minute);
        tasks.spawn(housekeeping(
            self.path.limiter.clone(),
            budget.clone(),
            shutdown.child_token(),
        ));
        let http_task = self.serve_http(&tasks, budget, &shutdown);
        let drain = Drain {
            ingress: self.path.ingress.clone(),
            breakers: self.models.breakers.clone(),
            spend: self.models.spend.clone(),
            agents: self.path.agents.clone(),
        };
        let events = self
            .personas
            .events
            .take()
            .ok_or_else(|| anyhow::anyhow!("the app is already running"))?;
        let reconnects = self
            .personas
            .reconnects
            .take()
            .ok_or_else(|| anyhow::anyhow!("the app is already running"))?;
        if let Some(release) = self.release_memory {
            tasks.spawn(release_memory(release, shutdown.child_token()));
        }
        let app = Arc::new(self);
        tasks.spawn(app.clone().follow_personas(events));
        tasks.spawn(app.follow_reconnects(reconnects, shutdown.child_token()));

        shutdown.cancelled().await;
        drain.run(tasks, http_task).await
    }

    /// Starts the bus and publishes again what a previous run journaled and did not finish.
    /// A shared bus starts consuming here, now that the agents are loaded.
    async fn replay_unfinished(&self) -> anyhow::Result<()> {
        self.path.ingress.bus().start().await?;
        let replayed = self
            .path
            .ingress
            .replay(self.config.agent.max_attempts)
            .await?;
        if replayed > 0 {
            tracing::info!(
                count = replayed,
                "driving again messages a previous run left unfinished"
            );
        }
        Ok(())
    }

    /// Serves the HTTP API on the bound listener, if any, until `shutdown`.
    fn serve_http(
        &mut self,
        tasks: &TaskTracker,
        budget: crate::limits::ApiBudget,
        shutdown: &CancellationToken,
    ) -> Option<tokio::task::JoinHandle<std::io::Result<()>>> {
        let listener = self.http.listener.take()?;
        let state = AppState::new(http::Services {
            config: self.config.clone(),
            agents: self.path.agents.clone(),
            ingress: self.path.ingress.clone(),
            store: self.path.store.clone(),
            connectors: self.path.connectors.clone(),
            knowledge: self.personas.knowledge.clone(),
            elector: self.loops.elector.clone(),
            budget,
            receivers: self.loops.receivers.clone(),
            posts: self.personas.posts.clone(),
            access: self.personas.access.clone(),
            secrets: self.personas.secrets.clone(),
            reconnect: self.personas.reconnect.clone(),
        });
        let router = http::router(state);
        let stop = shutdown.child_token();
        let settings = self.config.http.clone();
        let per_address = self.config.edge.max_connections_per_ip;
        Some(tasks.spawn(async move {
            http::serve(listener, router, &settings, per_address, stop).await
        }))
    }

    /// Applies the changes to the personas directory as they come, until the watch ends.
    async fn follow_personas(
        self: Arc<Self>,
        mut events: tokio::sync::mpsc::Receiver<PersonaEvent>,
    ) {
        while let Some(event) = events.recv().await {
            match event {
                PersonaEvent::Upsert(loaded) => {
                    if let Err(e) = self.upsert_persona(loaded).await {
                        tracing::error!(error = %e, "could not apply a persona change");
                    }
                }
                PersonaEvent::Removed { source } => self.remove_persona_from(&source),
                PersonaEvent::Invalid(problems) => {
                    for p in problems {
                        tracing::error!("{p} (keeping the last good version)");
                    }
                }
            }
        }
    }
}

impl App {
    /// Restarts a persona's connectors when the console connects or disconnects a
    /// platform (issue 47), with its character as it is now; answers once they are
    /// started, so the caller's next message finds them.
    /// Ends at `stop`: the requests' sender lives in the App this task holds, so the
    /// channel alone would never close and shutting down would wait on it for good.
    async fn follow_reconnects(
        self: Arc<Self>,
        mut requests: crate::connect::Requests,
        stop: CancellationToken,
    ) {
        loop {
            let next = tokio::select! {
                _ = stop.cancelled() => return,
                next = requests.recv() => next,
            };
            let Some((agent, done)) = next else { return };
            if let Some(agent) = self.path.agents.by_id(&agent) {
                let persona = agent.mind().persona.clone();
                self.start_connectors(&persona);
            }
            let _ = done.send(());
        }
    }
}
