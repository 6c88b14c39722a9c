//! Spend control: what every model call costs, who it was for, and whether one more may be
//! made (issue 16; docs/spend.md).
//!
//! - `accounting`: records each call (persona, room, user, provider, model, tokens from the
//!   provider's usage or estimated, cost, purpose) as a raw record and in daily rollups;
//! - `prices`: the price table (defaults, `troupe.toml`'s `[prices]`, the persona's);
//! - `budgets`: the four budgets and the rule that refuses a call past one;
//! - `scheduler`: the fair queue in front of each provider account (key): concurrency,
//!   requests and tokens per minute, back-off after a 429, priorities and rooms in turn;
//! - `clock`: the day boundary, injectable.
//!
//! The agent asks a persona's [`Meter`] before a call (`admit`) and tells it after
//! (`record`); memory upkeep does the same with a background purpose, so it stops before
//! replies do. Budget counters are the database's rollups, so they hold across replicas.
//! It knows nothing of providers or agents: callers pass it numbers.

mod accounting;
pub(crate) mod budgets;
pub(crate) mod clock;
pub(crate) mod prices;
pub(crate) mod report;
pub(crate) mod scheduler;

use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use troupe_connectors::{AgentId, Platform, RoomKey, UserId};

use crate::persona::Persona;
use crate::storage::{StorageError, Store};
pub use accounting::Tokens;
pub use budgets::{BudgetScope, Budgets, Limit, Tally};
use clock::SpendClock;
pub use prices::{Price, Prices};
pub use scheduler::{AccountLimits, Priority, Scheduler, Turn};

/// Which model a call went to, as the price table and the usage records key it: the vendor
/// (`openai`) and the model (`gpt-4o-mini`; empty for a stand-in such as `instant`). Its
/// `Display` (`openai:gpt-4o-mini`) is the label that logs, metrics and `GET /agents`
/// show; the price key is never parsed back out of that label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRef {
    pub vendor: String,
    pub model: String,
}

impl ModelRef {
    pub fn new(vendor: impl Into<String>, model: impl Into<String>) -> ModelRef {
        ModelRef {
            vendor: vendor.into(),
            model: model.into(),
        }
    }
}

impl std::fmt::Display for ModelRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.model.is_empty() {
            f.write_str(&self.vendor)
        } else {
            write!(f, "{}:{}", self.vendor, self.model)
        }
    }
}

/// What a model call was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Purpose {
    Reply,
    Summary,
    Facts,
    Embedding,
    /// An autonomous post's draft (issue 34): background work, like memory upkeep.
    Post,
    /// A step of a turn with tools that asked for tool calls (issue 33); the step that
    /// answers is a `Reply`.
    Tool,
    /// A separate vision model describing a message's images for a text-only persona
    /// (issue 32, `media::vision`): part of the reply, like `Tool`.
    Vision,
    /// A reply said aloud for a voice note (issue 32, `media::speech`): part of the reply.
    Speech,
    /// A voice note transcribed (issue 32, `media::voice`): part of the reply, counted in
    /// audio seconds (`Tokens::audio`).
    Transcribe,
}

impl Purpose {
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Reply => "reply",
            Purpose::Summary => "summary",
            Purpose::Facts => "facts",
            Purpose::Embedding => "embedding",
            Purpose::Post => "post",
            Purpose::Tool => "tool",
            Purpose::Vision => "vision",
            Purpose::Speech => "speech",
            Purpose::Transcribe => "transcribe",
        }
    }

    /// Background work stops at `background_share` of a budget; replies go to the cap.
    fn background(self) -> bool {
        !matches!(
            self,
            Purpose::Reply
                | Purpose::Tool
                | Purpose::Vision
                | Purpose::Speech
                | Purpose::Transcribe
        )
    }
}

/// Spend settings from the environment and troupe.toml (`TROUPE_SPEND_*`, `[prices]`,
/// `TROUPE_PROVIDER_RPM|TPM|CONCURRENCY`), built by `config`.
#[derive(Debug, Clone)]
pub struct SpendSettings {
    /// The default budgets of every persona; its `settings.spend` overrides each.
    pub budgets: Budgets,
    /// `TROUPE_SPEND_BACKGROUND_SHARE`, default 0.8: memory upkeep stops at this share of a
    /// budget.
    pub background_share: f64,
    /// `TROUPE_SPEND_API_SHARE`, default 0.5: calls for rooms of the HTTP API stop at this
    /// share of the persona's budgets, so the platforms' users keep the rest (issue 30, #7).
    pub api_share: f64,
    /// `TROUPE_SPEND_RETENTION_DAYS`, default 90: raw records older than this are deleted
    /// (the daily rollups stay).
    pub retention_days: u32,
    /// troupe.toml's `[prices]`, over the default table.
    pub prices: Prices,
    /// Limits of each provider account, shared by the personas on it.
    pub account: AccountLimits,
    /// `TROUPE_TEST_CLOCK_OFFSET_SECS` (test-only): shifts the spend clock.
    pub clock_offset_secs: i64,
}

impl Default for SpendSettings {
    fn default() -> Self {
        SpendSettings {
            budgets: Budgets::default(),
            background_share: 0.8,
            api_share: 0.5,
            retention_days: 90,
            prices: Prices::defaults(),
            account: AccountLimits::default(),
            clock_offset_secs: 0,
        }
    }
}

/// The app's spend handle: the store, the settings, the clock. Cheap to clone.
#[derive(Clone)]
pub struct Spend {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    settings: SpendSettings,
    /// `settings.prices`, shared by every persona that does not price models itself.
    prices: Arc<Prices>,
    clock: SpendClock,
    /// When raw records were last pruned (ms), so that pruning runs at most hourly.
    pruned_at_ms: AtomicI64,
    /// Writes the records, in batches.
    ledger: accounting::Ledger,
}

impl Spend {
    pub fn new(store: Store, settings: SpendSettings) -> Spend {
        let clock = SpendClock::system(settings.clock_offset_secs);
        Spend::with_clock(store, settings, clock)
    }

    pub fn with_clock(store: Store, settings: SpendSettings, clock: SpendClock) -> Spend {
        Spend {
            inner: Arc::new(Inner {
                ledger: accounting::Ledger::spawn(store.clone()),
                store,
                prices: Arc::new(settings.prices.clone()),
                settings,
                clock,
                pruned_at_ms: AtomicI64::new(0),
            }),
        }
    }

    /// Writes every usage record still queued and stops taking new ones: the app calls it
    /// at a graceful stop, once its agents have finished, so that a stop loses no record
    /// (issue 30, finding 9).
    pub async fn close(&self) {
        self.inner.ledger.close().await
    }

    #[cfg(test)]
    pub fn clock(&self) -> &SpendClock {
        &self.inner.clock
    }

    /// Whether the persona's `settings.spend` is well formed; the app logs the error when
    /// it loads the persona, and its meter then uses the config's defaults.
    pub fn check(&self, persona: &Persona) -> Result<(), String> {
        PersonaSpend::of(persona, &self.inner).map(|_| ())
    }

    /// A meter for `agent_id` with the config's budgets and prices, for calls made where the
    /// persona's file is not at hand (embeddings, made by the knowledge store).
    pub fn meter_for(&self, agent_id: &AgentId) -> Meter {
        Meter {
            spend: self.clone(),
            agent_id: agent_id.clone(),
            conf: Arc::new(PersonaSpend::defaults(&self.inner)),
        }
    }

    /// The meter of one persona: the config's budgets and prices with its
    /// `settings.spend` on top (the defaults alone when it is malformed: see `check`).
    pub fn meter(&self, persona: &Persona) -> Meter {
        let conf = PersonaSpend::of(persona, &self.inner)
            .unwrap_or_else(|_| PersonaSpend::defaults(&self.inner));
        Meter {
            spend: self.clone(),
            agent_id: persona.id.clone(),
            conf: Arc::new(conf),
        }
    }
}

/// A persona's spend settings, resolved.
#[derive(Debug, Clone)]
struct PersonaSpend {
    budgets: Budgets,
    prices: Arc<Prices>,
    notices: BTreeMap<BudgetScope, String>,
}

/// `settings.spend` in a character file (docs/spend.md).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SpendJson {
    user_per_day: Option<LimitJson>,
    room_per_day: Option<LimitJson>,
    persona_per_day: Option<LimitJson>,
    persona_per_month: Option<LimitJson>,
    /// One notice for every budget, or…
    notice: Option<String>,
    /// …one per budget (`userDay`, `roomDay`, `personaDay`, `personaMonth`).
    #[serde(default)]
    notices: BTreeMap<String, String>,
    #[serde(default)]
    prices: BTreeMap<String, Price>,
}

/// A budget in JSON: a number of tokens, or the text form of [`Limit`].
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum LimitJson {
    Tokens(u64),
    Text(String),
}

impl LimitJson {
    fn limit(&self) -> Result<Limit, String> {
        match self {
            LimitJson::Tokens(0) => Ok(Limit::default()),
            LimitJson::Tokens(n) => Ok(Limit {
                tokens: Some(*n),
                micros: None,
            }),
            LimitJson::Text(t) => t.parse(),
        }
    }
}

/// The longest notice kept: it is sent to a room as is.
const NOTICE_MAX_CHARS: usize = 1000;

impl PersonaSpend {
    fn defaults(inner: &Inner) -> PersonaSpend {
        PersonaSpend {
            budgets: inner.settings.budgets,
            prices: inner.prices.clone(),
            notices: BTreeMap::new(),
        }
    }

    fn of(persona: &Persona, inner: &Inner) -> Result<PersonaSpend, String> {
        let mut conf = PersonaSpend::defaults(inner);
        let Some(raw) = persona.raw.pointer("/settings/spend") else {
            return Ok(conf);
        };
        let json: SpendJson = serde_json::from_value(raw.clone()).map_err(|e| e.to_string())?;
        let b = &mut conf.budgets;
        for (slot, value) in [
            (&mut b.user_day, &json.user_per_day),
            (&mut b.room_day, &json.room_per_day),
            (&mut b.persona_day, &json.persona_per_day),
            (&mut b.persona_month, &json.persona_per_month),
        ] {
            if let Some(v) = value {
                *slot = v.limit()?;
            }
        }
        let scopes = [
            ("userDay", BudgetScope::UserDay),
            ("roomDay", BudgetScope::RoomDay),
            ("personaDay", BudgetScope::PersonaDay),
            ("personaMonth", BudgetScope::PersonaMonth),
        ];
        for (name, scope) in scopes {
            if let Some(text) = json.notices.get(name).or(json.notice.as_ref()) {
                conf.notices
                    .insert(scope, text.chars().take(NOTICE_MAX_CHARS).collect());
            }
        }
        if let Some(unknown) = json
            .notices
            .keys()
            .find(|k| !scopes.iter().any(|(n, _)| n == k))
        {
            return Err(format!(
                "notices.{unknown} is not a budget; use userDay, roomDay, personaDay or personaMonth"
            ));
        }
        if !json.prices.is_empty() {
            conf.prices = Arc::new(conf.prices.with(&json.prices)?);
        }
        Ok(conf)
    }
}

/// Who a call is for: the room and the user, when it has them.
#[derive(Debug, Clone, Copy)]
pub struct Who<'a> {
    pub room: Option<&'a RoomKey>,
    pub user: Option<(Platform, &'a UserId)>,
}

impl<'a> Who<'a> {
    /// A call made for `inbound`'s author in its room (`room`, the room's key).
    pub fn sender(room: &'a RoomKey, inbound: &'a troupe_connectors::Inbound) -> Who<'a> {
        Who {
            room: Some(room),
            user: Some((inbound.platform(), &inbound.author.id)),
        }
    }
}

/// What `Meter::admit` decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    Go,
    /// Past `scope`'s budget: no call. `notice` is the text to send, for the first refused
    /// reply of the window in this room (or for this user); `None` after that.
    Over {
        scope: BudgetScope,
        notice: Option<String>,
    },
}

/// One scope's use and what is left of its budget, for `/usage` and the console.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Standing {
    pub used_tokens: i64,
    pub used_micros: i64,
    /// `None`: no token budget.
    pub tokens_left: Option<i64>,
    /// `None`: no money budget.
    pub micros_left: Option<i64>,
}

/// What a room and a user used today and what they have left: the `/usage` room command
/// (issue 15) shows this ([`Meter::today`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Today {
    pub room: Standing,
    pub user: Standing,
    pub persona_day: Standing,
    pub persona_month: Standing,
}

/// What the persona used today and this month and what its budgets have left: the
/// console's persona cards and `GET …/usage` show this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PersonaToday {
    pub day: Standing,
    pub month: Standing,
}

/// One persona's spend: its budgets and prices, and the app's store and clock.
#[derive(Clone)]
pub struct Meter {
    spend: Spend,
    agent_id: AgentId,
    conf: Arc<PersonaSpend>,
}

fn user_key(platform: Platform, user: &UserId) -> String {
    format!("{platform}:{user}")
}

/// One scope's use against its limit.
fn standing(tally: Tally, limit: Limit) -> Standing {
    Standing {
        used_tokens: tally.tokens,
        used_micros: tally.micros,
        tokens_left: limit.tokens.map(|cap| (cap as i64 - tally.tokens).max(0)),
        micros_left: limit.micros.map(|cap| (cap as i64 - tally.micros).max(0)),
    }
}

impl Meter {
    /// Whether a call for `who` with `purpose` may be made now. With no budget set this
    /// costs no query.
    pub async fn admit(&self, who: Who<'_>, purpose: Purpose) -> Result<Admission, StorageError> {
        let budgets = &self.conf.budgets;
        if !budgets.any() {
            return Ok(Admission::Go);
        }
        let settings = &self.spend.inner.settings;
        let today = self.spend.inner.clock.today();
        let used = self.used(who, today).await?;
        let from_api = who.room.is_some_and(|r| r.platform == Platform::Web);
        let Some(scope) = budgets::over(
            budgets,
            &used,
            purpose,
            settings.background_share,
            from_api.then_some(settings.api_share),
        ) else {
            return Ok(Admission::Go);
        };
        crate::metrics::budget_refusal(&self.agent_id, scope.as_str(), purpose.as_str());
        if purpose != Purpose::Reply {
            return Ok(Admission::Over {
                scope,
                notice: None,
            });
        }
        // One notice per window: per user for the user's budget, per room otherwise.
        let key = match (scope, who.user) {
            // Per person: linked accounts get one notice between them.
            (BudgetScope::UserDay, Some((platform, user))) => {
                let store = &self.spend.inner.store;
                store.person_of(&self.agent_id, platform, user).await?.id
            }
            _ => who.room.map(ToString::to_string).unwrap_or_default(),
        };
        let window = match scope {
            BudgetScope::PersonaMonth | BudgetScope::ApiMonth => clock::month_start(today),
            _ => today,
        };
        let first = self
            .spend
            .inner
            .store
            .usage_notice_first(
                &self.agent_id,
                scope.as_str(),
                &key,
                window,
                self.spend.inner.clock.now_ms(),
            )
            .await?;
        Ok(Admission::Over {
            scope,
            notice: first.then(|| self.notice(scope)),
        })
    }

    /// Whether the API's share of the persona's budgets is spent (`TROUPE_SPEND_API_SHARE`):
    /// the scope (`ApiDay`, `ApiMonth`) when it is, so the HTTP API refuses a message
    /// before journaling it. With no budget set this costs no query.
    pub async fn api_spent(&self) -> Result<Option<BudgetScope>, StorageError> {
        let budgets = &self.conf.budgets;
        if !budgets.any() {
            return Ok(None);
        }
        let nobody = Who {
            room: None,
            user: None,
        };
        let used = self.used(nobody, self.spend.inner.clock.today()).await?;
        Ok(budgets::api_over(
            budgets,
            &used,
            self.spend.inner.settings.api_share,
        ))
    }

    /// The notice for `scope`: the persona's wording, else the default.
    fn notice(&self, scope: BudgetScope) -> String {
        if let Some(text) = self.conf.notices.get(&scope) {
            return text.clone();
        }
        match scope {
            BudgetScope::UserDay => "You've reached today's limit for talking with me. I'll gladly answer again tomorrow (UTC).",
            BudgetScope::RoomDay => "This room has reached today's limit for my answers. I'll be back tomorrow (UTC).",
            BudgetScope::ApiDay => "My answers over the API have reached today's limit. I'll be back tomorrow (UTC).",
            BudgetScope::ApiMonth => "My answers over the API have reached this month's limit. I'll be back next month.",
            BudgetScope::PersonaDay => "I've reached my limit for today. I'll be back tomorrow (UTC).",
            BudgetScope::PersonaMonth => "I've reached my limit for this month. I'll be back next month.",
        }
        .to_string()
    }

    async fn used(&self, who: Who<'_>, today: i64) -> Result<budgets::Used, StorageError> {
        let store = &self.spend.inner.store;
        let user = who.user.map(|(p, u)| user_key(p, u));
        let now = store
            .usage_now(
                &self.agent_id,
                today,
                clock::month_start(today),
                who.room,
                user.as_deref(),
            )
            .await?;
        let t = |u: crate::storage::UsageTally| Tally {
            tokens: u.tokens,
            micros: u.micros,
        };
        let mut user_day = t(now.user_day);
        // One per-user budget per person: the other accounts linked with the user's count.
        if let Some((platform, id)) = who.user {
            let person = store.person_of(&self.agent_id, platform, id).await?;
            for account in person.accounts.iter().filter(|a| Some(a.key()) != user) {
                let other = store
                    .usage_user_day(&self.agent_id, today, &account.key())
                    .await?;
                user_day.tokens += other.tokens;
                user_day.micros += other.micros;
            }
        }
        Ok(budgets::Used {
            user_day,
            room_day: t(now.room_day),
            persona_day: t(now.persona_day),
            persona_month: t(now.persona_month),
            api_day: t(now.api_day),
            api_month: t(now.api_month),
        })
    }

    /// The persona's own standing today and this month, without a room or a user.
    pub async fn persona_today(&self) -> Result<PersonaToday, StorageError> {
        let who = Who {
            room: None,
            user: None,
        };
        let used = self.used(who, self.spend.inner.clock.today()).await?;
        let b = &self.conf.budgets;
        Ok(PersonaToday {
            day: standing(used.persona_day, b.persona_day),
            month: standing(used.persona_month, b.persona_month),
        })
    }

    /// Tokens and money used today in `room` and by `user`, by the persona today and this
    /// month, and what each budget has left. The function the `/usage` room command calls.
    pub async fn today(
        &self,
        room: &RoomKey,
        platform: Platform,
        user: &UserId,
    ) -> Result<Today, StorageError> {
        let who = Who {
            room: Some(room),
            user: Some((platform, user)),
        };
        let used = self.used(who, self.spend.inner.clock.today()).await?;
        let b = &self.conf.budgets;
        Ok(Today {
            room: standing(used.room_day, b.room_day),
            user: standing(used.user_day, b.user_day),
            persona_day: standing(used.persona_day, b.persona_day),
            persona_month: standing(used.persona_month, b.persona_month),
        })
    }

    /// Records one call (see `accounting`). Never fails the caller: a record that cannot be
    /// written is logged and counted.
    pub async fn record(&self, who: Who<'_>, purpose: Purpose, model: &ModelRef, tokens: Tokens) {
        accounting::record(self, who, purpose, model, tokens).await
    }
}

#[cfg(test)]
mod tests;
