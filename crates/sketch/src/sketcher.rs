//! One config, one entry point: text -> normalised text -> signature -> band keys.

use crate::SketchError;
use crate::content::content_hash;
use crate::lsh::{BandKeyScheme, LshParams, band_keys};
use crate::minhash::{HashScheme, MinHasher, SignScratch};
use crate::normalize::{NormalizeScratch, Normalizer};
use crate::shingle::Shingler;
use crate::similarity::{SetScratch, append_fingerprint_set, fingerprint_set};

/// Everything that defines how a text becomes keys. Two runs with equal configs produce equal
/// keys.
#[derive(Clone, Debug)]
pub struct SketchConfig {
    /// Applied before shingling and before the content hash.
    pub normalizer: Normalizer,
    /// How the normalised text is cut into shingles.
    pub shingler: Shingler,
    /// MinHash hashing scheme.
    pub scheme: HashScheme,
    /// Signature length.
    pub num_perm: usize,
    /// Permutation seed.
    pub seed: u64,
    /// Banding; `lsh.num_perm_used() <= num_perm`.
    pub lsh: LshParams,
    /// How bands become keys.
    pub band_keys: BandKeyScheme,
}

/// Domain tag of the fingerprint encoding; bump only together with a format change.
const FINGERPRINT_TAG: &[u8] = b"neardup-sketch/config/v1";

impl SketchConfig {
    /// Checks that every part is valid and that the parts fit together
    /// (`lsh.num_perm_used() <= num_perm`, datasketch seeds fit numpy, ...).
    pub fn validate(&self) -> Result<(), SketchError> {
        self.shingler.validate()?;
        LshParams::new(self.lsh.bands, self.lsh.rows)?;
        if self.num_perm == 0 {
            return Err(SketchError::InvalidConfig("num_perm must be >= 1".into()));
        }
        if self.lsh.num_perm_used() > self.num_perm {
            return Err(SketchError::InvalidConfig(format!(
                "{} bands x {} rows need {} signature positions but num_perm is {}",
                self.lsh.bands,
                self.lsh.rows,
                self.lsh.num_perm_used(),
                self.num_perm
            )));
        }
        if self.scheme == HashScheme::Datasketch && self.seed > u64::from(u32::MAX) {
            return Err(SketchError::InvalidConfig(format!(
                "datasketch seeds must be <= 2^32-1, got {}",
                self.seed
            )));
        }
        Ok(())
    }

    /// A stable 64-bit fingerprint of every setting (written into on-disk key tables so tables
    /// made with different settings are refused). Must not change across releases for equal
    /// settings: it hashes an explicit byte encoding (never `Debug` or `Hash` output), except for
    /// custom tokenizers, which are identified by their `Debug` text.
    pub fn fingerprint(&self) -> u64 {
        let mut buf = Vec::with_capacity(128);
        let put_bytes = |buf: &mut Vec<u8>, b: &[u8]| {
            buf.extend_from_slice(&(b.len() as u64).to_le_bytes());
            buf.extend_from_slice(b);
        };
        put_bytes(&mut buf, FINGERPRINT_TAG);
        let n = &self.normalizer;
        let flags = u8::from(n.trim)
            | u8::from(n.nfkc) << 1
            | u8::from(n.lowercase) << 2
            | u8::from(n.strip_punctuation) << 3
            | u8::from(n.collapse_whitespace) << 4
            | u8::from(n.keep_chars.is_some()) << 5;
        buf.push(flags);
        put_bytes(
            &mut buf,
            n.keep_chars.as_ref().map_or("", |k| k.spec()).as_bytes(),
        );
        put_bytes(&mut buf, self.shingler.describe().as_bytes());
        buf.push(match self.scheme {
            HashScheme::Fast => 0,
            HashScheme::Datasketch => 1,
            HashScheme::Oph => 2,
        });
        for v in [
            self.num_perm as u64,
            self.seed,
            self.lsh.bands as u64,
            self.lsh.rows as u64,
        ] {
            buf.extend_from_slice(&v.to_le_bytes());
        }
        buf.push(match self.band_keys {
            BandKeyScheme::Fast => 0,
            BandKeyScheme::Lshcurator => 1,
        });
        xxhash_rust::xxh3::xxh3_64(&buf)
    }

    /// neardup's own scheme for `shingler`, `num_perm` and `lsh`: one-permutation hashing
    /// ([`HashScheme::Oph`]) with seed 1 and [`BandKeyScheme::Fast`] band keys, over the text
    /// as given ([`Normalizer::default`] changes nothing). Change a field to depart from it.
    pub fn new(shingler: Shingler, num_perm: usize, lsh: LshParams) -> SketchConfig {
        SketchConfig {
            normalizer: Normalizer::default(),
            shingler,
            scheme: HashScheme::Oph,
            num_perm,
            seed: 1,
            lsh,
            band_keys: BandKeyScheme::Fast,
        }
    }

    /// lshcurator 0.2.3 preset: trim (py_strip) only, Chars or Bytes shingles, Datasketch
    /// scheme, num_perm = bands*rows, seed 36, Lshcurator band keys.
    pub fn lshcurator(
        k: usize,
        step: usize,
        byte_mode: bool,
        bands: usize,
        rows: usize,
    ) -> SketchConfig {
        SketchConfig {
            normalizer: Normalizer {
                trim: true,
                ..Normalizer::default()
            },
            shingler: if byte_mode {
                Shingler::Bytes { k, step }
            } else {
                Shingler::Chars { k, step }
            },
            scheme: HashScheme::Datasketch,
            num_perm: bands * rows,
            seed: 36,
            lsh: LshParams { bands, rows },
            band_keys: BandKeyScheme::Lshcurator,
        }
    }
}

/// What sketching one text produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SketchInfo {
    /// Shingles of the normalised text, repeats counted; 0 means the signature is all
    /// `EMPTY_SLOT` (text shorter than one shingle).
    pub shingles: usize,
    /// [`content_hash`] of the normalised text.
    pub content_hash: u128,
}

/// Sketches texts with one config; `Send + Sync` (share it across threads by reference / Arc).
#[derive(Clone, Debug)]
pub struct Sketcher {
    config: SketchConfig,
    hasher: MinHasher,
}

/// A text normalised by [`Sketcher::normalize`], with its content hash, ready to be signed.
pub struct Normalized<'a> {
    sketcher: &'a Sketcher,
    text: &'a str,
    content_hash: u128,
    sign: &'a mut SignScratch,
}

impl Normalized<'_> {
    /// The normalised text.
    pub fn text(&self) -> &str {
        self.text
    }

    /// [`content_hash`] of the normalised text (what [`SketchInfo::content_hash`] reports).
    pub fn content_hash(&self) -> u128 {
        self.content_hash
    }

    /// Signs the text into `sig`, as [`Sketcher::signature`] does.
    ///
    /// # Panics
    /// When `sig.len() != num_perm`.
    pub fn signature(self, sig: &mut [u32]) -> SketchInfo {
        let s = self.sketcher;
        let shingles = s.hasher.sign(&s.config.shingler, self.text, self.sign, sig);
        SketchInfo {
            shingles,
            content_hash: self.content_hash,
        }
    }

    /// Signs the text into `sig` and band-keys it into `keys`, as [`Sketcher::sketch`] does.
    ///
    /// # Panics
    /// When a buffer has the wrong length.
    pub fn sketch(self, sig: &mut [u32], keys: &mut [u64]) -> SketchInfo {
        let config = &self.sketcher.config;
        let (scheme, lsh) = (config.band_keys, config.lsh);
        let info = self.signature(sig);
        band_keys(scheme, lsh, sig, keys);
        info
    }
}

/// Per-thread reusable buffers: normalisation buffers + [`SignScratch`].
#[derive(Default, Debug)]
pub struct Scratch {
    norm: NormalizeScratch,
    sign: SignScratch,
    /// Buffers of [`fingerprint_set`].
    set: SetScratch,
}

impl Scratch {
    /// Scratch for callers who take [`Sketcher::last_shingle_set`] after every text: signing
    /// then shares work with building the set ([`SignScratch::collecting_distinct`]).
    pub fn collecting_shingle_sets() -> Scratch {
        Scratch {
            sign: SignScratch::collecting_distinct(),
            ..Scratch::default()
        }
    }

    /// Whether signing keeps what [`Sketcher::last_shingle_set`] takes (as
    /// [`Scratch::collecting_shingle_sets`] makes it); see
    /// [`SignScratch::set_collecting_distinct`].
    pub fn collects_shingle_sets(&self) -> bool {
        self.sign.collects_distinct()
    }

    /// Turns keeping what [`Sketcher::last_shingle_set`] takes on or off
    /// ([`SignScratch::set_collecting_distinct`]).
    pub fn set_collecting_shingle_sets(&mut self, on: bool) {
        self.sign.set_collecting_distinct(on);
    }
}

impl Sketcher {
    /// Validates the config and precomputes the permutations.
    pub fn new(config: SketchConfig) -> Result<Sketcher, SketchError> {
        config.validate()?;
        let hasher = MinHasher::new(config.scheme, config.num_perm, config.seed)?;
        Ok(Sketcher { config, hasher })
    }

    /// The config this sketcher was built from.
    pub fn config(&self) -> &SketchConfig {
        &self.config
    }

    /// The underlying MinHasher.
    pub fn hasher(&self) -> &MinHasher {
        &self.hasher
    }

    /// Whether the shingler's tokenizer takes texts in batches ([`Sketcher::prefetch`]): callers
    /// that sketch a block of texts gather them only then.
    pub fn wants_batches(&self) -> bool {
        self.config.shingler.batching_tokenizer().is_some()
    }

    /// Hands the texts this thread is about to sketch to a tokenizer that takes batches (one
    /// that holds a lock per call, such as a Python callable and its GIL), normalised as
    /// sketching normalises them, so it tokenizes them all in one call. Sketching gives the
    /// same results with or without it; without a batching tokenizer it does nothing.
    pub fn prefetch<'t>(&self, texts: impl IntoIterator<Item = &'t str>) {
        let Some(tokenizer) = self.config.shingler.batching_tokenizer() else {
            return;
        };
        let normalized: Vec<std::borrow::Cow<'t, str>> = texts
            .into_iter()
            .map(|t| self.config.normalizer.normalize(t))
            .collect();
        let texts: Vec<&str> = normalized.iter().map(|t| t.as_ref()).collect();
        tokenizer.prefetch(&texts);
    }

    /// Signature length.
    pub fn num_perm(&self) -> usize {
        self.config.num_perm
    }

    /// Keys per text.
    pub fn bands(&self) -> usize {
        self.config.lsh.bands
    }

    /// Normalise, shingle, sign, band-key. `sig.len() == num_perm`, `keys.len() == bands`.
    /// `content_hash` is of the normalised text. A text without shingles still gets the keys of
    /// the all-`EMPTY_SLOT` signature (as lshcurator does); check `shingles == 0` to treat it
    /// differently.
    ///
    /// # Panics
    /// When a buffer has the wrong length.
    pub fn sketch(
        &self,
        text: &str,
        scratch: &mut Scratch,
        sig: &mut [u32],
        keys: &mut [u64],
    ) -> SketchInfo {
        self.normalize(text, scratch).sketch(sig, keys)
    }

    /// Only the signature (stage 2 recomputes signatures of hot samples).
    ///
    /// # Panics
    /// When `sig.len() != num_perm`.
    pub fn signature(&self, text: &str, scratch: &mut Scratch, sig: &mut [u32]) -> SketchInfo {
        self.normalize(text, scratch).signature(sig)
    }

    /// Normalises `text` into `scratch` and hashes its content, signing nothing yet: a caller
    /// that already knows the keys of this content (an exact copy of a text it sketched) looks
    /// them up by [`Normalized::content_hash`] and signs only on a miss, normalising once either
    /// way.
    pub fn normalize<'a>(&'a self, text: &'a str, scratch: &'a mut Scratch) -> Normalized<'a> {
        let Scratch { norm, sign, .. } = scratch;
        let text = self.config.normalizer.normalize_into(text, norm);
        Normalized {
            sketcher: self,
            content_hash: content_hash(text),
            text,
            sign,
        }
    }

    /// The normalised text's shingle set: the sorted distinct [`crate::fingerprint`]s of its
    /// shingle hashes (for exact Jaccard verification with [`crate::jaccard_at_least`]).
    pub fn shingle_set(&self, text: &str, scratch: &mut Scratch, out: &mut Vec<u32>) {
        let text = self
            .config
            .normalizer
            .normalize_into(text, &mut scratch.norm);
        let Scratch { sign, set, .. } = scratch;
        // Real text repeats about half of its shingles: the signing path's cheap filter drops
        // most repeats before the set is sorted.
        let hashes = self
            .hasher
            .mostly_distinct_hashes(&self.config.shingler, text, sign);
        fingerprint_set(hashes, out, set);
    }

    /// Hands the shingle hashes of `text`, normalised, to `each` at most `most` at a time
    /// (repeats kept; their distinct [`crate::fingerprint`]s are [`Sketcher::shingle_set`]),
    /// without holding them all when the text is signed a piece at a time
    /// ([`MinHasher::for_each_shingle_hash`]): how a caller builds the set of a text too long for
    /// its set to be held in memory. Returns the number of shingles.
    pub fn for_each_shingle_hash(
        &self,
        text: &str,
        scratch: &mut Scratch,
        most: usize,
        each: impl FnMut(&[u64]),
    ) -> usize {
        let text = self
            .config
            .normalizer
            .normalize_into(text, &mut scratch.norm);
        self.hasher.for_each_shingle_hash(
            &self.config.shingler,
            text,
            &mut scratch.sign,
            most,
            each,
        )
    }

    /// The 128-bit content hash of `text` after normalisation (what [`Sketcher::sketch`] reports
    /// as `content_hash`), normalising into `scratch`'s buffers: no shingle is hashed and
    /// nothing is allocated once the buffers have grown.
    pub fn content_hash(&self, text: &str, scratch: &mut Scratch) -> u128 {
        self.normalize(text, scratch).content_hash()
    }

    /// Appends to `out` the shingle set of the text last passed to [`Sketcher::signature`] or
    /// [`Sketcher::sketch`] with this scratch, as [`Sketcher::shingle_set`] would return it,
    /// without normalising and hashing the text again.
    ///
    /// # Panics
    /// When `scratch` was not made by [`Scratch::collecting_shingle_sets`]: a long text is
    /// signed a piece at a time, and only such a scratch keeps what its set is made of.
    pub fn last_shingle_set(&self, scratch: &mut Scratch, out: &mut Vec<u32>) {
        assert!(
            scratch.sign.collects_distinct(),
            "last_shingle_set needs a scratch made by Scratch::collecting_shingle_sets"
        );
        append_fingerprint_set(scratch.sign.mostly_distinct_hashes(), out, &mut scratch.set);
    }
}
