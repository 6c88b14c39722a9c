//! Platforms: how long a polling receive loop may stay silent before `/readyz` calls it
//! stale, and how replicas on one Postgres share the receivers a platform allows only once
//! (leader election, Discord shards; `leader.rs`, docs/deploy.md).

use std::time::Duration;

use super::{FileConfig, Layered};

/// How long a polling connector (Telegram `getUpdates`) may go without an answer from its
/// platform before `/readyz` reports its loop stale (503, naming the connector).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiveSettings {
    /// `TROUPE_RECEIVE_STALE_SECS`, default 60 (at least 1): well above a healthy long
    /// poll, which answers every 10 s; a poll in flight never counts as silence.
    pub stale_after: Duration,
}

/// `TROUPE_RECEIVE_STALE_SECS`, or troupe.toml's `receive_stale_secs`.
pub(super) fn receive_settings(
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

/// `TROUPE_LEADER_RETRY_SECS` and `TROUPE_DISCORD_SHARDS*`: several replicas on one Postgres.
pub(super) fn replica_settings(
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

#[cfg(test)]
mod tests {
    use super::super::tests::env;
    use super::*;
    use crate::config::Config;

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
}
