//! The arbiter of a room several personas of the troupe share (docs/rooms.md, "A troupe in
//! one room"): which one answers a message nobody addressed, in follow mode, so that such a
//! message gets at most one answer however many personas follow the room.
//!
//! The rule, in order: a persona the message addresses after all (its bot's `<@id>` or its
//! name in the text, seen by another persona's connector); else the persona a person last
//! addressed in the room, if it follows the room; else the following persona whose topics
//! the message names most; else the following personas in turn. The choice is a pure
//! function of the message, the troupe and the room's floor (`storage::arbiter`), and it is
//! all this file holds; the agent's decide step (`agent/arbitrate.rs`) reads the floor, and
//! the first persona to handle the message stores the choice (insert-on-conflict), so every
//! persona, on every replica, answers or not by it. No state in memory: replicas agree.

use troupe_connectors::{AgentId, Inbound, UserId};

use crate::storage::Floor;

/// A persona of the troupe on the message's platform, as the arbiter sees it.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub id: AgentId,
    pub name: String,
    pub topics: Vec<String>,
    /// Its bot's user id on the platform, once its connector knows it.
    pub bot_user: Option<UserId>,
    /// It follows the room and is not muted there.
    pub following: bool,
}

/// Why the arbiter chose whom it chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ground {
    Addressed,
    LastAddressed,
    Topics,
    InTurn,
}

/// The persona of `members` the message addresses (a reply to its message, its bot
/// mentioned as `<@id>`, or its name as a word), other than its author. `replied_to` is the
/// persona whose message this one replies to, when the troupe knows it.
pub(crate) fn addressee<'a>(
    members: &'a [Member],
    message: &Inbound,
    replied_to: Option<&AgentId>,
) -> Option<&'a Member> {
    let others = || members.iter().filter(|m| !is_author(m, message));
    if let Some(to) = replied_to
        && let Some(m) = others().find(|m| &m.id == to)
    {
        return Some(m);
    }
    // A bot several personas share (they speak through its webhooks) singles none out.
    let shared = |id: &UserId| {
        members
            .iter()
            .filter(|m| m.bot_user.as_ref() == Some(id))
            .count()
            > 1
    };
    others().find(|m| {
        m.bot_user
            .as_ref()
            .is_some_and(|id| !shared(id) && message.text.contains(&format!("<@{id}>")))
            || super::names_in(&message.text, &m.name)
    })
}

fn is_author(member: &Member, message: &Inbound) -> bool {
    member.bot_user.as_ref() == Some(&message.author.id)
}

/// The arbiter's choice for `message` among `members` (sorted by id), given the room's
/// floor and the persona it replies to (see `addressee`); `None` when no member follows the
/// room.
pub(crate) fn choose<'a>(
    members: &'a [Member],
    message: &Inbound,
    floor: &Floor,
    replied_to: Option<&AgentId>,
) -> Option<(&'a AgentId, Ground)> {
    if let Some(m) = addressee(members, message, replied_to) {
        return Some((&m.id, Ground::Addressed));
    }
    let following: Vec<&Member> = members
        .iter()
        .filter(|m| m.following && !is_author(m, message))
        .collect();
    if following.is_empty() {
        return None;
    }
    if let Some(last) = &floor.last_addressed
        && let Some(m) = following.iter().find(|m| &m.id == last)
    {
        return Some((&m.id, Ground::LastAddressed));
    }
    let fit = |m: &Member| {
        m.topics
            .iter()
            .filter(|t| super::names_in(&message.text, t))
            .count()
    };
    let best = following.iter().map(|m| fit(m)).max().unwrap_or(0);
    if best > 0
        && let Some(m) = following.iter().find(|m| fit(m) == best)
    {
        return Some((&m.id, Ground::Topics));
    }
    let turn = usize::try_from(floor.turn.rem_euclid(following.len() as i64)).unwrap_or(0);
    Some((&following[turn].id, Ground::InTurn))
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_connectors::{Platform, RoomId, RoomRef, UserRef};

    fn member(id: &str, topics: &[&str], following: bool) -> Member {
        Member {
            id: AgentId::new(id),
            name: id.to_string(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            bot_user: Some(UserId::new(format!("{id}-bot"))),
            following,
        }
    }

    fn msg(author: &str, is_bot: bool, text: &str) -> Inbound {
        Inbound::said(
            "1",
            RoomRef::new(Platform::Discord, RoomId::new("c")),
            UserRef {
                is_bot,
                ..UserRef::person(author, author)
            },
            text,
        )
    }

    #[test]
    fn the_rule_in_order() {
        let troupe = [
            member("ada", &["tides"], true),
            member("bea", &["knots", "sails"], true),
            member("cy", &[], false),
        ];
        let floor = Floor::default();
        let pick =
            |m: &Inbound, f: &Floor| choose(&troupe, m, f, None).map(|(id, g)| (id.to_string(), g));
        // Addressed after all: a name, or a bot mention, even of one not following.
        assert_eq!(
            pick(&msg("u", false, "cy, what now?"), &floor),
            Some(("cy".into(), Ground::Addressed))
        );
        assert_eq!(
            pick(&msg("u", false, "<@bea-bot> hi"), &floor),
            Some(("bea".into(), Ground::Addressed))
        );
        // Then who was last addressed, if following.
        let last_bea = Floor {
            last_addressed: Some(AgentId::new("bea")),
            turn: 0,
        };
        assert_eq!(
            pick(&msg("u", false, "the tides?"), &last_bea),
            Some(("bea".into(), Ground::LastAddressed))
        );
        let last_cy = Floor {
            last_addressed: Some(AgentId::new("cy")),
            turn: 0,
        };
        // Then topics.
        assert_eq!(
            pick(&msg("u", false, "knots and sails, and tides"), &last_cy),
            Some(("bea".into(), Ground::Topics))
        );
        // Then in turn, among the following only.
        let in_turn = |turn| {
            pick(
                &msg("u", false, "what a day"),
                &Floor {
                    last_addressed: None,
                    turn,
                },
            )
            .map(|(id, _)| id)
        };
        assert_eq!(in_turn(0).as_deref(), Some("ada"));
        assert_eq!(in_turn(1).as_deref(), Some("bea"));
        assert_eq!(in_turn(2).as_deref(), Some("ada"));
        // A reply to a persona's message is addressed to it, even one not following.
        let cy = AgentId::new("cy");
        assert_eq!(
            choose(&troupe, &msg("u", false, "what a day"), &floor, Some(&cy))
                .map(|(id, g)| (id.to_string(), g)),
            Some(("cy".into(), Ground::Addressed))
        );
    }

    #[test]
    fn a_bot_shared_by_personas_singles_none_out_but_a_name_does() {
        // Ada, Bob and Cy speak through one bot's webhooks (issue 46).
        let shared = |id: &str| Member {
            bot_user: Some(UserId::new("one-bot")),
            ..member(id, &[], true)
        };
        let troupe = [shared("ada"), shared("bob"), shared("cy")];
        let floor = Floor {
            last_addressed: None,
            turn: 1,
        };
        let pick = |text: &str| {
            choose(&troupe, &msg("u", false, text), &floor, None).map(|(id, g)| (id.to_string(), g))
        };
        assert_eq!(
            pick("<@one-bot> hello"),
            Some(("bob".into(), Ground::InTurn))
        );
        assert_eq!(
            pick("<@one-bot> cy, hello"),
            Some(("cy".into(), Ground::Addressed))
        );
    }

    #[test]
    fn an_author_is_never_chosen_for_its_own_message() {
        let troupe = [member("ada", &[], true), member("bea", &[], true)];
        let floor = Floor {
            last_addressed: Some(AgentId::new("ada")),
            turn: 0,
        };
        let from_ada = msg("ada-bot", true, "ada here, what a day");
        assert_eq!(
            choose(&troupe, &from_ada, &floor, None).map(|(id, _)| id.to_string()),
            Some("bea".into())
        );
        let alone = [member("ada", &[], true)];
        assert_eq!(choose(&alone, &from_ada, &floor, None), None);
    }
}
