//! Inbound rate limits: per user, per room and per agent, with governor's GCRA.
//!
//! A message over a limit costs no model call. It is still remembered in the room, it is
//! counted, and the room gets at most one notice per window, so a flood does not turn into
//! a flood of "slow down" replies.

use governor::{DefaultKeyedRateLimiter, Quota};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use crate::config::Limits;

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
    user: Option<DefaultKeyedRateLimiter<String>>,
    room: Option<DefaultKeyedRateLimiter<String>>,
    agent: Option<DefaultKeyedRateLimiter<String>>,
    /// Background model calls (memory) per agent: a quarter of the agent's quota, so they
    /// can never take the whole of it from replies.
    background: Option<DefaultKeyedRateLimiter<String>>,
    /// Rooms already told to slow down in the current window.
    noticed: moka::sync::Cache<String, ()>,
}

fn per_minute(n: u32) -> Option<DefaultKeyedRateLimiter<String>> {
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
                noticed: moka::sync::Cache::builder()
                    .max_capacity(100_000)
                    .time_to_live(Duration::from_secs(60))
                    .build(),
            }),
        }
    }

    /// Checks and counts one message. The narrowest scope is checked first, so one noisy
    /// user exhausts their own quota before the room's.
    pub fn check(&self, agent: &str, room: &str, user: &str) -> Verdict {
        let room_key = format!("{agent}\u{1f}{room}");
        let checks = [
            (
                Scope::User,
                &self.inner.user,
                format!("{agent}\u{1f}{user}"),
            ),
            (Scope::Room, &self.inner.room, room_key.clone()),
            (Scope::Agent, &self.inner.agent, agent.to_string()),
        ];
        for (scope, limiter, key) in checks {
            if let Some(limiter) = limiter
                && limiter.check_key(&key).is_err()
            {
                let first = !self.inner.noticed.contains_key(&room_key);
                if first {
                    self.inner.noticed.insert(room_key, ());
                }
                return Verdict::Limited {
                    scope,
                    notice: first,
                };
            }
        }
        Verdict::Allowed
    }

    /// Counts one background model call of `agent` (memory upkeep) against the agent's
    /// limit, within its background share. False: skip it for now; its work is still due
    /// and is tried again after a later reply.
    pub fn check_background(&self, agent: &str) -> bool {
        let key = agent.to_string();
        let within = |limiter: &Option<DefaultKeyedRateLimiter<String>>| {
            limiter.as_ref().is_none_or(|l| l.check_key(&key).is_ok())
        };
        within(&self.inner.background) && within(&self.inner.agent)
    }

    /// Drops state for keys that have been quiet, so memory follows active users only.
    pub fn housekeep(&self) {
        for limiter in [
            &self.inner.user,
            &self.inner.room,
            &self.inner.agent,
            &self.inner.background,
        ]
        .into_iter()
        .flatten()
        {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(rl.check("a", "r", "u"), Verdict::Allowed);
        assert_eq!(rl.check("a", "r", "u"), Verdict::Allowed);
        assert_eq!(
            rl.check("a", "r", "u"),
            Verdict::Limited {
                scope: Scope::User,
                notice: true
            }
        );
        assert_eq!(
            rl.check("a", "r", "u"),
            Verdict::Limited {
                scope: Scope::User,
                notice: false
            }
        );
        // Another user in the same room is not affected by u's quota.
        assert_eq!(rl.check("a", "r", "v"), Verdict::Allowed);
        // The same user talking to another agent has its own quota.
        assert_eq!(rl.check("b", "r", "u"), Verdict::Allowed);
    }

    #[test]
    fn a_room_limit_covers_all_its_users() {
        let rl = RateLimiter::new(&limits(100, 3));
        for u in ["u1", "u2", "u3"] {
            assert_eq!(rl.check("a", "r", u), Verdict::Allowed);
        }
        assert!(matches!(
            rl.check("a", "r", "u4"),
            Verdict::Limited {
                scope: Scope::Room,
                ..
            }
        ));
        assert_eq!(rl.check("a", "other", "u4"), Verdict::Allowed);
    }

    #[test]
    fn background_calls_get_a_quarter_of_the_agent_quota() {
        let rl = RateLimiter::new(&Limits {
            agent_per_minute: 8,
            ..limits(0, 0)
        });
        assert!(rl.check_background("a"));
        assert!(rl.check_background("a"));
        assert!(!rl.check_background("a"), "over the background share");
        // They were counted against the agent: six answers remain of eight.
        for _ in 0..6 {
            assert_eq!(rl.check("a", "r", "u"), Verdict::Allowed);
        }
        assert!(matches!(rl.check("a", "r", "u"), Verdict::Limited { .. }));
        assert!(rl.check_background("b"), "another agent has its own share");
        assert!(RateLimiter::new(&limits(0, 0)).check_background("a"));
    }

    #[test]
    fn zero_disables_a_limit() {
        let rl = RateLimiter::new(&limits(0, 0));
        for _ in 0..1000 {
            assert_eq!(rl.check("a", "r", "u"), Verdict::Allowed);
        }
    }
}
