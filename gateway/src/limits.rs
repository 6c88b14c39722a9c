//! Inbound rate limits: per user, per room and per agent, with governor's GCRA; and the
//! HTTP API's budget per caller ([`ApiBudget`]).
//!
//! A message over a limit costs no model call. It is still remembered in the room, it is
//! counted, and the room gets at most one notice per window, so a flood does not turn into
//! a flood of "slow down" replies.
//!
//! On the HTTP API the user and the room are whatever the caller writes, so they limit
//! nothing there. The API is limited by who calls: [`ApiBudget`] counts requests per
//! [`ApiCaller`] (a scoped token by its name, anyone else by address, behind a trusted proxy
//! the address it forwards) before anything is journaled, and messages from the API may use
//! at most half of an agent's quota, so that API callers together can never take the rest
//! from the platforms' users. The API's share of the persona's spend is `spend::budgets`'.

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use std::net::{IpAddr, Ipv6Addr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use troupe_connectors::{AgentId, Platform, RoomKey, UserId};

use crate::config::{Limits, TokenName};

/// Which limit a message ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    User,
    Room,
    Agent,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Room => "room",
            Scope::Agent => "agent",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// Over a limit; `notice` is true for the first limited message of the room in this
    /// window, which may be answered with a short notice.
    Limited {
        scope: Scope,
        notice: bool,
    },
}

/// A cheap-to-clone handle over the three limiters.
#[derive(Clone)]
pub struct RateLimiter {
    inner: Arc<Inner>,
}

struct Inner {
    /// A user as one agent sees them: user ids are only unique within a platform.
    user: Option<DefaultKeyedRateLimiter<(AgentId, Platform, UserId)>>,
    room: Option<DefaultKeyedRateLimiter<(AgentId, RoomKey)>>,
    agent: Option<DefaultKeyedRateLimiter<AgentId>>,
    /// Background model calls (memory) per agent: a quarter of the agent's quota, so they
    /// can never take the whole of it from replies.
    background: Option<DefaultKeyedRateLimiter<AgentId>>,
    /// Messages from the HTTP API per agent: half of the agent's quota.
    api: Option<DefaultKeyedRateLimiter<AgentId>>,
    /// Rooms already told to slow down in the current window.
    noticed: moka::sync::Cache<(AgentId, RoomKey), ()>,
}

fn per_minute<K: std::hash::Hash + Eq + Clone>(n: u32) -> Option<DefaultKeyedRateLimiter<K>> {
    NonZeroU32::new(n).map(|n| governor::RateLimiter::keyed(Quota::per_minute(n)))
}

impl RateLimiter {
    pub fn new(limits: &Limits) -> Self {
        Self {
            inner: Arc::new(Inner {
                user: per_minute(limits.user_per_minute),
                room: per_minute(limits.room_per_minute),
                agent: per_minute(limits.agent_per_minute),
                background: per_minute(limits.agent_per_minute.div_ceil(4)),
                api: per_minute(limits.agent_per_minute.div_ceil(2)),
                noticed: moka::sync::Cache::builder()
                    .max_capacity(100_000)
                    .time_to_live(Duration::from_secs(60))
                    .build(),
            }),
        }
    }

    /// Checks and counts one message of `user` in `room`. The narrowest scope is checked
    /// first, so one noisy user exhausts their own quota before the room's. A message of the
    /// Web platform (the HTTP API) also counts against the API's share of the agent's quota.
    pub fn check(&self, agent: &AgentId, room: &RoomKey, user: &UserId) -> Verdict {
        let in_room = (agent.clone(), room.clone());
        let from_api = room.platform == Platform::Web;
        let inner = &self.inner;
        let limited = if over(&inner.user, &(agent.clone(), room.platform, user.clone())) {
            Some(Scope::User)
        } else if over(&inner.room, &in_room) {
            Some(Scope::Room)
        } else if (from_api && over(&inner.api, agent)) || over(&inner.agent, agent) {
            Some(Scope::Agent)
        } else {
            None
        };
        let Some(scope) = limited else {
            return Verdict::Allowed;
        };
        let first = !inner.noticed.contains_key(&in_room);
        if first {
            inner.noticed.insert(in_room, ());
        }
        Verdict::Limited {
            scope,
            notice: first,
        }
    }

    /// Counts one background model call of `agent` (memory upkeep) against the agent's
    /// limit, within its background share. False: skip it for now; its work is still due
    /// and is tried again after a later reply.
    pub fn check_background(&self, agent: &AgentId) -> bool {
        !over(&self.inner.background, agent) && !over(&self.inner.agent, agent)
    }

    /// Drops state for keys that have been quiet, so memory follows active users only.
    pub fn housekeep(&self) {
        let inner = &self.inner;
        housekeep(&inner.user);
        housekeep(&inner.room);
        for limiter in [&inner.agent, &inner.background, &inner.api] {
            housekeep(limiter);
        }
    }
}

/// Counts one event for `key`: true when it is over the limit (a limit that is off never is).
fn over<K: std::hash::Hash + Eq + Clone>(
    limiter: &Option<DefaultKeyedRateLimiter<K>>,
    key: &K,
) -> bool {
    limiter.as_ref().is_some_and(|l| l.check_key(key).is_err())
}

fn housekeep<K: std::hash::Hash + Eq + Clone>(limiter: &Option<DefaultKeyedRateLimiter<K>>) {
    if let Some(limiter) = limiter {
        limiter.retain_recent();
        limiter.shrink_to_fit();
    }
}

/// Callers tracked at once by [`ApiBudget`]; past this, new ones share one bucket until
/// quiet ones are forgotten, so a flood of addresses cannot grow memory without bound.
const MAX_API_PEERS: usize = 65_536;

/// Who an API request is counted against (issue 30, finding 7).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ApiCaller {
    /// A scoped token, wherever it calls from: one website behind one proxy address does
    /// not share its budget with another, nor gain one by calling from many addresses.
    Token(TokenName),
    /// Anyone else, by address: the peer's, or behind a trusted proxy the forwarded one.
    Addr(IpAddr),
}

impl ApiCaller {
    /// How a refusal names the caller.
    pub fn noun(&self) -> &'static str {
        match self {
            ApiCaller::Token(_) => "this token",
            ApiCaller::Addr(_) => "this address",
        }
    }
}

/// The HTTP API's budget per caller: requests per minute per [`ApiCaller`] (an IPv6
/// address by its /64, which is what one host usually holds). A cheap-to-clone handle.
#[derive(Clone)]
pub struct ApiBudget {
    limiter: Option<Arc<DefaultKeyedRateLimiter<ApiCaller>>>,
}

impl ApiBudget {
    /// `per_minute` of 0 turns the budget off.
    pub fn new(per_minute: u32) -> Self {
        ApiBudget {
            limiter: NonZeroU32::new(per_minute)
                .map(|n| Arc::new(governor::RateLimiter::keyed(Quota::per_minute(n)))),
        }
    }

    /// Counts one request of `caller`. `Err(wait)`: over the budget, try again after `wait`.
    pub fn check(&self, caller: ApiCaller) -> Result<(), Duration> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        let mut key = match caller {
            ApiCaller::Addr(ip) => ApiCaller::Addr(api_key(ip)),
            token => token,
        };
        if limiter.len() >= MAX_API_PEERS {
            limiter.retain_recent();
            if limiter.len() >= MAX_API_PEERS {
                key = ApiCaller::Addr(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
            }
        }
        limiter
            .check_key(&key)
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }

    /// Forgets peers that have been quiet.
    pub fn housekeep(&self) {
        if let Some(limiter) = &self.limiter {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }
}

/// An IPv4 peer (or an IPv4-mapped IPv6 one) by its address, an IPv6 peer by its /64.
pub(crate) fn api_key(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_connectors::RoomId;

    /// `room` is a room key (`web:r1`), or a Discord room when it names no platform.
    fn check(rl: &RateLimiter, agent: &str, room: &str, user: &str) -> Verdict {
        let room = room
            .parse()
            .unwrap_or_else(|_| RoomKey::new(Platform::Discord, RoomId::new(room)));
        rl.check(&AgentId::new(agent), &room, &UserId::new(user))
    }

    fn limits(user: u32, room: u32) -> Limits {
        Limits {
            user_per_minute: user,
            room_per_minute: room,
            agent_per_minute: 0,
            max_body_bytes: 1024,
            max_message_chars: 1024,
        }
    }

    #[test]
    fn a_user_over_the_limit_is_limited_and_noticed_once() {
        let rl = RateLimiter::new(&limits(2, 100));
        assert_eq!(check(&rl, "a", "r", "u"), Verdict::Allowed);
        assert_eq!(check(&rl, "a", "r", "u"), Verdict::Allowed);
        assert_eq!(
            check(&rl, "a", "r", "u"),
            Verdict::Limited {
                scope: Scope::User,
                notice: true
            }
        );
        assert_eq!(
            check(&rl, "a", "r", "u"),
            Verdict::Limited {
                scope: Scope::User,
                notice: false
            }
        );
        // Another user in the same room is not affected by u's quota.
        assert_eq!(check(&rl, "a", "r", "v"), Verdict::Allowed);
        // The same user talking to another agent has its own quota.
        assert_eq!(check(&rl, "b", "r", "u"), Verdict::Allowed);
    }

    #[test]
    fn a_room_limit_covers_all_its_users() {
        let rl = RateLimiter::new(&limits(100, 3));
        for u in ["u1", "u2", "u3"] {
            assert_eq!(check(&rl, "a", "r", u), Verdict::Allowed);
        }
        assert!(matches!(
            check(&rl, "a", "r", "u4"),
            Verdict::Limited {
                scope: Scope::Room,
                ..
            }
        ));
        assert_eq!(check(&rl, "a", "other", "u4"), Verdict::Allowed);
    }

    #[test]
    fn background_calls_get_a_quarter_of_the_agent_quota() {
        let rl = RateLimiter::new(&Limits {
            agent_per_minute: 8,
            ..limits(0, 0)
        });
        assert!(rl.check_background(&"a".into()));
        assert!(rl.check_background(&"a".into()));
        assert!(
            !rl.check_background(&"a".into()),
            "over the background share"
        );
        // They were counted against the agent: six answers remain of eight.
        for _ in 0..6 {
            assert_eq!(check(&rl, "a", "r", "u"), Verdict::Allowed);
        }
        assert!(matches!(check(&rl, "a", "r", "u"), Verdict::Limited { .. }));
        assert!(
            rl.check_background(&"b".into()),
            "another agent has its own share"
        );
        assert!(RateLimiter::new(&limits(0, 0)).check_background(&"a".into()));
    }

    #[test]
    fn api_messages_get_half_the_agent_quota() {
        let rl = RateLimiter::new(&Limits {
            agent_per_minute: 6,
            ..limits(0, 0)
        });
        // Rotating users and rooms does not help: the share is the agent's.
        for i in 0..3 {
            assert_eq!(
                check(&rl, "a", &format!("web:r{i}"), &format!("u{i}")),
                Verdict::Allowed
            );
        }
        assert!(matches!(
            check(&rl, "a", "web:r9", "u9"),
            Verdict::Limited {
                scope: Scope::Agent,
                ..
            }
        ));
        // The platforms' users still have the other half.
        for i in 0..3 {
            assert_eq!(
                check(&rl, "a", &format!("telegram:{i}"), "t"),
                Verdict::Allowed
            );
        }
        assert!(matches!(
            check(&rl, "a", "telegram:9", "t"),
            Verdict::Limited { .. }
        ));
    }

    #[test]
    fn the_api_budget_is_per_peer() {
        let budget = ApiBudget::new(2);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        assert!(budget.check(ApiCaller::Addr(a)).is_ok());
        assert!(budget.check(ApiCaller::Addr(a)).is_ok());
        let wait = budget.check(ApiCaller::Addr(a)).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(60),
            "{wait:?}"
        );
        assert!(
            budget.check(ApiCaller::Addr(b)).is_ok(),
            "another peer has its own budget"
        );
        // One IPv6 host: any address in its /64.
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(budget.check(ApiCaller::Addr(v6("2001:db8:1:2::1"))).is_ok());
        assert!(
            budget
                .check(ApiCaller::Addr(v6("2001:db8:1:2::ffff")))
                .is_ok()
        );
        assert!(
            budget
                .check(ApiCaller::Addr(v6("2001:db8:1:2:abcd::")))
                .is_err()
        );
        assert!(budget.check(ApiCaller::Addr(v6("2001:db8:1:3::1"))).is_ok());
        // A scoped token by its name, whatever its address.
        let shop = || ApiCaller::Token(TokenName::parse("shop").unwrap());
        assert!(budget.check(shop()).is_ok());
        assert!(budget.check(shop()).is_ok());
        assert!(budget.check(shop()).is_err());
        assert!(
            budget
                .check(ApiCaller::Token(TokenName::parse("blog").unwrap()))
                .is_ok()
        );
        let off = ApiBudget::new(0);
        for _ in 0..1000 {
            assert!(off.check(ApiCaller::Addr(a)).is_ok());
        }
    }

    #[test]
    fn zero_disables_a_limit() {
        let rl = RateLimiter::new(&limits(0, 0));
        for _ in 0..1000 {
            assert_eq!(check(&rl, "a", "r", "u"), Verdict::Allowed);
        }
    }
}
