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

/// Signs non-empty `hashes` with the `oph` scheme (module docs). `bins` is scratch space.
/// `vector` mixes four hashes per AVX2 vector ([`oph_update_avx2`]); the values are the same.
pub(super) fn sign(
    hashes: &[u64],
    keys: &OphKeys,
    out: &mut [u32],
    bins: &mut Vec<u64>,
    vector: bool,
) {
    debug_assert!(!hashes.is_empty() && !out.is_empty());
    begin(bins, out.len());
    update(hashes, keys, bins, vector);
    finish(bins, keys, out);
}

/// Empties the per-position minima for a signature of `num_perm` positions: then any number of
/// [`update`]s (the minima are the same however the shingles are split), then [`finish`].
pub(super) fn begin(bins: &mut Vec<u64>, num_perm: usize) {
    // u64 minima so that "no shingle here" (u64::MAX) differs from every 32-bit value.
    bins.clear();
    bins.resize(num_perm, u64::MAX);
}

/// Takes `hashes` into the minima `bins` (see [`begin`]).
pub(super) fn update(hashes: &[u64], keys: &OphKeys, bins: &mut [u64], vector: bool) {
    let n = bins.len();
    let mix = (keys.xor, keys.mul);
    #[cfg(target_arch = "x86_64")]
    if vector && n <= 1 << 32 && avx2_supported() {
        // SAFETY: AVX2 was just checked.
        unsafe { oph_update_avx2(hashes, mix, bins) };
        return;
    }
    let _ = vector;
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

/// [`oph_update`] with the mixing done four hashes per AVX2 vector: the scalar loop spends its
/// time in two 64-bit multiplications per shingle (the mix and the position), which the
/// vector does with 32-bit ones; the minima stay scalar (four lanes may hit one position).
/// Needs `bins.len() <= 2^32`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn oph_update_avx2(hashes: &[u64], (xor, mul): (u64, u64), bins: &mut [u64]) {
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
                bins[p] = bins[p].min(v);
            }
        }
    }
    oph_update(rest, (xor, mul), bins, |z| oph_position(z, n));
}

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
