//! `/link` and `/unlink`: one person across platforms (issue 44 item 6, docs/people.md).
//! Only in a direct message on a chat platform: a code said in a group is seen by others,
//! and on the HTTP API the caller picks the user. The steps are `people::link`'s; this
//! file says them to the person.

use troupe_connectors::Platform;

use crate::people::codes::CODE_TTL_MS;
use crate::people::link::{self, Entered};
use crate::rooms::{Answer, Ctx, Effect};
use crate::storage::Account;

const DM_ONLY: &str = "/link and /unlink work only in a direct message with me.";

const SHARED: &str = "Linked accounts share what I know about you, one daily limit, \
                      /usage and /forgetme.";

fn sender(ctx: &Ctx<'_>) -> Option<Account> {
    (ctx.direct && ctx.platform != Platform::Web).then(|| Account::new(ctx.platform, ctx.user))
}

/// How an account reads in an answer: `telegram account Sam (id 42)`.
fn describe(account: &Account, name: Option<&str>) -> String {
    match name {
        Some(name) if name != account.user_id.as_str() => format!(
            "{} account {} (id {})",
            account.platform, name, account.user_id
        ),
        _ => format!("{} account {}", account.platform, account.user_id),
    }
}

pub(super) async fn link(ctx: &Ctx<'_>, arg: Option<&str>) -> anyhow::Result<Answer> {
    let Some(me) = sender(ctx) else {
        return Ok(Answer::text(DM_ONLY));
    };
    match arg {
        None => {
            let code = link::issue(ctx.store, ctx.agent, &me, ctx.now_ms).await?;
            Ok(Answer::text(format!(
                "Your link code is {code}. Within {} minutes, send /link {code} to me from \
                 your account on the other platform, in a direct message, and confirm there \
                 with /link yes. Never give this code to anyone else. {SHARED}",
                CODE_TTL_MS / 60_000
            )))
        }
        Some(yes) if yes.eq_ignore_ascii_case("yes") => confirm(ctx, &me).await,
        Some(code) => enter(ctx, &me, code).await,
    }
}

async fn enter(ctx: &Ctx<'_>, me: &Account, code: &str) -> anyhow::Result<Answer> {
    let text = match link::enter(ctx.store, ctx.agent, me, code, ctx.now_ms).await? {
        Entered::Joins { issuer, name } => format!(
            "This code links this account with {}. If that account is yours, send /link yes \
             to link them; if it is not, ignore this and nothing is linked. {SHARED}",
            describe(&issuer, name.as_deref())
        ),
        Entered::Refused => "That is not a valid link code. Send /link on your other account \
                             for a new one."
            .to_string(),
        Entered::Locked { minutes } => format!(
            "Too many wrong codes. Try again in {minutes} minute{}.",
            if minutes == 1 { "" } else { "s" }
        ),
        Entered::OwnCode => "That is this account's own code: send it from your account on \
                             the other platform."
            .to_string(),
        Entered::AlreadyLinked => "These accounts are linked already.".to_string(),
    };
    Ok(Answer::text(text))
}

async fn confirm(ctx: &Ctx<'_>, me: &Account) -> anyhow::Result<Answer> {
    let Some(issuer) = link::confirm(ctx.store, ctx.agent, me, ctx.now_ms).await? else {
        return Ok(Answer::text(
            "Nothing to confirm: send /link CODE first, with the code /link gave on your \
             other account.",
        ));
    };
    let name = ctx.store.account_name(&issuer).await?;
    tracing::info!(platform = %issuer.platform, "linked two accounts into one person");
    Ok(Answer {
        text: format!(
            "Linked: this account and your {} are one person to me now. {SHARED} /unlink \
             undoes it.",
            describe(&issuer, name.as_deref())
        ),
        effect: Effect::PeopleChanged,
    })
}

pub(super) async fn unlink(ctx: &Ctx<'_>) -> anyhow::Result<Answer> {
    let Some(me) = sender(ctx) else {
        return Ok(Answer::text(DM_ONLY));
    };
    let others = link::unlink(ctx.store, ctx.agent, &me).await?;
    if others.is_empty() {
        return Ok(Answer::text("This account is not linked to another."));
    }
    let names: Vec<String> = others.iter().map(|a| describe(a, None)).collect();
    Ok(Answer {
        text: format!(
            "Unlinked: this account is on its own again, apart from your {}. What I learned \
             on each account stays with that account.",
            names.join(" and ")
        ),
        effect: Effect::PeopleChanged,
    })
}
