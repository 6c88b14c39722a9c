//! Configuration: the only module that reads the process environment.
//!
//! Values come from environment variables first, then from an optional `troupe.toml` (in the
//! working directory, or wherever `TROUPE_CONFIG` points), then from the defaults below.
//! The environment is snapshotted once into `Config::env`, so personas can resolve their
//! secrets (`settings.secrets`, `CHARACTER.<NAME>.<KEY>`, then the process environment)
//! without touching `std::env` themselves. Secrets are `SecretString`, so they never reach a
//! `Debug` print or a log line.
//!
//! Layout: this file holds `Config` and the layering of environment over file over default;
//! `table` declares every setting once (its name, troupe.toml key, default, kind, where it
//! may be set and its security policy), and generates the troupe.toml keys (`FileConfig`)
//! from that; its module doc says how to add a setting. Each topic's settings, their parsing
//! and their tests sit in a file of their own:
//!
//! - `edge`: the HTTP server, its edge (`Host` names, connections per address), the API's
//!   callers (the operator's token, scoped tokens, trusted proxies) and the fetch policy;
//! - `storage`: the NATS JetStream bus;
//! - `knowledge`: documents, retrieval, the embedding model, the sandboxed document worker;
//! - `spend`: budgets, prices and the model scheduler, provider retries and the breaker;
//! - `platforms`: receive loops, replicas and Discord shards;
//! - `agent`: how agents work, and their memory;
//! - `stream`: live replies and edits;
//! - `telemetry`: logs and OpenTelemetry;
//! - `tools`: the MCP servers the operator allows, and the tool loop's bounds.

mod agent;
mod edge;
mod knowledge;
mod platforms;
mod spend;
mod storage;
mod stream;
mod table;
mod telemetry;
mod tools;

use anyhow::Context;
use secrecy::SecretString;
#[cfg(test)]
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub use crate::fetch::FetchSettings;
use crate::persona::Env;

pub use agent::{AgentSettings, MediaSettings, MemorySettings, Vision};
pub use edge::{
    AllowedHosts, ApiCallers, EdgeSettings, HttpSettings, Limits, ScopedToken, SystemMessages,
    TokenName,
};
pub use knowledge::{
    DEFAULT_LOCAL_MODEL_DIR, EmbeddingApi, EmbeddingSettings, ExtractSettings, HubSettings,
    KnowledgeSettings,
};
pub use platforms::{ReceiveSettings, ReplicaSettings};
pub use spend::ProviderSettings;
pub use storage::NatsSettings;
pub use stream::Switch;
use table::FileConfig;
pub use tools::ToolSettings;

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
    /// a build with the `otlp` feature (the default); `OTEL_SERVICE_NAME` names the service
    /// (default `troupe`).
    pub otlp_endpoint: Option<String>,
    /// `OTEL_SERVICE_NAME`, default `troupe`.
    pub otel_service_name: String,
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` as given (troupe exports `http/protobuf`).
    pub otel_protocol: Option<String>,
    /// `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`: message text in model spans.
    pub otel_capture_content: bool,
    /// `OTEL_BSP_MAX_QUEUE_SIZE`: spans waiting for the collector (2,048).
    pub otel_queue: usize,
    /// How model calls ride out a failing provider (issue 12, faults slice).
    pub provider: ProviderSettings,
    /// Accounting, budgets and the model scheduler (issue 16, docs/spend.md).
    pub spend: crate::spend::SpendSettings,
    /// The environment as it was at start, for persona secrets and provider keys, with the
    /// troupe.toml values of the settings read by name where the environment has none
    /// (`table::fill_env`).
    pub env: Env,
    /// `TROUPE_SECRETS_FILE` (`secrets_file` in troupe.toml), default `data/secrets.json`:
    /// the platform tokens the console connects (`crate::secrets_file`).
    pub secrets_file: PathBuf,
    /// `TROUPE_KNOWLEDGE_ALLOW_PATHS` (`knowledge_allow_paths` in troupe.toml), empty by
    /// default: directories besides `TROUPE_PERSONAS` that character `knowledge` paths may
    /// point into (absolute, through `..` or through a symlink). A `:`-separated list.
    pub knowledge_allow_paths: Vec<PathBuf>,
    /// Issue 30, finding 11: when `/readyz` calls a polling receive loop stale.
    pub receive: ReceiveSettings,
    /// Issue 30, findings 2 and 8: `TROUPE_ALLOWED_HOSTS`, `TROUPE_HTTP_MAX_CONNECTIONS_PER_IP`.
    pub edge: EdgeSettings,
    /// Issue 33: `TROUPE_MCP_*`, `TROUPE_TOOL_*` (docs/tools.md).
    pub tools: ToolSettings,
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

impl Config {
    /// Reads the process environment and the optional config file.
    pub fn load() -> anyhow::Result<Config> {
        #[allow(clippy::disallowed_methods)] // the one place that reads the environment
        let env: Env = std::env::vars().collect();
        Self::from_env(env)
    }

    /// Builds the configuration from an environment snapshot (tests pass their own), one
    /// settings group at a time; each step takes its keys out of the file.
    pub fn from_env(mut env: Env) -> anyhow::Result<Config> {
        let mut file = file_config(&env)?;
        // The settings read by name (a persona's, elizaOS's) take their troupe.toml value
        // through the snapshot, so every reader sees the environment, then the file.
        table::fill_env(&mut file, &mut env);
        let layered = Layered { env: &env };
        let knowledge_allow_paths =
            knowledge::knowledge_allow_paths(&env, file.knowledge_allow_paths.take())?;
        let api_token = edge::api_token(&layered, file.api_token.take())?;
        let http = edge::http_settings(&layered, &file)?;
        let fetch = edge::fetch_settings(&layered, &mut file)?;
        let http_addr = edge::http_addr(&layered, file.http_addr.take(), api_token.is_some())?;
        let limits = edge::limits(&layered, &file)?;
        let agent = agent::agent_settings(&layered, &file)?;
        let knowledge = KnowledgeSettings {
            fetch,
            extract: knowledge::extract_settings(&layered, &file)?,
            ..knowledge::knowledge_settings(&layered, &mut file)?
        };
        let provider = spend::provider_settings(&layered, &file)?;
        let api_callers = edge::api_callers(&layered, &mut file, api_token.as_ref())?;
        let spend = spend::spend_settings(&layered, &mut file)?;
        let replicas = platforms::replica_settings(&layered, &mut file)?;
        let nats = storage::nats_settings(&layered, &mut file)?;
        let logs = telemetry::log_settings(&layered, &mut file);
        let otel = telemetry::otel_settings(&layered, &mut file)?;
        let receive = platforms::receive_settings(&layered, &mut file)?;
        let edge = edge::edge_settings(&layered, &mut file)?;
        let tools = tools::tool_settings(&layered, &mut file)?;
        Ok(Config {
            http_addr,
            nats,
            database_url: layered
                .string("TROUPE_DATABASE_URL", file.database_url)
                .unwrap_or_else(|| "sqlite://data/troupe.db".into()),
            bus_url: layered.string("TROUPE_BUS_URL", file.bus_url),
            secrets_file: layered
                .string("TROUPE_SECRETS_FILE", file.secrets_file.take())
                .map_or_else(|| PathBuf::from("data/secrets.json"), PathBuf::from),
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
            otlp_endpoint: otel.endpoint,
            otel_service_name: otel.service,
            otel_protocol: otel.protocol,
            otel_capture_content: otel.capture_content,
            otel_queue: otel.queue,
            spend,
            env,
            knowledge_allow_paths,
            receive,
            edge,
            tools,
        })
    }

    /// A configuration for tests: an empty environment and the defaults.
    #[cfg(test)]
    pub fn for_test() -> Config {
        Self::from_env(HashMap::new()).expect("the defaults are valid")
    }
}

/// `TROUPE_CONFIG`, else `troupe.toml` in the working directory when it exists, else none.
fn file_config(env: &Env) -> anyhow::Result<FileConfig> {
    match env.get("TROUPE_CONFIG") {
        Some(path) => read_file_config(Path::new(path)),
        None if Path::new("troupe.toml").exists() => read_file_config(Path::new("troupe.toml")),
        None => Ok(FileConfig::default()),
    }
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
mod tests;
