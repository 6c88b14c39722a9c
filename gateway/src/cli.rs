//! The command line: `troupe run | check | migrate | chat | ingest | models | bench | usage |
//! extract`.
//!
//! Each subcommand is a small function over the same `Config`; errors go to stderr as one
//! sentence that says what to do, and the exit code says whether it worked.

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;

use troupe_connectors::{AgentId, RoomId, RoomKey};

use crate::app::App;
use crate::config::Config;

#[derive(Debug, Parser)]
#[command(
    name = "troupe",
    version,
    about = "Character-driven LLM agents on chat platforms"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway: connectors, agents and the HTTP API.
    Run,
    /// Check character files; prints `file:line:col: field: reason` per problem.
    Check {
        /// Character files (JSON). Default: every file in TROUPE_PERSONAS.
        files: Vec<PathBuf>,
    },
    /// Create or upgrade the database schema, then exit.
    Migrate,
    /// Talk to a persona in the terminal, through the same path as any platform.
    Chat {
        /// The persona's id or name.
        #[arg(long)]
        agent: AgentId,
        /// The room of the HTTP API to talk in (its memory persists).
        #[arg(long = "room", default_value = "cli")]
        room_id: RoomId,
    },
    /// Add documents (files, or directories read recursively) to a persona's knowledge.
    Ingest {
        /// The persona's id or name.
        #[arg(long)]
        agent: AgentId,
        /// Scope the documents to one room (`platform:room`, e.g. `telegram:-100123`; a bare
        /// id is a room of the HTTP API).
        #[arg(long, value_parser = RoomKey::parse_lenient)]
        room: Option<RoomKey>,
        /// Rebuild the persona's vectors for the configured embedding model (after the files,
        /// if any are given).
        #[arg(long)]
        reembed: bool,
        files: Vec<PathBuf>,
    },
    /// Pairing codes and approvals (docs/access.md): `list`, `approve CODE`, `revoke
    /// PLATFORM:USER_ID`, against the configured database.
    #[command(subcommand)]
    Pairing(crate::access::cli::PairingCommand),
    /// Local embedding models: `troupe models pull [NAME]` from the Hugging Face Hub.
    Models(crate::models::ModelsArgs),
    /// Measure the gateway's own per-message cost with a zero-latency model.
    Bench(crate::bench::BenchArgs),
    /// Print what a persona's model calls used and cost, per room, user or day
    /// (docs/spend.md).
    Usage {
        /// The persona's id.
        #[arg(long)]
        agent: AgentId,
        /// Group by `room`, `user` or `day`.
        #[arg(long, default_value = "day")]
        by: String,
        /// First day to include (`YYYY-MM-DD`, UTC); default: the last 30 days.
        #[arg(long)]
        since: Option<String>,
        /// Print JSON (the API's shape) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The sandboxed document worker, started by troupe itself: reads one document on
    /// stdin and writes its chunks on stdout (see docs/knowledge.md).
    Extract,
    /// Exit 0 if the gateway on TROUPE_HTTP_ADDR answers `GET /healthz`, 1 if not: the
    /// container image's health check (it has no shell, curl or wget).
    Healthcheck,
}

pub fn main() -> ExitCode {
    main_with(|| {})
}

/// [`main`], with the executable's way to give the allocator's free pages back to the
/// kernel (`release`), which `troupe run` calls after its start and then now and then
/// (`App::release_memory_with`), so that an idle gateway does not keep what its start and
/// its last burst freed (see src/main.rs).
pub fn main_with(release: fn()) -> ExitCode {
    let cli = Cli::parse();
    // The worker reads no configuration, logs nothing and starts no runtime: everything it
    // needs comes on stdin, and its stdout is the answer.
    if let Command::Extract = cli.command {
        return crate::knowledge::worker_main();
    }
    // The process-wide TLS crypto provider (ring): reqwest is built without one of its own.
    troupe_connectors::tls::install_crypto_provider();
    let config = match Config::load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("troupe: {e:#}");
            return ExitCode::from(2);
        }
    };
    // No runtime and no logging: a health check runs every few seconds and says one line.
    if let Command::Healthcheck = cli.command {
        return healthcheck(config.http_addr);
    }
    // A benchmark measures the path, not the per-message log lines, and in `troupe chat`
    // the conversation is all the terminal shows: quiet unless asked.
    let filter = match &cli.command {
        Command::Bench(_) | Command::Chat { .. } | Command::Pairing(_)
            if !config.log_filter_set =>
        {
            "warn"
        }
        _ => config.log_filter.as_str(),
    };
    let _telemetry = crate::telemetry::init(
        filter,
        config.log_json,
        &crate::telemetry::Export::from_config(&config),
    );
    for name in config.unknown_variables() {
        tracing::warn!(
            "{name} is set, but troupe reads no such setting (misspelt?); README.md lists them"
        );
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("troupe: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Run => run(config, release).await,
            Command::Check { files } => check(config, files).await,
            Command::Migrate => migrate(config).await,
            Command::Chat { agent, room_id } => crate::chat::run(config, &agent, &room_id).await,
            Command::Ingest {
                agent,
                room,
                reembed,
                files,
            } => ingest(config, agent, room, reembed, files).await,
            Command::Bench(args) => crate::bench::run(config, args).await,
            Command::Pairing(command) => crate::access::cli::run(config, command).await,
            Command::Models(args) => crate::models::run_cli(&config, args).await,
            Command::Usage {
                agent,
                by,
                since,
                json,
            } => usage(config, agent, by, since, json).await,
            Command::Extract => Ok(crate::knowledge::worker_main()),
            Command::Healthcheck => Ok(healthcheck(config.http_addr)),
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("troupe: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `troupe healthcheck`: asks the gateway's own `/healthz` on loopback (a wildcard listen
/// address is reached there) and exits 0 on a 200. It says why when it fails.
fn healthcheck(listen: std::net::SocketAddr) -> ExitCode {
    match probe_healthz(listen, std::time::Duration::from_secs(3)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("troupe healthcheck: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One `GET /healthz` over a plain TCP connection, every step bounded by `timeout`. Only the
/// status line is read (at most 256 bytes): the body does not matter, and a peer that
/// talks forever cannot hold the check.
fn probe_healthz(listen: std::net::SocketAddr, timeout: std::time::Duration) -> Result<(), String> {
    use std::io::Read;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    let addr = SocketAddr::new(ip, listen.port());
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| format!("{addr}: {e}"))?;
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("cannot send to {addr}: {e}"))?;
    let mut head = Vec::with_capacity(256);
    let mut limited = stream.take(256);
    let mut buf = [0u8; 256];
    while !head.contains(&b'\n') {
        match limited.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("no answer from {addr}/healthz: {e}")),
        }
    }
    let line = String::from_utf8_lossy(&head);
    let line = line.lines().next().unwrap_or("").trim();
    match line.split(' ').nth(1) {
        Some("200") => Ok(()),
        _ if line.is_empty() => Err(format!("{addr}/healthz closed without answering")),
        _ => Err(format!("{addr}/healthz answered {line:?}")),
    }
}

/// The configured database, or an error naming it (without its password).
async fn connect(config: &Config) -> anyhow::Result<crate::storage::Store> {
    crate::storage::Store::connect(&config.database_url)
        .await
        .with_context(|| {
            format!(
                "cannot open the database {}",
                crate::config::redact_url(&config.database_url)
            )
        })
}

/// `troupe usage`: the persona's usage report from the database, as a table or JSON.
async fn usage(
    config: Config,
    agent: AgentId,
    by: String,
    since: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    use crate::spend::report;
    let by = report::parse_by(&by).map_err(anyhow::Error::msg)?;
    let today = crate::spend::clock::day_of(crate::clock::now_ms());
    let since = report::parse_since(since.as_deref(), today).map_err(anyhow::Error::msg)?;
    let store = connect(&config).await?;
    let report = report::report(&store, &agent, by, since).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report::table(&report));
    }
    Ok(ExitCode::SUCCESS)
}

async fn run(config: Config, release: fn()) -> anyhow::Result<ExitCode> {
    let mut app = App::build(config).await?;
    app.release_memory_with(release);
    if let Some(addr) = app.http_addr() {
        // On stdout, so scripts and tests can find the port when 0 was asked for.
        println!("troupe: listening on http://{addr}");
        let _ = std::io::stdout().flush();
        tracing::info!(%addr, "HTTP API listening");
    }
    let shutdown = CancellationToken::new();
    tokio::spawn(signal_shutdown(shutdown.clone()));
    app.run_until_stopped(shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

/// Cancels `token` on Ctrl-C or SIGTERM.
async fn signal_shutdown(token: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    token.cancel();
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    token.cancel();
}

async fn check(config: Config, mut files: Vec<PathBuf>) -> anyhow::Result<ExitCode> {
    if files.is_empty() {
        let dir = &config.personas_dir;
        let entries = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read the personas directory {}", dir.display()))?;
        files = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
    }
    let report = crate::persona::check_files(&files, &config.env, &config.persona_load_options());
    for d in &report.diagnostics {
        println!("{d}");
    }
    let posts_ok = check_posts(&report, &config.env);
    let tools_ok = check_tools(&report, &config);
    // Who may talk to each persona, per platform (issue 44).
    for loaded in &report.loaded {
        for line in crate::access::cli::describe(&loaded.persona, &config.env, &config) {
            eprintln!("troupe: {line}");
        }
    }
    // On stderr with the summary: stdout holds only the problems, one per line.
    eprintln!(
        "troupe: knowledge search: {}",
        crate::knowledge::SearchMode::of(&config.knowledge)
    );
    // Per persona: its model, and how many of its chunks have vectors (issue 36).
    let agents: Vec<AgentId> = report.loaded.iter().map(|l| l.persona.id.clone()).collect();
    for line in
        crate::knowledge::check_lines(&config.database_url, &config.knowledge, &agents).await
    {
        eprintln!("troupe: {line}");
    }
    if report.ok() && posts_ok && tools_ok {
        eprintln!("troupe: {} file(s) checked, no errors", files.len());
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(1))
    }
}

/// Tools (issue 33): the MCP servers the operator's policy refuses, each at its field and
/// named with the variable to set; `false` when any is.
fn check_tools(report: &crate::persona::CheckReport, config: &Config) -> bool {
    for var in crate::tools::policy::floor_in_allow_list(&config.tools) {
        println!(
            "TROUPE_MCP_ENV: warning: `{var}` is refused anyway: {}",
            crate::tools::floor::env_floor(var).unwrap_or_default()
        );
    }
    let mut errors = 0;
    for loaded in &report.loaded {
        let persona = &loaded.persona;
        let calls_tools = crate::provider::resolve_target(persona, &config.env).is_ok();
        for d in crate::tools::check(persona, &config.tools, calls_tools) {
            println!("{d}");
            errors += usize::from(d.is_error());
        }
    }
    errors == 0
}

/// Which personas will post on their own, where and how often, and what in their post
/// settings is wrong (an error: the schedule would not run). `false` when anything is.
fn check_posts(report: &crate::persona::CheckReport, env: &crate::persona::Env) -> bool {
    let mut ok = true;
    for loaded in &report.loaded {
        let p = &loaded.persona;
        let posts = crate::posts::settings::of(p, env);
        for problem in &posts.problems {
            println!("{}: error: posts: {problem}", p.source.display());
            ok = false;
        }
        match posts.describe() {
            Some(where_) => eprintln!("troupe: {} will post: {where_}", p.id),
            None => eprintln!("troupe: {} posts nothing on its own", p.id),
        }
    }
    ok
}

async fn migrate(config: Config) -> anyhow::Result<ExitCode> {
    let store = crate::storage::Store::connect(&config.database_url).await?;
    println!("troupe: the {:?} database is up to date", store.backend());
    Ok(ExitCode::SUCCESS)
}

/// `troupe ingest`: files read, stored and embedded at once, through bounded queues (memory
/// holds a few pages of chunks, never the corpus), with a progress bar on a terminal and
/// one line per problem. Exit code 1 when a file failed.
async fn ingest(
    config: Config,
    agent: AgentId,
    room: Option<RoomKey>,
    reembed: bool,
    files: Vec<PathBuf>,
) -> anyhow::Result<ExitCode> {
    use crate::knowledge::files_under;

    if files.is_empty() && !reembed {
        anyhow::bail!("nothing to do: name files or directories to ingest, or pass --reembed");
    }
    let persona = find_persona(&config, &agent)?;
    if let Some(missing) = files.iter().find(|f| !f.exists()) {
        anyhow::bail!("{} does not exist", missing.display());
    }
    let knowledge = open_knowledge(&config, &persona).await?;
    if reembed && knowledge.embedder().is_none() {
        anyhow::bail!(
            "--reembed needs an embedding model: a local model in TROUPE_EMBEDDING_MODEL_DIR, or TROUPE_EMBEDDING_MODEL for an API (see docs/knowledge.md)"
        );
    }
    let paths: Vec<PathBuf> = files.iter().flat_map(|f| files_under(f)).collect();
    let failed = ingest_paths(&knowledge, &persona.id, room.as_ref(), &paths).await?;
    if reembed {
        reembed_all(&knowledge, &persona.id).await?;
    }
    Ok(if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The persona `agent` names, by id or name, among the character files.
fn find_persona(config: &Config, agent: &AgentId) -> anyhow::Result<crate::persona::Persona> {
    let (loaded, _) =
        crate::persona::load_dir(&config.personas_dir, &config.persona_load_options());
    if let Some(persona) = loaded
        .iter()
        .map(|l| &l.persona)
        .find(|p| p.id == *agent || p.name.eq_ignore_ascii_case(agent.as_str()))
    {
        return Ok(persona.clone());
    }
    let known: Vec<&str> = loaded.iter().map(|l| l.persona.id.as_str()).collect();
    anyhow::bail!(
        "no persona `{agent}` in {} (TROUPE_PERSONAS); known: {}",
        config.personas_dir.display(),
        if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        }
    );
}

/// The knowledge store of the configured database, with `persona` registered in it.
async fn open_knowledge(
    config: &Config,
    persona: &crate::persona::Persona,
) -> anyhow::Result<crate::knowledge::Knowledge> {
    let store = connect(config).await?;
    store.upsert_agent(&persona.id, &persona.name).await?;
    Ok(crate::knowledge::Knowledge::from_settings(
        store,
        &config.knowledge,
    ))
}

/// Ingests `paths` for `agent` (reading, storing and embedding overlap: `knowledge::
/// pipeline`), with a progress bar of files done, and prints the tally: how many files
/// failed. A database failure stops it.
async fn ingest_paths(
    knowledge: &crate::knowledge::Knowledge,
    agent: &AgentId,
    room: Option<&RoomKey>,
    paths: &[PathBuf],
) -> anyhow::Result<usize> {
    use crate::knowledge::Origin;

    let bar = progress_bar(
        paths.len(),
        "{spinner} [{bar:30}] {pos}/{len} files {wide_msg}",
    );
    let (mut added, mut duplicates, mut failed, mut chunks) = (0usize, 0usize, 0usize, 0usize);
    let run = knowledge
        .ingest_files(Origin::Cli, agent, room, paths, |path, outcome| {
            bar.set_message(path.display().to_string());
            match outcome {
                Ok(done) if done.duplicate => duplicates += 1,
                Ok(done) => {
                    added += 1;
                    chunks += done.chunks;
                }
                Err(e) => {
                    failed += 1;
                    bar.suspend(|| eprintln!("troupe: skipped: {e}"));
                }
            }
            bar.inc(1);
        })
        .await;
    if let Err(e) = run {
        bar.abandon();
        return Err(e).context("the database failed; nothing more was ingested");
    }
    bar.finish_and_clear();
    // The keyword index commits what it staged (it would replay it at the next start).
    if let Err(e) = knowledge.sync_index().await {
        eprintln!("troupe: the keyword index will catch up at the next start: {e}");
    }
    if !paths.is_empty() {
        println!(
            "troupe: {added} document(s) added ({chunks} chunks), {duplicates} already known, \
             {failed} skipped, for {agent}"
        );
    }
    Ok(failed)
}

/// `--reembed`: every chunk of `agent` embedded again for the configured model, with a
/// progress bar.
async fn reembed_all(
    knowledge: &crate::knowledge::Knowledge,
    agent: &AgentId,
) -> anyhow::Result<()> {
    let total = knowledge.chunk_count(agent).await?;
    let bar = progress_bar(total, "{spinner} [{bar:30}] {pos}/{len} chunks embedded");
    let done = knowledge
        .reembed(agent, |n| bar.set_position(n as u64))
        .await?;
    bar.finish_and_clear();
    println!("troupe: {done} chunk(s) embedded for {agent}");
    Ok(())
}

/// A progress bar of `len` steps drawn with `template`.
fn progress_bar(len: usize, template: &str) -> indicatif::ProgressBar {
    use indicatif::{ProgressBar, ProgressStyle};
    ProgressBar::new(len as u64).with_style(
        ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    )
}

#[cfg(test)]
mod tests {
    use super::probe_healthz;
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener};
    use std::time::Duration;

    /// A one-connection server on a wildcard address, answering `reply` after reading the
    /// request; returns the address it listens on and what it was asked.
    fn serve_once(reply: &'static [u8]) -> (SocketAddr, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("0.0.0.0:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let handle = std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 512];
            while !request.ends_with(b"\r\n\r\n") {
                let n = socket.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
            }
            let _ = socket.write_all(reply);
            String::from_utf8_lossy(&request).into_owned()
        });
        (addr, handle)
    }

    #[test]
    fn a_200_is_healthy_and_the_wildcard_address_is_reached_on_loopback() {
        let (addr, server) = serve_once(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
        probe_healthz(addr, Duration::from_secs(5)).expect("healthy");
        let request = server.join().unwrap();
        assert!(
            request.starts_with("GET /healthz HTTP/1.1\r\n"),
            "{request}"
        );
    }

    #[test]
    fn another_status_or_no_server_is_unhealthy_with_the_reason() {
        let (addr, server) = serve_once(b"HTTP/1.1 503 Service Unavailable\r\n\r\n");
        let err = probe_healthz(addr, Duration::from_secs(5)).unwrap_err();
        assert!(err.contains("503 Service Unavailable"), "{err}");
        server.join().unwrap();

        // A port nothing listens on: bind, learn the port, close.
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let err = probe_healthz(closed, Duration::from_secs(5)).unwrap_err();
        assert!(err.contains("cannot connect"), "{err}");
    }

    /// A peer that accepts and never answers holds the check only for the timeout.
    #[test]
    fn a_silent_peer_fails_the_check_at_the_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let err = probe_healthz(addr, Duration::from_millis(200)).unwrap_err();
        assert!(err.contains("no answer"), "{err}");
        drop(listener);
    }
}
