//! `/usage`: what this room and the sender used today (UTC), and what is left of their
//! budgets when the persona has any; the sender's figure is their person's (every account
//! linked with theirs, `people`). The figures are spend accounting's (`spend::Meter`,
//! docs/spend.md): the same rows `GET …/usage` reads, so every replica answers alike.

use super::{Answer, Ctx};
use crate::spend::{Standing, Today};

/// What the room and the sender used today; `None` when spend accounting is off.
async fn usage_today(ctx: &Ctx<'_>) -> anyhow::Result<Option<Today>> {
    let Some(meter) = &ctx.meter else {
        return Ok(None);
    };
    Ok(Some(meter.today(&ctx.room, ctx.platform, ctx.user).await?))
}

/// "1,234 tokens ($0.0012)", plus what is left when there is a budget.
fn line(standing: &Standing) -> String {
    let mut text = format!(
        "{} tokens (${:.4})",
        standing.used_tokens,
        standing.used_micros as f64 / 1e6
    );
    let mut left = Vec::new();
    if let Some(tokens) = standing.tokens_left {
        left.push(format!("{tokens} tokens"));
    }
    if let Some(micros) = standing.micros_left {
        left.push(format!("${:.4}", micros as f64 / 1e6));
    }
    if !left.is_empty() {
        text.push_str(&format!(", {} left", left.join(" and ")));
    }
    text
}

pub(super) async fn run(ctx: &Ctx<'_>) -> anyhow::Result<Answer> {
    Ok(Answer::text(match usage_today(ctx).await? {
        Some(today) => {
            // Linked accounts share one per-user budget (`people`): the figure is theirs.
            let person = ctx
                .store
                .person_of(ctx.agent, ctx.platform, ctx.user)
                .await?;
            let you = if person.is_linked() {
                "you (all your linked accounts)"
            } else {
                "you"
            };
            format!(
                "Today: this room {}; {you} {}.",
                line(&today.room),
                line(&today.user)
            )
        }
        None => "Usage accounting is off in this gateway.".to_string(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_shows_what_is_left_only_under_a_budget() {
        let free = Standing {
            used_tokens: 120,
            used_micros: 1500,
            tokens_left: None,
            micros_left: None,
        };
        assert_eq!(line(&free), "120 tokens ($0.0015)");
        let capped = Standing {
            tokens_left: Some(880),
            ..free
        };
        assert_eq!(line(&capped), "120 tokens ($0.0015), 880 tokens left");
    }
}
