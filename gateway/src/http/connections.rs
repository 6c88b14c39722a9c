//! Who may hold a connection (issue 30, finding 8): the cap per peer address, and the
//! probes' own lane. [`super::serve`]'s accept loop asks [`Slots`] before it accepts and
//! before it serves; this module owns no socket and no request.
//!
//! - **Per address.** One peer address (an IPv6 peer by its /64, as the API's budget counts
//!   it) holds at most `TROUPE_HTTP_MAX_CONNECTIONS_PER_IP` connections at once. The next
//!   one is answered 429 at once and closed, so one slow client cannot fill the server.
//! - **The probes' lane.** When every one of `TROUPE_HTTP_MAX_CONNECTIONS` is taken (slow
//!   clients from many addresses), up to [`PROBE_LANE`] more connections are accepted. On
//!   them only `GET`/`HEAD` `/healthz` and `/readyz` are served, one request per connection
//!   with a short header deadline; anything else is answered 503 `busy` with
//!   `retry-after: 1`. A health check therefore finds a slot without waiting behind slow
//!   clients, whatever address it comes from (a container's health check dials loopback,
//!   Kubernetes the pod's address). Past the lane too, connections wait in the listen
//!   queue, as they did before.

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use troupe_connectors::sync::Locked;

use super::error::ApiError;

/// Connections accepted for the probes past `TROUPE_HTTP_MAX_CONNECTIONS`. A probe holds
/// one for a moment; 16 leave room for several probers at once, and cost 16 descriptors.
pub const PROBE_LANE: usize = 16;

/// How long a connection in the probes' lane has to send its request head. A probe sends
/// it at once; a slow client that took a lane slot is gone this quickly.
pub const PROBE_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// Which pool a connection's slot came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// One of `TROUPE_HTTP_MAX_CONNECTIONS`: every route.
    General,
    /// One of [`PROBE_LANE`]: the probes only.
    Probes,
}

/// The connection slots of one server: the general pool, the probes' lane, and the count
/// per address. A cheap-to-clone handle.
#[derive(Clone)]
pub struct Slots {
    general: Arc<Semaphore>,
    probes: Arc<Semaphore>,
    per_address: usize,
    /// Connections held per address; an address with none has no entry, so the map holds
    /// at most as many entries as there are connections.
    held: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// A slot taken before `accept`, not yet tied to an address.
pub struct Reserved {
    lane: Lane,
    permit: OwnedSemaphorePermit,
}

/// A connection's right to be served; dropping it frees the slot and the address's count.
pub struct Slot {
    lane: Lane,
    _permit: OwnedSemaphorePermit,
    key: IpAddr,
    held: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Slot {
    pub fn lane(&self) -> Lane {
        self.lane
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.held.locked();
        if let Some(n) = held.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

/// The address already holds `TROUPE_HTTP_MAX_CONNECTIONS_PER_IP` connections.
#[derive(Debug, PartialEq, Eq)]
pub struct TooMany;

impl Slots {
    pub fn new(max_connections: usize, per_address: usize) -> Self {
        Slots {
            general: Arc::new(Semaphore::new(max_connections)),
            probes: Arc::new(Semaphore::new(PROBE_LANE)),
            per_address,
            held: Arc::default(),
        }
    }

    /// Waits until a connection may be accepted: a general slot when one is free, else one
    /// of the probes' lane. `None` only if the pools were closed (they never are).
    pub async fn reserve(&self) -> Option<Reserved> {
        let (lane, permit) = tokio::select! {
            biased;
            p = self.general.clone().acquire_owned() => (Lane::General, p),
            p = self.probes.clone().acquire_owned() => (Lane::Probes, p),
        };
        Some(Reserved {
            lane,
            permit: permit.ok()?,
        })
    }

    /// Ties a reserved slot to the peer's address, unless that address holds its share. A
    /// lane slot is traded for a general one if one came free while `accept` waited, so a
    /// caller is not told "busy" when the server no longer is.
    pub fn admit(&self, reserved: Reserved, peer: IpAddr) -> Result<Slot, TooMany> {
        let reserved = match (reserved.lane, self.general.clone().try_acquire_owned()) {
            (Lane::Probes, Ok(permit)) => Reserved {
                lane: Lane::General,
                permit,
            },
            _ => reserved,
        };
        let key = crate::limits::api_key(peer);
        let mut held = self.held.locked();
        let n = held.entry(key).or_insert(0);
        if *n >= self.per_address {
            return Err(TooMany);
        }
        *n += 1;
        Ok(Slot {
            lane: reserved.lane,
            _permit: reserved.permit,
            key,
            held: self.held.clone(),
        })
    }
}

/// Whether a request is one the probes' lane serves.
pub fn is_probe(method: &Method, path: &str) -> bool {
    matches!(*method, Method::GET | Method::HEAD) && matches!(path, "/healthz" | "/readyz")
}

/// The answer to anything but a probe on the probes' lane.
pub fn busy() -> Response {
    let mut response = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "busy",
        "the server is serving as many connections as it may (TROUPE_HTTP_MAX_CONNECTIONS); \
         try again in a moment",
    )
    .retry_after(1)
    .into_response();
    super::edge::secure(response.headers_mut());
    response
}

/// The bytes written to a connection refused for its address, before it is closed: a
/// whole HTTP/1.1 response, since nothing of the request has been read.
pub fn too_many_response() -> Vec<u8> {
    let body = serde_json::json!({
        "error": "too_many_connections",
        "detail": "this address holds as many connections as it may \
                   (TROUPE_HTTP_MAX_CONNECTIONS_PER_IP); close one, or try again in a moment",
    })
    .to_string();
    format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\ncache-control: no-store\r\nx-content-type-options: nosniff\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[tokio::test]
    async fn an_address_holds_at_most_its_share_and_gets_it_back() {
        let slots = Slots::new(10, 2);
        let a1 = slots.admit(slots.reserve().await.unwrap(), ip("10.0.0.1"));
        let a2 = slots.admit(slots.reserve().await.unwrap(), ip("10.0.0.1"));
        assert!(a1.is_ok() && a2.is_ok());
        let a3 = slots.admit(slots.reserve().await.unwrap(), ip("10.0.0.1"));
        assert_eq!(a3.err(), Some(TooMany));
        // Another address is not affected.
        let b = slots.admit(slots.reserve().await.unwrap(), ip("10.0.0.2"));
        assert!(b.is_ok());
        drop(a1);
        let again = slots.admit(slots.reserve().await.unwrap(), ip("10.0.0.1"));
        assert!(again.is_ok());
        drop((a2, again, b));
        assert!(
            slots.held.lock().unwrap().is_empty(),
            "counts are forgotten"
        );
        // The refused ones gave their slot back.
        assert_eq!(slots.general.available_permits(), 10);
    }

    #[tokio::test]
    async fn an_ipv6_host_is_counted_by_its_64() {
        let slots = Slots::new(10, 1);
        let a = slots.admit(slots.reserve().await.unwrap(), ip("2001:db8::1"));
        assert!(a.is_ok());
        let b = slots.admit(slots.reserve().await.unwrap(), ip("2001:db8::2"));
        assert_eq!(b.err(), Some(TooMany));
        let c = slots.admit(slots.reserve().await.unwrap(), ip("2001:db8:0:1::1"));
        assert!(c.is_ok());
    }

    #[tokio::test]
    async fn past_the_cap_the_probes_lane_is_used() {
        let slots = Slots::new(1, 100);
        let first = slots.admit(slots.reserve().await.unwrap(), ip("10.0.0.1"));
        assert_eq!(first.as_ref().map(Slot::lane).ok(), Some(Lane::General));
        let mut lane = Vec::new();
        for _ in 0..PROBE_LANE {
            let slot = slots.admit(slots.reserve().await.unwrap(), ip("10.0.0.1"));
            assert_eq!(slot.as_ref().map(Slot::lane).ok(), Some(Lane::Probes));
            lane.push(slot);
        }
        // Both pools full: the next waits (for the listen queue) until one frees.
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.reserve().await.map(|r| r.lane) }
        });
        drop(first);
        assert_eq!(waiting.await.unwrap(), Some(Lane::General));
    }

    #[tokio::test]
    async fn a_lane_slot_becomes_a_general_one_when_one_came_free() {
        let slots = Slots::new(1, 100);
        let first = slots.admit(slots.reserve().await.unwrap(), ip("10.0.0.1"));
        let reserved = slots.reserve().await.unwrap();
        assert_eq!(reserved.lane, Lane::Probes);
        drop(first);
        let slot = slots.admit(reserved, ip("10.0.0.2")).unwrap();
        assert_eq!(slot.lane(), Lane::General);
        assert_eq!(slots.probes.available_permits(), PROBE_LANE);
    }

    #[test]
    fn only_the_probes_are_served_on_their_lane() {
        assert!(is_probe(&Method::GET, "/healthz"));
        assert!(is_probe(&Method::HEAD, "/readyz"));
        assert!(!is_probe(&Method::POST, "/healthz"));
        assert!(!is_probe(&Method::GET, "/api/agents"));
        let text = String::from_utf8(too_many_response()).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["error"], "too_many_connections");
    }
}
