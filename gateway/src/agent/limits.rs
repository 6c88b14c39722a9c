//! Budget: the rate limits (`budget`) and the persona's spend budgets (`spend_cap`), the
//! last gates before the model. A message past one costs no model call; it is remembered,
//! and the first one of its window may get a short notice as its reply.

use troupe_connectors::Platform;

use super::Agent;
use super::turn::{Step, Turn, done};
use crate::limits::Verdict;
use crate::outcome::Outcome;

/// The short reply sent once per window to a room that is over its rate limit.
const SLOW_DOWN: &str = "I'm getting a lot of messages right now. Give me a minute and ask again.";

impl Agent {
    /// Budget: the per-user, per-room and per-agent rate limits. A limited message costs no
    /// model call; it is remembered, and the first one of a window gets the short notice
    /// (not on the Web platform, whose caller sees the 429). `Ok` when within the limits.
    pub(super) async fn budget(&self, turn: &Turn<'_>) -> Step {
        let inbound = turn.inbound();
        let room_key = inbound.room.key();
        let Verdict::Limited { scope, notice } =
            self.limiter.check(&self.id, &room_key, &inbound.author.id)
        else {
            return Ok(());
        };
        tracing::info!(scope = scope.as_str(), notice, "rate limited");
        if notice && inbound.platform() != Platform::Web {
            self.reply(turn, SLOW_DOWN.to_string()).await?;
        } else {
            self.record(turn, None).await?;
        }
        done(Outcome::RateLimited { scope })
    }

    /// Spend: the persona's budgets (docs/spend.md). Past one there is no model call; the
    /// message is remembered, and the first refused message of the window in its room (or
    /// from its user, for the user's budget) gets the persona's notice. `Ok` when within.
    pub(super) async fn spend_cap(&self, turn: &Turn<'_>) -> Step {
        let Some(meter) = &turn.meter else {
            return Ok(());
        };
        let inbound = turn.inbound();
        let room = inbound.room.key();
        let who = crate::spend::Who::sender(&room, inbound);
        let crate::spend::Admission::Over { scope, notice } =
            meter.admit(who, crate::spend::Purpose::Reply).await?
        else {
            return Ok(());
        };
        tracing::info!(
            budget = scope.as_str(),
            notice = notice.is_some(),
            "over budget"
        );
        match notice {
            // The notice is the message's reply (on the Web platform too: its caller reads
            // it), recorded and delivered like any reply.
            Some(text) => {
                self.reply(turn, text.clone()).await?;
                done(Outcome::Replied {
                    texts: vec![text],
                    origin: crate::outcome::Origin::BudgetNotice,
                })
            }
            None => {
                self.record(turn, None).await?;
                done(Outcome::Ignored {
                    reason: crate::outcome::WhyNot::OverBudget,
                })
            }
        }
    }
}
