//! An image's size as its header states it (issue 43, finding 5): width, height and, for
//! an animation, its frames; read from the bytes without decoding a pixel, so that an image
//! whose decoded size would be gigabytes (a 100000×100000 PNG is a few KB) is refused before
//! it is stored, sent to a model or served to a browser (`super::check`).
//!
//! - PNG: the `IHDR` chunk; an APNG's `acTL` chunk (before the first `IDAT`) has the frames.
//! - GIF: the logical screen, grown to hold every frame's descriptor; the frames are counted
//!   by walking the blocks (each image's data sub-blocks are skipped by their lengths).
//! - WebP: the `VP8X` canvas, and its `ANMF` chunks as frames; or a still `VP8`/`VP8L`.
//! - JPEG: the first start-of-frame marker (`SOF0`…`SOF15`) of the image itself; segments
//!   (an EXIF thumbnail among them) are skipped by their lengths.
//!
//! Why not a crate: `imagesize` reads the first frame's size only (no frame count, and a
//! GIF's screen but not its frames'), and the decoders (`png`, `gif`, `image-webp`) would
//! bring decoding into the gateway, which `super` keeps out. Each reader walks the bytes
//! once, bounded by their length (at most `TROUPE_MEDIA_MAX_BYTES`).

/// What a header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dimensions {
    pub width: u64,
    pub height: u64,
    /// 1 for a still image.
    pub frames: u64,
}

impl Dimensions {
    /// Pixels a decoder holds for every frame: width × height × frames.
    pub fn pixels(&self) -> u64 {
        self.width
            .saturating_mul(self.height)
            .saturating_mul(self.frames)
    }
}

/// A RIFF container of WebP: `RIFF`, its length, `WEBP`.
pub(super) fn is_webp(bytes: &[u8]) -> bool {
    bytes.len() >= 12 && bytes.starts_with(b"RIFF") && bytes[8..12] == *b"WEBP"
}

/// The size `bytes` state, for a PNG, GIF, WebP or JPEG; `None` when the header cannot be
/// read (cut short, or not one of them).
pub fn dimensions(bytes: &[u8]) -> Option<Dimensions> {
    let d = match bytes {
        [0x89, b'P', b'N', b'G', ..] => png(bytes),
        [b'G', b'I', b'F', ..] => gif(bytes),
        b if is_webp(b) => webp(bytes),
        [0xff, 0xd8, ..] => jpeg(bytes),
        _ => None,
    }?;
    (d.width > 0 && d.height > 0).then_some(d)
}

fn be32(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at + 4)?;
    Some(u64::from(u32::from_be_bytes([s[0], s[1], s[2], s[3]])))
}

fn be16(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at + 2)?;
    Some(u64::from(u16::from_be_bytes([s[0], s[1]])))
}

fn le16(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at + 2)?;
    Some(u64::from(u16::from_le_bytes([s[0], s[1]])))
}

fn le24(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at + 3)?;
    Some(u64::from(s[0]) | u64::from(s[1]) << 8 | u64::from(s[2]) << 16)
}

fn le32(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at + 4)?;
    Some(u64::from(u32::from_le_bytes([s[0], s[1], s[2], s[3]])))
}

/// `IHDR` first (the PNG rule), then chunks up to the first `IDAT` for an `acTL`.
fn png(b: &[u8]) -> Option<Dimensions> {
    if b.get(12..16)? != b"IHDR" {
        return None;
    }
    let (width, height) = (be32(b, 16)?, be32(b, 20)?);
    let mut frames = 1;
    let mut at = 8usize;
    // A file cut short (or padded) past `IHDR` still states its size.
    while let (Some(len), Some(kind)) = (be32(b, at), b.get(at + 4..at + 8)) {
        if kind == b"IDAT" || kind == b"IEND" {
            break;
        }
        if kind == b"acTL" {
            frames = be32(b, at + 8)?.max(1);
            break;
        }
        // length, type, data, CRC
        at = at
            .checked_add(12)?
            .checked_add(usize::try_from(len).ok()?)?;
    }
    Some(Dimensions {
        width,
        height,
        frames,
    })
}

/// The logical screen, every image descriptor (the frames), skipping data by its lengths.
fn gif(b: &[u8]) -> Option<Dimensions> {
    let mut d = Dimensions {
        width: le16(b, 6)?,
        height: le16(b, 8)?,
        frames: 0,
    };
    let mut at = 13 + color_table(*b.get(10)?);
    // A file cut short, or with bytes after its last block, still shows the frames before.
    while let Some(next) = gif_block(b, at, &mut d) {
        at = next;
    }
    d.frames = d.frames.max(1);
    Some(d)
}

/// Reads the block at `at` into `d` (an image descriptor grows the canvas to hold it and
/// counts a frame); where the next block starts, or `None` at the end or where it is cut.
fn gif_block(b: &[u8], at: usize, d: &mut Dimensions) -> Option<usize> {
    match *b.get(at)? {
        0x2c => {
            let (left, top) = (le16(b, at + 1)?, le16(b, at + 3)?);
            let (w, h) = (le16(b, at + 5)?, le16(b, at + 7)?);
            d.width = d.width.max(left + w);
            d.height = d.height.max(top + h);
            d.frames += 1;
            // Descriptor, local color table, LZW minimum code size, then the data.
            skip_sub_blocks(b, at + 10 + color_table(*b.get(at + 9)?) + 1)
        }
        // An extension: its label, then sub-blocks.
        0x21 => skip_sub_blocks(b, at + 2),
        _ => None,
    }
}

/// The bytes of a GIF color table a packed field announces.
fn color_table(packed: u8) -> usize {
    if packed & 0x80 == 0 {
        0
    } else {
        3 << ((packed & 0x07) + 1)
    }
}

/// Past a run of sub-blocks (a length byte, that many bytes… a zero); `None` when cut.
fn skip_sub_blocks(b: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = usize::from(*b.get(at)?);
        at += 1;
        if len == 0 {
            return Some(at);
        }
        at += len;
    }
}

/// The RIFF chunks: a `VP8X` canvas and its `ANMF` frames, or a still `VP8 `/`VP8L`.
fn webp(b: &[u8]) -> Option<Dimensions> {
    let mut at = 12usize;
    let mut canvas = None;
    let mut frames = 0u64;
    while let (Some(kind), Some(len)) = (b.get(at..at + 4), le32(b, at + 4)) {
        let data = at + 8;
        match kind {
            b"VP8X" => {
                canvas = Some((le24(b, data + 4)? + 1, le24(b, data + 7)? + 1));
            }
            b"ANMF" => frames += 1,
            b"VP8 " if canvas.is_none() => {
                // A key frame: 3 bytes of tag, the start code, then 14-bit sizes.
                if b.get(data + 3..data + 6)? != [0x9d, 0x01, 0x2a] {
                    return None;
                }
                let (w, h) = (le16(b, data + 6)? & 0x3fff, le16(b, data + 8)? & 0x3fff);
                return Some(Dimensions {
                    width: w,
                    height: h,
                    frames: 1,
                });
            }
            b"VP8L" if canvas.is_none() => {
                if *b.get(data)? != 0x2f {
                    return None;
                }
                let bits = le32(b, data + 1)?;
                return Some(Dimensions {
                    width: (bits & 0x3fff) + 1,
                    height: ((bits >> 14) & 0x3fff) + 1,
                    frames: 1,
                });
            }
            _ => {}
        }
        // Chunks are padded to an even length.
        let len = usize::try_from(len).ok()?;
        at = data.checked_add(len)?.checked_add(len & 1)?;
    }
    let (width, height) = canvas?;
    Some(Dimensions {
        width,
        height,
        frames: frames.max(1),
    })
}

/// The first start-of-frame marker's size; segments are skipped by their lengths, and the
/// scan stops at the start of the image data (`SOS`) or the end (`EOI`).
fn jpeg(b: &[u8]) -> Option<Dimensions> {
    let mut at = 2usize;
    loop {
        if *b.get(at)? != 0xff {
            return None;
        }
        // Fill bytes: any number of 0xff before a marker.
        while *b.get(at + 1)? == 0xff {
            at += 1;
        }
        let marker = *b.get(at + 1)?;
        match marker {
            // Markers without a length: TEM, RSTn, SOI.
            0x01 | 0xd0..=0xd8 => at += 2,
            0xc0..=0xcf if !matches!(marker, 0xc4 | 0xc8 | 0xcc) => {
                // Length, precision, then the height and the width.
                return Some(Dimensions {
                    height: be16(b, at + 5)?,
                    width: be16(b, at + 7)?,
                    frames: 1,
                });
            }
            0xd9 | 0xda => return None,
            _ => at += 2 + usize::try_from(be16(b, at + 2)?).ok()?,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PNG's signature and `IHDR` of `w`×`h`, then `chunks`.
    fn png_of(w: u32, h: u32, chunks: &[(&[u8; 4], Vec<u8>)]) -> Vec<u8> {
        let mut b = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
        let mut ihdr = Vec::new();
        ihdr.extend_from_slice(&w.to_be_bytes());
        ihdr.extend_from_slice(&h.to_be_bytes());
        ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
        for (kind, data) in std::iter::once((b"IHDR", ihdr)).chain(chunks.iter().cloned()) {
            b.extend_from_slice(&(data.len() as u32).to_be_bytes());
            b.extend_from_slice(kind);
            b.extend_from_slice(&data);
            b.extend_from_slice(&[0, 0, 0, 0]);
        }
        b
    }

    #[test]
    fn png_sizes_and_frames() {
        let still = png_of(640, 480, &[(b"IDAT", vec![0; 10])]);
        assert_eq!(
            dimensions(&still),
            Some(Dimensions {
                width: 640,
                height: 480,
                frames: 1
            })
        );
        let mut actl = 12u32.to_be_bytes().to_vec();
        actl.extend_from_slice(&0u32.to_be_bytes());
        let apng = png_of(10, 10, &[(b"acTL", actl), (b"IDAT", vec![0; 4])]);
        assert_eq!(dimensions(&apng).unwrap().frames, 12);
        let huge = png_of(100_000, 100_000, &[]);
        assert_eq!(dimensions(&huge).unwrap().pixels(), 10_000_000_000);
        assert_eq!(dimensions(&still[..20]), None, "cut inside IHDR");
        let mut padded = png_of(3, 2, &[]);
        padded.resize(4099, 0);
        assert_eq!(dimensions(&padded).map(|d| d.pixels()), Some(6));
    }

    fn gif_of(screen: (u16, u16), frames: &[(u16, u16)]) -> Vec<u8> {
        let mut b = b"GIF89a".to_vec();
        b.extend_from_slice(&screen.0.to_le_bytes());
        b.extend_from_slice(&screen.1.to_le_bytes());
        b.extend_from_slice(&[0x80, 0, 0]); // a global table of 2 colors
        b.extend_from_slice(&[0; 6]);
        // A graphic control extension, as animations carry.
        b.extend_from_slice(&[0x21, 0xf9, 4, 0, 10, 0, 0, 0]);
        for (w, h) in frames {
            b.push(0x2c);
            b.extend_from_slice(&[0, 0, 0, 0]);
            b.extend_from_slice(&w.to_le_bytes());
            b.extend_from_slice(&h.to_le_bytes());
            b.push(0);
            b.extend_from_slice(&[2, 3, 1, 2, 3, 0]); // code size, one sub-block, end
        }
        b.push(0x3b);
        b
    }

    #[test]
    fn gif_frames_are_counted_and_may_grow_the_screen() {
        let d = dimensions(&gif_of((100, 50), &[(100, 50), (100, 50), (100, 50)])).unwrap();
        assert_eq!((d.width, d.height, d.frames), (100, 50, 3));
        let d = dimensions(&gif_of((1, 1), &[(60_000, 60_000)])).unwrap();
        assert_eq!((d.width, d.height), (60_000, 60_000));
        let whole = gif_of((10, 10), &[(10, 10), (10, 10)]);
        let cut = dimensions(&whole[..whole.len() - 5]).unwrap();
        assert_eq!(cut.frames, 2, "the frames before the cut count");
    }

    #[test]
    fn webp_still_and_animated() {
        let chunk = |kind: &[u8; 4], data: &[u8]| {
            let mut c = kind.to_vec();
            c.extend_from_slice(&(data.len() as u32).to_le_bytes());
            c.extend_from_slice(data);
            if data.len() % 2 == 1 {
                c.push(0);
            }
            c
        };
        let riff = |chunks: Vec<u8>| {
            let mut b = b"RIFF".to_vec();
            b.extend_from_slice(&((chunks.len() + 4) as u32).to_le_bytes());
            b.extend_from_slice(b"WEBP");
            b.extend_from_slice(&chunks);
            b
        };
        let mut vp8 = vec![0, 0, 0, 0x9d, 0x01, 0x2a];
        vp8.extend_from_slice(&320u16.to_le_bytes());
        vp8.extend_from_slice(&200u16.to_le_bytes());
        let d = dimensions(&riff(chunk(b"VP8 ", &vp8))).unwrap();
        assert_eq!((d.width, d.height, d.frames), (320, 200, 1));
        let bits: u32 = 99 | (49 << 14);
        let mut vp8l = vec![0x2f];
        vp8l.extend_from_slice(&bits.to_le_bytes());
        let d = dimensions(&riff(chunk(b"VP8L", &vp8l))).unwrap();
        assert_eq!((d.width, d.height), (100, 50));
        let mut vp8x = vec![0x12, 0, 0, 0];
        vp8x.extend_from_slice(&[0xff, 0x3f, 0]); // 16384 wide
        vp8x.extend_from_slice(&[9, 0, 0]); // 10 high
        let mut chunks = chunk(b"VP8X", &vp8x);
        chunks.extend(chunk(b"ANIM", &[0; 6]));
        for _ in 0..5 {
            chunks.extend(chunk(b"ANMF", &[0; 17]));
        }
        let d = dimensions(&riff(chunks)).unwrap();
        assert_eq!((d.width, d.height, d.frames), (16384, 10, 5));
    }

    #[test]
    fn jpeg_reads_the_images_own_frame() {
        let mut b = vec![0xff, 0xd8];
        // An APP1 segment holding a thumbnail's SOF, skipped by its length.
        let thumb = [0xff, 0xc0, 0, 11, 8, 0, 9, 0, 9, 1, 1, 0x11, 0];
        b.extend_from_slice(&[0xff, 0xe1, 0, (thumb.len() + 2) as u8]);
        b.extend_from_slice(&thumb);
        b.extend_from_slice(&[
            0xff, 0xff, 0xc2, 0, 11, 8, 0x0b, 0xb8, 0x0f, 0xa0, 1, 1, 0x11, 0,
        ]);
        let d = dimensions(&b).unwrap();
        assert_eq!((d.width, d.height, d.frames), (4000, 3000, 1));
        assert_eq!(
            dimensions(&[0xff, 0xd8, 0xff, 0xe0, 0, 0x10]),
            None,
            "no SOF"
        );
        assert_eq!(
            dimensions(&[0xff, 0xd8, 0xff, 0xda, 0, 2]),
            None,
            "data before a SOF"
        );
    }

    #[test]
    fn other_bytes_have_no_size() {
        assert_eq!(dimensions(b"hello"), None);
        assert_eq!(dimensions(&png_of(0, 10, &[])), None, "a zero side");
    }
}
