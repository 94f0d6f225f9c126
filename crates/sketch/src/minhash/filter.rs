//! The repeat filter: a branch-free direct-mapped cache that drops most repeated shingle
//! hashes before the min kernels (module docs of [`super`], step 2). Dropping a repeat never
//! changes a signature; missing one costs only kernel time.

use std::mem::MaybeUninit;

use neardup_cpu::{Feature, Features};

/// The filter has 2^FILTER_BITS slots (64 KB): fewer let more repeats through to the kernel and
/// measured slower, more measured no faster (docs/benchmarks.md, "Measurements behind the code").
const FILTER_BITS: u32 = 13;
pub(super) const FILTER_SLOTS: usize = 1 << FILTER_BITS;

/// The bits of a hash that pick its slot, and of a stored entry that hold its text's tag.
const SLOT_BITS: u64 = FILTER_SLOTS as u64 - 1;

/// A hash's slot: its low bits, which are uniform for both schemes (xxh3 outputs, and the
/// datasketch scheme's 32-bit sha1 prefixes, whose high bits are all zero).
#[inline(always)]
fn filter_slot(h: u64) -> usize {
    (h & SLOT_BITS) as usize
}

/// The repeat filter's slots and the tag of the text going through it: a slot holds a hash's
/// high bits with the tag of the text that stored it in the low bits, which the slot's index
/// repeats anyway. A hash is a repeat exactly when its slot holds its high bits with this
/// text's tag, so an entry of an earlier text never matches, and nothing is cleared between
/// texts (clearing the slots each text had written showed in a run's profile): each
/// text takes the next tag, and only when the tags run out are all the slots cleared.
#[derive(Debug, Default)]
pub(super) struct RepeatFilter {
    /// Empty until first used; an empty slot holds 0, which no entry equals (tags are nonzero).
    slots: Vec<u64>,
    /// The current text's tag, `1..=SLOT_BITS` (0 before the first text).
    tag: u64,
}

impl RepeatFilter {
    /// The filter for a new text: empty of every earlier text's hashes.
    pub(super) fn begin_text(&mut self) -> TextFilter<'_> {
        if self.slots.len() != FILTER_SLOTS || self.tag == SLOT_BITS {
            self.slots.clear();
            self.slots.resize(FILTER_SLOTS, 0);
            self.tag = 0;
        }
        self.tag += 1;
        TextFilter {
            slots: self
                .slots
                .as_mut_slice()
                .try_into()
                .expect("filter has FILTER_SLOTS slots"),
            tag: self.tag,
        }
    }

    /// A filter whose next text takes the last tag, for the tests of running out of tags.
    #[cfg(test)]
    fn at_last_tag() -> RepeatFilter {
        let mut filter = RepeatFilter::default();
        filter.begin_text();
        filter.tag = SLOT_BITS - 1;
        filter
    }
}

/// The repeat filter during one text ([`RepeatFilter::begin_text`]), for all of its pieces.
pub(super) struct TextFilter<'a> {
    slots: &'a mut [u64; FILTER_SLOTS],
    tag: u64,
}

impl TextFilter<'_> {
    /// What `h`'s slot holds once `h` went through it during this text.
    #[inline(always)]
    fn entry(&self, h: u64) -> u64 {
        (h & !SLOT_BITS) | self.tag
    }

    /// Whether `h` went through the filter since its slot last changed during this text; the
    /// slot holds `h` after.
    #[inline(always)]
    fn seen(&mut self, h: u64) -> bool {
        let entry = self.entry(h);
        let slot = &mut self.slots[filter_slot(h)];
        let seen = *slot == entry;
        *slot = entry;
        seen
    }
}

/// Below this many shingles the kernel is cheap enough that filtering first does not pay.
pub(super) const DEDUP_MIN: usize = 32;

/// Writes `hashes` minus repeats of recently seen values to `unique`, in order.
///
/// MinHash is a set function (`min` is idempotent), and real text repeats about half of its
/// character 5-grams, so dropping repeats before the kernel saves kernel work — but only if
/// dropping is much cheaper than the kernel. An exact set costs probes and branches; this is a
/// direct-mapped cache of the last value per slot, without branches: a repeat whose slot was
/// overwritten in between is signed twice, which changes nothing. Earlier texts' hashes never
/// count as repeats ([`RepeatFilter`]).
pub(super) fn drop_recent_repeats(
    hashes: &[u64],
    unique: &mut Vec<u64>,
    filter: &mut RepeatFilter,
) {
    unique.clear();
    append_unless_recent(hashes, unique, &mut filter.begin_text());
}

/// [`drop_recent_repeats`] for a text passed a piece at a time: appends `hashes` minus recent
/// repeats to `unique`, the filter going on from the text's earlier pieces.
pub(super) fn append_unless_recent(
    hashes: &[u64],
    unique: &mut Vec<u64>,
    filter: &mut TextFilter<'_>,
) {
    append_unless_recent_on(Features::detected(), hashes, unique, filter)
}

/// [`append_unless_recent`] copying kept values out with the path `features` allow.
fn append_unless_recent_on(
    features: Features,
    hashes: &[u64],
    unique: &mut Vec<u64>,
    filter: &mut TextFilter<'_>,
) {
    let start = unique.len();
    // A local slice keeps the output pointer in a register (stores through a `&mut Vec` make
    // the compiler reload its header every iteration).
    // Three more slots: the vector copy writes four values wherever it stops.
    let dst = spare_slots(unique, hashes.len() + 3);
    let mut len = 0;
    // Two passes per 64 hashes. Probing and writing the output in one loop ([`filter_step`])
    // made each probe wait for the previous output store, whose address depends on the probe
    // before it: repeats hit recently written slots, so the CPU stops loading ahead of stores
    // with unknown addresses, and the loop ran at the latency of a probe. Here the probes only
    // set bits, and the kept hashes are copied out afterwards.
    #[cfg(target_arch = "x86_64")]
    let avx2 = features.has_all(&[Feature::Avx2, Feature::Popcnt]);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = features;
    for block in hashes.chunks(64) {
        let mut kept = 0u64;
        for (i, &h) in block.iter().enumerate() {
            kept |= u64::from(!filter.seen(h)) << i;
        }
        #[cfg(target_arch = "x86_64")]
        if avx2 && block.len() == 64 {
            // SAFETY: `Features` only holds features this CPU has (AVX2 and POPCNT here); `dst` has room for the whole block from
            // `len` on (`len` grew by at most what earlier blocks held), plus 3 slots.
            len += unsafe { copy_kept_avx2(block, kept, dst[len..].as_mut_ptr().cast()) };
            continue;
        }
        while kept != 0 {
            dst[len].write(block[kept.trailing_zeros() as usize]);
            len += 1;
            kept &= kept - 1;
        }
    }
    // SAFETY: every `dst[i]` with `i < len` was written above, right after the first `start`.
    unsafe { unique.set_len(start + len) };
}

/// Copies the values of a 64-value `block` whose bits are set in `kept` to `dst`, in order, four
/// at a time (a lane permutation per four, from a table of the sixteen ways to keep some of
/// them); returns how many. The scalar loop took a branch per kept value and mispredicted its
/// exit once per block.
///
/// # Safety
/// The CPU has AVX2 and POPCNT; `dst` is valid for writing `kept.count_ones() + 3` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
unsafe fn copy_kept_avx2(block: &[u64], kept: u64, dst: *mut u64) -> usize {
    use std::arch::x86_64::*;
    /// For each 4-bit mask, the 32-bit lanes that move its kept 64-bit lanes to the front.
    static ORDER: [[i32; 8]; 16] = neardup_cpu::kept_pairs_first_i32();
    assert_eq!(block.len(), 64, "a whole block");
    let mut len = 0usize;
    // SAFETY: each load reads `block[i..i + 4]` (i < 64, a multiple of 4) or a table row; each
    // store writes 4 values at `dst + len`, with `len` at most the kept values before `i`, so
    // within the `kept.count_ones() + 3` the caller provides.
    unsafe {
        for i in (0..64).step_by(4) {
            let mask = ((kept >> i) & 0xF) as usize;
            let values = _mm256_loadu_si256(block.as_ptr().add(i).cast());
            let order = _mm256_loadu_si256(ORDER[mask].as_ptr().cast());
            _mm256_storeu_si256(
                dst.add(len).cast(),
                _mm256_permutevar8x32_epi32(values, order),
            );
            len += mask.count_ones() as usize;
        }
    }
    len
}

/// Empties `v` and returns its first `n` (uninitialised) slots; the filter writes into them
/// without zeroing them first.
pub(super) fn output_slots(v: &mut Vec<u64>, n: usize) -> &mut [MaybeUninit<u64>] {
    v.clear();
    spare_slots(v, n)
}

/// The `n` (uninitialised) slots after `v`'s values.
fn spare_slots(v: &mut Vec<u64>, n: usize) -> &mut [MaybeUninit<u64>] {
    v.reserve(n);
    &mut v.spare_capacity_mut()[..n]
}

/// One shingle through the filter: `h` is written to `dst[*len]`, and kept (`*len` advanced)
/// unless its slot already holds it. No branch: repeats are as frequent as new values. Every
/// `dst[i]` with `i < *len` has been written.
#[inline(always)]
pub(super) fn filter_step(
    filter: &mut TextFilter<'_>,
    dst: &mut [MaybeUninit<u64>],
    len: &mut usize,
    h: u64,
) {
    dst[*len].write(h);
    *len += usize::from(!filter.seen(h));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::minhash::{HashScheme, MinHasher, splitmix64};

    #[test]
    fn every_copy_path_keeps_what_the_scalar_one_keeps() {
        let mut state = 9;
        let base: Vec<u64> = (0..300).map(|_| splitmix64(&mut state)).collect();
        let mut filter = RepeatFilter::default();
        // Repeats near and far, blocks of 64 whole and cut, appended after earlier values.
        for len in [0, 1, 63, 64, 65, 200, 1000] {
            let hashes: Vec<u64> = (0..len)
                .map(|i| base[(splitmix64(&mut state) % 300) as usize] ^ (i % 3 == 0) as u64)
                .collect();
            let mut expected = vec![7];
            append_unless_recent_on(
                Features::none(),
                &hashes,
                &mut expected,
                &mut filter.begin_text(),
            );
            for features in Features::detected().levels() {
                let mut got = vec![7];
                append_unless_recent_on(features, &hashes, &mut got, &mut filter.begin_text());
                assert_eq!(got, expected, "{features:?}, {len} hashes");
            }
        }
    }

    /// What [`drop_recent_repeats`] must give: a subsequence of `hashes` holding every distinct
    /// value at its first occurrence, and no more than `at_most` values.
    fn check_kept(hashes: &[u64], unique: &[u64], at_most: usize) {
        let mut rest = unique.iter();
        assert!(
            hashes
                .iter()
                .all(|h| rest.clone().next() != Some(h) || rest.next() == Some(h)),
            "a subsequence"
        );
        let distinct = |v: &[u64]| {
            let mut v = v.to_vec();
            v.sort_unstable();
            v.dedup();
            v
        };
        assert_eq!(distinct(hashes), distinct(unique));
        let first: Vec<u64> = hashes
            .iter()
            .enumerate()
            .filter(|&(i, h)| !hashes[..i].contains(h))
            .map(|(_, &h)| h)
            .take(50)
            .collect();
        assert_eq!(
            &unique[..first.len()],
            &first[..],
            "first occurrences come first"
        );
        assert!(unique.len() <= at_most, "{} kept", unique.len());
    }

    #[test]
    fn dropping_repeats_keeps_every_value_and_forgets_earlier_texts() {
        let mut state = 5;
        let base: Vec<u64> = (0..1000).map(|_| splitmix64(&mut state)).collect();
        let mut hashes: Vec<u64> = base.iter().chain(&base[..500]).copied().collect();
        // Values that look like empty slots or entries once tagged, and the extremes.
        hashes.extend([
            0,
            0,
            1,
            u64::MAX,
            base[7],
            SLOT_BITS,
            SLOT_BITS + 1,
            2,
            1 << 13,
        ]);
        hashes.extend([1 << 13 | 1, 0, 1, 4, u64::MAX - SLOT_BITS, u64::MAX]);
        let (mut unique, mut filter) = (Vec::new(), RepeatFilter::default());
        // The same text again and again: nothing from the previous call counts as a repeat.
        for _ in 0..3 {
            drop_recent_repeats(&hashes, &mut unique, &mut filter);
            // A repeat survives when one of the ~750 values in between took its slot (~17 %).
            check_kept(&hashes, &unique, 1000 + 150);
            // Signing the filtered values equals signing the multiset.
            let m = MinHasher::new(HashScheme::Fast, 64, 9).unwrap();
            let (mut a, mut b) = ([0u32; 64], [0u32; 64]);
            m.sign_hashes(&hashes, &mut a);
            m.sign_hashes(&unique, &mut b);
            assert_eq!(a, b);
        }
        // A text made of the last one's values keeps them all, once each.
        let again: Vec<u64> = base[..300].to_vec();
        drop_recent_repeats(&again, &mut unique, &mut filter);
        assert_eq!(unique, again);
    }

    #[test]
    fn running_out_of_tags_forgets_every_earlier_text() {
        let mut state = 3;
        let text: Vec<u64> = (0..2000).map(|_| splitmix64(&mut state)).collect();
        let mut filter = RepeatFilter::at_last_tag();
        let mut unique = Vec::new();
        // The text with the last tag, then the first text after the slots were cleared, then
        // one with the tag after that: each keeps every value.
        for round in 0..3 {
            drop_recent_repeats(&text, &mut unique, &mut filter);
            assert_eq!(unique, text, "round {round}");
        }
        assert_eq!(filter.tag, 2, "the tags started over");
        // Tags go on rising text after text, and run out again: a whole cycle later the tag
        // of the last whole text comes back, and nothing of that text is left in the slots
        // it wrote (the short texts in between overwrote only their own forty).
        for _ in 0..SLOT_BITS - 1 {
            drop_recent_repeats(&text[..40], &mut unique, &mut filter);
            assert_eq!(unique, text[..40]);
        }
        drop_recent_repeats(&text, &mut unique, &mut filter);
        assert_eq!(filter.tag, 2);
        assert_eq!(unique, text);
    }

    #[test]
    fn adjacent_repeats_are_always_dropped_and_32_bit_hashes_spread() {
        // datasketch hashes fit in 32 bits: slots must not come from the (zero) high bits.
        let mut state = 11;
        let small: Vec<u64> = (0..300).map(|_| splitmix64(&mut state) >> 32).collect();
        let doubled: Vec<u64> = small.iter().flat_map(|&h| [h, h]).collect();
        let (mut unique, mut filter) = (Vec::new(), RepeatFilter::default());
        drop_recent_repeats(&doubled, &mut unique, &mut filter);
        assert_eq!(unique, small);
        let twice: Vec<u64> = small.iter().chain(&small).copied().collect();
        drop_recent_repeats(&twice, &mut unique, &mut filter);
        assert!(unique.len() < 330, "{} of 600 kept", unique.len());
    }

    #[test]
    fn a_step_keeps_what_a_block_keeps() {
        let mut state = 21;
        let base: Vec<u64> = (0..100).map(|_| splitmix64(&mut state)).collect();
        let hashes: Vec<u64> = (0..500)
            .map(|_| base[(splitmix64(&mut state) % 100) as usize])
            .collect();
        let mut filter = RepeatFilter::default();
        let mut want = Vec::new();
        drop_recent_repeats(&hashes, &mut want, &mut filter);
        let mut got = Vec::new();
        let dst = output_slots(&mut got, hashes.len());
        let mut len = 0;
        let mut text = filter.begin_text();
        for &h in &hashes {
            filter_step(&mut text, dst, &mut len, h);
        }
        // SAFETY: `filter_step` wrote every slot below `len`.
        unsafe { got.set_len(len) };
        assert_eq!(got, want);
    }
}
