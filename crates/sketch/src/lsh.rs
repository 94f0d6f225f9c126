//! LSH banding: parameters, their error areas, and one key per band.
//!
//! A signature of `bands * rows` positions is cut into `bands` runs of `rows`; two texts become
//! candidates when any band matches entirely, which happens with probability
//! `1 - (1 - s^rows)^bands` at Jaccard `s`. Each band is reduced to one u64 key so that tables
//! hold `bands` u64 per text.

use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use crate::SketchError;

/// Band count and rows per band.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LshParams {
    /// Number of bands (keys per text).
    pub bands: usize,
    /// Signature positions per band.
    pub rows: usize,
}

/// Band indices must fit the 2-byte blake2b personalisation of lshcurator keys.
const MAX_BANDS: usize = 1 << 16;

/// How far above the best error a bound must be before [`LshParams::optimal`] skips a candidate:
/// far above the areas' integration error (~1e-15), far below any real gap between candidates.
const PRUNE_MARGIN: f64 = 1e-9;

impl LshParams {
    /// Both must be >= 1, and `bands <= 65536`.
    pub fn new(bands: usize, rows: usize) -> Result<LshParams, SketchError> {
        if bands == 0 || rows == 0 {
            return Err(SketchError::InvalidLsh(format!(
                "bands and rows must be >= 1 (got {bands} x {rows})"
            )));
        }
        if bands > MAX_BANDS {
            return Err(SketchError::InvalidLsh(format!(
                "at most {MAX_BANDS} bands are supported (got {bands})"
            )));
        }
        Ok(LshParams { bands, rows })
    }

    /// datasketch `_optimal_param(threshold, num_perm, fp_weight, fn_weight)`: minimise
    /// `fp_weight * FP-area + fn_weight * FN-area` over all b, r with `b * r <= num_perm`
    /// (b outer, r inner, the first strict minimum wins, as in datasketch). The usual weights
    /// are (0.5, 0.5).
    pub fn optimal(
        threshold: f64,
        num_perm: usize,
        fp_weight: f64,
        fn_weight: f64,
    ) -> Result<LshParams, SketchError> {
        if !(threshold > 0.0 && threshold < 1.0) {
            return Err(SketchError::InvalidLsh(format!(
                "threshold must be in (0, 1), got {threshold}"
            )));
        }
        if num_perm == 0 {
            return Err(SketchError::InvalidLsh("num_perm must be >= 1".into()));
        }
        if !(fp_weight >= 0.0 && fn_weight >= 0.0) {
            return Err(SketchError::InvalidLsh("weights must be >= 0".into()));
        }
        // A pure function of its inputs, asked for several times per process (every settings
        // check resolves it) and costing milliseconds each: a distributed run's many short
        // processes paid for it a dozen times each.
        type Memo = Vec<((u64, usize, u64, u64), LshParams)>;
        static MEMO: Mutex<Memo> = Mutex::new(Vec::new());
        let key = (
            threshold.to_bits(),
            num_perm,
            fp_weight.to_bits(),
            fn_weight.to_bits(),
        );
        let memo = |m: &Memo| m.iter().find(|(k, _)| *k == key).map(|&(_, p)| p);
        if let Some(p) = memo(&MEMO.lock().unwrap_or_else(|e| e.into_inner())) {
            return Ok(p);
        }
        let best = Self::search(threshold, num_perm, fp_weight, fn_weight);
        let mut m = MEMO.lock().unwrap_or_else(|e| e.into_inner());
        if memo(&m).is_none() {
            m.push((key, best));
        }
        Ok(best)
    }

    /// [`LshParams::optimal`]'s search, on checked inputs.
    fn search(threshold: f64, num_perm: usize, fp_weight: f64, fn_weight: f64) -> LshParams {
        let mut best = LshParams { bands: 0, rows: 0 };
        let mut min_error = f64::INFINITY;
        // The search skips what cannot win, so its cost stays small for wide signatures (all
        // pairs of 8192 permutations took seconds): P(s) = 1 - (1 - s^r)^b grows with b and falls
        // with r, so the false-positive area grows with b and falls with r, and the
        // false-negative area does the opposite. A pair whose lower bound exceeds the best error
        // by more than the integration error is never a strict minimum, so the result is the
        // exhaustive search's (tested against it).
        for bands in 1..=num_perm.min(MAX_BANDS) {
            let max_rows = num_perm / bands;
            // Every pair from here on has at least these bands and at most these rows.
            let fewest_fp = LshParams {
                bands,
                rows: max_rows,
            }
            .false_positive_area(threshold);
            if fewest_fp * fp_weight > min_error + PRUNE_MARGIN {
                break;
            }
            for rows in 1..=max_rows {
                let p = LshParams { bands, rows };
                let fn_area = p.false_negative_area(threshold);
                // More rows only miss more.
                if fn_area * fn_weight > min_error + PRUNE_MARGIN {
                    break;
                }
                let error = p.false_positive_area(threshold) * fp_weight + fn_area * fn_weight;
                if error < min_error {
                    min_error = error;
                    best = p;
                }
            }
        }
        best
    }

    /// `bands * rows`: the signature positions the keys depend on.
    pub fn num_perm_used(&self) -> usize {
        self.bands * self.rows
    }

    /// P(candidate | Jaccard s) = 1 - (1 - s^r)^b.
    pub fn collision_probability(&self, s: f64) -> f64 {
        // powf with float exponents, like datasketch's `s ** float(r)`, for identical rounding.
        1.0 - (1.0 - s.powf(self.rows as f64)).powf(self.bands as f64)
    }

    /// Integral of P over [0, t]: the false-positive area.
    pub fn false_positive_area(&self, threshold: f64) -> f64 {
        integrate(|s| self.collision_probability(s), 0.0, threshold)
    }

    /// Integral of 1 - P over [t, 1]: the false-negative area.
    pub fn false_negative_area(&self, threshold: f64) -> f64 {
        integrate(|s| 1.0 - self.collision_probability(s), threshold, 1.0)
    }

    /// `points` evenly spaced (s, P(s)) pairs over [0, 1] inclusive (one point is s = 0).
    pub fn s_curve(&self, points: usize) -> Vec<(f64, f64)> {
        let denom = points.saturating_sub(1).max(1) as f64;
        (0..points)
            .map(|i| {
                let s = i as f64 / denom;
                (s, self.collision_probability(s))
            })
            .collect()
    }
}

/// Gauss-Legendre order of one panel. P(s) is a polynomial of degree `rows * bands`, and an
/// n-point rule is exact up to degree 2n-1, so small configurations integrate exactly in one
/// panel and larger ones converge after a few bisections.
const GL_ORDER: usize = 64;

/// Nodes and weights on [-1, 1], by Newton iteration on the Legendre polynomial.
fn gauss_legendre() -> &'static [(f64, f64)] {
    static RULE: OnceLock<Vec<(f64, f64)>> = OnceLock::new();
    RULE.get_or_init(|| {
        let n = GL_ORDER;
        let mut rule = Vec::with_capacity(n);
        for i in 0..n {
            let mut x = (std::f64::consts::PI * (i as f64 + 0.75) / (n as f64 + 0.5)).cos();
            let mut dp = 0.0;
            for _ in 0..100 {
                // Recurrence for P_n(x) and its derivative.
                let (mut p0, mut p1) = (1.0, x);
                for k in 2..=n {
                    let p2 = ((2 * k - 1) as f64 * x * p1 - (k - 1) as f64 * p0) / k as f64;
                    p0 = p1;
                    p1 = p2;
                }
                dp = n as f64 * (x * p1 - p0) / (x * x - 1.0);
                let dx = p1 / dp;
                x -= dx;
                if dx.abs() < 1e-16 {
                    break;
                }
            }
            rule.push((x, 2.0 / ((1.0 - x * x) * dp * dp)));
        }
        rule
    })
}

fn gl_panel(f: &impl Fn(f64) -> f64, a: f64, b: f64) -> f64 {
    let (mid, half) = ((a + b) / 2.0, (b - a) / 2.0);
    half * gauss_legendre()
        .iter()
        .map(|&(x, w)| w * f(mid + half * x))
        .sum::<f64>()
}

/// Adaptive composite Gauss-Legendre to ~1e-15 absolute: accurate enough that near-ties in
/// [`LshParams::optimal`] resolve like scipy's `quad` (whose own error on these smooth
/// integrands is far below the gaps between candidates).
fn integrate(f: impl Fn(f64) -> f64, a: f64, b: f64) -> f64 {
    fn recurse(f: &impl Fn(f64) -> f64, a: f64, b: f64, whole: f64, depth: u32) -> f64 {
        let m = (a + b) / 2.0;
        let (left, right) = (gl_panel(f, a, m), gl_panel(f, m, b));
        if depth == 0 || (left + right - whole).abs() <= 1e-15 {
            left + right
        } else {
            recurse(f, a, m, left, depth - 1) + recurse(f, m, b, right, depth - 1)
        }
    }
    if a >= b {
        return 0.0;
    }
    recurse(&f, a, b, gl_panel(&f, a, b), 30)
}

/// How band keys are computed from signature rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BandKeyScheme {
    /// `xxh3_64_with_seed(rows as LE u32 bytes, seed = band index)`.
    Fast,
    /// lshcurator 0.2.3: `blake2b(digest_size=8, person=band index as 2-byte LE)` over the band's
    /// rows as LE u64, read as LE u64.
    Lshcurator,
}

/// The reserved "no key" value: band_keys never returns 0 (a computed 0 is mapped to 1), so
/// tables can use 0 for samples that have no keys.
pub const NO_KEY: u64 = 0;

/// Largest `rows` whose band fits the on-stack byte buffer; wider bands hash incrementally.
const STACK_ROWS: usize = 64;

/// One key per band into `out` (`out.len() == bands`). `sig.len()` must be >= `bands * rows`;
/// extra positions are ignored. Fast: `xxh3_64_with_seed(rows as LE u32 bytes, seed = band
/// index)`. Lshcurator: `blake2b(digest_size=8, person = band index as 2-byte LE)` over the
/// band's rows as LE u64, read as LE u64. A computed 0 becomes 1 (see [`NO_KEY`]).
///
/// # Panics
/// When `sig` is shorter than `bands * rows` or `out.len() != bands`.
pub fn band_keys(scheme: BandKeyScheme, params: LshParams, sig: &[u32], out: &mut [u64]) {
    let LshParams { bands, rows } = params;
    assert!(
        sig.len() >= bands * rows,
        "signature shorter than bands * rows"
    );
    assert_eq!(out.len(), bands, "key buffer length != bands");
    let mut buf = [0u8; STACK_ROWS * 8];
    for (band, (key, band_rows)) in out.iter_mut().zip(sig.chunks_exact(rows)).enumerate() {
        let k = match scheme {
            BandKeyScheme::Fast if rows <= STACK_ROWS => {
                for (dst, v) in buf.chunks_exact_mut(4).zip(band_rows) {
                    dst.copy_from_slice(&v.to_le_bytes());
                }
                xxhash_rust::xxh3::xxh3_64_with_seed(&buf[..rows * 4], band as u64)
            }
            BandKeyScheme::Fast => {
                let bytes: Vec<u8> = band_rows.iter().flat_map(|v| v.to_le_bytes()).collect();
                xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, band as u64)
            }
            BandKeyScheme::Lshcurator => {
                let mut state = blake2b_simd::Params::new()
                    .hash_length(8)
                    .personal(&(band as u16).to_le_bytes())
                    .to_state();
                for chunk in band_rows.chunks(STACK_ROWS) {
                    for (dst, v) in buf.chunks_exact_mut(8).zip(chunk) {
                        dst.copy_from_slice(&u64::from(*v).to_le_bytes());
                    }
                    state.update(&buf[..chunk.len() * 8]);
                }
                let digest = state.finalize();
                u64::from_le_bytes(digest.as_bytes().try_into().expect("8-byte digest"))
            }
        };
        *key = if k == NO_KEY { 1 } else { k };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_validates_ranges() {
        assert!(LshParams::new(0, 1).is_err());
        assert!(LshParams::new(1, 0).is_err());
        assert!(LshParams::new(65_537, 1).is_err());
        assert_eq!(LshParams::new(16, 8).unwrap().num_perm_used(), 128);
    }

    /// The search without skipping, as datasketch runs it.
    fn exhaustive(threshold: f64, num_perm: usize, fp: f64, fn_: f64) -> LshParams {
        let mut best = LshParams { bands: 0, rows: 0 };
        let mut min_error = f64::INFINITY;
        for bands in 1..=num_perm {
            for rows in 1..=num_perm / bands {
                let p = LshParams { bands, rows };
                let error =
                    p.false_positive_area(threshold) * fp + p.false_negative_area(threshold) * fn_;
                if error < min_error {
                    min_error = error;
                    best = p;
                }
            }
        }
        best
    }

    #[test]
    fn optimal_skips_nothing_that_could_win() {
        for num_perm in [1, 2, 3, 7, 16, 31, 64, 100, 128, 200, 256] {
            for t in [0.01, 0.1, 0.3, 0.5, 0.65, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99] {
                for (fp, fn_) in [(0.5, 0.5), (0.05, 0.95), (0.9, 0.1), (0.0, 1.0), (1.0, 0.0)] {
                    assert_eq!(
                        LshParams::optimal(t, num_perm, fp, fn_).unwrap(),
                        exhaustive(t, num_perm, fp, fn_),
                        "t={t} num_perm={num_perm} weights=({fp}, {fn_})"
                    );
                }
            }
        }
    }

    #[test]
    fn optimal_answers_quickly_for_wide_signatures() {
        let started = std::time::Instant::now();
        let p = LshParams::optimal(0.8, 8192, 0.05, 0.95).unwrap();
        assert!(p.num_perm_used() <= 8192);
        // All pairs took seconds; the bounded search a small fraction of one even unoptimised.
        assert!(
            started.elapsed().as_secs_f64() < 2.0,
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn areas_match_closed_forms() {
        // b = 1: P(s) = s^r, so FP area = t^(r+1)/(r+1) and FN area = (1-t) - (1-t^(r+1))/(r+1).
        let p = LshParams::new(1, 3).unwrap();
        let t: f64 = 0.7;
        assert!((p.false_positive_area(t) - t.powi(4) / 4.0).abs() < 1e-15);
        assert!((p.false_negative_area(t) - ((1.0 - t) - (1.0 - t.powi(4)) / 4.0)).abs() < 1e-15);
        // Total area of P over [0, 1] for r = 1: 1 - 1/(b+1).
        let p = LshParams::new(9, 1).unwrap();
        let total = p.false_positive_area(0.4) + (0.6 - p.false_negative_area(0.4));
        assert!((total - (1.0 - 1.0 / 10.0)).abs() < 1e-14);
    }

    #[test]
    fn s_curve_spans_zero_to_one() {
        let p = LshParams::new(16, 8).unwrap();
        let c = p.s_curve(11);
        assert_eq!(c.len(), 11);
        assert_eq!(c[0], (0.0, 0.0));
        assert_eq!(c[10], (1.0, 1.0));
        assert!(c.windows(2).all(|w| w[0].1 <= w[1].1));
        assert!((c[5].1 - (1.0 - (1.0 - 0.5f64.powi(8)).powi(16))).abs() < 1e-12);
    }

    #[test]
    fn keys_are_never_zero_and_ignore_extra_positions() {
        let p = LshParams::new(4, 2).unwrap();
        let sig: Vec<u32> = (0..10).collect();
        for scheme in [BandKeyScheme::Fast, BandKeyScheme::Lshcurator] {
            let mut a = [0u64; 4];
            let mut b = [0u64; 4];
            band_keys(scheme, p, &sig, &mut a);
            band_keys(scheme, p, &sig[..8], &mut b);
            assert_eq!(a, b);
            assert!(a.iter().all(|&k| k != NO_KEY));
            // Equal rows in different bands still give different keys (band-seeded).
            let same = [7u32; 8];
            band_keys(scheme, p, &same, &mut a);
            assert_ne!(a[0], a[1]);
        }
    }

    #[test]
    fn wide_bands_hash_like_narrow_ones_would() {
        // rows beyond the stack buffer must equal hashing all bytes in one go.
        let rows = STACK_ROWS * 2 + 3;
        let p = LshParams::new(2, rows).unwrap();
        let sig: Vec<u32> = (0..2 * rows as u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let mut fast = [0u64; 2];
        band_keys(BandKeyScheme::Fast, p, &sig, &mut fast);
        let bytes: Vec<u8> = sig[rows..].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(fast[1], xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, 1));
        let mut lsh = [0u64; 2];
        band_keys(BandKeyScheme::Lshcurator, p, &sig, &mut lsh);
        let bytes: Vec<u8> = sig[rows..]
            .iter()
            .flat_map(|v| u64::from(*v).to_le_bytes())
            .collect();
        let d = blake2b_simd::Params::new()
            .hash_length(8)
            .personal(&[1, 0])
            .hash(&bytes);
        assert_eq!(lsh[1], u64::from_le_bytes(d.as_bytes().try_into().unwrap()));
    }
}
