//! The floor of a room several personas share (tables `room_floor`, `room_claims` and
//! `room_senders`, migration 0009): who was last addressed there, the turn for answering in
//! turn, the one persona that answers each unaddressed message in follow mode, and the
//! persona of the troupe that wrote a message.
//!
//! The choice itself is `rooms::arbiter`'s; this file makes it stick: `claim` writes the
//! first choice made for a message and returns whatever choice is stored, so every persona
//! on every replica reads one winner, on SQLite and Postgres alike. A sender is noted the
//! same way (the first note wins), and both are kept a week.

use troupe_connectors::{AgentId, MessageId, RoomKey};

use super::{Result, Store, now_ms, with_pool};

/// How long a message's claim (or note of its sender) is kept.
const CLAIM_KEEP_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// A table that ties a message of a room to one persona, the first write winning, for
/// [`CLAIM_KEEP_MS`]: its statements, over `(room, message_id, agent_id, <at>)`.
struct PersonaOfMessage {
    /// Drops the room (`$1`) ties older than `$2`.
    prune: &'static str,
    /// Ties message `$2` of room `$1` to persona `$3` at `$4`, unless it is tied already.
    insert: &'static str,
    /// The persona message `$2` of room `$1` is tied to.
    read: &'static str,
}

/// The persona that answers an unaddressed message (follow mode).
const CLAIMS: PersonaOfMessage = PersonaOfMessage {
    prune: "DELETE FROM room_claims WHERE room = $1 AND claimed_at_ms < $2",
    insert: "INSERT INTO room_claims (room, message_id, agent_id, claimed_at_ms)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (room, message_id) DO NOTHING",
    read: "SELECT agent_id FROM room_claims WHERE room = $1 AND message_id = $2",
};

/// The persona of the troupe that wrote a message, as the others heard it.
const SENDERS: PersonaOfMessage = PersonaOfMessage {
    prune: "DELETE FROM room_senders WHERE room = $1 AND heard_at_ms < $2",
    insert: "INSERT INTO room_senders (room, message_id, agent_id, heard_at_ms)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (room, message_id) DO NOTHING",
    read: "SELECT agent_id FROM room_senders WHERE room = $1 AND message_id = $2",
};

/// What the room remembers about who speaks there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Floor {
    /// The persona a person last addressed in the room.
    pub last_addressed: Option<AgentId>,
    /// Advances each time a message is given in turn.
    pub turn: i64,
}

impl Store {
    /// The room's floor; the defaults when no persona was addressed or chosen there yet.
    pub async fn room_floor(&self, room: &RoomKey) -> Result<Floor> {
        let row: Option<(Option<AgentId>, i64)> = with_pool!(self, pool => {
            sqlx::query_as("SELECT last_addressed, turn FROM room_floor WHERE room = $1")
                .bind(room)
                .fetch_optional(pool)
                .await
        })?;
        Ok(row
            .map(|(last_addressed, turn)| Floor {
                last_addressed,
                turn,
            })
            .unwrap_or_default())
    }

    /// What the arbiter reads before it chooses, in one query: the room's floor and, when
    /// the message replies to `replied_to`, the persona of the troupe that wrote that one
    /// (`sender_of`, else the persona whose delivered reply it is: a persona's webhook
    /// message on a shared bot is never heard as a message, issue 46).
    pub async fn floor_and_sender(
        &self,
        room: &RoomKey,
        replied_to: Option<&MessageId>,
    ) -> Result<(Floor, Option<AgentId>)> {
        let row: (Option<AgentId>, Option<i64>, Option<AgentId>) = with_pool!(self, pool => {
            sqlx::query_as(
                "SELECT (SELECT last_addressed FROM room_floor WHERE room = $1),
                        (SELECT turn FROM room_floor WHERE room = $1),
                        COALESCE(
                            (SELECT agent_id FROM room_senders WHERE room = $1 AND message_id = $2),
                            (SELECT agent_id FROM reply_messages
                             WHERE room = $1 AND message_id = $2 LIMIT 1))",
            )
            .bind(room)
            .bind(replied_to)
            .fetch_one(pool)
            .await
        })?;
        let (last_addressed, turn, sender) = row;
        let floor = Floor {
            last_addressed,
            turn: turn.unwrap_or_default(),
        };
        Ok((floor, sender))
    }

    /// Notes that a person addressed `agent_id` in the room.
    pub async fn set_last_addressed(&self, room: &RoomKey, agent_id: &AgentId) -> Result<()> {
        with_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO room_floor (room, last_addressed, updated_at_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (room) DO UPDATE SET
                     last_addressed = excluded.last_addressed,
                     updated_at_ms = excluded.updated_at_ms",
            )
            .bind(room)
            .bind(agent_id)
            .bind(now_ms())
            .execute(pool)
            .await
            .map(|_| ())
        })?;
        Ok(())
    }

    /// Moves the room's turn on by one (after a message was given in turn).
    pub async fn advance_turn(&self, room: &RoomKey) -> Result<()> {
        with_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO room_floor (room, turn, updated_at_ms) VALUES ($1, 1, $2)
                 ON CONFLICT (room) DO UPDATE SET
                     turn = room_floor.turn + 1, updated_at_ms = excluded.updated_at_ms",
            )
            .bind(room)
            .bind(now_ms())
            .execute(pool)
            .await
            .map(|_| ())
        })?;
        Ok(())
    }

    /// Records `choice` as the persona that answers `message` in the room, unless a choice
    /// is recorded already, and returns the recorded one with whether it is this call's.
    pub async fn claim_message(
        &self,
        room: &RoomKey,
        message: &MessageId,
        choice: &AgentId,
    ) -> Result<(AgentId, bool)> {
        // A claim only matters while its message may still be handled (a redelivery).
        let inserted = self.tie_once(&CLAIMS, room, message, choice).await?;
        let winner = self
            .tied_to(&CLAIMS, room, message)
            .await?
            .ok_or(sqlx::Error::RowNotFound)?;
        Ok((winner, inserted))
    }

    /// Ties `message` of the room to `persona` in `table` unless it is tied already, and
    /// drops the room's week-old ties, so the table stays the size of recent traffic.
    /// Whether this call tied it.
    async fn tie_once(
        &self,
        table: &PersonaOfMessage,
        room: &RoomKey,
        message: &MessageId,
        persona: &AgentId,
    ) -> Result<bool> {
        let now = now_ms();
        let inserted = with_pool!(self, pool => async {
            sqlx::query(table.prune)
                .bind(room)
                .bind(now - CLAIM_KEEP_MS)
                .execute(pool)
                .await?;
            let done = sqlx::query(table.insert)
                .bind(room)
                .bind(message)
                .bind(persona)
                .bind(now)
                .execute(pool)
                .await?;
            Ok::<_, sqlx::Error>(done.rows_affected() == 1)
        }
        .await)?;
        Ok(inserted)
    }

    /// The persona `message` of the room is tied to in `table`, if any.
    async fn tied_to(
        &self,
        table: &PersonaOfMessage,
        room: &RoomKey,
        message: &MessageId,
    ) -> Result<Option<AgentId>> {
        let persona = with_pool!(self, pool => {
            sqlx::query_scalar(table.read)
                .bind(room)
                .bind(message)
                .fetch_optional(pool)
                .await
        })?;
        Ok(persona)
    }
}

impl Store {
    /// Notes that `sender`, a persona of the troupe, wrote `message` in the room (as another
    /// persona heard it). The room's week-old notes go.
    pub async fn note_sender(
        &self,
        room: &RoomKey,
        message: &MessageId,
        sender: &AgentId,
    ) -> Result<()> {
        self.tie_once(&SENDERS, room, message, sender).await?;
        Ok(())
    }

    /// The persona of the troupe that wrote `message` in the room, if one did.
    pub async fn sender_of(&self, room: &RoomKey, message: &MessageId) -> Result<Option<AgentId>> {
        self.tied_to(&SENDERS, room, message).await
    }

    /// Lets `listener` hear an exchange of another persona in a room it is present in (it
    /// has messages there): `lines` join its memory of the room, tied to the exchange's
    /// journal entry so that a second call for the same entry adds nothing. The Web
    /// platform's shared rooms use it, where no connector carries one persona's reply to
    /// the others. Returns whether the listener heard it.
    pub async fn overhear(
        &self,
        listener: &AgentId,
        room: &RoomKey,
        journal_id: super::JournalId,
        lines: &[super::NewMemory<'_>],
    ) -> Result<bool> {
        let heard = with_pool!(self, pool => async {
            let mut tx = pool.begin().await?;
            let (present, heard_before): (bool, bool) = sqlx::query_as(
                "SELECT
                     EXISTS (SELECT 1 FROM messages WHERE agent_id = $1 AND room = $2),
                     EXISTS (SELECT 1 FROM messages
                             WHERE agent_id = $1 AND room = $2 AND journal_id = $3)",
            )
            .bind(listener)
            .bind(room)
            .bind(journal_id.0)
            .fetch_one(&mut *tx)
            .await?;
            if !present || heard_before {
                tx.commit().await?;
                return Ok::<_, sqlx::Error>(false);
            }
            for line in lines {
                sqlx::query(
                    "INSERT INTO messages (agent_id, room, journal_id, author_id, author_name,
                         text, from_agent, created_at_ms)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                )
                .bind(listener)
                .bind(room)
                .bind(journal_id.0)
                .bind(line.author_id)
                .bind(line.author_name)
                .bind(line.text)
                .bind(line.from_agent)
                .bind(line.created_at_ms)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(true)
        }
        .await)?;
        Ok(heard)
    }
}
