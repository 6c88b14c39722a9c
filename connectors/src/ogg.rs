//! Reading an Ogg stream's page headers, and nothing else: the voice notes troupe sends
//! (issue 32, voice out) are Ogg Opus made by a model provider, and the gateway decodes no
//! audio (docs/media.md: no decoder a crafted file can crash). What the headers give is
//! enough: the length of a note (the gateway's `sendVoice` `duration`, Discord's
//! `duration_secs`) and the size of each packet over time (Discord's waveform,
//! `discord::waveform`). One reader for both, bounded by the bytes it is given: a bad or
//! cut stream ends the pages early, never a panic.

use std::time::Duration;

/// One Ogg page's header: the granule position (for Opus, the time in 48 kHz samples at
/// which its last packet ends; `u64::MAX` when no packet ends on it) and the lacing values
/// (the sizes of its packets' segments).
pub struct Page<'a> {
    pub granule: u64,
    pub lacing: &'a [u8],
}

/// The pages of `ogg`, in order, until the bytes stop looking like one. A page whose
/// lacing table is whole is given even if its body is cut short.
pub fn pages(ogg: &[u8]) -> impl Iterator<Item = Page<'_>> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        // A page: "OggS", version, flags, granule (8 LE), serial, sequence, crc, count,
        // then `count` lacing values and the body they add up to.
        let page = ogg.get(at..)?;
        if page.len() < 27 || !page.starts_with(b"OggS") {
            return None;
        }
        let granule = u64::from_le_bytes(page[6..14].try_into().ok()?);
        let count = usize::from(page[26]);
        let lacing = page.get(27..27 + count)?;
        let body: usize = lacing.iter().map(|&l| usize::from(l)).sum();
        at += 27 + count + body;
        Some(Page { granule, lacing })
    })
}

/// The length of an Ogg Opus stream, from its pages' headers only: the last page's granule
/// position (48 kHz samples) less the pre-skip in the `OpusHead` packet. Zero when the
/// headers do not say (a platform then shows no length); never a panic on bad bytes.
pub fn opus_duration(ogg: &[u8]) -> Duration {
    let pre_skip = ogg
        .windows(8)
        .position(|w| w == b"OpusHead")
        .and_then(|at| ogg.get(at + 10..at + 12))
        .map_or(0, |b| u64::from(u16::from_le_bytes([b[0], b[1]])));
    let last_granule = pages(ogg)
        .map(|p| p.granule)
        .filter(|&g| g != u64::MAX)
        .last()
        .unwrap_or(0);
    Duration::from_micros(
        last_granule
            .saturating_sub(pre_skip)
            .saturating_mul(1_000_000)
            / 48_000,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One Ogg page with `granule` and a body of `body`.
    fn page(granule: u64, body: &[u8]) -> Vec<u8> {
        let mut p = b"OggS\0\0".to_vec();
        p.extend_from_slice(&granule.to_le_bytes());
        p.extend_from_slice(&[0; 12]);
        p.push(1);
        p.push(u8::try_from(body.len()).unwrap());
        p.extend_from_slice(body);
        p
    }

    #[test]
    fn the_duration_is_read_from_the_pages() {
        let mut head = b"OpusHead\x01\x01".to_vec();
        head.extend_from_slice(&312u16.to_le_bytes());
        let mut ogg = page(0, &head);
        ogg.extend(page(0, b"OpusTags"));
        ogg.extend(page(48_000 + 312, b"audio"));
        ogg.extend(page(2 * 48_000 + 312, b"audio"));
        assert_eq!(opus_duration(&ogg), Duration::from_secs(2));
    }

    #[test]
    fn bad_bytes_have_no_duration_and_no_panic() {
        assert_eq!(opus_duration(b""), Duration::ZERO);
        assert_eq!(opus_duration(b"OggS\0\0\xff"), Duration::ZERO);
        let mut cut = page(96_000, b"audio");
        cut.truncate(30);
        assert_eq!(opus_duration(&cut), Duration::from_secs(2));
    }
}
