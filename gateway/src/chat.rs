//! `troupe chat`: a terminal conversation with a persona, through the same journal, bus and
//! agent as every platform (as the Web platform, in a room of its own).

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use troupe_connectors::{AgentId, Inbound, MessageId, Platform, RoomId, RoomRef, UserId, UserRef};

use crate::app::{App, default_provider_factory};
use crate::config::Config;
use crate::ingress::Outcome;

/// Talks to the persona named `agent` (its id, or its name) in the Web room `room_id`.
pub async fn run(config: Config, agent: &AgentId, room_id: &RoomId) -> anyhow::Result<ExitCode> {
    let deadline = config.agent.model_timeout + Duration::from_secs(5);
    let app = App::build_headless(config, default_provider_factory()).await?;
    let Some(agent) = app.path.agents.find(agent.as_str()) else {
        let known: Vec<String> = app
            .path
            .agents
            .all()
            .iter()
            .map(|a| a.id.to_string())
            .collect();
        anyhow::bail!("no persona `{agent}`; loaded: {}", known.join(", "));
    };
    if let Some(reason) = agent.mind().provider.unavailable() {
        anyhow::bail!("{reason}");
    }
    let ingress = app.path.ingress.clone();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(app.run_until_stopped(shutdown.clone()));
    let name = agent.mind().persona.name.clone();
    eprintln!("Talking to {name} in room `{room_id}`. An empty line or Ctrl-D ends.");

    let mut lines = read_lines();
    // At a terminal the prompt waits for the line; from a pipe nothing waits, so each line
    // read is shown after its prompt instead: the transcript is the same, and no prompt is
    // left hanging after the last answer.
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        prompt("");
    }
    while let Some(text) = lines.recv().await {
        if !interactive {
            prompt(&text);
        }
        let inbound = Inbound {
            id: MessageId::new(uuid::Uuid::now_v7().to_string()),
            room: RoomRef::new(Platform::Web, room_id.clone()),
            author: UserRef {
                id: UserId::new("cli"),
                name: "You".into(),
                is_bot: false,
                username: None,
            },
            text,
            attachments: vec![],
            reply_to: None,
            is_direct: true,
            mentions_self: false,
            sent_at_ms: crate::clock::now_ms(),
            client: None,
            revises: None,
        };
        match ingress.converse(&agent.id, inbound, deadline).await {
            Ok(answer) => match answer.outcome {
                Outcome::Replied { texts, .. } => {
                    for t in texts {
                        println!("{name}: {t}");
                    }
                }
                Outcome::Ignored { reason } => println!("({name} did not answer: {reason})"),
                Outcome::RateLimited { scope } => println!("(rate limited per {scope})"),
                Outcome::Failed { error } => println!("(error: {error})"),
                Outcome::GaveUp { reason } => println!("({reason})"),
            },
            Err(e) => println!("(error: {e})"),
        }
        if interactive {
            prompt("");
        }
    }
    shutdown.cancel();
    running.await??;
    Ok(ExitCode::SUCCESS)
}

/// The lines typed, read on a thread of their own; an empty line or the end of input ends.
fn read_lines() -> tokio::sync::mpsc::Receiver<String> {
    let (tx, rx) = tokio::sync::mpsc::channel::<String>(1);
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            if line.trim().is_empty() || tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The prompt, followed by the line read when it came from a pipe (`echo` not empty).
fn prompt(echo: &str) {
    if echo.is_empty() {
        print!("> ");
    } else {
        println!("> {echo}");
    }
    let _ = std::io::stdout().flush();
}
