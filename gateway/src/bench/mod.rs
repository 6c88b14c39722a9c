//! `troupe bench`: the gateway's own cost per message.
//!
//! It pushes messages through the whole in-process path that a platform message takes
//! (journal, bus, agent: decide, rate limits, recall, prompt, record; outbox delivery) with
//! a model that answers at once, on a fresh SQLite file (or `--database-url`). Each room
//! has one conversation partner who waits for an answer before saying the next thing.
//! Two phases: latency (one room, so nothing queues ahead of a message) and throughput
//! (`--rooms` conversations at once). It also reports the process's resident memory, idle
//! after start and at its peak, and what each phase cost the process per message: CPU time
//! and context switches (`stats::Usage`; the clients, in this process, are in it too).
//!
//! With `--bus nats://…` the messages go through NATS JetStream instead, and `--replicas N`
//! builds N headless apps in this one process on the same database and the same stream (a
//! fresh prefix per run, deleted at the end), as N replicas would be: conversations post
//! to the replicas in turn, and whichever replica pulls a message handles it.
//!
//! With `--http` the same app also serves the HTTP API on loopback, and the messages come
//! from clients in this process posting to `POST /api/agents/bench/messages` (`http`).
//!
//! Layout: this file runs the message benchmark; `http` is `--http`; `knowledge` is
//! `--knowledge-mb`, what knowledge costs; `vectors` is `--vectors`, the vector index
//! against the exact scan (its generated corpus also feeds the vector index's tests);
//! `embed` is `--embed-texts`, the embedding model's throughput; `stats` holds what they
//! report (percentiles, resident memory).

use clap::Args;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use troupe_connectors::{AgentId, Inbound, Platform, RoomId, RoomRef, UserRef};

use crate::app::App;
use crate::config::Config;
use crate::ingress::{Ingress, Outcome};
use crate::provider::{self, ModelProvider};
use crate::storage::Backend;

mod embed;
mod http;
mod knowledge;
mod scheduler;
mod stats;
pub(crate) mod vectors;

use stats::{Usage, pct, rss_kib};

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Messages to push in all.
    #[arg(long, default_value_t = 20_000)]
    pub messages: usize,
    /// Rooms to spread them over (one conversation at a time per room).
    #[arg(long, default_value_t = 1_000)]
    pub rooms: usize,
    /// Database to use; default: a fresh SQLite file in a temporary directory.
    #[arg(long)]
    pub database_url: Option<String>,
    /// Messages per room sent first and not measured (warms caches and the connection pool).
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// Messages of the single-room latency phase.
    #[arg(long, default_value_t = 2_000)]
    pub latency_messages: usize,
    /// A NATS server (`nats://…`): use the JetStream bus instead of the in-process one.
    #[arg(long)]
    pub bus: Option<String>,
    /// Replicas to run in this process (with `--bus`), sharing the database and the bus.
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// Measure knowledge instead of messages: ingest a generated corpus of this many
    /// megabytes, then time searches over it (see `bench/knowledge.rs`).
    #[arg(long)]
    pub knowledge_mb: Option<usize>,
    /// Searches timed after a `--knowledge-mb` ingest.
    #[arg(long, default_value_t = 2_000)]
    pub knowledge_queries: usize,
    /// Measure search at scale instead: store this many generated chunks directly, build
    /// the on-disk index from them, then time searches (see `bench/knowledge.rs`).
    #[arg(long)]
    pub knowledge_chunks: Option<usize>,
    /// With `--knowledge-mb`: read documents in `troupe extract` workers and keep the
    /// index on disk, as the gateway does.
    #[arg(long)]
    pub knowledge_sandbox: bool,
    /// With `--knowledge-mb`: documents ingested at once, as that many uploads would be.
    #[arg(long, default_value_t = 1)]
    pub knowledge_parallel: usize,
    /// Measure the model scheduler instead: its overhead per call, and a DM's wait behind
    /// a flood in another room (see `bench/scheduler.rs`).
    #[arg(long)]
    pub scheduler: bool,
    /// Post the messages over the HTTP API (loopback) instead of straight to the ingress.
    #[arg(long)]
    pub http: bool,
    /// Clients posting at once in the `--http` throughput phase.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Measure the vector index instead: store this many generated vectors, then time
    /// dense queries through the index and by the exact scan (see `bench/vectors.rs`).
    #[arg(long)]
    pub vectors: Option<usize>,
    /// The size of each `--vectors` vector.
    #[arg(long, default_value_t = 384)]
    pub vector_dims: usize,
    /// Queries timed by `--vectors` (each both ways).
    #[arg(long, default_value_t = 200)]
    pub vector_queries: usize,
    /// With `--vectors` on Postgres: false keeps the index in process even where pgvector is.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub pgvector: bool,
    /// Measure the embedding model instead: embed the texts of this file (one a line) as
    /// ingestion does, and print chunks per second (see `bench/embed.rs`).
    #[arg(long)]
    pub embed_texts: Option<std::path::PathBuf>,
    /// Timed passes over `--embed-texts`.
    #[arg(long, default_value_t = 3)]
    pub embed_rounds: usize,
}

const PERSONA: &str = r#"{
  "name": "Bench",
  "bio": ["Bench answers at once, for measuring the gateway."],
  "lore": ["Bench was made to measure."],
  "style": {"all": ["be brief"], "chat": ["answer directly"]},
  "messageExamples": [[{"user": "{{user1}}", "content": {"text": "hi"}},
                       {"user": "Bench", "content": {"text": "hello"}}]],
  "topics": ["latency"],
  "adjectives": ["fast"],
  "clients": []
}"#;

pub async fn run(config: Config, args: BenchArgs) -> anyhow::Result<ExitCode> {
    if args.scheduler {
        return scheduler::run().await;
    }
    if let Some(file) = &args.embed_texts {
        return embed::run(&config, file, args.embed_rounds).await;
    }
    if let Some(n) = args.vectors {
        return vectors::run(vectors::VectorBench {
            vectors: n,
            dims: args.vector_dims,
            queries: args.vector_queries,
            database_url: args.database_url,
            pgvector: args.pgvector,
        })
        .await;
    }
    if args.knowledge_mb.is_some() || args.knowledge_chunks.is_some() {
        return knowledge::run(knowledge::KnowledgeBench {
            megabytes: args.knowledge_mb.unwrap_or(0),
            chunks: args.knowledge_chunks,
            queries: args.knowledge_queries,
            database_url: args.database_url,
            sandbox: args.knowledge_sandbox,
            parallel: args.knowledge_parallel,
        })
        .await;
    }
    messages(config, args).await
}

/// The message benchmark: the latency phase, then the throughput phase, then the report
/// (or `--http`'s two phases).
async fn messages(mut config: Config, args: BenchArgs) -> anyhow::Result<ExitCode> {
    let dir = tempfile::tempdir()?;
    configure(&mut config, &args, dir.path())?;
    let prefix = config.nats.prefix.clone();
    let replicas = args.replicas.max(1);
    let bench = Running::start(config, &args, replicas).await?;
    // Message ids unique to this run: a reused database would answer old ids from the journal.
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let idle_rss = rss_kib("VmRSS");
    if let Some(addr) = bench.http_addr {
        return over_http(addr, &args, &run_id, idle_rss, bench.shutdown, bench.tasks).await;
    }
    let (backend, bus_kind) = (bench.backend, bench.bus_kind);
    let before = Usage::now();
    let latencies = latency(&bench, &run_id, args.latency_messages, args.warmup).await?;
    let solo_cost = Usage::report(before, "one room", args.latency_messages + args.warmup);
    let rooms = args.rooms.max(1);
    let per_room = args.messages.div_ceil(rooms);
    let total = rooms * (per_room + args.warmup);
    let before = Usage::now();
    let (loaded, elapsed) = throughput(&bench, &run_id, rooms, per_room, args.warmup).await?;
    let many_cost = Usage::report(before, &format!("{rooms} rooms"), total);
    let peak_rss = rss_kib("VmHWM");
    stop(bench.shutdown, bench.tasks).await?;
    if let Some(bus) = &args.bus {
        remove_stream(bus, &prefix).await;
    }

    println!("backend                 {backend:?}");
    println!("bus                     {bus_kind}, {replicas} replica(s)");
    println!(
        "latency, one room       p50 {:.3} ms   p90 {:.3} ms   p99 {:.3} ms   ({} messages)",
        ms(pct(&latencies, 0.50)),
        ms(pct(&latencies, 0.90)),
        ms(pct(&latencies, 0.99)),
        latencies.len()
    );
    println!(
        "throughput, {rooms} rooms  {:.0} messages/s   (p50 {:.1} ms, p99 {:.1} ms under that load; {} messages)",
        total as f64 / elapsed.as_secs_f64(),
        ms(pct(&loaded, 0.50)),
        ms(pct(&loaded, 0.99)),
        loaded.len()
    );
    println!("{solo_cost}");
    println!("{many_cost}");
    print_rss(idle_rss, peak_rss);
    Ok(ExitCode::SUCCESS)
}

/// The configuration a run uses: the bench persona and a database in `dir` (unless
/// `--database-url`), no rate limits, and with `--bus` a stream of its own.
fn configure(config: &mut Config, args: &BenchArgs, dir: &Path) -> anyhow::Result<()> {
    let personas = dir.join("personas");
    std::fs::create_dir_all(&personas)?;
    std::fs::write(personas.join("bench.json"), PERSONA)?;
    config.personas_dir = personas;
    // Its own keyword index beside its database: never the operator's `data/index`, which
    // a run in a checkout would otherwise rebuild (or, on another schema, remove).
    config.knowledge.index_dir = dir.join("index");
    config.database_url = args
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}", dir.join("bench.db").display()));
    // The benchmark measures the path, not the limits: lift them.
    config.limits.user_per_minute = 0;
    config.limits.room_per_minute = 0;
    config.limits.agent_per_minute = 0;
    config.http.api_per_minute = 0;
    let replicas = args.replicas.max(1);
    if args.http && replicas > 1 {
        anyhow::bail!("--http runs one replica");
    }
    if replicas > 1 && args.bus.is_none() {
        anyhow::bail!("--replicas needs --bus nats://…: in-process buses are not shared");
    }
    if let Some(bus) = &args.bus {
        config.bus_url = Some(bus.clone());
        // A stream of its own, so runs do not meet each other's messages.
        config.nats.prefix = format!("bench{}", uuid::Uuid::new_v4().simple());
    }
    Ok(())
}

/// The replicas under test, running: what the phases drive and the report names.
struct Running {
    ingresses: Vec<Ingress>,
    agent_id: AgentId,
    backend: Backend,
    bus_kind: &'static str,
    /// With `--http`: where the first replica serves the API.
    http_addr: Option<SocketAddr>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<anyhow::Result<()>>>,
}

impl Running {
    /// Builds `replicas` headless apps on `config`, each with a model that answers at
    /// once, and runs them.
    async fn start(config: Config, args: &BenchArgs, replicas: usize) -> anyhow::Result<Self> {
        let factory: crate::app::ProviderFactory = Arc::new(|_, _, _| {
            Arc::new(provider::Instant {
                text: "ok, noted.".into(),
            }) as Arc<dyn ModelProvider>
        });
        let mut apps = Vec::with_capacity(replicas);
        for _ in 0..replicas {
            apps.push(App::build_headless(config.clone(), factory.clone()).await?);
        }
        let agent = apps[0]
            .path
            .agents
            .find("bench")
            .ok_or_else(|| anyhow::anyhow!("the bench persona did not load"))?;
        let ingresses: Vec<_> = apps.iter().map(|a| a.path.ingress.clone()).collect();
        let backend = apps[0].path.store.backend();
        let bus_kind = ingresses[0].bus().describe();
        let mut http_addr = None;
        if args.http {
            // As `troupe run` has it: the routes count into /metrics.
            crate::metrics::install();
            http_addr = Some(apps[0].listen("127.0.0.1:0".parse()?).await?);
        }
        let shutdown = CancellationToken::new();
        let tasks = apps
            .into_iter()
            .map(|app| tokio::spawn(app.run_until_stopped(shutdown.clone())))
            .collect();
        Ok(Running {
            ingresses,
            agent_id: agent.id.clone(),
            backend,
            bus_kind,
            http_addr,
            shutdown,
            tasks,
        })
    }
}

/// Phase 1, latency: one conversation, one message at a time, so each figure is the
/// gateway's own cost for one message with nothing queued ahead of it. The latency of each
/// measured message, sorted.
async fn latency(
    bench: &Running,
    run_id: &str,
    single: usize,
    warmup: usize,
) -> anyhow::Result<Vec<Duration>> {
    eprintln!(
        "troupe bench ({:?}, {}, {} replica(s)): latency over {single} sequential messages in one room",
        bench.backend,
        bench.bus_kind,
        bench.ingresses.len()
    );
    // The conversation runs as a task of the runtime, as a connector's does (a platform's
    // event loop, an HTTP connection): on a worker, not on the thread that started the
    // runtime, whose every hand-off to a worker would be a wake-up no gateway pays.
    let (ingresses, agent_id, run_id) = (
        bench.ingresses.clone(),
        bench.agent_id.clone(),
        run_id.to_string(),
    );
    let mut latencies = tokio::spawn(async move {
        converse_many(&ingresses, &run_id, &agent_id, usize::MAX, single, warmup).await
    })
    .await??;
    latencies.sort();
    Ok(latencies)
}

/// Phase 2, throughput: `rooms` conversations at once. The latency of each measured
/// message, sorted, and the time the whole phase took.
async fn throughput(
    bench: &Running,
    run_id: &str,
    rooms: usize,
    per_room: usize,
    warmup: usize,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    eprintln!(
        "troupe bench ({:?}, {}): throughput over {} messages in {rooms} concurrent rooms",
        bench.backend,
        bench.bus_kind,
        per_room * rooms
    );
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for r in 0..rooms {
        let ingresses = bench.ingresses.clone();
        let agent_id = bench.agent_id.clone();
        let run_id = run_id.to_string();
        tasks.spawn(async move {
            converse_many(&ingresses, &run_id, &agent_id, r, per_room, warmup).await
        });
    }
    let mut loaded = Vec::with_capacity(per_room * rooms);
    while let Some(result) = tasks.join_next().await {
        loaded.extend(result??);
    }
    let elapsed = started.elapsed();
    loaded.sort();
    Ok((loaded, elapsed))
}

/// Stops the replicas and waits for each to finish, failing with the first that failed.
async fn stop(
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<anyhow::Result<()>>>,
) -> anyhow::Result<()> {
    shutdown.cancel();
    for t in tasks {
        t.await??;
    }
    Ok(())
}

fn print_rss(idle_kib: u64, peak_kib: u64) {
    println!(
        "RSS idle / peak         {:.1} MiB / {:.1} MiB",
        idle_kib as f64 / 1024.0,
        peak_kib as f64 / 1024.0
    );
}

/// `--http`: one client for latency, then `--clients` at once for throughput.
async fn over_http(
    addr: SocketAddr,
    args: &BenchArgs,
    run_id: &str,
    idle_rss: u64,
    shutdown: CancellationToken,
    running: Vec<JoinHandle<anyhow::Result<()>>>,
) -> anyhow::Result<ExitCode> {
    let clients = args.clients.max(1);
    let rooms = args.rooms.max(clients);
    eprintln!(
        "troupe bench (http {addr}): latency over {} sequential posts, then {} posts from {clients} clients over {rooms} rooms",
        args.latency_messages, args.messages
    );
    let before = Usage::now();
    let single = http::load(
        addr,
        &format!("{run_id}-solo"),
        1,
        args.latency_messages,
        args.warmup,
        1,
    )
    .await?;
    let solo_cost = Usage::report(before, "one client", args.latency_messages + args.warmup);
    let per_client = args.messages.div_ceil(clients);
    let total = clients * (per_client + args.warmup);
    let before = Usage::now();
    let many = http::load(addr, run_id, clients, per_client, args.warmup, rooms).await?;
    let many_cost = Usage::report(before, &format!("{clients} clients"), total);
    let peak_rss = rss_kib("VmHWM");
    stop(shutdown, running).await?;
    println!("bus                     in-process, over HTTP");
    http::report("one client", &single, single.latencies.len());
    http::report(&format!("{clients} clients"), &many, total);
    println!("{solo_cost}");
    println!("{many_cost}");
    print_rss(idle_rss, peak_rss);
    Ok(ExitCode::SUCCESS)
}

/// Deletes the run's stream (and with it its consumers) from the NATS server.
async fn remove_stream(url: &str, prefix: &str) {
    let removed = async {
        let client = async_nats::connect(url).await?;
        let js = async_nats::jetstream::new(client);
        js.delete_stream(format!("{prefix}_inbound")).await?;
        Ok::<_, anyhow::Error>(())
    }
    .await;
    if let Err(e) = removed {
        eprintln!("troupe bench: could not delete the stream {prefix}_inbound: {e}");
    }
}

/// Talks `count` (+ `warmup`) messages into room `room`, each after the previous answer,
/// posting to the replicas in turn; returns the latency of each measured one.
async fn converse_many(
    ingresses: &[Ingress],
    run_id: &str,
    agent_id: &AgentId,
    room: usize,
    count: usize,
    warmup: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut latencies = Vec::with_capacity(count);
    for n in 0..(warmup + count) {
        let t = Instant::now();
        let ingress = &ingresses[(room.wrapping_add(n)) % ingresses.len()];
        let answer = ingress
            .converse(agent_id, message(run_id, room, n), Duration::from_secs(60))
            .await?;
        if !matches!(answer.outcome, Outcome::Replied { .. }) {
            anyhow::bail!("unexpected outcome {:?}", answer.outcome);
        }
        if n >= warmup {
            latencies.push(t.elapsed());
        }
    }
    Ok(latencies)
}

fn message(run_id: &str, room: usize, n: usize) -> Inbound {
    let room = if room == usize::MAX {
        "solo".to_string()
    } else {
        room.to_string()
    };
    Inbound::said(
        format!("bench-{run_id}-{room}-{n}"),
        RoomRef::new(Platform::Web, RoomId::new(format!("room-{room}"))),
        UserRef::person(format!("user-{room}"), format!("User {room}")),
        format!("message {n} in room {room}: how is the weather today?"),
    )
    .direct()
    .at(crate::clock::now_ms())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
