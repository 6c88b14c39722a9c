//! `troupe pairing list | approve CODE | revoke PLATFORM:USER_ID`, against the configured
//! database (the gateway may be running: approvals are rows it reads on the next message),
//! and what `troupe check` and the start log say about each persona's access.

use std::process::ExitCode;

use clap::Subcommand;
use troupe_connectors::Platform;

use super::{DmPolicy, Rules, approve};
use crate::config::Config;
use crate::persona::{Env, Persona};
use crate::spend::clock::SpendClock;
use crate::storage::Approval;

#[derive(Debug, Subcommand)]
pub enum PairingCommand {
    /// The codes waiting to be approved, and the people approved.
    List,
    /// Approve a pairing code (any case).
    Approve { code: String },
    /// Take back an approval: `telegram:123`, `discord:456`.
    Revoke { subject: String },
}

pub async fn run(config: Config, command: PairingCommand) -> anyhow::Result<ExitCode> {
    let store = crate::storage::Store::connect(&config.database_url).await?;
    let now = SpendClock::system(config.spend.clock_offset_secs).now_ms();
    match command {
        PairingCommand::List => {
            let (pending, approved) = store.access_list(None, now).await?;
            println!("pending codes: {}", pending.len());
            for p in &pending {
                println!(
                    "  {}  {}  {}:{} ({})  expires in {} min",
                    p.code,
                    p.agent_id,
                    p.platform,
                    p.user_id,
                    p.user_name,
                    (p.expires_at_ms - now).max(0) / 60_000
                );
            }
            println!("approved: {}", approved.len());
            for a in &approved {
                println!(
                    "  {}  {} ({})  by {}",
                    a.agent_id, a.subject, a.user_name, a.approved_by
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        PairingCommand::Approve { code } => {
            let approval = approve::approve(&store, &code, None, "cli", "cli", now).await?;
            println!("{}", approve::answer(&approval, now));
            Ok(match approval {
                Approval::Approved(_) => ExitCode::SUCCESS,
                _ => ExitCode::from(1),
            })
        }
        PairingCommand::Revoke { subject } => {
            let Some((platform, user)) = subject.split_once(':') else {
                anyhow::bail!("expected PLATFORM:USER_ID, like telegram:123");
            };
            let platform: Platform = platform.parse().map_err(anyhow::Error::msg)?;
            let taken = store
                .access_revoke(None, &format!("{platform}:{user}"))
                .await?;
            println!("revoked {taken} approval(s) of {platform}:{user}");
            Ok(if taken > 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

/// One line per platform the persona runs on with a DM gate: its policy, allowlist,
/// rooms and owners. Then a warning when strangers may spend its tools.
pub fn describe(persona: &Persona, env: &Env, config: &Config) -> Vec<String> {
    let rules = Rules::of(persona, env);
    let mut lines = Vec::new();
    for platform in persona.platforms() {
        let Some(on) = rules.on(platform) else {
            continue;
        };
        let rooms = match &on.rooms {
            Some(r) => format!("{} room(s)", r.len()),
            None => "every room".to_string(),
        };
        lines.push(format!(
            "{} on {platform}: DMs {}, {} allowed sender(s), answers in {rooms}, {} listen-only, {} owner(s)",
            persona.id,
            on.dm.as_str(),
            on.allow_from.len(),
            on.listen_only.len(),
            rules.owners.len()
        ));
    }
    if let Some(w) = open_tools_warning(persona, &rules, platforms_open(persona, &rules), config) {
        lines.push(w);
    }
    lines.extend(
        rules
            .problems
            .iter()
            .map(|p| format!("{}: {p}", persona.id)),
    );
    lines
}

fn platforms_open(persona: &Persona, rules: &Rules) -> bool {
    persona
        .platforms()
        .into_iter()
        .filter_map(|p| rules.on(p))
        .any(|on| on.dm == DmPolicy::Open)
}

/// The warning for a persona with tools (or `web.fetch`) on, DMs `open` and no per-user
/// budget: any stranger may spend its money and use its tools.
pub fn open_tools_warning(
    persona: &Persona,
    rules: &Rules,
    dms_open: bool,
    config: &Config,
) -> Option<String> {
    let servers = !crate::tools::servers::servers_of(&persona.raw)
        .specs
        .is_empty();
    let (builtins, _) = crate::tools::builtin::builtins_of(&persona.raw, &config.tools);
    let tools = servers || !builtins.is_empty();
    let user_budget = config.spend.budgets.user_day.is_set()
        || persona.raw.pointer("/settings/spend/userPerDay").is_some();
    (tools && dms_open && !user_budget).then(|| {
        format!(
            "{}: warning: tools are on, DMs are open and there is no per-user budget: any \
             stranger may spend this persona's money{} (docs/access.md)",
            persona.id,
            if rules.tools_for_everyone {
                " and use its tools (settings.troupe.tools.dm is \"everyone\")"
            } else {
                ""
            }
        )
    })
}
