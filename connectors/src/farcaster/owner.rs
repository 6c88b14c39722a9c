//! Who owns a Farcaster room, and so who may steer it (issue 30, finding 4;
//! docs/farcaster.md, "Who steers a thread").
//!
//! The room is a cast thread, and Farcaster has no roles: anyone may reply anywhere. A thread
//! belongs to whoever cast its root, so that person alone gives the commands that change
//! the room (`/mute`, `/forget`, `/follow`, …); a reply in someone else's thread steers
//! nothing. A thread the bot itself started (an autonomous post) belongs to no one: no cast
//! steers it, the operator does, through `POST …/rooms/{room}/commands`. The root's author
//! is the message's own author when the message is the root; otherwise it comes from the
//! casts the connector has seen, else from one Neynar cast lookup of the thread's hash. A
//! lookup that fails is an error, which the gateway takes as a refusal.

use super::api::Neynar;
use super::config::Fid;
use super::publish::{self, Authors};
use crate::connector::ConnectorError;
use crate::model::Inbound;

/// Who owns a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// The person (FID) who cast the thread's root.
    Person(u64),
    /// The bot started the thread: no cast steers it.
    NoOne,
}

impl Owner {
    /// The owner of a thread whose root `root_author` cast, for the bot `bot`.
    pub(crate) fn of(root_author: u64, bot: Fid) -> Self {
        if root_author == bot.0 {
            Owner::NoOne
        } else {
            Owner::Person(root_author)
        }
    }

    /// Whether `message`'s author is this owner.
    fn is(self, message: &Inbound) -> bool {
        match self {
            Owner::Person(fid) => message.author.id.as_str() == fid.to_string(),
            Owner::NoOne => false,
        }
    }
}

/// The owner of `message`'s thread (its room).
pub(crate) async fn owner(
    api: &Neynar,
    authors: &Authors,
    bot: Fid,
    message: &Inbound,
) -> Result<Owner, ConnectorError> {
    let root = message.room.id.as_str();
    let root_author = if root == message.id.as_str() {
        // The message is the thread's root: its author cast it.
        match message.author.id.as_str().parse::<u64>() {
            Ok(fid) => fid,
            Err(_) => {
                return Err(ConnectorError::Fatal(format!(
                    "`{}` is not a Farcaster FID",
                    message.author.id
                )));
            }
        }
    } else {
        publish::author_of(api, authors, root).await?
    };
    Ok(Owner::of(root_author, bot))
}

/// Whether `message`'s author may steer its thread: they cast its root.
pub(crate) async fn may_steer(
    api: &Neynar,
    authors: &Authors,
    bot: Fid,
    message: &Inbound,
) -> Result<bool, ConnectorError> {
    Ok(owner(api, authors, bot, message).await?.is(message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{MessageId, Platform, RoomId, RoomRef, UserId, UserRef};

    const BOT: Fid = Fid(42);

    /// A client whose every call fails at once: nothing listens on port 1.
    fn unreachable_neynar() -> Neynar {
        let lookup = |name: &str| match name {
            "FARCASTER_FID" => Some("42".to_string()),
            "FARCASTER_NEYNAR_API_KEY" => Some("key".to_string()),
            "FARCASTER_NEYNAR_SIGNER_UUID" => Some("signer".to_string()),
            "NEYNAR_API_URL" => Some("http://127.0.0.1:1".to_string()),
            _ => None,
        };
        match super::super::config::parse(&lookup) {
            Ok(super::super::config::Parsed::Ready(settings)) => {
                Neynar::new(&settings).expect("a client")
            }
            other => panic!("settings: {other:?}"),
        }
    }

    fn cast_in(thread: &str, hash: &str, author: u64) -> Inbound {
        Inbound {
            id: MessageId::new(hash),
            room: RoomRef::new(Platform::Farcaster, RoomId::new(thread)),
            author: UserRef {
                id: UserId::new(author.to_string()),
                name: format!("fid:{author}"),
                is_bot: false,
                username: None,
            },
            text: "@fern /forget".into(),
            attachments: vec![],
            reply_to: None,
            is_direct: false,
            mentions_self: true,
            sent_at_ms: 0,
            client: None,
            revises: None,
        }
    }

    #[test]
    fn the_root_author_owns_the_thread_and_the_bots_own_thread_is_no_ones() {
        assert_eq!(Owner::of(7, BOT), Owner::Person(7));
        assert_eq!(Owner::of(42, BOT), Owner::NoOne);
        let by_7 = cast_in("0xroot", "0xreply", 7);
        let by_43 = cast_in("0xroot", "0xreply", 43);
        assert!(Owner::Person(7).is(&by_7));
        assert!(!Owner::Person(7).is(&by_43));
        assert!(!Owner::NoOne.is(&by_7));
    }

    /// The root's author comes from the message itself or from the casts already seen:
    /// no Neynar call (the client points nowhere).
    #[tokio::test]
    async fn the_owner_is_found_without_a_lookup_when_known() {
        let api = unreachable_neynar();
        let authors = Authors::default();
        // A root cast: its author owns it.
        let root = cast_in("0xroot", "0xroot", 7);
        assert!(may_steer(&api, &authors, BOT, &root).await.unwrap());
        // A reply: the root's author, remembered, decides.
        authors.remember("0xroot", 7);
        assert!(
            may_steer(&api, &authors, BOT, &cast_in("0xroot", "0xr1", 7))
                .await
                .unwrap()
        );
        assert!(
            !may_steer(&api, &authors, BOT, &cast_in("0xroot", "0xr2", 43))
                .await
                .unwrap()
        );
        // The bot's own thread: no one.
        authors.remember("0xbotpost", 42);
        assert!(
            !may_steer(&api, &authors, BOT, &cast_in("0xbotpost", "0xr3", 7))
                .await
                .unwrap()
        );
        // Unknown and unreachable: an error, which the gateway takes as a refusal.
        assert!(
            may_steer(&api, &authors, BOT, &cast_in("0xother", "0xr4", 7))
                .await
                .is_err()
        );
    }
}
