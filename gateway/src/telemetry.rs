//! Logging and tracing setup. Human-readable lines by default, JSON lines with
//! `TROUPE_LOG_FORMAT=json`; the filter is `RUST_LOG`-style (`TROUPE_LOG` or `RUST_LOG`).

use tracing_subscriber::EnvFilter;

pub fn init(filter: &str, json: bool) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (tests) is harmless.
    let _ = if json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}
