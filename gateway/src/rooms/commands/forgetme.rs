//! `/forgetme`: what the persona learned about the sender (their facts) is deleted, in every
//! room of the persona on this platform. Anyone may ask it for themselves.

use crate::storage::FactSubject;

use crate::rooms::{Answer, Ctx, Effect};

pub(super) async fn run(ctx: &Ctx<'_>) -> anyhow::Result<Answer> {
    let gone = ctx
        .store
        .forget_user_facts(FactSubject {
            agent_id: ctx.agent,
            platform: ctx.platform,
            user_id: ctx.user,
        })
        .await?;
    tracing::info!(facts = gone, "forgot a user's facts");
    Ok(Answer {
        text: "Done: I've forgotten what I had learned about you.".into(),
        effect: Effect::ForgotFacts,
    })
}
