//! The configuration's own tests: the defaults, and the file's typed keys checked against
//! `config/table.rs` (every one changes its setting, and the environment wins over it).
//! Each topic's tests sit in its own file; the table's own in `table/tests.rs`.

use super::table::SETTINGS;
use super::*;
use std::path::Path;

pub(super) fn env(pairs: &[(&str, &str)]) -> Env {
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
fn a_misspelt_toml_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("troupe.toml");
    std::fs::write(&path, "knowledge_top_kk = 3\n").unwrap();
    let err = Config::from_env(env(&[("TROUPE_CONFIG", &path.display().to_string())])).unwrap_err();
    assert!(err.to_string().contains("knowledge_top_kk"), "{err}");
}

/// The settings whose troupe.toml key is typed, read by their topic's file: each needs a
/// probe. (`[prices]`, a table, has its own tests in `spend`; the keys of settings read by
/// name are checked all at once by `config::table`.)
fn typed_settings() -> Vec<&'static str> {
    SETTINGS
        .iter()
        .filter(|s| s.typed && s.is_variable())
        .map(|s| s.name)
        .collect()
}

/// The troupe.toml key of a variable, from the table.
fn toml_key(var: &str) -> String {
    SETTINGS
        .iter()
        .find(|s| s.name == var)
        .and_then(|s| s.key)
        .unwrap_or_else(|| panic!("{var} has no troupe.toml key in config/table.rs"))
        .to_string()
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
    fn embedding(var: &'static str, file: &str, env: &str, read: fn(&Config) -> String) -> Probe {
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
        p("TROUPE_VISION", "\"off\"", "on", |c| {
            format!("{:?}", c.agent.media.vision)
        }),
        n("TROUPE_MEDIA_MAX_BYTES", |c| {
            c.agent.media.max_bytes.to_string()
        }),
        n("TROUPE_MEDIA_KEEP_DAYS", |c| {
            c.agent.media.keep_days.to_string()
        }),
        p("TROUPE_TRANSCRIBE", "\"off\"", "on", |c| {
            c.agent.media.transcribe.to_string()
        }),
        p("TROUPE_TRANSCRIBE_MODEL", "\"m1\"", "m2", |c| {
            c.agent.media.transcribe_model.clone()
        }),
        p("TROUPE_STREAM", "\"off\"", "on", |c| {
            c.agent.stream.on.to_string()
        }),
        p("TROUPE_STREAM_EDIT_MS", "300", "400", |c| {
            c.agent.stream.edit_every.as_millis().to_string()
        }),
        n("TROUPE_EDIT_WINDOW_SECS", |c| {
            c.agent.stream.edit_window.as_secs().to_string()
        }),
        p("TROUPE_ACK_REACTION", "\"👀\"", "👍", |c| {
            c.agent.ack_reaction.clone().unwrap_or_default()
        }),
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
        p("TROUPE_SECRETS_FILE", "\"/s1.json\"", "/s2.json", |c| {
            c.secrets_file.display().to_string()
        }),
        p("TROUPE_INDEX_DIR", "\"/i1\"", "/i2", |c| {
            c.knowledge.index_dir.display().to_string()
        }),
        p("TROUPE_INDEX_POLL_MS", "70", "90", |c| {
            format!("{:?}", c.knowledge.index_poll)
        }),
        p("TROUPE_PGVECTOR", "false", "true", |c| {
            c.knowledge.pgvector.to_string()
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
        p("TROUPE_MODELS_AUTO_PULL", "true", "false", |c| {
            c.knowledge.hub.auto_pull.to_string()
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
        p(
            "TROUPE_OPENAI_SYSTEM_MESSAGES",
            "\"refuse\"",
            "instruction",
            |c| format!("{:?}", c.http.openai_system),
        ),
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
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "\"grpc\"",
            "http/json",
            |c| format!("{:?}", c.otel_protocol),
        ),
        p(
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
            "true",
            "false",
            |c| c.otel_capture_content.to_string(),
        ),
        n("OTEL_BSP_MAX_QUEUE_SIZE", |c| c.otel_queue.to_string()),
        p(
            "TROUPE_KNOWLEDGE_ALLOW_PATHS",
            &format!("[{:?}]", dir_a.display().to_string()),
            &dir_b.display().to_string(),
            |c| format!("{:?}", c.knowledge_allow_paths),
        ),
        p("TROUPE_FETCH_ALLOW", "\"10.0.0.1\"", "10.0.0.2", |c| {
            format!("{:?}", c.knowledge.fetch.allow)
        }),
        p("TROUPE_MCP_COMMANDS", "\"/usr/bin/a\"", "/usr/bin/b", |c| {
            format!("{:?}", c.tools.mcp_commands)
        }),
        p("TROUPE_MCP_ENV", "\"A\"", "B", |c| {
            format!("{:?}", c.tools.mcp_env)
        }),
        p("TROUPE_MCP_CWDS", "\"/srv/a\"", "/srv/b", |c| {
            format!("{:?}", c.tools.mcp_cwds)
        }),
        p(
            "TROUPE_MCP_URLS",
            "\"https://a.example/\"",
            "https://b.example/",
            |c| format!("{:?}", c.tools.mcp_urls),
        ),
        n("TROUPE_TOOL_MAX_STEPS", |c| c.tools.max_steps.to_string()),
        p("TROUPE_TOOL_MAX_OUTPUT_BYTES", "1000", "2000", |c| {
            c.tools.max_output_bytes.to_string()
        }),
        p("TROUPE_TOOL_WEB_FETCH", "true", "false", |c| {
            c.tools.web_fetch.to_string()
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
/// lower case, without the TROUPE_ prefix), then these defaults". Checked for every setting
/// of `config/table.rs` with a typed key: the key is accepted, it changes the setting, and
/// the environment wins over it.
#[test]
fn every_toml_key_changes_its_setting() {
    let dir_a = tempfile::tempdir().unwrap();
    let dir_b = tempfile::tempdir().unwrap();
    let probes = probes(dir_a.path(), dir_b.path());
    let typed = typed_settings();
    let probed: Vec<&str> = probes.iter().map(|p| p.var).collect();
    for var in &typed {
        assert!(
            probed.contains(var),
            "config/table.rs gives {var} a typed troupe.toml key: add a probe for it here"
        );
    }
    for var in &probed {
        assert!(
            typed.contains(var),
            "{var} is probed but has no typed troupe.toml key in config/table.rs"
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

#[test]
fn the_hub_endpoint_and_token_come_from_the_environment() {
    let c = Config::for_test();
    assert_eq!(c.knowledge.hub.endpoint, "https://huggingface.co");
    assert!(c.knowledge.hub.token.is_none());
    let env: Env = [
        ("HF_ENDPOINT", "https://mirror.example/hf/"),
        ("HF_TOKEN", " hf_abc "),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let c = Config::from_env(env).unwrap();
    assert_eq!(c.knowledge.hub.endpoint, "https://mirror.example/hf");
    use secrecy::ExposeSecret;
    assert_eq!(
        c.knowledge.hub.token.as_ref().unwrap().expose_secret(),
        "hf_abc"
    );
    for bad in ["ftp://mirror.example", "not a url", "file:///etc"] {
        let env: Env = [("HF_ENDPOINT".to_string(), bad.to_string())]
            .into_iter()
            .collect();
        let why = Config::from_env(env).unwrap_err().to_string();
        assert!(why.contains("HF_ENDPOINT"), "{why}");
    }
}
