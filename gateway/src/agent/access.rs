//! Access: the first step of a platform message's turn (issue 44, docs/access.md). The
//! sender and the room are let in or not by `access::Access::admit`; this step applies the
//! verdict. A message not let in ends here with no model call and nothing in the room's
//! memory (its journal entry is closed done), and at most its one reply (a pairing code, a
//! short refusal), queued as a command's answer is. A listen-only room's message is
//! remembered and ends here. An owner's `/approve CODE` in a DM is answered here too, and
//! so are an owner's `/drafts`, `/approve-post ID` and `/reject-post ID` (issue 47,
//! `drafts`).

use super::Agent;
use super::outbound::Kind;
use super::turn::{Step, Turn, done};
use crate::access::{DmPolicy, Trust, Verdict, approve};
use crate::outcome::{Origin, Outcome, WhyNot};

impl Agent {
    /// Access: whether the sender is let in, and how far they are trusted (`Ok`), or the
    /// end of the turn.
    pub(super) async fn admit(&self, turn: &mut Turn<'_>) -> Step<Trust> {
        let mind = turn.mind.clone();
        let rules = &mind.access;
        let inbound = turn.inbound();
        let is_direct = inbound.is_direct;
        if is_direct
            && let Some(code) = approve::approve_command(&inbound.text)
            && rules.is_owner(inbound.platform(), inbound.author.id.as_str())
        {
            let now = self.access.now_ms();
            let by = format!("{}:{}", inbound.platform(), inbound.author.id);
            let scope = format!("owners:{}", self.id);
            let store = self.access.store();
            let approval = approve::approve(store, code, Some(&self.id), &scope, &by, now).await?;
            let text = approve::answer(&approval, now);
            self.say(turn, text.clone()).await?;
            return done(Outcome::Replied {
                texts: vec![text],
                origin: Origin::Other,
            });
        }
        if is_direct
            && let Some(command) = crate::drafts::command(&inbound.text)
            && rules.is_owner(inbound.platform(), inbound.author.id.as_str())
        {
            let by = format!("{}:{}", inbound.platform(), inbound.author.id);
            let text =
                crate::drafts::run_command(&self.store, &self.outbox, &self.id, &by, command)
                    .await?;
            self.say(turn, text.clone()).await?;
            return done(Outcome::Replied {
                texts: vec![text],
                origin: Origin::Other,
            });
        }
        // `/link` must reach its command from an account not let in yet: linking it with an
        // approved one is how a person approved on one platform is let in on another
        // (docs/people.md). It makes no model call and needs a code from that account.
        if is_direct
            && is_link(&inbound.text)
            && rules
                .on(inbound.platform())
                .is_some_and(|on| on.dm != DmPolicy::Disabled)
        {
            turn.untrusted = !rules.tools_for_everyone;
            return Ok(Trust::Stranger);
        }
        let need_trust = is_direct && mind.tools.is_some() && !rules.tools_for_everyone;
        let verdict = self
            .access
            .admit(&self.id, rules, inbound, need_trust)
            .await?;
        match verdict {
            Verdict::Let(trust) => {
                turn.untrusted = is_direct && trust == Trust::Stranger && !rules.tools_for_everyone;
                Ok(trust)
            }
            Verdict::Listen => {
                self.record(turn, None).await?;
                done(Outcome::Ignored {
                    reason: WhyNot::ListenOnly,
                })
            }
            Verdict::Refuse { say } => {
                match say {
                    Some(text) => self.say(turn, text).await?,
                    None => self.store.journal_refused(turn.journal).await?,
                }
                done(Outcome::Ignored {
                    reason: WhyNot::NotLetIn,
                })
            }
        }
    }

    /// Says `text` in answer to the message, which (like a command, and like the answer)
    /// is kept out of the room's memory.
    async fn say(&self, turn: &Turn<'_>, text: String) -> anyhow::Result<()> {
        let outbound = self.outbound(turn.inbound(), Kind::Reply(turn.journal), text);
        if let Some(id) = self
            .store
            .record_command(turn.journal, &self.id, &outbound)
            .await?
        {
            self.outbox.deliver(id).await?;
        }
        Ok(())
    }
}

/// Whether `text` is the `/link` command (`/link`, `/link CODE`, `/link yes`, Telegram's
/// `/link@bot`).
fn is_link(text: &str) -> bool {
    let word = text.split_whitespace().next().unwrap_or("");
    word.split('@').next() == Some("/link")
}

#[cfg(test)]
mod link_tests {
    #[test]
    fn only_the_link_command_is_link() {
        for yes in [
            "/link",
            " /link ABCD2345",
            "/link yes",
            "/link@troupe_bot CODE",
        ] {
            assert!(super::is_link(yes), "{yes}");
        }
        for no in ["/linked", "link", "/unlink", "hello /link", ""] {
            assert!(!super::is_link(no), "{no}");
        }
    }
}
