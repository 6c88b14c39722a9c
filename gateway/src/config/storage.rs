//! Storage and the bus: how the NATS JetStream bus is laid out (`TROUPE_BUS_*`). The
//! database and bus URLs themselves are plain strings on `Config`; `storage` and `bus`
//! open them.

use anyhow::bail;
use std::time::Duration;

use super::{FileConfig, Layered};

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

/// `TROUPE_BUS_*` but the URL and the capacity: how the NATS JetStream bus is laid out.
pub(super) fn nats_settings(
    layered: &Layered<'_>,
    file: &mut FileConfig,
) -> anyhow::Result<NatsSettings> {
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

#[cfg(test)]
mod tests {
    use super::super::tests::env;
    use super::*;
    use crate::config::Config;

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
}
