//! What the benchmarks report: percentiles of measured durations, the process's resident
//! memory, and what a phase cost the process (CPU time and context switches, per message).

use std::time::Duration;

pub(super) fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// A field of /proc/self/status in KiB (0 where there is no /proc).
pub(super) fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// What the process has spent so far, all its threads (living or ended) together:
/// `getrusage(RUSAGE_SELF)`. A phase's cost is the difference of two readings, so the
/// start-up (migrations, loading the persona) is not in it. These hold from machine to
/// machine better than a time does: a busy host makes each wake-up dearer, not more of them.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Usage {
    /// User plus system CPU time.
    pub cpu: Duration,
    /// Context switches, voluntary (a thread waited) and involuntary (it was preempted).
    pub switches: u64,
}

impl Usage {
    /// The process's usage now (zero where `getrusage` is not available).
    pub fn now() -> Usage {
        #[cfg(unix)]
        {
            let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
            // SAFETY: getrusage writes one `rusage` into the buffer it is given, which is
            // one, zeroed; it reads nothing of ours.
            let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) } == 0;
            if ok {
                // SAFETY: getrusage succeeded, so it filled the struct (and it was zeroed).
                let ru = unsafe { ru.assume_init() };
                let time = |t: libc::timeval| {
                    Duration::from_secs(t.tv_sec.max(0) as u64)
                        + Duration::from_micros(t.tv_usec.max(0) as u64)
                };
                return Usage {
                    cpu: time(ru.ru_utime) + time(ru.ru_stime),
                    switches: (ru.ru_nvcsw.max(0) + ru.ru_nivcsw.max(0)) as u64,
                };
            }
        }
        Usage::default()
    }

    /// The line a phase of `messages` messages reports, from `since` (read before it) to now:
    /// CPU time and context switches per message.
    pub fn report(since: Usage, label: &str, messages: usize) -> String {
        let now = Usage::now();
        let n = messages.max(1) as f64;
        let cpu_ms = now.cpu.saturating_sub(since.cpu).as_secs_f64() * 1000.0 / n;
        let switches = now.switches.saturating_sub(since.switches) as f64 / n;
        format!(
            "cost, {label:<18}CPU {cpu_ms:.3} ms/message   {switches:.2} context switches/message   ({messages} messages)"
        )
    }
}
