//! Budgets: how much one user, one room and the whole persona may spend, and the rule that
//! decides whether a model call may still be made.
//!
//! A budget is a number of tokens (prompt plus completion), an amount of money, or both;
//! whichever is reached first applies. There are four: per user per day, per room per day,
//! per persona per day, per persona per month (days are UTC). The rule, [`over`], is pure:
//! the counters come from the database (`storage::usage`), so every replica applies the same
//! budget.
//!
//! Priorities: background memory work (summaries, facts) stops once a scope has used
//! `background_share` of its budget (0.8 by default), so replies keep the rest up to the
//! hard cap.
//!
//! Shares between platforms (issue 30, finding 7): on the HTTP API the caller chooses the
//! room and the user, so the user's and the room's budgets limit nothing there. Calls for
//! rooms of the API (`web:`) together may use at most `api_share` (0.5 by default) of the
//! persona's daily and monthly budgets ([`BudgetScope::ApiDay`], [`BudgetScope::ApiMonth`]):
//! past it the API is refused, and Discord, Telegram and Farcaster users keep the rest,
//! as `limits` gives the API at most half of a persona's message rate.

use serde::Serialize;
use std::fmt;
use std::str::FromStr;

use super::Purpose;

/// One budget: tokens, micro-dollars, or both. `Limit::default()` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limit {
    pub tokens: Option<u64>,
    pub micros: Option<u64>,
}

impl Limit {
    pub fn is_set(&self) -> bool {
        self.tokens.is_some() || self.micros.is_some()
    }

    /// Whether `used` reached `share` of this limit.
    fn reached(&self, used: Tally, share: f64) -> bool {
        let hit = |cap: u64, used: i64| used as f64 >= cap as f64 * share;
        self.tokens.is_some_and(|cap| hit(cap, used.tokens))
            || self.micros.is_some_and(|cap| hit(cap, used.micros))
    }
}

/// Parses `20000`, `20000 tokens`, `$0.50`, `0.5 usd`, or both joined by a comma
/// (`20000 tokens, $1`). `0`, `none` and the empty text are no limit.
impl FromStr for Limit {
    type Err = String;
    fn from_str(text: &str) -> Result<Limit, String> {
        let mut limit = Limit::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let lower = part.to_ascii_lowercase();
            if lower == "none" || lower == "off" {
                continue;
            }
            let bad = || {
                format!(
                    "`{part}` is not a budget: write a number of tokens (`20000 tokens`) or \
                     dollars (`$0.50`), or both separated by a comma"
                )
            };
            let money = lower
                .strip_prefix('$')
                .or_else(|| lower.strip_suffix("usd"))
                .map(str::trim);
            if let Some(amount) = money {
                let usd: f64 = amount.parse().map_err(|_| bad())?;
                if !usd.is_finite() || usd < 0.0 {
                    return Err(bad());
                }
                let micros = (usd * 1e6).round() as u64;
                limit.micros = (micros > 0).then_some(micros);
            } else {
                let n = lower.strip_suffix("tokens").unwrap_or(&lower).trim();
                let tokens: u64 = n.replace('_', "").parse().map_err(|_| bad())?;
                limit.tokens = (tokens > 0).then_some(tokens);
            }
        }
        Ok(limit)
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.tokens, self.micros) {
            (None, None) => f.write_str("none"),
            (Some(t), None) => write!(f, "{t} tokens"),
            (None, Some(m)) => write!(f, "${:.6}", m as f64 / 1e6),
            (Some(t), Some(m)) => write!(f, "{t} tokens, ${:.6}", m as f64 / 1e6),
        }
    }
}

/// The four budgets of a persona.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budgets {
    pub user_day: Limit,
    pub room_day: Limit,
    pub persona_day: Limit,
    pub persona_month: Limit,
}

impl Budgets {
    pub fn any(&self) -> bool {
        self.user_day.is_set()
            || self.room_day.is_set()
            || self.persona_day.is_set()
            || self.persona_month.is_set()
    }
}

/// Which budget a call ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum BudgetScope {
    UserDay,
    RoomDay,
    /// The API's share of the persona's day.
    ApiDay,
    /// The API's share of the persona's month.
    ApiMonth,
    PersonaDay,
    PersonaMonth,
}

impl BudgetScope {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetScope::UserDay => "user_day",
            BudgetScope::RoomDay => "room_day",
            BudgetScope::ApiDay => "api_day",
            BudgetScope::ApiMonth => "api_month",
            BudgetScope::PersonaDay => "persona_day",
            BudgetScope::PersonaMonth => "persona_month",
        }
    }
}

/// Tokens and micro-dollars used in one scope and window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub tokens: i64,
    pub micros: i64,
}

/// What each scope has used in its current window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Used {
    pub user_day: Tally,
    pub room_day: Tally,
    pub persona_day: Tally,
    pub persona_month: Tally,
    /// All the persona's rooms of the HTTP API together, today and this month.
    pub api_day: Tally,
    pub api_month: Tally,
}

/// The API's budgets: its share of the persona's day and month, checked against what the
/// API's rooms used together.
fn api_budgets(budgets: &Budgets, used: &Used) -> [(BudgetScope, Limit, Tally); 2] {
    [
        (BudgetScope::ApiDay, budgets.persona_day, used.api_day),
        (BudgetScope::ApiMonth, budgets.persona_month, used.api_month),
    ]
}

/// The first of `checks` (scope, limit, use, share of the limit) whose use reached its
/// share; a check without a share does not apply.
fn first_reached(
    checks: impl IntoIterator<Item = (BudgetScope, Limit, Tally, Option<f64>)>,
) -> Option<BudgetScope> {
    checks
        .into_iter()
        .find(|(_, limit, tally, share)| share.is_some_and(|s| limit.reached(*tally, s)))
        .map(|(scope, ..)| scope)
}

/// Whether the HTTP API's rooms together have used `api_share` of the persona's day or
/// month: the HTTP API checks this before it accepts a message.
pub fn api_over(budgets: &Budgets, used: &Used, api_share: f64) -> Option<BudgetScope> {
    let share = Some(api_share.clamp(0.0, 1.0));
    first_reached(api_budgets(budgets, used).map(|(s, l, t)| (s, l, t, share)))
}

/// The first budget that forbids a call, if any: a reply may use a budget up to its cap, a
/// background call (`purpose`) only up to `background_share` of it. `api_share` is set for a call for
/// a room of the HTTP API, which also stops at that share of the persona's budgets.
pub fn over(
    budgets: &Budgets,
    used: &Used,
    purpose: Purpose,
    background_share: f64,
    api_share: Option<f64>,
) -> Option<BudgetScope> {
    let share = if purpose.background() {
        background_share.clamp(0.0, 1.0)
    } else {
        1.0
    };
    let api = api_share.map(|a| a.clamp(0.0, 1.0) * share);
    let [api_day, api_month] = api_budgets(budgets, used).map(|(s, l, t)| (s, l, t, api));
    first_reached([
        (
            BudgetScope::UserDay,
            budgets.user_day,
            used.user_day,
            Some(share),
        ),
        (
            BudgetScope::RoomDay,
            budgets.room_day,
            used.room_day,
            Some(share),
        ),
        api_day,
        api_month,
        (
            BudgetScope::PersonaDay,
            budgets.persona_day,
            used.persona_day,
            Some(share),
        ),
        (
            BudgetScope::PersonaMonth,
            budgets.persona_month,
            used.persona_month,
            Some(share),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_tokens_money_or_both() {
        assert_eq!("20000".parse::<Limit>().unwrap().tokens, Some(20_000));
        assert_eq!(
            "20_000 tokens".parse::<Limit>().unwrap().tokens,
            Some(20_000)
        );
        assert_eq!("$0.50".parse::<Limit>().unwrap().micros, Some(500_000));
        assert_eq!(
            "100 tokens, 2 usd".parse::<Limit>().unwrap(),
            Limit {
                tokens: Some(100),
                micros: Some(2_000_000)
            }
        );
        assert!(!"0".parse::<Limit>().unwrap().is_set());
        assert!(!"".parse::<Limit>().unwrap().is_set());
        assert!("lots".parse::<Limit>().unwrap_err().contains("lots"));
        assert!("$-1".parse::<Limit>().is_err());
    }

    #[test]
    fn replies_go_to_the_cap_and_background_work_stops_first() {
        let budgets = Budgets {
            room_day: "100 tokens".parse().unwrap(),
            ..Budgets::default()
        };
        let mut used = Used::default();
        used.room_day.tokens = 79;
        assert_eq!(over(&budgets, &used, Purpose::Facts, 0.8, None), None);
        used.room_day.tokens = 80;
        assert_eq!(
            over(&budgets, &used, Purpose::Facts, 0.8, None),
            Some(BudgetScope::RoomDay)
        );
        assert_eq!(over(&budgets, &used, Purpose::Reply, 0.8, None), None);
        used.room_day.tokens = 99;
        assert_eq!(over(&budgets, &used, Purpose::Reply, 0.8, None), None);
        used.room_day.tokens = 100;
        assert_eq!(
            over(&budgets, &used, Purpose::Reply, 0.8, None),
            Some(BudgetScope::RoomDay)
        );
        // Money counts as well, whichever is reached first.
        let budgets = Budgets {
            user_day: "1000 tokens, $0.01".parse().unwrap(),
            ..Budgets::default()
        };
        let used = Used {
            user_day: Tally {
                tokens: 5,
                micros: 10_000,
            },
            ..Used::default()
        };
        assert_eq!(
            over(&budgets, &used, Purpose::Reply, 0.8, None),
            Some(BudgetScope::UserDay)
        );
    }

    #[test]
    fn the_api_stops_at_its_share_and_the_platforms_keep_the_rest() {
        let budgets = Budgets {
            persona_day: "1000 tokens".parse().unwrap(),
            persona_month: "$1".parse().unwrap(),
            ..Budgets::default()
        };
        let mut used = Used::default();
        used.api_day.tokens = 499;
        used.persona_day.tokens = 499;
        assert_eq!(over(&budgets, &used, Purpose::Reply, 0.8, Some(0.5)), None);
        used.api_day.tokens = 500;
        used.persona_day.tokens = 500;
        assert_eq!(
            over(&budgets, &used, Purpose::Reply, 0.8, Some(0.5)),
            Some(BudgetScope::ApiDay)
        );
        assert_eq!(api_over(&budgets, &used, 0.5), Some(BudgetScope::ApiDay));
        // A Telegram reply is not a call of the API: it goes on to the persona's cap.
        assert_eq!(over(&budgets, &used, Purpose::Reply, 0.8, None), None);
        used.persona_day.tokens = 1000;
        assert_eq!(
            over(&budgets, &used, Purpose::Reply, 0.8, None),
            Some(BudgetScope::PersonaDay)
        );
        // The month: half of $1 spent through the API over the month.
        let used = Used {
            api_month: Tally {
                tokens: 0,
                micros: 500_000,
            },
            ..Used::default()
        };
        assert_eq!(api_over(&budgets, &used, 0.5), Some(BudgetScope::ApiMonth));
        assert_eq!(api_over(&budgets, &used, 1.0), None);
        // Without a persona budget the API has no share to run out of.
        assert_eq!(api_over(&Budgets::default(), &used, 0.0), None);
    }
}
