//! `/mute [duration]` and `/unmute`: stop or resume answering in the room. A mute without a
//! duration lasts until `/unmute`; commands are still answered while muted.

use std::time::Duration;

use crate::storage::RoomControl;

use super::{Answer, Ctx};

/// Muted "until unmuted".
pub(crate) const FOREVER: i64 = i64::MAX;

pub(super) async fn mute(ctx: &Ctx<'_>, for_: Option<Duration>) -> anyhow::Result<Answer> {
    let until = match for_ {
        Some(d) => ctx
            .now_ms
            .saturating_add(i64::try_from(d.as_millis()).unwrap_or(FOREVER)),
        None => FOREVER,
    };
    ctx.store
        .set_room_control(
            ctx.agent,
            &ctx.room,
            RoomControl::Mute(Some(until)),
            &ctx.by,
        )
        .await?;
    Ok(Answer::text(match for_ {
        Some(d) => format!(
            "Okay, I'll stay quiet here for {}. /unmute brings me back sooner.",
            describe(d)
        ),
        None => "Okay, I'll stay quiet here until someone says /unmute.".to_string(),
    }))
}

pub(super) async fn unmute(ctx: &Ctx<'_>) -> anyhow::Result<Answer> {
    ctx.store
        .set_room_control(ctx.agent, &ctx.room, RoomControl::Mute(None), &ctx.by)
        .await?;
    Ok(Answer::text("I'm back: I'll answer here again."))
}

/// `d` in the largest unit that divides it (`2 hours`, `90 seconds`).
fn describe(d: Duration) -> String {
    let secs = d.as_secs();
    let (n, unit) = [(86_400, "day"), (3600, "hour"), (60, "minute")]
        .into_iter()
        .find(|(u, _)| secs.is_multiple_of(*u))
        .map_or((secs, "second"), |(u, name)| (secs / u, name));
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(describe(Duration::from_secs(7200)), "2 hours");
        assert_eq!(describe(Duration::from_secs(60)), "1 minute");
        assert_eq!(describe(Duration::from_secs(90)), "90 seconds");
        assert_eq!(describe(Duration::from_secs(86_400)), "1 day");
    }
}
