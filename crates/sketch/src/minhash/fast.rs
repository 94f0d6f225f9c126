//! The `fast` scheme's min kernels (module docs of [`super`]): one block of up to [`BLOCK`]
//! positions over all of a text's shingle hashes, as a scalar reference, a portable blocked
//! loop and AVX2 and AVX-512 intrinsics, plus the AVX-512 kernel fused with the repeat filter.

use super::filter::{TextFilter, filter_step, output_slots};
use super::{BLOCK, EMPTY_SLOT, Kernel};

#[inline(always)]
fn value(h: u64, a: u32, s: u32) -> u32 {
    ((h as u32 ^ s).wrapping_mul(a)) ^ (h >> 32) as u32
}

fn reference<const W: usize>(hashes: &[u64], a: &[u32; W], s: &[u32; W], out: &mut [u32; W]) {
    for i in 0..W {
        let mut m = EMPTY_SLOT;
        for &h in hashes {
            m = m.min(value(h, a[i], s[i]));
        }
        out[i] = m;
    }
}

/// Shingles outer, a block of permutations inner, for whatever vector width the build target
/// has (SSE2 on x86_64); the x86 kernels below are the same loop written with intrinsics.
#[inline(always)]
fn blocked<const W: usize>(hashes: &[u64], a: &[u32; W], s: &[u32; W], out: &mut [u32; W]) {
    let mut acc = [EMPTY_SLOT; W];
    for &h in hashes {
        for j in 0..W {
            acc[j] = acc[j].min(value(h, a[j], s[j]));
        }
    }
    *out = acc;
}

/// Explicit intrinsics: `R` accumulators of 8 lanes live in registers for the whole pass over
/// the hashes. 16 ymm registers hold at most 4 accumulators + 8 parameter vectors, so wider
/// blocks take several passes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn avx2<const W: usize>(hashes: &[u64], a: &[u32; W], s: &[u32; W], out: &mut [u32; W]) {
    const LANES: usize = 8;
    const PASS: usize = 4 * LANES;
    let mut start = 0;
    while start < W {
        let end = (start + PASS).min(W);
        match (end - start) / LANES {
            1 => avx2_pass::<1>(hashes, &a[start..end], &s[start..end], &mut out[start..end]),
            2 => avx2_pass::<2>(hashes, &a[start..end], &s[start..end], &mut out[start..end]),
            _ => avx2_pass::<4>(hashes, &a[start..end], &s[start..end], &mut out[start..end]),
        }
        start = end;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn avx2_pass<const R: usize>(hashes: &[u64], a: &[u32], s: &[u32], out: &mut [u32]) {
    use std::arch::x86_64::*;
    assert!(a.len() == R * 8 && s.len() == R * 8 && out.len() == R * 8);
    // SAFETY: the loads and stores stay within the R * 8 elements asserted above.
    unsafe {
        let av: [__m256i; R] =
            std::array::from_fn(|i| _mm256_loadu_si256(a.as_ptr().add(i * 8).cast()));
        let sv: [__m256i; R] =
            std::array::from_fn(|i| _mm256_loadu_si256(s.as_ptr().add(i * 8).cast()));
        let mut acc = [_mm256_set1_epi32(-1); R];
        for h in hashes {
            // As in the AVX-512 kernel: broadcast the halves from memory.
            // x86 is little-endian: the low half comes first.
            let halves: *const i32 = (h as *const u64).cast();
            let lo = _mm256_set1_epi32(halves.read());
            let hi = _mm256_set1_epi32(halves.add(1).read());
            for i in 0..R {
                let v =
                    _mm256_xor_si256(_mm256_mullo_epi32(_mm256_xor_si256(lo, sv[i]), av[i]), hi);
                acc[i] = _mm256_min_epu32(acc[i], v);
            }
        }
        for (i, v) in acc.iter().enumerate() {
            _mm256_storeu_si256(out.as_mut_ptr().add(i * 8).cast(), *v);
        }
    }
}

/// Explicit intrinsics: all `W / 16` accumulators (8 for a 128-permutation block) and their
/// parameters stay in the 32 zmm registers for one pass over the hashes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn avx512<const W: usize>(hashes: &[u64], a: &[u32; W], s: &[u32; W], out: &mut [u32; W]) {
    match W / 16 {
        1 => avx512_pass::<1>(hashes, a, s, out),
        2 => avx512_pass::<2>(hashes, a, s, out),
        4 => avx512_pass::<4>(hashes, a, s, out),
        8 => avx512_pass::<8>(hashes, a, s, out),
        _ => unreachable!("block widths are 16, 32, 64 or 128"),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn avx512_pass<const R: usize>(hashes: &[u64], a: &[u32], s: &[u32], out: &mut [u32]) {
    use std::arch::x86_64::*;
    assert!(a.len() == R * 16 && s.len() == R * 16 && out.len() == R * 16);
    // SAFETY: the loads and stores stay within the R * 16 elements asserted above.
    unsafe {
        let av: [__m512i; R] =
            std::array::from_fn(|i| _mm512_loadu_si512(a.as_ptr().add(i * 16).cast()));
        let sv: [__m512i; R] =
            std::array::from_fn(|i| _mm512_loadu_si512(s.as_ptr().add(i * 16).cast()));
        let mut acc = [_mm512_set1_epi32(-1); R];
        for h in hashes {
            // Broadcasting each 32-bit half straight from memory is a load-unit operation;
            // going through a general register costs vector-pipe work the kernel is short of.
            // x86 is little-endian: the low half comes first.
            let halves: *const i32 = (h as *const u64).cast();
            let lo = _mm512_set1_epi32(halves.read());
            let hi = _mm512_set1_epi32(halves.add(1).read());
            for i in 0..R {
                let v =
                    _mm512_xor_si512(_mm512_mullo_epi32(_mm512_xor_si512(lo, sv[i]), av[i]), hi);
                acc[i] = _mm512_min_epu32(acc[i], v);
            }
        }
        for (i, v) in acc.iter().enumerate() {
            _mm512_storeu_si512(out.as_mut_ptr().add(i * 16).cast(), *v);
        }
    }
}

/// Hashes per step of [`avx512_filtered`]'s pipeline: small enough that a block's hashes
/// and kept values stay in L1.
#[cfg(target_arch = "x86_64")]
const FUSED_BLOCK: usize = 256;

/// [`drop_recent_repeats`] and the AVX-512 kernel for positions `0..R * 16` in one loop: the
/// filter (scalar loads, compares and stores) runs on block `t + 1` of `hashes` while the
/// kernel (vector multiplies and minima) runs on block `t`'s kept values, two filter steps per
/// kernel step since about half the values are kept. The two use different execution units, so
/// the filter costs almost nothing extra. Leaves the kept values in `unique` (for further
/// position blocks).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) fn avx512_filtered<const R: usize>(
    hashes: &[u64],
    filter: &mut TextFilter<'_>,
    unique: &mut Vec<u64>,
    a: &[u32],
    s: &[u32],
    out: &mut [u32; BLOCK],
) {
    use std::arch::x86_64::*;
    assert!(a.len() >= R * 16 && s.len() >= R * 16 && R * 16 <= BLOCK);
    let dst = output_slots(unique, hashes.len());
    let mut len = 0;
    let mut done = 0;
    // SAFETY: the parameter loads and accumulator stores stay within the first R * 16
    // elements of `a`, `s` and `out` (asserted above); hash broadcasts read `dst[done]`,
    // which is in bounds and written (`done < len`, see `filter_step`).
    unsafe {
        let av: [__m512i; R] =
            std::array::from_fn(|i| _mm512_loadu_si512(a.as_ptr().add(i * 16).cast()));
        let sv: [__m512i; R] =
            std::array::from_fn(|i| _mm512_loadu_si512(s.as_ptr().add(i * 16).cast()));
        let mut acc = [_mm512_set1_epi32(-1); R];
        // A macro rather than a closure, so that the body is compiled with AVX-512 enabled.
        macro_rules! kernel_step {
            () => {{
                let halves: *const i32 = dst[done].as_ptr().cast();
                let lo = _mm512_set1_epi32(halves.read());
                let hi = _mm512_set1_epi32(halves.add(1).read());
                for i in 0..R {
                    let v = _mm512_xor_si512(
                        _mm512_mullo_epi32(_mm512_xor_si512(lo, sv[i]), av[i]),
                        hi,
                    );
                    acc[i] = _mm512_min_epu32(acc[i], v);
                }
                done += 1;
            }};
        }
        for block in hashes.chunks(FUSED_BLOCK) {
            // The kept values of the previous block: dst[done..ready].
            let ready = len;
            let mut pairs = block.chunks_exact(2);
            while done < ready {
                let Some(pair) = pairs.next() else { break };
                kernel_step!();
                filter_step(filter, dst, &mut len, pair[0]);
                filter_step(filter, dst, &mut len, pair[1]);
            }
            for pair in pairs.by_ref() {
                filter_step(filter, dst, &mut len, pair[0]);
                filter_step(filter, dst, &mut len, pair[1]);
            }
            for &h in pairs.remainder() {
                filter_step(filter, dst, &mut len, h);
            }
            while done < ready {
                kernel_step!();
            }
        }
        while done < len {
            kernel_step!();
        }
        for (i, v) in acc.iter().enumerate() {
            _mm512_storeu_si512(out.as_mut_ptr().add(i * 16).cast(), *v);
        }
        // `filter_step` wrote every `dst[i]` with `i < len`.
        unique.set_len(len);
    }
}

/// Signs one block of `W` positions with `kernel`, whose parameters are `a` and `s`.
pub(super) fn sign_block<const W: usize>(
    kernel: Kernel,
    hashes: &[u64],
    a: &[u32; W],
    s: &[u32; W],
    out: &mut [u32; W],
) {
    match kernel {
        Kernel::Reference => reference(hashes, a, s, out),
        Kernel::Portable => blocked(hashes, a, s, out),
        // SAFETY: MinHasher::with_kernel only accepts kernels the CPU supports.
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => unsafe { avx2(hashes, a, s, out) },
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 => unsafe { avx512(hashes, a, s, out) },
        #[cfg(not(target_arch = "x86_64"))]
        Kernel::Avx2 | Kernel::Avx512 => unreachable!("x86 kernel on another architecture"),
    }
}
