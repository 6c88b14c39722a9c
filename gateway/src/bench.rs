//! `troupe bench`: the gateway's own cost per message.
//!
//! It pushes messages through the whole in-process path that a platform message takes
//! (journal, bus, agent: decide, rate limits, recall, prompt, record; outbox delivery) with
//! a model that answers at once, on a fresh SQLite file (or `--database-url`). Each room
//! has one conversation partner who waits for an answer before saying the next thing, so
//! `--rooms` is the concurrency. It reports latency percentiles per message, throughput,
//! and the process's resident memory (idle after start, and peak).

use clap::Args;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use troupe_connectors::{Inbound, MessageId, Platform, RoomId, RoomRef, UserId, UserRef};

use crate::app::App;
use crate::config::Config;
use crate::ingress::Outcome;
use crate::provider::{self, ModelProvider};

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

pub async fn run(mut config: Config, args: BenchArgs) -> anyhow::Result<ExitCode> {
    let dir = tempfile::tempdir()?;
    let personas = dir.path().join("personas");
    std::fs::create_dir_all(&personas)?;
    std::fs::write(personas.join("bench.json"), PERSONA)?;
    config.personas_dir = personas;
    config.database_url = args
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}", dir.path().join("bench.db").display()));
    // The benchmark measures the path, not the limits: lift them.
    config.limits.user_per_minute = 0;
    config.limits.room_per_minute = 0;
    config.limits.agent_per_minute = 0;
    let rooms = args.rooms.max(1);
    let per_room = args.messages.div_ceil(rooms);

    let factory: crate::app::ProviderFactory = Arc::new(|_, _| {
        Arc::new(provider::Instant {
            text: "ok, noted.".into(),
        }) as Arc<dyn ModelProvider>
    });
    let app = App::build_headless(config, factory).await?;
    let agent = app
        .agents
        .find("bench")
        .ok_or_else(|| anyhow::anyhow!("the bench persona did not load"))?;
    let ingress = app.ingress.clone();
    let backend = app.store.backend();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(app.run_until_stopped(shutdown.clone()));
    let idle_rss = rss_kib("VmRSS");

    eprintln!(
        "troupe bench: {} messages over {rooms} rooms ({per_room} per room, {} warm-up each), {backend:?}",
        per_room * rooms,
        args.warmup
    );
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for r in 0..rooms {
        let ingress = ingress.clone();
        let agent_id = agent.id.clone();
        let warmup = args.warmup;
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(per_room);
            for n in 0..(warmup + per_room) {
                let inbound = message(r, n);
                let t = Instant::now();
                let answer = ingress
                    .converse(&agent_id, inbound, Duration::from_secs(60))
                    .await?;
                if !matches!(answer.outcome, Outcome::Replied { .. }) {
                    anyhow::bail!("unexpected outcome {:?}", answer.outcome);
                }
                if n >= warmup {
                    latencies.push(t.elapsed());
                }
            }
            Ok::<_, anyhow::Error>(latencies)
        });
    }
    let mut latencies = Vec::with_capacity(per_room * rooms);
    while let Some(result) = tasks.join_next().await {
        latencies.extend(result??);
    }
    let elapsed = started.elapsed();
    let peak_rss = rss_kib("VmHWM");
    shutdown.cancel();
    running.await??;

    latencies.sort();
    let total = rooms * (per_room + args.warmup);
    let pct = |p: f64| latencies[((latencies.len() as f64 - 1.0) * p).round() as usize];
    println!("messages        {}", latencies.len());
    println!("rooms           {rooms}");
    println!("p50             {:.3} ms", ms(pct(0.50)));
    println!("p90             {:.3} ms", ms(pct(0.90)));
    println!("p99             {:.3} ms", ms(pct(0.99)));
    println!("max             {:.3} ms", ms(pct(1.0)));
    println!(
        "throughput      {:.0} messages/s",
        total as f64 / elapsed.as_secs_f64()
    );
    println!("idle RSS        {:.1} MiB", idle_rss as f64 / 1024.0);
    println!("peak RSS        {:.1} MiB", peak_rss as f64 / 1024.0);
    Ok(ExitCode::SUCCESS)
}

fn message(room: usize, n: usize) -> Inbound {
    Inbound {
        id: MessageId::new(format!("bench-{room}-{n}")),
        room: RoomRef::new(Platform::Web, RoomId::new(format!("room-{room}"))),
        author: UserRef {
            id: UserId::new(format!("user-{room}")),
            name: format!("User {room}"),
            is_bot: false,
        },
        text: format!("message {n} in room {room}: how is the weather today?"),
        attachments: vec![],
        reply_to: None,
        is_direct: true,
        mentions_self: false,
        sent_at_ms: crate::clock::now_ms(),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A field of /proc/self/status in KiB (0 where there is no /proc).
fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}
