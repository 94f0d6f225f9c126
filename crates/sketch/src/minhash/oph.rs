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
pub(super) fn sign(hashes: &[u64], keys: &OphKeys, out: &mut [u32], bins: &mut Vec<u64>) {
    let n = out.len();
    debug_assert!(!hashes.is_empty() && n > 0);
    // u64 minima so that "no shingle here" (u64::MAX) differs from every 32-bit value.
    bins.clear();
    bins.resize(n, u64::MAX);
    let bins = bins.as_mut_slice();
    let mix = (keys.xor, keys.mul);
    if n.is_power_of_two() && n <= 1 << 32 {
        // ((x >> 32) * 2^k) >> 32 == (x >> 32) >> (32 - k): the same positions without the
        // second multiplication, which halves the multiplier pressure of the loop.
        let shift = 32 - n.trailing_zeros();
        oph_update(hashes, mix, bins, |z| ((z >> 32) >> shift) as usize);
    } else {
        oph_update(hashes, mix, bins, |z| oph_position(z, n));
    }
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
