//! Access: who may talk to a persona (issue 44, docs/access.md).
//!
//! One question is answered here, for every message from a platform before anything else
//! is done with it: **who is this sender, and are they let in?** ([`Access::admit`]). The
//! answer is a [`Verdict`]: let in with a [`Trust`] (an owner, someone trusted by the
//! allowlist or by an approval, or a stranger let in by an `open` policy), listened to
//! only, or refused, with the one thing to say when there is one (a pairing code, a short
//! refusal). The agent applies it (`agent::access`): a refused message costs no model call
//! and leaves nothing in the room's memory.
//!
//! Layout:
//! - `rules`: the settings, per persona and platform ([`Rules`], [`DmPolicy`]);
//! - `cli`: `troupe pairing`, and what `troupe check` and the start log say;
//! - `crate::pairing`: pairing codes and the numbers of every limit (below `storage`);
//! - `approve`: approving a code and revoking an approval, shared by the owner's
//!   `/approve`, the API, the console and `troupe pairing`;
//! - the records themselves live in `storage::access`.
//!
//! Approvals are keyed `platform:user_id` per persona. Everything that asks whether a
//! sender is known goes through [`Access::trust`], so that one person's accounts on several
//! platforms can later be resolved in that one place.

pub mod approve;
pub mod cli;
pub mod rules;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use troupe_connectors::{AgentId, Inbound, Platform, RoomKey, UserId};

pub use rules::{DmPolicy, Rules};

use crate::spend::clock::SpendClock;
use crate::storage::{Asker, Store, Telling};

/// The most rooms kept as asking to be let in; past it the oldest is forgotten.
const MAX_ASKING: usize = 256;

/// How far a sender is trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// One of the persona's owners (`TROUPE_OWNERS`).
    Owner,
    /// On the allowlist, approved by a code, or a caller of the API.
    Trusted,
    /// Let in by an `open` policy (or a group), and no more.
    Stranger,
}

/// What becomes of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Let(Trust),
    /// A listen-only room: remembered, never answered.
    Listen,
    /// Not let in: no model call, nothing remembered; `say` is the one reply, if any.
    Refuse {
        say: Option<String>,
    },
}

/// A group room that was refused, for the console's "asking to be let in".
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AskingRoom {
    pub agent_id: AgentId,
    pub room: RoomKey,
    pub name: Option<String>,
    pub first_ms: i64,
    pub last_ms: i64,
    pub messages: u64,
}

/// The access handle: the database and the clock. Cheap to clone.
#[derive(Clone)]
pub struct Access {
    store: Store,
    clock: SpendClock,
    asking: Arc<Mutex<HashMap<(AgentId, RoomKey), AskingRoom>>>,
}

impl Access {
    pub fn new(store: Store, clock: SpendClock) -> Self {
        Access {
            store,
            clock,
            asking: Arc::default(),
        }
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Who the sender of `inbound` is to persona `agent`, and whether they are let in; see
    /// the module doc. `need_trust`: whether a stranger let in must still be told apart from
    /// someone trusted (the persona's tools in a DM), which may cost a database read.
    pub async fn admit(
        &self,
        agent: &AgentId,
        rules: &Rules,
        inbound: &Inbound,
        need_trust: bool,
    ) -> anyhow::Result<Verdict> {
        let platform = inbound.platform();
        let Some(on) = rules.on(platform) else {
            return Ok(Verdict::Let(Trust::Trusted));
        };
        // The lists name the platform's own ids; in a room of one of the persona's several
        // bots, which is tagged with its account, that account's list applies (issue 46).
        let (tag, room, send_to) = untagged(&inbound.room);
        let allowed_rooms = rules.rooms_of(platform, tag);
        let listed = |list: &[String]| {
            list.iter()
                .any(|r| r == room || Some(r.as_str()) == send_to)
        };
        let user = inbound.author.id.as_str();
        if !inbound.is_direct {
            if listed(&on.listen_only) {
                return Ok(Verdict::Listen);
            }
            if let Some(rooms) = allowed_rooms
                && !listed(rooms)
                && !rules.is_owner(platform, user)
            {
                self.asking(agent, inbound);
                return Ok(Verdict::Refuse { say: None });
            }
            return Ok(Verdict::Let(Trust::Stranger));
        }
        if rules.is_owner(platform, user) {
            return Ok(Verdict::Let(Trust::Owner));
        }
        if allowed_rooms.is_some_and(listed) || on.allows(user, inbound.author.username.as_deref())
        {
            return Ok(Verdict::Let(Trust::Trusted));
        }
        let dm = rules.dm_of(platform, tag);
        if dm == DmPolicy::Open && !need_trust {
            return Ok(Verdict::Let(Trust::Stranger));
        }
        if dm != DmPolicy::Disabled && self.trust(agent, platform, user).await? {
            return Ok(Verdict::Let(Trust::Trusted));
        }
        let pairing = match dm {
            DmPolicy::Open => return Ok(Verdict::Let(Trust::Stranger)),
            DmPolicy::Pairing => true,
            DmPolicy::Allowlist | DmPolicy::Disabled => false,
        };
        let every = if pairing {
            crate::pairing::REISSUE_MS
        } else {
            crate::pairing::REFUSAL_EVERY_MS
        };
        let asker = Asker {
            agent_id: agent,
            platform,
            user_id: user,
            user_name: &inbound.author.name,
            now_ms: self.now_ms(),
        };
        let telling = if pairing {
            Telling::Code
        } else {
            Telling::Refusal
        };
        let told = self.store.access_tell(asker, telling, every).await?;
        tracing::info!(
            policy = dm.as_str(),
            told = told.is_some(),
            "direct message not let in"
        );
        Ok(Verdict::Refuse {
            say: told.map(|code| refusal(dm, &code)),
        })
    }

    /// Whether `platform:user` was approved for `agent`: the one place a sender is looked
    /// up as known (see the module doc).
    pub async fn trust(
        &self,
        agent: &AgentId,
        platform: Platform,
        user: &str,
    ) -> anyhow::Result<bool> {
        // Approved once, approved everywhere (issue 44, item 6): a sender is trusted when
        // any account linked with theirs is (`/link`, docs/people.md). An unlinked account
        // is its own person, so this is one lookup for it.
        let person =
            crate::people::person_of(&self.store, agent, platform, &UserId::new(user)).await?;
        for account in &person.accounts {
            let subject = format!("{}:{}", account.platform, account.user_id);
            if self.store.access_approved(agent, &subject).await? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Notes a refused group room, logging the first message of each.
    fn asking(&self, agent: &AgentId, inbound: &Inbound) {
        let now = self.now_ms();
        let key = (agent.clone(), inbound.room.key());
        let mut asking = self.asking.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(seen) = asking.get_mut(&key) {
            seen.last_ms = now;
            seen.messages += 1;
            return;
        }
        tracing::info!(room = %inbound.room.id, "a group room not in the persona's allowed list; not answered, nothing kept");
        if asking.len() >= MAX_ASKING
            && let Some(oldest) = asking
                .iter()
                .min_by_key(|(_, r)| r.last_ms)
                .map(|(k, _)| k.clone())
        {
            asking.remove(&oldest);
        }
        asking.insert(
            key.clone(),
            AskingRoom {
                agent_id: agent.clone(),
                room: key.1.clone(),
                name: inbound.room.name.clone(),
                first_ms: now,
                last_ms: now,
                messages: 1,
            },
        );
    }

    /// The group rooms refused lately, most recent first.
    pub fn asking_rooms(&self) -> Vec<AskingRoom> {
        let asking = self.asking.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<AskingRoom> = asking.values().cloned().collect();
        out.sort_by_key(|b| std::cmp::Reverse(b.last_ms));
        out
    }
}

/// What a sender who is not let in is told, once.
fn refusal(policy: DmPolicy, code: &str) -> String {
    match policy {
        DmPolicy::Pairing => format!(
            "I don't know you yet. Your pairing code is {code} (valid for an hour). Ask my \
             owner to approve it: they can run `troupe pairing approve {code}`, or send me \
             `/approve {code}`."
        ),
        DmPolicy::Allowlist => "Sorry, I only talk here with people on my list.".to_string(),
        _ => "Sorry, I don't take direct messages.".to_string(),
    }
}

/// A room's account tag (a room of one of a persona's several bots, issue 46), and the
/// platform's own ids of the room and of where replies to it are sent.
fn untagged(room: &troupe_connectors::RoomRef) -> (Option<&str>, &str, Option<&str>) {
    let (tag, id) = troupe_connectors::accounts::split(room.id.as_str());
    let send_to = room
        .send_to
        .as_deref()
        .map(|s| troupe_connectors::accounts::split(s).1);
    (tag, id, send_to)
}
