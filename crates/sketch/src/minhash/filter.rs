//! The repeat filter: a branch-free direct-mapped cache that drops most repeated shingle
//! hashes before the min kernels (module docs of [`super`], step 2). Dropping a repeat never
//! changes a signature; missing one costs only kernel time.

use std::mem::MaybeUninit;

use neardup_cpu::{Feature, Features};

/// The filter has 2^FILTER_BITS slots (64 KB). On the rustdocs corpus 8192 slots pass 50 % of
/// char 5-grams to the kernel (45 % are distinct per text); 4096 pass 53 % and measured ~6 %
/// slower overall, 2048 pass 58 %; 16384 and more (48 %) measured no faster.
const FILTER_BITS: u32 = 13;
pub(super) const FILTER_SLOTS: usize = 1 << FILTER_BITS;

/// A hash's slot: its low bits, which are uniform for both schemes (xxh3 outputs, and the
/// datasketch scheme's 32-bit sha1 prefixes, whose high bits are all zero).
#[inline(always)]
fn filter_slot(h: u64) -> usize {
    h as usize & (FILTER_SLOTS - 1)
}

/// The value of an empty slot: one that belongs to another slot, so it never equals a hash
/// stored in this one.
#[inline(always)]
fn filter_empty(slot: usize) -> u64 {
    (slot ^ 1) as u64
}

/// Below this many shingles the kernel is cheap enough that filtering first does not pay.
pub(super) const DEDUP_MIN: usize = 32;

/// Writes `hashes` minus repeats of recently seen values to `unique`, in order.
///
/// MinHash is a set function (`min` is idempotent), and real text repeats about half of its
/// character 5-grams, so dropping repeats before the kernel saves kernel work — but only if
/// dropping is much cheaper than the kernel. An exact set costs probes and branches; this is a
/// direct-mapped cache of the last value per slot, without branches: a repeat whose slot was
/// overwritten in between is signed twice, which changes nothing. `filter` is all empty
/// before and after the call.
pub(super) fn drop_recent_repeats(hashes: &[u64], unique: &mut Vec<u64>, filter: &mut Vec<u64>) {
    unique.clear();
    let filter = ready_filter(filter);
    append_unless_recent(hashes, unique, filter);
    reset_filter(filter, unique);
}

/// [`drop_recent_repeats`] for a text passed a piece at a time: appends `hashes` minus recent
/// repeats to `unique`, leaving the filter as it is for the next piece. Once the text's last
/// piece is in, [`reset_filter`] with all of `unique` empties the filter again.
pub(super) fn append_unless_recent(
    hashes: &[u64],
    unique: &mut Vec<u64>,
    filter: &mut [u64; FILTER_SLOTS],
) {
    append_unless_recent_on(Features::detected(), hashes, unique, filter)
}

/// [`append_unless_recent`] copying kept values out with the path `features` allow.
fn append_unless_recent_on(
    features: Features,
    hashes: &[u64],
    unique: &mut Vec<u64>,
    filter: &mut [u64; FILTER_SLOTS],
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
            let slot = &mut filter[filter_slot(h)];
            kept |= u64::from(*slot != h) << i;
            *slot = h;
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

/// The filter as an array, built on first use.
pub(super) fn ready_filter(filter: &mut Vec<u64>) -> &mut [u64; FILTER_SLOTS] {
    if filter.len() != FILTER_SLOTS {
        *filter = (0..FILTER_SLOTS).map(filter_empty).collect();
    }
    filter
        .as_mut_slice()
        .try_into()
        .expect("filter has FILTER_SLOTS slots")
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
    filter: &mut [u64; FILTER_SLOTS],
    dst: &mut [MaybeUninit<u64>],
    len: &mut usize,
    h: u64,
) {
    let slot = &mut filter[filter_slot(h)];
    dst[*len].write(h);
    *len += usize::from(*slot != h);
    *slot = h;
}

/// Empties the filter again after a text whose kept values are `kept`: only their slots were
/// written.
pub(super) fn reset_filter(filter: &mut [u64; FILTER_SLOTS], kept: &[u64]) {
    for &h in kept {
        let slot = filter_slot(h);
        filter[slot] = filter_empty(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::minhash::{HashScheme, MinHasher, splitmix64};

    #[test]
    fn every_copy_path_keeps_what_the_scalar_one_keeps() {
        let mut state = 9;
        let base: Vec<u64> = (0..300).map(|_| splitmix64(&mut state)).collect();
        // Repeats near and far, blocks of 64 whole and cut, appended after earlier values.
        for len in [0, 1, 63, 64, 65, 200, 1000] {
            let hashes: Vec<u64> = (0..len)
                .map(|i| base[(splitmix64(&mut state) % 300) as usize] ^ (i % 3 == 0) as u64)
                .collect();
            let mut expected = vec![7];
            let mut filter = Vec::new();
            let table = ready_filter(&mut filter);
            append_unless_recent_on(Features::none(), &hashes, &mut expected, table);
            reset_filter(table, &expected[1..]);
            for features in Features::detected().levels() {
                let mut got = vec![7];
                append_unless_recent_on(features, &hashes, &mut got, table);
                reset_filter(table, &got[1..]);
                assert_eq!(got, expected, "{features:?}, {len} hashes");
            }
        }
    }

    #[test]
    fn dropping_repeats_keeps_every_value_and_leaves_the_filter_empty() {
        let mut state = 5;
        let base: Vec<u64> = (0..1000).map(|_| splitmix64(&mut state)).collect();
        let mut hashes: Vec<u64> = base.iter().chain(&base[..500]).copied().collect();
        // Values that look like empty marks once mixed, and the extremes.
        hashes.extend([0, 0, 1, u64::MAX, base[7], filter_empty(5), filter_empty(4)]);
        hashes.extend([filter_empty(5), 0, 1, 4]);
        let (mut unique, mut filter) = (Vec::new(), Vec::new());
        for _ in 0..2 {
            drop_recent_repeats(&hashes, &mut unique, &mut filter);
            let fresh: Vec<u64> = (0..FILTER_SLOTS).map(filter_empty).collect();
            assert_eq!(filter, fresh, "the filter is reset after a call");
            // A subsequence that keeps every distinct value (its first occurrence included).
            let mut rest = unique.iter();
            assert!(
                hashes
                    .iter()
                    .all(|h| rest.clone().next() != Some(h) || rest.next() == Some(h))
            );
            let mut distinct_in = hashes.clone();
            distinct_in.sort_unstable();
            distinct_in.dedup();
            let mut distinct_out = unique.clone();
            distinct_out.sort_unstable();
            distinct_out.dedup();
            assert_eq!(distinct_in, distinct_out);
            // A repeat survives when one of the ~750 values in between took its slot (~17 %).
            assert!(
                unique.len() < 1000 + 150,
                "most repeats dropped: {}",
                unique.len()
            );
            // Signing the filtered values equals signing the multiset.
            let m = MinHasher::new(HashScheme::Fast, 64, 9).unwrap();
            let (mut a, mut b) = ([0u32; 64], [0u32; 64]);
            m.sign_hashes(&hashes, &mut a);
            m.sign_hashes(&unique, &mut b);
            assert_eq!(a, b);
        }
    }

    #[test]
    fn adjacent_repeats_are_always_dropped_and_32_bit_hashes_spread() {
        // datasketch hashes fit in 32 bits: slots must not come from the (zero) high bits.
        let mut state = 11;
        let small: Vec<u64> = (0..300).map(|_| splitmix64(&mut state) >> 32).collect();
        let doubled: Vec<u64> = small.iter().flat_map(|&h| [h, h]).collect();
        let (mut unique, mut filter) = (Vec::new(), Vec::new());
        drop_recent_repeats(&doubled, &mut unique, &mut filter);
        assert_eq!(unique, small);
        let twice: Vec<u64> = small.iter().chain(&small).copied().collect();
        drop_recent_repeats(&twice, &mut unique, &mut filter);
        assert!(unique.len() < 330, "{} of 600 kept", unique.len());
    }
}
