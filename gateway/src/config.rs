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
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    /// `TROUPE_API_TOKEN`: when set, mutating routes need `Authorization: Bearer <token>`.
    pub api_token: Option<SecretString>,
    pub limits: Limits,
    pub agent: AgentSettings,
    /// `TROUPE_LOG` (or `RUST_LOG`): the log filter, default `info`.
    pub log_filter: String,
    /// Whether the filter came from the environment rather than the default.
    pub log_filter_set: bool,
    /// `TROUPE_LOG_FORMAT=json` for JSON log lines.
    pub log_json: bool,
    /// The environment as it was at start, for persona secrets and provider keys.
    pub env: Env,
}

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
    /// `TROUPE_MAX_ATTEMPTS`, default 5: how often a failed message is driven again.
    pub max_attempts: u32,
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
            .field("limits", &self.limits)
            .field("agent", &self.agent)
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

/// The optional `troupe.toml`: the same settings as the environment, in lower case.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    http_addr: Option<String>,
    database_url: Option<String>,
    bus_url: Option<String>,
    personas: Option<PathBuf>,
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
    max_attempts: Option<u32>,
    bus_prefix: Option<String>,
    bus_partitions: Option<u32>,
    bus_ack_wait_secs: Option<u64>,
    bus_dedupe_window_secs: Option<u64>,
}

impl Config {
    /// Reads the process environment and the optional config file.
    pub fn load() -> anyhow::Result<Config> {
        #[allow(clippy::disallowed_methods)] // the one place that reads the environment
        let env: Env = std::env::vars().collect();
        Self::from_env(env)
    }

    /// Builds the configuration from an environment snapshot (tests pass their own).
    pub fn from_env(env: Env) -> anyhow::Result<Config> {
        let file = match env.get("TROUPE_CONFIG") {
            Some(path) => read_file_config(Path::new(path))?,
            None if Path::new("troupe.toml").exists() => {
                read_file_config(Path::new("troupe.toml"))?
            }
            None => FileConfig::default(),
        };
        let layered = Layered { env: &env };

        let http_addr = layered
            .string("TROUPE_HTTP_ADDR", file.http_addr)
            .unwrap_or_else(|| "127.0.0.1:3000".into());
        let http_addr: SocketAddr = http_addr.parse().with_context(|| {
            format!("TROUPE_HTTP_ADDR `{http_addr}` is not an address such as 127.0.0.1:3000")
        })?;
        let api_token = env
            .get("TROUPE_API_TOKEN")
            .filter(|t| !t.is_empty())
            .map(|t| SecretString::from(t.clone()));
        if api_token.is_none() && !http_addr.ip().is_loopback() {
            bail!(
                "TROUPE_HTTP_ADDR {http_addr} is not a loopback address, and TROUPE_API_TOKEN is \
                 not set: anyone who reaches this port could talk to your agents and upload \
                 documents. Set TROUPE_API_TOKEN, or bind 127.0.0.1."
            );
        }

        let limits = Limits {
            user_per_minute: layered.parse(
                "TROUPE_RATE_USER_PER_MIN",
                file.rate_user_per_min,
                20,
            )?,
            room_per_minute: layered.parse(
                "TROUPE_RATE_ROOM_PER_MIN",
                file.rate_room_per_min,
                60,
            )?,
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
        };
        let agent = AgentSettings {
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
            max_attempts: layered
                .parse("TROUPE_MAX_ATTEMPTS", file.max_attempts, 5)?
                .max(1),
        };

        let prefix = layered
            .string("TROUPE_BUS_PREFIX", file.bus_prefix)
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
        let ack_wait: u64 =
            layered.parse("TROUPE_BUS_ACK_WAIT_SECS", file.bus_ack_wait_secs, 30)?;
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
        let nats = NatsSettings {
            prefix,
            partitions,
            ack_wait: Duration::from_secs(ack_wait),
            dedupe_window: Duration::from_secs(dedupe_window),
        };

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
            log_filter: env
                .get("TROUPE_LOG")
                .or_else(|| env.get("RUST_LOG"))
                .cloned()
                .unwrap_or_else(|| "info,sqlx=warn".into()),
            log_filter_set: env.contains_key("TROUPE_LOG") || env.contains_key("RUST_LOG"),
            log_json: env
                .get("TROUPE_LOG_FORMAT")
                .is_some_and(|f| f.eq_ignore_ascii_case("json")),
            limits,
            agent,
            env,
        })
    }

    /// A configuration for tests and benchmarks: an empty environment and the defaults.
    pub fn for_test() -> Config {
        Self::from_env(HashMap::new()).expect("the defaults are valid")
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
    fn a_bad_number_names_the_variable() {
        let err = Config::from_env(env(&[("TROUPE_HISTORY_LIMIT", "lots")])).unwrap_err();
        assert!(err.to_string().contains("TROUPE_HISTORY_LIMIT"), "{err}");
    }
}
