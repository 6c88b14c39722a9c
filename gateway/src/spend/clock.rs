//! The spend clock: what "today" and "this month" are for budgets and rollups.
//!
//! Budgets reset at midnight UTC. The clock is a value, not a call to the system time, so
//! the day boundary is testable without sleeping: unit tests use `SpendClock::manual`, and
//! the end-to-end tests start the binary with `TROUPE_TEST_CLOCK_OFFSET_SECS` (test-only,
//! documented in docs/spend.md) to be "tomorrow" on the same database.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

const DAY_MS: i64 = 86_400_000;

/// Milliseconds since the epoch, shifted by a fixed offset (zero in production).
#[derive(Clone, Debug)]
pub struct SpendClock {
    offset_ms: Arc<AtomicI64>,
    /// `Some(now)`: a manual clock that only moves when told (tests).
    manual: Option<Arc<AtomicI64>>,
}

impl SpendClock {
    /// The system clock, shifted by `offset_secs` (0 outside tests).
    pub fn system(offset_secs: i64) -> Self {
        SpendClock {
            offset_ms: Arc::new(AtomicI64::new(offset_secs.saturating_mul(1000))),
            manual: None,
        }
    }

    /// A clock standing at `now_ms` until `advance` moves it.
    #[cfg(test)]
    pub fn manual(now_ms: i64) -> Self {
        SpendClock {
            offset_ms: Arc::new(AtomicI64::new(0)),
            manual: Some(Arc::new(AtomicI64::new(now_ms))),
        }
    }

    #[cfg(test)]
    pub fn advance(&self, ms: i64) {
        match &self.manual {
            Some(now) => now.fetch_add(ms, Ordering::SeqCst),
            None => self.offset_ms.fetch_add(ms, Ordering::SeqCst),
        };
    }

    pub fn now_ms(&self) -> i64 {
        let base = match &self.manual {
            Some(now) => now.load(Ordering::SeqCst),
            None => crate::clock::now_ms(),
        };
        base + self.offset_ms.load(Ordering::Relaxed)
    }

    /// Today, as days since the epoch (UTC).
    pub fn today(&self) -> i64 {
        day_of(self.now_ms())
    }
}

/// The UTC day (days since the epoch) of an instant.
pub fn day_of(ms: i64) -> i64 {
    ms.div_euclid(DAY_MS)
}

/// The first day of the month that `day` is in (days since the epoch, UTC).
pub fn month_start(day: i64) -> i64 {
    let (y, m, _) = civil_from_days(day);
    days_from_civil(y, m, 1)
}

/// `YYYY-MM-DD` of a day number, for the API and the CLI.
pub fn date_of(day: i64) -> String {
    let (y, m, d) = civil_from_days(day);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Parses `YYYY-MM-DD` into a day number.
pub fn parse_date(text: &str) -> Option<i64> {
    let mut parts = text.trim().splitn(3, '-');
    let y: i64 = parts.next()?.parse().ok()?;
    let m: u32 = parts.next()?.parse().ok()?;
    let d: u32 = parts.next()?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || !(1970..=9999).contains(&y) {
        return None;
    }
    let day = days_from_civil(y, m, d);
    // Refuse dates that do not exist (2026-02-30 would roll over).
    (civil_from_days(day) == (y, m, d)).then_some(day)
}

// Howard Hinnant's civil calendar algorithms (public domain), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip_and_months_start_on_the_first() {
        assert_eq!(date_of(0), "1970-01-01");
        let day = parse_date("2026-12-01").unwrap();
        assert_eq!(date_of(day), "2026-12-01");
        assert_eq!(month_start(parse_date("2026-12-31").unwrap()), day);
        assert_eq!(
            date_of(month_start(parse_date("2024-02-29").unwrap())),
            "2024-02-01"
        );
        assert_eq!(parse_date("2026-02-30"), None);
        assert_eq!(parse_date("yesterday"), None);
    }

    #[test]
    fn the_manual_clock_crosses_midnight_when_told() {
        let midnight = parse_date("2026-12-02").unwrap() * DAY_MS;
        let clock = SpendClock::manual(midnight - 1);
        let before = clock.today();
        clock.advance(1);
        assert_eq!(clock.today(), before + 1);
        let shifted = SpendClock::system(86_400);
        assert_eq!(shifted.today(), SpendClock::system(0).today() + 1);
    }
}
