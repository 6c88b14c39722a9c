//! `troupe bench`: pushes messages through the whole in-process path (journal, bus, agent,
//! prompt, store, outbox) with a zero-latency model, and reports the gateway's own cost.

use clap::Args;
use std::process::ExitCode;

use crate::config::Config;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Messages to push.
    #[arg(long, default_value_t = 20_000)]
    pub messages: usize,
    /// Rooms to spread them over.
    #[arg(long, default_value_t = 1_000)]
    pub rooms: usize,
}

pub async fn run(_config: Config, _args: BenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not yet")
}
