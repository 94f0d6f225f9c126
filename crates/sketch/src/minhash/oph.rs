//! The `oph` scheme (module docs of [`super`]): its keys, the per-shingle minima and optimal
//! densification of the positions no shingle reached.

use super::splitmix64;

/// Keys of the `oph` scheme (module docs).
#[derive(Clone, Debug)]
pub(super) struct OphKeys {
    xor: u64,
    mul: u64,
    pub(super) densify: u64,
    /// The first [`OPH_DRAWS`] densification draws of every position, `draws[i * OPH_DRAWS + a]`
    /// = `j_(a+1)` of position `i`; empty when `num_perm` is too wide to tabulate
    /// ([`OPH_TABULATED_MAX`]). The sequence never depends on the text, so signing looks draws
    /// up instead of computing a splitmix64 step per draw.
    draws: Box<[u16]>,
}

/// Densification draws tested at once (one bit mask): a short text's empty position finds a
/// reached one among the first eight unless fewer than about a quarter of the positions were
/// reached (each draw hits with probability reached / num_perm).
const OPH_DRAW_GROUP: usize = 8;

/// Densification draws tabulated per position: two groups cover texts down to a few shingles
/// before the computed sequence takes over.
const OPH_DRAWS: usize = 2 * OPH_DRAW_GROUP;

/// Widest signature whose draws are tabulated (positions fit `u16`; the table takes
/// `2 × OPH_DRAWS` bytes per position, 4 KB at 128).
pub(super) const OPH_TABULATED_MAX: usize = 1 << 16;

impl OphKeys {
    pub(super) fn new(num_perm: usize, seed: u64) -> OphKeys {
        let mut state = seed;
        let xor = splitmix64(&mut state);
        let mul = splitmix64(&mut state) | 1;
        let densify = splitmix64(&mut state);
        let draws = if num_perm <= OPH_TABULATED_MAX {
            (0..num_perm)
                .flat_map(|i| {
                    (1..=OPH_DRAWS as u64).map(move |a| oph_draw(densify, i, a, num_perm) as u16)
                })
                .collect()
        } else {
            Box::default()
        };
        OphKeys {
            xor,
            mul,
            densify,
            draws,
        }
    }
}

/// How [`update`] takes the per-shingle minima; every path gives the same minima.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OphPath {
    /// The plain loop (the reference and portable kernels, so that tests compare the others
    /// with it).
    Scalar,
    /// Mixing four hashes per AVX2 vector ([`oph_update_avx2`]); once a text's minima have
    /// settled, a lane stores its value only when it is lower.
    Avx2,
    /// Once a text's minima have settled, sixteen hashes per AVX-512 vector tested against
    /// them, and only the few that lower one taken ([`oph_update_avx512`]); before that, and
    /// for signatures wider than [`SETTLED_MAX_WIDTH`], the AVX2 path.
    Avx512,
}

/// Signs non-empty `hashes` with the `oph` scheme (module docs). `bins` is scratch space.
pub(super) fn sign(
    hashes: &[u64],
    keys: &OphKeys,
    out: &mut [u32],
    bins: &mut Vec<u64>,
    path: OphPath,
) {
    debug_assert!(!hashes.is_empty() && !out.is_empty());
    begin(bins, out.len());
    update(hashes, keys, bins, path, 0);
    finish(bins, keys, out);
}

/// Empties the per-position minima for a signature of `num_perm` positions: then any number of
/// [`update`]s (the minima are the same however the shingles are split), then [`finish`].
pub(super) fn begin(bins: &mut Vec<u64>, num_perm: usize) {
    // u64 minima so that "no shingle here" (u64::MAX) differs from every 32-bit value.
    bins.clear();
    bins.resize(num_perm, u64::MAX);
}

/// Shingles per position a text takes on the AVX2 path before [`OphPath::Avx512`] tests
/// sixteen at a time. After `k` shingles per position a new one lowers its position's minimum
/// with probability about `1/k`, so a vector of sixteen needs an update about `16/k` of the
/// time (each a mispredicted branch and a few register updates). The value is measured
/// (docs/benchmarks.md, "Measurements behind the code").
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const SETTLED_PER_POSITION: usize = 128;

/// Shingles per position a text takes on the AVX2 path before each lane stores its value only
/// when it is lower than its position's minimum (a branch, rarely taken by then) instead of
/// always storing the lower of the two: the stores made each load of a minimum wait for the
/// store to that position a few shingles earlier (the profiles, and the other counts tried:
/// docs/benchmarks.md, "Measurements behind the code").
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const SETTLED_PER_POSITION_AVX2: usize = 64;

/// Widest signature [`OphPath::Avx512`] tests in vectors: its minima (as 32-bit values) fit
/// eight registers, looked up by four two-register permutations.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) const SETTLED_MAX_WIDTH: usize = 128;

/// Takes `hashes` into the minima `bins` (see [`begin`]); `taken` is how many shingles went
/// into `bins` since [`begin`] (the text's earlier pieces).
pub(super) fn update(
    hashes: &[u64],
    keys: &OphKeys,
    bins: &mut [u64],
    path: OphPath,
    taken: usize,
) {
    let n = bins.len();
    let mix = (keys.xor, keys.mul);
    #[cfg(target_arch = "x86_64")]
    if path != OphPath::Scalar && n <= 1 << 32 && avx2_supported() {
        let mut settled = 0;
        if path == OphPath::Avx512 && n <= SETTLED_MAX_WIDTH && avx512_supported() {
            let warm_up = (SETTLED_PER_POSITION * n).saturating_sub(taken);
            settled = hashes.len().saturating_sub(warm_up);
        }
        if settled > 0 {
            let (warming, rest) = hashes.split_at(hashes.len() - settled);
            // SAFETY: AVX2 was just checked.
            unsafe { oph_update_avx2::<false>(warming, mix, bins) };
            // SAFETY: AVX-512 F and DQ were checked with `settled`.
            unsafe { oph_update_avx512(rest, mix, bins) };
            return;
        }
        let warm_up = (SETTLED_PER_POSITION_AVX2 * n).saturating_sub(taken);
        let (warming, rest) = hashes.split_at(warm_up.min(hashes.len()));
        // SAFETY: AVX2 was just checked.
        unsafe { oph_update_avx2::<false>(warming, mix, bins) };
        if !rest.is_empty() {
            // SAFETY: as above.
            unsafe { oph_update_avx2::<true>(rest, mix, bins) };
        }
        return;
    }
    let _ = (path, taken);
    if n.is_power_of_two() && n <= 1 << 32 {
        // ((x >> 32) * 2^k) >> 32 == (x >> 32) >> (32 - k): the same positions without the
        // second multiplication, which halves the multiplier pressure of the loop.
        let shift = 32 - n.trailing_zeros();
        oph_update(hashes, mix, bins, |z| ((z >> 32) >> shift) as usize);
    } else {
        oph_update(hashes, mix, bins, |z| oph_position(z, n));
    }
}

/// Writes the signature of the shingles taken into `bins` since [`begin`] (at least one).
pub(super) fn finish(bins: &[u64], keys: &OphKeys, out: &mut [u32]) {
    oph_densify(bins, keys, out);
}

/// Writes the signature from the per-position minima `bins`, filling the positions no shingle
/// reached (`u64::MAX`) from their donors ([`oph_donor`] gives the same donors, draw by draw).
///
/// Short texts leave many positions empty, and looking each donor up draw by draw (a branch
/// whose outcome is a coin flip, after a splitmix64 step) cost more than all of their shingles'
/// updates. Here the empty positions are first listed without a branch, and each one tests its
/// tabulated draws a group at a time (one load per draw makes a bit mask, whose lowest set bit is
/// the first draw that hits); only when every tabulated draw misses does it go on draw by draw.
fn oph_densify(bins: &[u64], keys: &OphKeys, out: &mut [u32]) {
    let n = bins.len();
    if keys.draws.is_empty() {
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = match bins[i] {
                u64::MAX => bins[oph_donor(bins, i, keys.densify)] as u32,
                v => v as u32,
            };
        }
        return;
    }
    assert_eq!(
        keys.draws.len(),
        n * OPH_DRAWS,
        "draws tabulated for another width"
    );
    // Positions are below 2^16 here, so the empty ones list into a small stack buffer per pass.
    let mut empty = [0u16; 256];
    for start in (0..n).step_by(empty.len()) {
        let end = (start + empty.len()).min(n);
        let mut found = 0;
        for i in start..end {
            out[i] = bins[i] as u32;
            empty[found] = i as u16;
            found += usize::from(bins[i] == u64::MAX);
        }
        for &i in &empty[..found] {
            let i = usize::from(i);
            let draws = &keys.draws[i * OPH_DRAWS..(i + 1) * OPH_DRAWS];
            let donor = draws
                .chunks_exact(OPH_DRAW_GROUP)
                .find_map(|group| first_reached(bins, group))
                .unwrap_or_else(|| oph_donor_from(bins, i, keys.densify, OPH_DRAWS as u64 + 1));
            out[i] = bins[donor] as u32;
        }
    }
}

/// The first of a group of draws that a shingle reached, from one bit mask (no branch per draw).
#[inline(always)]
fn first_reached(bins: &[u64], draws: &[u16]) -> Option<usize> {
    let draws: &[u16; OPH_DRAW_GROUP] = draws.try_into().expect("one group of draws");
    let mut mask = 0u32;
    for (a, &j) in draws.iter().enumerate() {
        // SAFETY: tabulated draws are positions below num_perm == bins.len() (checked by oph_densify).
        mask |= u32::from(unsafe { *bins.get_unchecked(usize::from(j)) } != u64::MAX) << a;
    }
    (mask != 0).then(|| usize::from(draws[mask.trailing_zeros() as usize]))
}

/// The per-shingle minima of the `oph` scheme, with `position` computing
/// [`oph_position`] (or an equal shortcut).
#[inline(always)]
fn oph_update(
    hashes: &[u64],
    (xor, mul): (u64, u64),
    bins: &mut [u64],
    position: impl Fn(u64) -> usize,
) {
    for &h in hashes {
        let mut z = (h ^ xor).wrapping_mul(mul);
        z ^= z >> 32;
        let pos = position(z);
        // Branch-free: whether a value is a new minimum is a coin flip early in a text. (The
        // bounds check stays, but it is never taken, so it costs no misprediction.)
        bins[pos] = bins[pos].min(z & 0xFFFF_FFFF);
    }
}

/// Whether [`oph_update_avx2`] can run on this CPU.
#[cfg(target_arch = "x86_64")]
fn avx2_supported() -> bool {
    use neardup_cpu::{Feature, Features};
    Features::detected().has(Feature::Avx2)
}

/// Whether [`oph_update_avx512`] can run on this CPU.
#[cfg(target_arch = "x86_64")]
fn avx512_supported() -> bool {
    use neardup_cpu::{Feature, Features};
    Features::detected().has_all(&[Feature::Avx512F, Feature::Avx512Dq])
}

/// [`oph_update`] with the mixing done four hashes per AVX2 vector: the scalar loop spends its
/// time in two 64-bit multiplications per shingle (the mix and the position), which the
/// vector does with 32-bit ones; the minima stay scalar (four lanes may hit one position).
/// `SETTLED`: store a value only where it is lower ([`SETTLED_PER_POSITION_AVX2`]). Needs
/// `bins.len() <= 2^32`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn oph_update_avx2<const SETTLED: bool>(hashes: &[u64], (xor, mul): (u64, u64), bins: &mut [u64]) {
    use std::arch::x86_64::*;
    let n = bins.len();
    let blocks = hashes.chunks_exact(4);
    let rest = blocks.remainder();
    // SAFETY: AVX2 is enabled on this function; each load reads one 4-hash block, each store
    // writes a local 4-lane array.
    unsafe {
        let key = _mm256_set1_epi64x(xor as i64);
        let mul_lo = _mm256_set1_epi64x(mul as i64);
        let mul_hi = _mm256_set1_epi64x((mul >> 32) as i64);
        let width = _mm256_set1_epi64x(n as i64);
        let low = _mm256_set1_epi64x(0xFFFF_FFFF);
        let (mut positions, mut values) = ([0u64; 4], [0u64; 4]);
        for block in blocks {
            let h = _mm256_xor_si256(_mm256_loadu_si256(block.as_ptr().cast()), key);
            // z = h * mul mod 2^64, from 32-bit products (the high halves' product shifts out).
            let cross = _mm256_add_epi64(
                _mm256_mul_epu32(_mm256_srli_epi64::<32>(h), mul_lo),
                _mm256_mul_epu32(h, mul_hi),
            );
            let mut z =
                _mm256_add_epi64(_mm256_mul_epu32(h, mul_lo), _mm256_slli_epi64::<32>(cross));
            z = _mm256_xor_si256(z, _mm256_srli_epi64::<32>(z));
            // ((z >> 32) * n) >> 32, the high half times n fitting 64 bits.
            let pos = _mm256_srli_epi64::<32>(_mm256_mul_epu32(_mm256_srli_epi64::<32>(z), width));
            _mm256_storeu_si256(positions.as_mut_ptr().cast(), pos);
            _mm256_storeu_si256(values.as_mut_ptr().cast(), _mm256_and_si256(z, low));
            for (&p, &v) in positions.iter().zip(&values) {
                let p = p as usize;
                if SETTLED {
                    if v < bins[p] {
                        bins[p] = v;
                    }
                } else {
                    bins[p] = bins[p].min(v);
                }
            }
        }
    }
    oph_update(rest, (xor, mul), bins, |z| oph_position(z, n));
}

/// [`oph_update`] for a text whose minima have mostly settled (`bins.len()` at most
/// [`SETTLED_MAX_WIDTH`]): the minima live in eight registers as 32-bit values while sixteen
/// shingles at a time are mixed and compared with the minima of their positions; a vector in
/// which none is lower moves on at once, and each lane that is lower takes its position's
/// minimum in the registers (one lane after the other: lanes may share a position). The
/// registers go back to `bins` at the end, so the minima are those of [`oph_update`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
fn oph_update_avx512(hashes: &[u64], (xor, mul): (u64, u64), bins: &mut [u64]) {
    use std::arch::x86_64::*;
    let n = bins.len();
    assert!(n <= SETTLED_MAX_WIDTH, "minima wider than the registers");
    // The minima as 32-bit values. An empty position (u64::MAX) reads u32::MAX, which every
    // value is at most, so `value <= minimum` finds every update (and equal values, which
    // change nothing); `reached` tells which positions a lane wrote, so that an empty one that
    // took the value u32::MAX is told from one no shingle reached. Positions past `n` are never
    // looked up.
    let mut minima = [u32::MAX; SETTLED_MAX_WIDTH];
    for (m, &b) in minima.iter_mut().zip(bins.iter()) {
        *m = b as u32;
    }
    let mut reached = 0u128;
    let blocks = hashes.chunks_exact(16);
    let rest = blocks.remainder();
    // SAFETY: AVX-512 F and DQ are enabled on this function; the loads read 16-value stretches
    // of `minima`, `LANE_POSITIONS` and 8-hash halves of a 16-hash block, the stores write
    // 16-lane arrays.
    unsafe {
        let mut table: [__m512i; 8] =
            std::array::from_fn(|r| _mm512_loadu_si512(minima[16 * r..].as_ptr().cast()));
        let lane_positions: [__m512i; 8] =
            std::array::from_fn(|r| _mm512_loadu_si512(LANE_POSITIONS[16 * r..].as_ptr().cast()));
        let key = _mm512_set1_epi64(xor as i64);
        let factor = _mm512_set1_epi64(mul as i64);
        let width = _mm512_set1_epi64(n as i64);
        let (bit5, bit6) = (_mm512_set1_epi32(32), _mm512_set1_epi32(64));
        let (mut positions, mut values) = ([0u32; 16], [0u32; 16]);
        for block in blocks {
            // Positions and values of 8 hashes, as 8 32-bit lanes each.
            let mix = |half: &[u64]| {
                let h = _mm512_xor_si512(_mm512_loadu_si512(half.as_ptr().cast()), key);
                let mut z = _mm512_mullo_epi64(h, factor);
                z = _mm512_xor_si512(z, _mm512_srli_epi64::<32>(z));
                let pos =
                    _mm512_srli_epi64::<32>(_mm512_mul_epu32(_mm512_srli_epi64::<32>(z), width));
                (_mm512_cvtepi64_epi32(pos), _mm512_cvtepi64_epi32(z))
            };
            let (pos_lo, value_lo) = mix(&block[..8]);
            let (pos_hi, value_hi) = mix(&block[8..]);
            let pos = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(pos_lo), pos_hi);
            let value = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(value_lo), value_hi);
            // The minimum of each lane's position: four 32-entry lookups chosen by bits 5 and 6.
            let quarter = |a: __m512i, b: __m512i| _mm512_permutex2var_epi32(a, pos, b);
            let in_upper_32 = _mm512_test_epi32_mask(pos, bit5);
            let low = _mm512_mask_blend_epi32(
                in_upper_32,
                quarter(table[0], table[1]),
                quarter(table[2], table[3]),
            );
            let high = _mm512_mask_blend_epi32(
                in_upper_32,
                quarter(table[4], table[5]),
                quarter(table[6], table[7]),
            );
            let current = _mm512_mask_blend_epi32(_mm512_test_epi32_mask(pos, bit6), low, high);
            let lower = _mm512_cmple_epu32_mask(value, current);
            if lower == 0 {
                continue;
            }
            // The lower lanes to the front, then each into the register holding its position.
            _mm512_storeu_si512(
                positions.as_mut_ptr().cast(),
                _mm512_maskz_compress_epi32(lower, pos),
            );
            _mm512_storeu_si512(
                values.as_mut_ptr().cast(),
                _mm512_maskz_compress_epi32(lower, value),
            );
            for k in 0..lower.count_ones() as usize {
                reached |= 1 << positions[k];
                let (p, v) = (
                    _mm512_set1_epi32(positions[k] as i32),
                    _mm512_set1_epi32(values[k] as i32),
                );
                for (minima, lanes) in table.iter_mut().zip(&lane_positions) {
                    let here = _mm512_cmpeq_epi32_mask(*lanes, p);
                    *minima = _mm512_mask_min_epu32(*minima, here, *minima, v);
                }
            }
        }
        for (r, minima_r) in table.iter().enumerate() {
            _mm512_storeu_si512(minima[16 * r..].as_mut_ptr().cast(), *minima_r);
        }
    }
    for (p, bin) in bins.iter_mut().enumerate() {
        if reached >> p & 1 == 1 {
            *bin = (*bin).min(u64::from(minima[p]));
        }
    }
    oph_update(rest, (xor, mul), bins, |z| oph_position(z, n));
}

/// Each lane's position in the registers of [`oph_update_avx512`]: 0, 1, …, 127.
#[cfg(target_arch = "x86_64")]
static LANE_POSITIONS: [u32; SETTLED_MAX_WIDTH] = {
    let mut lanes = [0u32; SETTLED_MAX_WIDTH];
    let mut i = 0;
    while i < SETTLED_MAX_WIDTH {
        lanes[i] = i as u32;
        i += 1;
    }
    lanes
};

/// `((x >> 32) * n) >> 32`: a position below `n` from the high half of `x`.
#[inline(always)]
fn oph_position(x: u64, n: usize) -> usize {
    (((x >> 32) * n as u64) >> 32) as usize
}

/// The position an empty position `i` copies from (optimal densification, module docs).
fn oph_donor(bins: &[u64], i: usize, key: u64) -> usize {
    oph_donor_from(bins, i, key, 1)
}

/// Draw `a` of empty position `i`'s densification sequence (module docs).
#[inline(always)]
fn oph_draw(key: u64, i: usize, a: u64, n: usize) -> usize {
    let mut state = key ^ ((i as u64) << 32 | a);
    oph_position(splitmix64(&mut state), n)
}

/// [`oph_donor`] when draws before `first_attempt` are known to have missed.
fn oph_donor_from(bins: &[u64], i: usize, key: u64, first_attempt: u64) -> usize {
    let n = bins.len();
    for attempt in first_attempt..=(64 * n as u64) {
        let j = oph_draw(key, i, attempt, n);
        if bins[j] != u64::MAX {
            return j;
        }
    }
    (0..n)
        .map(|d| (i + d) % n)
        .find(|&j| bins[j] != u64::MAX)
        .expect("a non-empty text reaches at least one position")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path takes the same minima as the scalar loop, whatever the width, the length, the
    /// split into pieces and the shingles taken before (so also across the switch from the
    /// AVX2 path to the settled one, and with values equal to a minimum).
    #[test]
    fn every_path_takes_the_scalar_minima() {
        let mut state = 5;
        let paths = [OphPath::Scalar, OphPath::Avx2, OphPath::Avx512];
        for n in [1, 2, 7, 31, 32, 33, 64, 100, 127, 128, 129, 256] {
            let keys = OphKeys::new(n, 3 + n as u64);
            let settled = SETTLED_PER_POSITION * n;
            let settled_avx2 = SETTLED_PER_POSITION_AVX2 * n;
            for len in [
                0,
                1,
                15,
                16,
                17,
                100,
                settled_avx2 - 1,
                settled_avx2 + 5,
                settled - 1,
                settled + 17,
                settled + 40 * n + 13,
            ] {
                // Few distinct values, so that later hashes repeat earlier minima exactly.
                let distinct: Vec<u64> = (0..len / 3 + 1).map(|_| splitmix64(&mut state)).collect();
                let hashes: Vec<u64> = (0..len)
                    .map(|_| distinct[(splitmix64(&mut state) % distinct.len() as u64) as usize])
                    .collect();
                let mut expected = Vec::new();
                begin(&mut expected, n);
                update(&hashes, &keys, &mut expected, OphPath::Scalar, 0);
                for path in paths {
                    for pieces in [1, 2, 5] {
                        let mut bins = Vec::new();
                        begin(&mut bins, n);
                        let mut taken = 0;
                        for piece in hashes.chunks(len.div_ceil(pieces).max(1)) {
                            update(piece, &keys, &mut bins, path, taken);
                            taken += piece.len();
                        }
                        assert_eq!(
                            bins, expected,
                            "{path:?}, n {n}, len {len}, {pieces} pieces"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn tabulated_densification_equals_drawing_one_by_one() {
        // Every width class (tiny, ragged, power of two, past one pass of the empty list, past
        // the tabulated limit) and every fill from one reached position to all of them.
        let mut state = 11;
        for n in [
            1,
            2,
            3,
            7,
            64,
            100,
            128,
            256,
            300,
            1000,
            OPH_TABULATED_MAX + 3,
        ] {
            let keys = OphKeys::new(n, 1 + n as u64);
            assert_eq!(keys.draws.is_empty(), n > OPH_TABULATED_MAX);
            let fills: Vec<usize> = [1, 2, 3, n / 16, n / 4, n / 2, n - 1, n]
                .into_iter()
                .filter(|&f| (1..=n).contains(&f))
                // A sparse fill of the widest table costs the one-by-one oracle ~n^2 draws.
                .filter(|&f| n <= 1000 || f >= n / 2)
                .collect();
            for fill in fills {
                let rounds = if n > 1000 { 1 } else { 20 };
                for _ in 0..rounds {
                    let mut bins = vec![u64::MAX; n];
                    for _ in 0..fill {
                        let j = (splitmix64(&mut state) % n as u64) as usize;
                        bins[j] = splitmix64(&mut state) & 0xFFFF_FFFF;
                    }
                    let expected: Vec<u32> = (0..n)
                        .map(|i| match bins[i] {
                            u64::MAX => bins[oph_donor(&bins, i, keys.densify)] as u32,
                            v => v as u32,
                        })
                        .collect();
                    let mut out = vec![0u32; n];
                    oph_densify(&bins, &keys, &mut out);
                    assert_eq!(out, expected, "n {n}, fill {fill}");
                }
            }
        }
    }
}
