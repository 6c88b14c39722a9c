//! The `waveform` of a voice message (issue 32, voice out): the preview bars Discord draws,
//! one byte per point (0 to 255), at most 256 points, one per 100 ms at most, as Discord's
//! clients sample their recordings (docs: "Voice Messages").
//!
//! The gateway decodes no audio (docs/media.md: no decoder a crafted file can crash), so
//! the loudness is not measured. What it reads instead is the Ogg pages' headers: each
//! page's granule position (the time, in 48 kHz samples, at which its last packet ends)
//! and its lacing table (the size of each Opus packet in it). Opus is variable bitrate:
//! speech takes more bytes per packet than a pause, and silence (DTX) takes almost none,
//! so bytes per unit of time draw the shape of the speech, coarsely, without touching the
//! audio. The packets that end on a page share its stretch of time evenly. Header pages
//! (granule 0: `OpusHead`, `OpusTags`) are not audio. Bad bytes give a short or flat
//! waveform, never a panic.

use crate::ogg::pages;

/// Points in a waveform at most (Discord's clients downsample to this).
const MAX_POINTS: usize = 256;

/// The time one point covers at least: 100 ms of 48 kHz samples.
const POINT_SAMPLES: u64 = 4_800;

/// The waveform of an Ogg Opus voice note: 1 to 256 points, the loudest stretch at 255.
pub(crate) fn waveform(ogg: &[u8]) -> Vec<u8> {
    // The last time a page gives: the length, in samples, the points are spread over.
    let span = pages(ogg)
        .map(|p| p.granule)
        .filter(|&g| g != u64::MAX)
        .max()
        .unwrap_or(0);
    if span == 0 {
        return vec![0];
    }
    let points = usize::try_from(span.div_ceil(POINT_SAMPLES))
        .unwrap_or(MAX_POINTS)
        .clamp(1, MAX_POINTS);
    let mut bytes = vec![0f64; points];
    let scale = points as f64 / span as f64;
    let mut before = 0u64;
    let mut open = 0usize;
    let mut ended: Vec<usize> = Vec::with_capacity(255);
    for page in pages(ogg) {
        ended.clear();
        for &l in page.lacing {
            open += usize::from(l);
            // A lacing value under 255 ends a packet; 255 continues it (onto the next page).
            if l < 255 {
                ended.push(std::mem::take(&mut open));
            }
        }
        // No time, or time going back (header pages, a damaged stream): not audio.
        if page.granule == u64::MAX || page.granule <= before {
            continue;
        }
        let from = before as f64 * scale;
        let each = (page.granule - before) as f64 * scale / ended.len().max(1) as f64;
        for (i, &size) in ended.iter().enumerate() {
            let start = from + i as f64 * each;
            spread(&mut bytes, start, start + each, size as f64);
        }
        before = page.granule;
    }
    let loudest = bytes.iter().copied().fold(0f64, f64::max);
    if loudest <= 0.0 {
        return vec![0; points];
    }
    bytes
        .iter()
        .map(|b| (b / loudest * 255.0).round().clamp(0.0, 255.0) as u8)
        .collect()
}

/// Adds `size` bytes spread evenly over `[start, end)` (in points) to the points it covers.
fn spread(points: &mut [f64], start: f64, end: f64, size: f64) {
    let length = end - start;
    if length <= 0.0 {
        return;
    }
    let first = start.floor().max(0.0) as usize;
    let last = (end.ceil() as usize).min(points.len());
    for (k, point) in points.iter_mut().enumerate().take(last).skip(first) {
        let overlap = end.min(k as f64 + 1.0) - start.max(k as f64);
        if overlap > 0.0 {
            *point += size * overlap / length;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One Ogg page at `granule` holding packets of `sizes` bytes.
    fn page(granule: u64, sizes: &[usize]) -> Vec<u8> {
        let mut lacing = Vec::new();
        for &size in sizes {
            lacing.extend(std::iter::repeat_n(255u8, size / 255));
            lacing.push(u8::try_from(size % 255).unwrap());
        }
        let mut p = b"OggS\0\0".to_vec();
        p.extend_from_slice(&granule.to_le_bytes());
        p.extend_from_slice(&[0; 12]);
        p.push(u8::try_from(lacing.len()).unwrap());
        p.extend_from_slice(&lacing);
        p.resize(p.len() + sizes.iter().sum::<usize>(), 0x55);
        p
    }

    fn headers() -> Vec<u8> {
        let mut ogg = page(0, &[19]);
        ogg.extend(page(0, &[16]));
        ogg
    }

    #[test]
    fn speech_then_a_pause_draws_high_then_low() {
        // One second of 20 ms packets: 80 bytes each (speech), then one second of 3-byte
        // packets (a pause), a page each.
        let mut ogg = headers();
        ogg.extend(page(48_000, &[80; 50]));
        ogg.extend(page(96_000, &[3; 50]));
        let w = waveform(&ogg);
        assert_eq!(w.len(), 20, "one point per 100 ms");
        assert!(w[..10].iter().all(|&p| p == 255), "{w:?}");
        assert!(w[10..].iter().all(|&p| p < 20), "{w:?}");
    }

    #[test]
    fn headers_are_not_audio_and_long_notes_keep_256_points() {
        // A header page's packet is large; it must not count.
        let mut ogg = page(0, &[600]);
        ogg.extend(page(48_000, &[10; 50]));
        assert!(waveform(&ogg).iter().all(|&p| p == 255));
        // Ten minutes, one page a second.
        let mut long = headers();
        for s in 1..=600u64 {
            long.extend(page(s * 48_000, &[40; 50]));
        }
        assert_eq!(waveform(&long).len(), MAX_POINTS);
    }

    #[test]
    fn a_packet_over_two_pages_counts_once_where_it_ends() {
        // 300 bytes: 255 on the first page (granule -1: no packet ends there), 45 on the
        // next, which ends it at 100 ms; then a 60-byte packet over the next 100 ms.
        let mut first = page(u64::MAX, &[]);
        first[26] = 1;
        first.push(255);
        first.resize(first.len() + 255, 0);
        let mut ogg = headers();
        ogg.extend(first);
        ogg.extend(page(4_800, &[45]));
        ogg.extend(page(9_600, &[60]));
        let w = waveform(&ogg);
        assert_eq!(w, vec![255, 51]);
    }

    #[test]
    fn bad_bytes_give_a_flat_waveform_and_no_panic() {
        assert_eq!(waveform(b""), vec![0]);
        assert_eq!(waveform(b"OggS\0\0\xff"), vec![0]);
        assert_eq!(waveform(&headers()), vec![0]);
        let mut cut = headers();
        cut.extend(page(48_000, &[50; 10]));
        cut.truncate(cut.len() - 200);
        let w = waveform(&cut);
        assert_eq!(w.len(), 10);
        // Time going back is not audio.
        let mut back = headers();
        back.extend(page(48_000, &[50]));
        back.extend(page(24_000, &[50]));
        assert_eq!(waveform(&back).len(), 10);
    }
}
