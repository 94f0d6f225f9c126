//! neardup-cpu: which SIMD instruction sets this CPU has, detected once.
//!
//! This crate owns the detection of the x86-64 extensions that neardup's kernels use
//! ([`Feature`]), cached for the life of the process ([`Features::detected`]), and the way tests
//! force a slower kernel: a [`Features`] value with some features taken away
//! ([`Features::without`], [`Features::levels`], [`Features::none`]), passed down to the code
//! that picks a kernel. Nothing here is global and mutable, so tests running in parallel can each
//! force their own level.
//!
//! A [`Features`] value can only be the detected set or a subset of it (there is no way to add a
//! feature), so code that runs a kernel because a [`Features`] value has its features is sound.
//!
//! It also holds the lane tables the kernels for CPUs without a compress instruction share
//! ([`kept_lanes_first`], and its widened forms [`kept_lanes_first_i32`] and
//! [`kept_pairs_first_i32`]).
//!
//! It does not own the kernels or the choice between them: `neardup-sketch` maps features to its
//! signing, window-hashing, SHA-1 and set kernels, `neardup-corpus` to its JSON string paths.
//! Every kernel gives the same results as the portable code it replaces; only speed differs.

#![deny(missing_docs)]

use std::fmt;
use std::sync::OnceLock;

/// For each 8-bit mask, the indices of its set bits in ascending order, then zeros: the shuffle
/// that moves the kept lanes of an 8-lane vector to its front, for CPUs without a compress
/// instruction (AVX2). Kernels build their tables from it at compile time, as bytes for a byte
/// shuffle or widened to 32-bit lane indices for a lane permutation.
pub const fn kept_lanes_first() -> [[u8; 8]; 256] {
    let mut table = [[0u8; 8]; 256];
    let mut mask = 0;
    while mask < 256 {
        let (mut lane, mut kept) = (0, 0);
        while lane < 8 {
            if mask & (1 << lane) != 0 {
                table[mask][kept] = lane as u8;
                kept += 1;
            }
            lane += 1;
        }
        mask += 1;
    }
    table
}

/// [`kept_lanes_first`] widened to 32-bit lane indices, for a lane permutation of eight 32-bit
/// lanes (`vpermd`).
pub const fn kept_lanes_first_i32() -> [[i32; 8]; 256] {
    let lanes = kept_lanes_first();
    let mut table = [[0i32; 8]; 256];
    let mut mask = 0;
    while mask < 256 {
        let mut k = 0;
        while k < 8 {
            table[mask][k] = lanes[mask][k] as i32;
            k += 1;
        }
        mask += 1;
    }
    table
}

/// For each 4-bit mask of four 64-bit lanes, the 32-bit lane indices that move its kept lanes
/// to the front (each 64-bit lane as its two halves), for a lane permutation (`vpermd`).
pub const fn kept_pairs_first_i32() -> [[i32; 8]; 16] {
    let lanes = kept_lanes_first();
    let mut table = [[0i32; 8]; 16];
    let mut mask = 0;
    while mask < 16 {
        let mut k = 0;
        while k < 4 {
            table[mask][2 * k] = 2 * lanes[mask][k] as i32;
            table[mask][2 * k + 1] = 2 * lanes[mask][k] as i32 + 1;
            k += 1;
        }
        mask += 1;
    }
    table
}

/// One instruction-set extension a neardup kernel needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Feature {
    /// SSE2: part of the x86-64 baseline, so detected on every x86-64 CPU; listed so that tests
    /// can take the 16-byte paths away too and run the plain word-at-a-time code.
    Sse2,
    /// POPCNT.
    Popcnt,
    /// AVX2.
    Avx2,
    /// AVX-512 Foundation.
    Avx512F,
    /// AVX-512 Byte and Word instructions.
    Avx512Bw,
    /// AVX-512 Doubleword and Quadword instructions.
    Avx512Dq,
    /// AVX-512 Vector Byte Manipulation Instructions.
    Avx512Vbmi,
    /// AVX-512 VBMI2 (byte compress and expand).
    Avx512Vbmi2,
}

impl Feature {
    /// Every feature, in the order [`Features`]' debug output lists them.
    pub const ALL: [Feature; 8] = [
        Feature::Sse2,
        Feature::Popcnt,
        Feature::Avx2,
        Feature::Avx512F,
        Feature::Avx512Bw,
        Feature::Avx512Dq,
        Feature::Avx512Vbmi,
        Feature::Avx512Vbmi2,
    ];

    /// The AVX-512 extensions.
    pub const AVX512: [Feature; 5] = [
        Feature::Avx512F,
        Feature::Avx512Bw,
        Feature::Avx512Dq,
        Feature::Avx512Vbmi,
        Feature::Avx512Vbmi2,
    ];

    /// The feature's name as `is_x86_feature_detected!` and `/proc/cpuinfo` spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Feature::Sse2 => "sse2",
            Feature::Popcnt => "popcnt",
            Feature::Avx2 => "avx2",
            Feature::Avx512F => "avx512f",
            Feature::Avx512Bw => "avx512bw",
            Feature::Avx512Dq => "avx512dq",
            Feature::Avx512Vbmi => "avx512vbmi",
            Feature::Avx512Vbmi2 => "avx512vbmi2",
        }
    }

    const fn bit(self) -> u16 {
        1 << self as u16
    }

    #[cfg(target_arch = "x86_64")]
    fn is_detected(self) -> bool {
        match self {
            Feature::Sse2 => std::arch::is_x86_feature_detected!("sse2"),
            Feature::Popcnt => std::arch::is_x86_feature_detected!("popcnt"),
            Feature::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            Feature::Avx512F => std::arch::is_x86_feature_detected!("avx512f"),
            Feature::Avx512Bw => std::arch::is_x86_feature_detected!("avx512bw"),
            Feature::Avx512Dq => std::arch::is_x86_feature_detected!("avx512dq"),
            Feature::Avx512Vbmi => std::arch::is_x86_feature_detected!("avx512vbmi"),
            Feature::Avx512Vbmi2 => std::arch::is_x86_feature_detected!("avx512vbmi2"),
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn is_detected(self) -> bool {
        false
    }
}

/// A set of [`Feature`]s this CPU has: the detected set, or a subset of it that forces slower
/// kernels. `Copy`, one word; reading [`Features::detected`] is one atomic load.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Features {
    bits: u16,
}

impl Features {
    /// The features of this CPU, detected on the first call and cached for the process.
    #[inline]
    pub fn detected() -> Features {
        static DETECTED: OnceLock<Features> = OnceLock::new();
        *DETECTED.get_or_init(|| Features {
            bits: Feature::ALL
                .iter()
                .filter(|f| f.is_detected())
                .fold(0, |bits, f| bits | f.bit()),
        })
    }

    /// No features at all: every choice falls back to portable code.
    pub const fn none() -> Features {
        Features { bits: 0 }
    }

    /// Whether `feature` is in the set.
    #[inline]
    pub const fn has(self, feature: Feature) -> bool {
        self.bits & feature.bit() != 0
    }

    /// Whether every one of `features` is in the set.
    #[inline]
    pub const fn has_all(self, features: &[Feature]) -> bool {
        let mut i = 0;
        while i < features.len() {
            if !self.has(features[i]) {
                return false;
            }
            i += 1;
        }
        true
    }

    /// The set without `feature`.
    pub const fn without(self, feature: Feature) -> Features {
        Features {
            bits: self.bits & !feature.bit(),
        }
    }

    /// The set without any of `features`.
    pub const fn without_all(self, features: &[Feature]) -> Features {
        let mut set = self;
        let mut i = 0;
        while i < features.len() {
            set = set.without(features[i]);
            i += 1;
        }
        set
    }

    /// The set, then the set without each feature from the most recent down (VBMI2, VBMI, the
    /// other AVX-512 extensions, AVX2, POPCNT, SSE2): every level at which a kernel choice can
    /// change, ending with [`Features::none`], without repeats. Tests run every kernel choice
    /// they make once per level and compare the results.
    pub fn levels(self) -> Vec<Features> {
        let steps: [&[Feature]; 6] = [
            &[Feature::Avx512Vbmi2],
            &[Feature::Avx512Vbmi],
            &[Feature::Avx512F, Feature::Avx512Bw, Feature::Avx512Dq],
            &[Feature::Avx2],
            &[Feature::Popcnt],
            &[Feature::Sse2],
        ];
        let mut levels = vec![self];
        let mut set = self;
        for step in steps {
            set = set.without_all(step);
            if levels.last() != Some(&set) {
                levels.push(set);
            }
        }
        levels
    }
}

impl fmt::Debug for Features {
    /// The names of the features in the set: `Features[sse2, popcnt, avx2]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = Feature::ALL
            .iter()
            .filter(|&&x| self.has(x))
            .map(|x| x.name());
        f.write_str("Features[")?;
        for (i, name) in names.enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(name)?;
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_lanes_come_first_in_order() {
        let table = kept_lanes_first();
        assert_eq!(table[0], [0; 8]);
        assert_eq!(table[0b1010_0110], [1, 2, 5, 7, 0, 0, 0, 0]);
        assert_eq!(table[0xff], [0, 1, 2, 3, 4, 5, 6, 7]);
    }

    #[test]
    fn detection_agrees_with_std_and_is_cached() {
        let detected = Features::detected();
        assert_eq!(Features::detected(), detected);
        for feature in Feature::ALL {
            assert_eq!(detected.has(feature), feature.is_detected(), "{feature:?}");
        }
        #[cfg(target_arch = "x86_64")]
        assert!(detected.has(Feature::Sse2), "SSE2 is part of x86-64");
    }

    #[test]
    fn levels_only_take_features_away_and_end_with_none() {
        let detected = Features::detected();
        let levels = detected.levels();
        assert_eq!(levels.first(), Some(&detected));
        assert_eq!(levels.last(), Some(&Features::none()));
        for pair in levels.windows(2) {
            assert_ne!(pair[0], pair[1]);
            // Each level is a strict subset of the one before.
            assert_eq!(pair[0].bits & pair[1].bits, pair[1].bits);
        }
        assert_eq!(Features::none().levels(), vec![Features::none()]);
        let no_avx512 = detected.without_all(&Feature::AVX512);
        assert!(Feature::AVX512.iter().all(|&f| !no_avx512.has(f)));
        assert!(levels.contains(&no_avx512));
    }

    #[test]
    fn debug_lists_names() {
        let set = Features::detected().without_all(&Feature::ALL);
        assert_eq!(format!("{set:?}"), "Features[]");
        assert!(!Features::none().has_all(&[Feature::Sse2]));
        assert!(Features::none().has_all(&[]));
    }
}
