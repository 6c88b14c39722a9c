//! `troupe bench --http`: the message path through the HTTP API, as a client sees it.
//!
//! The app is the one `troupe run` serves (routes, extractors, the API's budget, JSON both
//! ways), with the model that answers at once; the clients are in this process, on loopback,
//! each with its own keep-alive connection, each posting its next message when the previous
//! one is answered (`POST /api/agents/bench/messages`). One client first, for latency with
//! nothing queued; then `--clients` at once over `--rooms` rooms, for throughput.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::stats::pct;

/// What one run of clients measured: every request's latency, and the wall time.
pub(super) struct Load {
    pub latencies: Vec<Duration>,
    pub elapsed: Duration,
}

/// `clients` clients post `per_client` messages each (after `warmup` unmeasured ones),
/// client `c` to rooms `c`, `c + clients`, … in turn, below `rooms`.
pub(super) async fn load(
    addr: SocketAddr,
    run_id: &str,
    clients: usize,
    per_client: usize,
    warmup: usize,
    rooms: usize,
) -> anyhow::Result<Load> {
    let url = format!("http://{addr}/api/agents/bench/messages");
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        // One client (and so one connection) per task, as separate callers would be.
        let client = troupe_connectors::tls::http_client()
            .pool_max_idle_per_host(1)
            .build()?;
        let url = url.clone();
        let run_id = run_id.to_string();
        let own_rooms = rooms.div_ceil(clients).max(1);
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(per_client);
            for n in 0..(warmup + per_client) {
                let room = c + clients * (n % own_rooms);
                let body = serde_json::json!({
                    "roomId": format!("http-{run_id}-{room}"),
                    "userId": format!("user-{room}"),
                    "userName": format!("User {room}"),
                    "text": format!("message {n} from client {c}: how is the weather today?"),
                });
                let t = Instant::now();
                let response = client.post(&url).json(&body).send().await?;
                let status = response.status();
                let text = response.text().await?;
                if !status.is_success() {
                    anyhow::bail!("POST …/messages answered {status}: {text}");
                }
                if n >= warmup {
                    latencies.push(t.elapsed());
                }
            }
            Ok::<_, anyhow::Error>(latencies)
        });
    }
    let mut latencies = Vec::with_capacity(clients * per_client);
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done??);
    }
    let elapsed = started.elapsed();
    latencies.sort();
    Ok(Load { latencies, elapsed })
}

pub(super) fn report(label: &str, load: &Load, total: usize) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{label:<24}{:.0} messages/s   p50 {:.3} ms   p90 {:.3} ms   p99 {:.3} ms   ({} messages)",
        total as f64 / load.elapsed.as_secs_f64(),
        ms(pct(&load.latencies, 0.50)),
        ms(pct(&load.latencies, 0.90)),
        ms(pct(&load.latencies, 0.99)),
        load.latencies.len()
    );
}
