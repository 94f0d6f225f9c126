//! neardup-sketch: turns one text into numbers.
//!
//! This crate owns the pure, deterministic part of near-duplicate detection:
//! opt-in text normalisation ([`normalize`]), shingling ([`shingle`]; words found by UAX #29 with
//! an ASCII fast path, or as hojichar's ASCII alphanumeric runs), MinHash signatures
//! ([`minhash`], with the default one-permutation `oph` scheme, a SIMD k-permutation `fast`
//! scheme and a bit-exact `datasketch` 1.9 scheme), LSH banding and band keys ([`lsh`], including
//! lshcurator 0.2.3 compatible keys), signature similarity and exact shingle-set Jaccard
//! ([`mod@similarity`]), content hashes ([`content`]) and the [`Sketcher`] that ties them together
//! under one fingerprinted [`SketchConfig`].
//!
//! [`minhash`] is a folder with one file per scheme and its kernels (`oph`, `fast`,
//! `datasketch`) and the repeat filter (`filter`). Every SIMD kernel here (signing, window
//! hashing, SHA-1 batches, signature and set comparison) is chosen from the CPU features that
//! `neardup-cpu` detects once; each has a portable twin it is tested against.
//!
//! It does not own any I/O (reading corpora, writing tables), threads or the deduplication
//! stages themselves: those live in `neardup-corpus`, `neardup-keys` and `neardup-dedup`.
//! Everything here is `Send + Sync`. With a reused [`Scratch`], char and byte shingling and
//! signing allocate nothing per text in steady state (word shingles and non-ASCII lowercasing
//! still allocate).

#![deny(missing_docs)]

pub mod content;
pub mod error;
pub mod lsh;
pub mod normalize;
pub mod similarity;
mod words;
pub mod shingle;
mod shingle_hash;
mod sha1_block;
mod sha1x16;
pub mod minhash;
pub mod sketcher;

pub use content::content_hash;
pub use error::SketchError;
pub use lsh::{BandKeyScheme, LshParams, NO_KEY, band_keys};
pub use minhash::{
    EMPTY_SLOT, HashScheme, Kernel, MinHasher, SignScratch, datasketch_permutations,
};
pub use normalize::{CharClassSet, Normalizer, is_blank, py_strip};
pub use shingle::{CustomShingler, Shingler, Tokenizer};
pub use similarity::{
    SetScratch, append_fingerprint_set, count_equal, fingerprint, fingerprint_set,
    jaccard_at_least, jaccard_sorted, similarity,
};
pub use sketcher::{Normalized, Scratch, SketchConfig, SketchInfo, Sketcher};
