//! Per-word memories: what the chunker (token counts) and the keyword analyzer (stems)
//! remember about words they have seen, so that the costly work (BPE, Snowball) runs once
//! per distinct word, not once per occurrence.
//!
//! Two layers, because ingest speed (issue 14) was bound by cache misses, not by the work
//! remembered: a lookup in a table of 100k words touches memory that the other core's
//! indexing keeps evicting.
//! - [`packed`]: a word of at most 15 bytes (nearly all) is its own key, its bytes and
//!   length in one `u128`, hashed and compared without following a pointer;
//! - [`Hot`]: a small direct-mapped table (16,384 slots, 512 KiB) in front
//!   of the full one. Text follows Zipf's law, so most occurrences are of a few thousand
//!   words, and those stay in the core's own cache.

/// `bytes` with their length in one `u128`, when they are at most 15. A non-empty word
/// never packs to 0 (its length byte is not zero); the empty word does, and [`Hot`] reads
/// 0 as "no entry".
pub(super) fn packed(bytes: &[u8]) -> Option<u128> {
    if bytes.len() > 15 {
        return None;
    }
    let mut key = [0u8; 16];
    key[..bytes.len()].copy_from_slice(bytes);
    key[15] = bytes.len() as u8;
    Some(u128::from_le_bytes(key))
}

/// Slots of a [`Hot`] table by default, a power of two.
pub(super) const HOT_SLOTS: usize = 16_384;

/// A direct-mapped memory of packed keys: each key has one slot, and a new key takes it
/// over. Lookups are one multiply and one compare; there is nothing to bound, since it
/// never grows.
/// `SLOTS` (a power of two) sets its size.
pub(super) struct Hot<V: Copy, const SLOTS: usize = HOT_SLOTS> {
    slots: Box<[(u128, V)]>,
}

impl<V: Copy + Default, const SLOTS: usize> Default for Hot<V, SLOTS> {
    fn default() -> Self {
        const { assert!(SLOTS.is_power_of_two()) };
        Hot {
            slots: vec![(0, V::default()); SLOTS].into_boxed_slice(),
        }
    }
}

impl<V: Copy, const SLOTS: usize> Hot<V, SLOTS> {
    #[inline]
    fn slot(key: u128) -> usize {
        // Fibonacci hashing of both halves: the top bits of the product spread every byte.
        let folded = (key as u64) ^ ((key >> 64) as u64).rotate_left(29);
        (folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros())) as usize
    }

    /// The value remembered for `key` (a non-zero packed word), if its slot holds it.
    #[inline]
    pub(super) fn get(&self, key: u128) -> Option<V> {
        let (k, v) = self.slots[Self::slot(key)];
        (k == key).then_some(v)
    }

    #[inline]
    pub(super) fn put(&mut self, key: u128, value: V) {
        self.slots[Self::slot(key)] = (key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_words_are_distinct_and_never_zero() {
        let a = packed(b"a").unwrap();
        let a0 = packed(b"a\0").unwrap();
        assert_ne!(a, a0);
        assert_ne!(a, 0);
        assert_eq!(packed(b""), Some(0));
        assert!(packed(b"sixteen bytes!!!").is_none());
    }

    #[test]
    fn the_hot_table_gives_back_only_what_its_slot_holds() {
        let mut hot: Hot<u32> = Hot::default();
        let words: Vec<u128> = (0..20_000)
            .map(|i| packed(format!("w{i}").as_bytes()).unwrap())
            .collect();
        for (i, &w) in words.iter().enumerate() {
            hot.put(w, i as u32);
        }
        let mut kept = 0;
        for (i, &w) in words.iter().enumerate() {
            if let Some(v) = hot.get(w) {
                assert_eq!(v, i as u32, "a slot answered for another word");
                kept += 1;
            }
        }
        // Direct-mapped: at most one word per slot, and a spread hash fills most slots.
        assert!(kept <= HOT_SLOTS);
        assert!(kept > HOT_SLOTS / 2, "only {kept} slots used");
        assert_eq!(hot.get(packed(b"never seen").unwrap()), None);
    }
}
