//! One configuration for a whole run, serialisable to and from TOML or JSON, and the one order in
//! which its layers apply ([`Layers`]): the defaults, a preset's defaults, the settings file, the
//! caller's settings (flags, keywords), and the settings a preset pins.
//!
//! Defaults are not written here twice: where a lower crate has a default of its own (stage 1's
//! chunk size, the decision settings, the row rule, the join separator), the section's default
//! is read from it.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use neardup_corpus::{DEFAULT_SEPARATOR, FieldPath, FieldsMode, Format, TextSelector};
use neardup_dedup::{DeduperConfig, EmptyPolicy, Prefer, Verify};
use neardup_exec::OnError;
use neardup_keys::{DEFAULT_CHUNK_BYTES, DEFAULT_MIN_COUNT, MaskMemory, RowRule, ShortTextPolicy};
use neardup_sketch::{
    BandKeyScheme, CharClassSet, HashScheme, LshParams, Normalizer, Shingler, SketchConfig,
};
use serde::{Deserialize, Serialize};

use crate::error::{ConfigError, Error, SettingsFileProblem};
use crate::limits::{MAX_NUM_PERM, MAX_THREADS};

/// How (bands, rows) are chosen for a threshold when they are not given: the weights of LSH's
/// false-positive area (pairs below the threshold that become candidates) and false-negative
/// area (pairs above it that never do) in [`LshParams::optimal`]. Only their ratio matters.
///
/// The weighting follows [`Verify`], because what a false candidate costs depends on it (see
/// `docs/tuning.md`, "threshold, and how (bands, rows) are chosen").
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LshWeights {
    /// Weight of the false-positive area.
    pub false_positive: f64,
    /// Weight of the false-negative area.
    pub false_negative: f64,
}

impl LshWeights {
    /// Under `--verify estimate`, and so under `--compat lshcurator`, which pins it: a false
    /// candidate costs one signature comparison but may be dropped when its estimate reaches the
    /// threshold by chance, so false candidates are not free; a miss still weighs 19 times more.
    /// At threshold 0.8 and 128 permutations this picks 16 bands × 8 rows.
    pub const ESTIMATE: LshWeights = LshWeights {
        false_positive: 0.05,
        false_negative: 0.95,
    };

    /// Under `--verify exact` (the default): a false candidate costs at most one set
    /// intersection and can never drop a document, while a miss is a duplicate kept for good.
    /// So a miss weighs about 330 false candidates. At threshold 0.8 and 128 permutations this
    /// picks 20 bands × 6 rows, which found duplicates 16 × 8 missed for a little more wall time
    /// (`docs/benchmarks.md`, "Default bands and rows").
    pub const EXACT: LshWeights = LshWeights {
        false_positive: 0.003,
        false_negative: 0.997,
    };

    /// The weighting for a way of confirming candidates.
    pub fn for_verify(verify: Verify) -> LshWeights {
        match verify {
            Verify::Estimate => LshWeights::ESTIMATE,
            Verify::Jaccard => LshWeights::EXACT,
        }
    }

    /// Why this weighting, for `neardup params`: lines of at most 80 characters.
    pub fn reason(verify: Verify) -> &'static str {
        match verify {
            Verify::Estimate => concat!(
                "a candidate whose estimated similarity reaches the threshold is dropped, and\n",
                "the estimate errs (about 0.035 near 0.8 with 128 permutations), so a false\n",
                "candidate may drop a document: a miss weighs 19 false candidates\n",
                "(--compat lshcurator estimates too, so it keeps this weighting)",
            ),
            Verify::Jaccard => concat!(
                "a candidate is dropped only when the exact Jaccard of its shingle sets reaches\n",
                "the threshold, so a false candidate costs at most one set intersection and can\n",
                "never drop a document, while a miss is a duplicate kept for good: a miss\n",
                "weighs about 330 false candidates, leaning to recall",
            ),
        }
    }
}

/// Everything that defines a run. Every field has a default; see `docs/tuning.md`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// What to read.
    pub input: InputSettings,
    /// How texts become signatures and keys.
    pub sketch: SketchSettings,
    /// Stage 1.
    pub keys: KeysSettings,
    /// Stage 2.
    pub dedup: DedupSettings,
    /// Threads and error policy.
    pub run: RunSettings,
    /// What to write.
    pub output: OutputSettings,
}

/// What to read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InputSettings {
    /// Files, directories (recursive) and glob patterns.
    pub inputs: Vec<String>,
    /// Force a format instead of going by extension.
    pub format: Option<Format>,
    /// Text fields (dotted paths into JSON objects, or Parquet columns).
    pub fields: Vec<String>,
    /// Several fields: join them into one text per record, or one sample per field.
    pub fields_mode: FieldsModeKind,
    /// Separator for `join`.
    pub separator: String,
    /// A field carried into every decision as the record's id.
    pub id_field: Option<String>,
}

impl Default for InputSettings {
    fn default() -> Self {
        InputSettings {
            inputs: Vec::new(),
            format: None,
            fields: vec!["text".into()],
            fields_mode: FieldsModeKind::Join,
            separator: DEFAULT_SEPARATOR.into(),
            id_field: None,
        }
    }
}

/// Which way several text fields make samples (the setting `fields_mode`): the kind of the
/// corpus's `FieldsMode` without its data; with the setting `separator` it becomes one
/// ([`Config::selector`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldsModeKind {
    /// One sample per record, the fields newline-joined.
    Join,
    /// One sample per field (lshcurator's semantics).
    Expand,
}

/// What a shingle is made of (the setting `tokenize`); with the shingle size and step it becomes
/// the sketch's `neardup_sketch::Shingler`. Written as a name in settings files and flags:
/// `char`, `byte`, `word`, `ascii-word` (also `alnum`), `jieba`, `custom:NAME`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ShingleUnit {
    /// Unicode characters.
    Char,
    /// UTF-8 bytes.
    Byte,
    /// Words (Unicode word boundaries).
    Word,
    /// Runs of ASCII letters, digits and `_` (hojichar's `non_alpha_num_splitter`, `alnum`).
    AsciiWord,
    /// Chinese words by jieba (`neardup_segment::Jieba`), n-grams joined by one space.
    Jieba,
    /// Tokens of a tokenizer the program hands in under this name (the Python package's
    /// `tokenizer=` callable): [`SketchSettings::custom_tokenizer`]. The name enters the
    /// settings fingerprint, so runs with different tokenizers must name them differently.
    Custom(String),
}

impl FromStr for ShingleUnit {
    type Err = String;
    fn from_str(name: &str) -> Result<ShingleUnit, String> {
        Ok(match name {
            "char" => ShingleUnit::Char,
            "byte" => ShingleUnit::Byte,
            "word" => ShingleUnit::Word,
            "ascii-word" | "alnum" => ShingleUnit::AsciiWord,
            "jieba" => ShingleUnit::Jieba,
            _ => match name.strip_prefix("custom:") {
                Some(custom) if !custom.is_empty() => ShingleUnit::Custom(custom.to_string()),
                _ => {
                    return Err(format!(
                        "unknown tokenize {name:?} (known: \"char\", \"byte\", \"word\", \
                         \"ascii-word\" or \"alnum\", \"jieba\", and \"custom:NAME\" for a \
                         tokenizer handed in by the Python package's tokenizer=)"
                    ));
                }
            },
        })
    }
}

impl TryFrom<String> for ShingleUnit {
    type Error = String;
    fn try_from(name: String) -> Result<ShingleUnit, String> {
        name.parse()
    }
}

impl std::fmt::Display for ShingleUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShingleUnit::Char => f.write_str("char"),
            ShingleUnit::Byte => f.write_str("byte"),
            ShingleUnit::Word => f.write_str("word"),
            ShingleUnit::AsciiWord => f.write_str("ascii-word"),
            ShingleUnit::Jieba => f.write_str("jieba"),
            ShingleUnit::Custom(name) => write!(f, "custom:{name}"),
        }
    }
}

impl From<ShingleUnit> for String {
    fn from(unit: ShingleUnit) -> String {
        unit.to_string()
    }
}

/// The tokenizer of `tokenize = "custom:NAME"` ([`SketchSettings::custom_tokenizer`]): a program
/// hands it in beside the settings, since no settings file can hold one. Equal when it is the
/// same tokenizer.
#[derive(Clone, Debug)]
pub struct CustomTokenizer(pub std::sync::Arc<dyn neardup_sketch::Tokenizer>);

impl PartialEq for CustomTokenizer {
    fn eq(&self, other: &CustomTokenizer) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// How texts become signatures and keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SketchSettings {
    /// Shingle unit.
    pub tokenize: ShingleUnit,
    /// Shingle size (characters, bytes or words).
    pub shingle: usize,
    /// Window step.
    pub step: usize,
    /// Trim leading and trailing whitespace.
    pub trim: bool,
    /// Unicode NFKC.
    pub nfkc: bool,
    /// Lowercase.
    pub lowercase: bool,
    /// Remove punctuation.
    pub strip_punctuation: bool,
    /// Keep only these characters, e.g. `0-9a-zA-Z가-힣`.
    pub keep_chars: Option<String>,
    /// Collapse whitespace runs into one space.
    pub collapse_whitespace: bool,
    /// MinHash hash scheme (default `oph`; see docs/tuning.md, "Hash schemes").
    pub hash: HashScheme,
    /// Signature width.
    pub num_perm: usize,
    /// Seed of the permutations.
    pub seed: u64,
    /// LSH bands (with `rows`; otherwise chosen from the threshold).
    pub bands: Option<usize>,
    /// Rows per band.
    pub rows: Option<usize>,
    /// Band-key encoding.
    pub band_keys: BandKeyScheme,
    /// The tokenizer of `tokenize = "custom:NAME"`, whose [`neardup_sketch::Tokenizer::name`]
    /// must be `custom:NAME`. Not a setting of files or flags: a program sets it (the Python
    /// package from `tokenizer=`).
    #[serde(skip)]
    pub custom_tokenizer: Option<CustomTokenizer>,
}

impl Default for SketchSettings {
    fn default() -> Self {
        SketchSettings {
            tokenize: ShingleUnit::Char,
            shingle: 5,
            step: 1,
            trim: true,
            nfkc: false,
            lowercase: false,
            strip_punctuation: false,
            keep_chars: None,
            collapse_whitespace: false,
            hash: HashScheme::Oph,
            num_perm: 128,
            seed: 1,
            bands: None,
            rows: None,
            band_keys: BandKeyScheme::Fast,
            custom_tokenizer: None,
        }
    }
}

/// Stage-1 settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeysSettings {
    /// Near-duplicate detection (MinHash band keys). Off for exact deduplication only.
    pub near: bool,
    /// A key is hot when seen more than this many times.
    pub min_key_count: u32,
    /// Count content hashes too, so exact copies are dropped without signature work.
    pub exact: bool,
    /// What texts shorter than one shingle get.
    pub short_texts: ShortTextPolicy,
    /// Bytes the key table may take before stage 1 spills to disk; half of it is what stage 2's
    /// decision state may take before representatives' signatures and shingle sets spill
    /// ([`decision_memory`]).
    pub memory_limit: Option<u64>,
    /// Where spill files go.
    pub spill_dir: Option<PathBuf>,
    /// Largest unit of parallel work within large files, in bytes (smaller inputs get smaller
    /// chunks: `neardup_corpus::balanced_chunk_bytes`).
    pub chunk_bytes: u64,
}

impl Default for KeysSettings {
    fn default() -> Self {
        let rule = RowRule::default();
        KeysSettings {
            near: rule.band_keys,
            min_key_count: DEFAULT_MIN_COUNT,
            exact: rule.exact_key,
            short_texts: rule.short_texts,
            memory_limit: None,
            spill_dir: None,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
        }
    }
}

/// The share of [`KeysSettings::memory_limit`] stage 2's decision state may take (see
/// `neardup_dedup::DeduperConfig::decision_memory`): half, the other half being for the blocks in
/// flight, the hot mask and the writers.
pub fn decision_memory(memory_limit: u64) -> u64 {
    memory_limit / 2
}

/// The largest unit of parallel work under [`KeysSettings::memory_limit`]: a 512th of it (at
/// least 1 MiB). Stage 2 holds up to four blocks per thread (two prepared ahead of the deciding
/// thread, two recycled), and a block of hot samples takes several times its input bytes (per
/// 100-byte text a 512-byte signature, keys and a shingle set; per 3 KB page a 12 KB shingle
/// set), so smaller blocks keep what is in flight to a small share of the limit. Independent of
/// the thread count, as everything that shapes outputs is.
pub fn chunk_bytes_within(memory_limit: u64) -> u64 {
    (memory_limit / 512).max(1 << 20)
}

/// What a run holds per worker thread beside the blocks it reads (which the block memory
/// bounds): its reader's buffers (a Parquet reader's decompressed pages and decoded
/// dictionaries, a few megabytes with pages of 1 MB), its sketching scratch, its stack and its
/// allocator's arena. Measured: see docs/tuning.md, "Memory limit and spilling".
pub const MEMORY_PER_THREAD: u64 = 8 << 20;

/// What a run holds beside what `memory_limit` bounds, whatever the thread count: the program
/// and its allocator, the block being decided and those waiting for the writer, and the
/// writers' buffers. A run's peak stays below the limit plus this (docs/tuning.md, "Memory
/// limit and spilling", says what it leaves out: the largest text's working memory, and a
/// Parquet output's row group being encoded).
pub const MEMORY_ABOVE_LIMIT: u64 = 32 << 20;

/// What a run with `threads` worker threads holds beside what `memory_limit` bounds (the
/// memory that grows with the corpus, and spills): [`MEMORY_ABOVE_LIMIT`], and
/// [`MEMORY_PER_THREAD`] per thread. A limit below it is said before a run starts (it will use
/// about this much more); above it, the threads a run uses are those the limit has room for
/// ([`threads_within`]).
pub fn memory_floor(threads: usize) -> u64 {
    MEMORY_ABOVE_LIMIT + MEMORY_PER_THREAD * threads as u64
}

/// The worker threads a run under `memory_limit` uses when asked for `threads` (already
/// resolved: not 0): as many as the limit has room for, what each thread holds
/// ([`MEMORY_PER_THREAD`]) taking at most a quarter of it, and at least one. Fewer threads
/// change nothing a run decides or writes.
pub fn threads_within(memory_limit: u64, threads: usize) -> usize {
    let room = (memory_limit / 4 / MEMORY_PER_THREAD).max(1);
    threads.clamp(1, usize::try_from(room).unwrap_or(usize::MAX))
}

/// How a run holds [`KeysSettings::memory_limit`]: the run report's `memory` (absent without a
/// limit), so that a report says what the limit changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPlan {
    /// The limit, in bytes.
    pub limit: u64,
    /// The worker threads asked for (`run.threads`, 0 resolved to the cores).
    pub threads_asked: usize,
    /// The worker threads the run used ([`threads_within`]).
    pub threads: usize,
    /// The largest block read at once ([`block_bytes_within`]).
    pub block_bytes: u64,
    /// The blocks in flight, with what preparing added to them, at most ([`block_memory_within`]).
    pub block_memory: u64,
    /// Stage 2's decision state at most before it spills ([`decision_memory`]).
    pub decision_memory: u64,
    /// What the run holds beside the limit at most ([`MEMORY_ABOVE_LIMIT`]; docs/tuning.md,
    /// "Memory limit and spilling", says what it leaves out).
    pub above_limit: u64,
}

impl MemoryPlan {
    /// The plan of a run of `config`; `None` without a memory limit.
    pub fn of(config: &Config) -> Option<MemoryPlan> {
        let limit = config.keys.memory_limit?;
        let threads_asked = neardup_exec::ExecOptions::threads(config.run.threads).threads;
        let threads = threads_within(limit, threads_asked);
        Some(MemoryPlan {
            limit,
            threads_asked,
            threads,
            block_bytes: block_bytes_within(limit, threads) as u64,
            block_memory: block_memory_within(limit),
            decision_memory: decision_memory(limit),
            above_limit: MEMORY_ABOVE_LIMIT,
        })
    }
}

/// The bytes of read blocks a run under [`KeysSettings::memory_limit`] holds at most between
/// reading them and being done with them (prepared, or waiting for their turn; see
/// `neardup_exec::ExecOptions::block_memory`): an eighth of it, whatever the thread count and the
/// size of a chunk (a Parquet row group decodes to several times its bytes on disk). What
/// preparing adds to a block (decoded texts, signatures, shingle sets) comes on top, a few times
/// its bytes for hot samples.
pub fn block_memory_within(memory_limit: u64) -> u64 {
    (memory_limit / 8).max(1)
}

/// The size of a read block under [`KeysSettings::memory_limit`] with `threads` workers: a
/// sixteenth per thread of [`block_memory_within`] (a block is charged there with what preparing
/// may add to it, up to four times its bytes of text in shingle sets, and a few wait for their
/// turn), from 64 KiB up to the default 4 MiB. Smaller blocks change nothing a run decides or
/// writes (the Parquet writer regroups rows, see `neardup_corpus::FileWriter`).
pub fn block_bytes_within(memory_limit: u64, threads: usize) -> usize {
    let per_block = block_memory_within(memory_limit) / (16 * threads.max(1) as u64);
    per_block.clamp(
        64 << 10,
        neardup_corpus::ReadOptions::DEFAULT_BLOCK_BYTES as u64,
    ) as usize
}

/// Stage 2's settings as a run's [`Config`] holds them (the section `dedup`); the dedup crate
/// takes them as the decision core's `DeduperConfig` ([`Config::deduper_config`]) inside the
/// pass's `Stage2Config` ([`crate::stage2_config`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DedupSettings {
    /// Similarity at which a sample is a duplicate.
    pub threshold: f64,
    /// Representatives per hot bucket (`None`: unbounded). Settings files, flags and keywords
    /// say "unbounded" with 0 (TOML has no null), read by [`DedupSettings::max_reps_given`].
    #[serde(deserialize_with = "max_reps_given")]
    pub max_reps: Option<usize>,
    /// How candidates are confirmed.
    pub verify: Verify,
    /// Memory for exact verification's shingle sets before they spill.
    pub verify_memory: u64,
    /// Keep or drop empty texts.
    pub empty: EmptyPolicy,
    /// Which copy of a duplicate set is kept: `first` (input order), `longest`, `shortest`,
    /// `FIELD:desc` or `FIELD:asc` (see `neardup_dedup::Prefer`).
    pub prefer: Prefer,
    /// With a preference other than `first`: memory for the ranked hot samples a run (or a
    /// `sign` step) sorts, and for the decisions a run (or a `decide` step) holds to write them
    /// in row order, before sorted runs spill to `keys.spill_dir`. Under `keys.memory_limit`, at
    /// most a quarter of the limit ([`Config::sort_memory`]).
    pub sort_memory: u64,
    /// Saved indexes of earlier runs to deduplicate against (`--against`), in order: this run's
    /// records get the decisions they get in one run over the indexed runs' inputs, then these.
    pub against: Vec<PathBuf>,
}

/// The default of [`DedupSettings::sort_memory`].
pub const DEFAULT_SORT_MEMORY: u64 = 256 << 20;

impl Default for DedupSettings {
    fn default() -> Self {
        let d = DeduperConfig::default();
        DedupSettings {
            threshold: d.threshold,
            max_reps: d.max_reps,
            verify: d.verify,
            verify_memory: d.verify_memory,
            empty: EmptyPolicy::default(),
            prefer: Prefer::First,
            sort_memory: DEFAULT_SORT_MEMORY,
            against: Vec::new(),
        }
    }
}

impl DedupSettings {
    /// `max_reps` as a settings file, a flag (`--max-reps`) or a keyword gives it: 0 is how they
    /// say "unbounded" (TOML has no null). The one place where 0 means that.
    pub fn max_reps_given(given: usize) -> Option<usize> {
        (given > 0).then_some(given)
    }
}

fn max_reps_given<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    Ok(Option::<usize>::deserialize(d)?.and_then(DedupSettings::max_reps_given))
}

/// Threads and error policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunSettings {
    /// Worker threads (0: all cores).
    pub threads: usize,
    /// Skip bad records (counted and quoted) or stop at the first.
    pub on_error: OnError,
}

/// What to write.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutputSettings {
    /// Filtered dataset directory.
    pub dir: Option<PathBuf>,
    /// Decisions file (`.jsonl` or `.parquet`).
    pub decisions: Option<PathBuf>,
    /// Run report (JSON).
    pub report: Option<PathBuf>,
    /// Replace an existing output directory.
    pub overwrite: bool,
    /// Split outputs into parts of at most this many bytes.
    pub max_output_bytes: Option<u64>,
    /// Where to save the index of this run (with the indexes it was made against), for later
    /// runs to deduplicate against (`--index-out`).
    pub index_out: Option<PathBuf>,
    /// Whether `decisions` is a stand-in the caller sends to standard output once the run has
    /// succeeded (the CLI's `--decisions -`): the run's report then names the decisions `-`,
    /// not the stand-in, which is gone once sent. Not a setting of files or flags.
    #[serde(skip)]
    pub decisions_to_stdout: bool,
}

/// A preset reproducing another tool's decisions (the CLI's `--compat`, Python's `compat=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// lshcurator 0.2.3's `Curator.process_corpus`; see `docs/compatibility.md`.
    Lshcurator,
}

/// A preset name no preset has.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown compat preset {0:?} (known: \"lshcurator\")")]
pub struct UnknownPreset(pub String);

impl FromStr for Preset {
    type Err = UnknownPreset;
    fn from_str(name: &str) -> Result<Preset, UnknownPreset> {
        match name {
            "lshcurator" => Ok(Preset::Lshcurator),
            other => Err(UnknownPreset(other.to_string())),
        }
    }
}

impl Preset {
    /// The settings the preset only changes the default of: a settings file and the caller's
    /// settings still set them (lshcurator's bound on representatives, unbounded by default).
    fn defaults(self, c: &mut Config) {
        match self {
            Preset::Lshcurator => c.dedup.max_reps = None,
        }
    }

    /// The settings the preset pins, over the settings file and the caller's: what reproducing
    /// the tool needs. What the tool lets its user choose (shingles, bands and rows) is kept.
    fn pin(self, c: &mut Config) {
        match self {
            Preset::Lshcurator => {
                c.input.fields_mode = FieldsModeKind::Expand;
                // lshcurator keeps the first copy.
                c.dedup.prefer = Prefer::First;
                c.sketch = SketchSettings {
                    tokenize: if c.sketch.tokenize == ShingleUnit::Byte {
                        ShingleUnit::Byte
                    } else {
                        ShingleUnit::Char
                    },
                    shingle: c.sketch.shingle,
                    step: c.sketch.step,
                    trim: true,
                    hash: HashScheme::Datasketch,
                    seed: 36,
                    band_keys: BandKeyScheme::Lshcurator,
                    bands: c.sketch.bands,
                    rows: c.sketch.rows,
                    num_perm: c.sketch.num_perm,
                    ..SketchSettings::default()
                };
                if let (Some(b), Some(r)) = (c.sketch.bands, c.sketch.rows) {
                    // lshcurator signs with exactly bands × rows permutations.
                    c.sketch.num_perm = b * r;
                }
                c.keys.exact = false;
                c.keys.short_texts = ShortTextPolicy::EmptySignature;
                c.dedup.verify = Verify::Estimate;
            }
        }
    }
}

/// A run's settings being built from its layers, in the one order every front end (the CLI, the
/// Python package) applies them: the defaults, the preset's defaults, the settings file (only
/// the settings it names), the caller's own settings ([`Layers::given`]: flags, keywords), and
/// last the settings the preset pins ([`Layers::finish`]).
#[derive(Debug)]
pub struct Layers {
    config: Config,
    preset: Option<Preset>,
}

impl Layers {
    /// The defaults, then `preset`'s defaults, then the settings file `file`.
    pub fn new(preset: Option<Preset>, file: Option<&Path>) -> Result<Layers, Error> {
        let mut config = Config::default();
        if let Some(p) = preset {
            p.defaults(&mut config);
        }
        if let Some(path) = file {
            config.merge_file(path)?;
        }
        Ok(Layers { config, preset })
    }

    /// The settings so far, for the caller to write its own over.
    pub fn given(&mut self) -> &mut Config {
        &mut self.config
    }

    /// The settings, with what the preset pins written last.
    pub fn finish(mut self) -> Config {
        if let Some(p) = self.preset {
            p.pin(&mut self.config);
        }
        self.config
    }
}

impl Config {
    /// The preset that reproduces lshcurator 0.2.3's `Curator.process_corpus`: datasketch hashing
    /// with seed 36, lshcurator band keys, one sample per field, texts stripped, empty texts
    /// skipped, no exact-copy shortcut, short texts keep the empty signature, representatives
    /// unbounded (set a bound after the preset). [`Layers`] applies the same preset in layers.
    pub fn lshcurator(mut self) -> Config {
        Preset::Lshcurator.defaults(&mut self);
        Preset::Lshcurator.pin(&mut self);
        self
    }

    /// These settings without where a run reads and writes: the inputs, the output directory,
    /// the decisions file, the report, the saved index, the spill directory, and `overwrite`
    /// (which only ever meant the output directory named with it). What is left decides what a
    /// run decides and writes, and is what a run's report keeps as its `config`: given back as a
    /// settings file (`--config`, `config=`), it repeats the run's decisions on the inputs and
    /// outputs named anew, and never sends a run to write over an earlier run's outputs. The
    /// report keeps the paths apart ([`crate::ReportPaths`]).
    pub fn without_run_paths(&self) -> Config {
        let mut settings = self.clone();
        settings.input.inputs.clear();
        settings.keys.spill_dir = None;
        settings.output = OutputSettings {
            max_output_bytes: self.output.max_output_bytes,
            ..OutputSettings::default()
        };
        settings
    }

    /// Reads a TOML (`.toml`) or JSON file.
    pub fn load(path: &Path) -> Result<Config, Error> {
        Ok(read_settings_file(path)?.0)
    }

    /// Writes the settings a TOML (`.toml`) or JSON file names over these, leaving the others as
    /// they are: a settings file is one layer of [`Layers`].
    pub fn merge_file(&mut self, path: &Path) -> Result<(), Error> {
        let (_, named) = read_settings_file(path)?;
        let bad = |e: serde_json::Error| ConfigError::File {
            path: path.to_path_buf(),
            problem: SettingsFileProblem::Json(e),
        };
        let mut merged = serde_json::to_value(&*self).map_err(bad)?;
        if let serde_json::Value::Object(sections) = named {
            for (section, fields) in sections {
                match fields {
                    serde_json::Value::Object(fields) => {
                        for (name, value) in fields {
                            merged[&section][name] = value;
                        }
                    }
                    other => merged[&section] = other,
                }
            }
        }
        *self = serde_json::from_value(merged).map_err(bad)?;
        Ok(())
    }

    /// Checks the settings and builds the sketch configuration.
    pub fn sketch_config(&self) -> Result<SketchConfig, Error> {
        let s = &self.sketch;
        if s.shingle == 0 || s.step == 0 {
            return Err(ConfigError::ShingleOrStep {
                shingle: s.shingle,
                step: s.step,
            }
            .into());
        }
        if s.hash == HashScheme::Datasketch && s.seed > u64::from(u32::MAX) {
            return Err(ConfigError::DatasketchSeed { seed: s.seed }.into());
        }
        let tokens = |tokenizer| Shingler::Tokens {
            n: s.shingle,
            step: s.step,
            tokenizer,
        };
        let shingler = match &s.tokenize {
            ShingleUnit::Char => Shingler::Chars {
                k: s.shingle,
                step: s.step,
            },
            ShingleUnit::Byte => Shingler::Bytes {
                k: s.shingle,
                step: s.step,
            },
            ShingleUnit::Word => Shingler::Words {
                n: s.shingle,
                step: s.step,
            },
            ShingleUnit::AsciiWord => Shingler::AsciiWords {
                n: s.shingle,
                step: s.step,
            },
            ShingleUnit::Jieba => tokens(neardup_segment::jieba()),
            ShingleUnit::Custom(name) => match &s.custom_tokenizer {
                Some(t) if t.0.name() == s.tokenize.to_string() => tokens(t.0.clone()),
                _ => return Err(ConfigError::NoCustomTokenizer(name.clone()).into()),
            },
        };
        let keep_chars = match &s.keep_chars {
            Some(spec) => Some(
                spec.parse::<CharClassSet>()
                    .map_err(ConfigError::KeepChars)?,
            ),
            None => None,
        };
        let normalizer = Normalizer {
            trim: s.trim,
            nfkc: s.nfkc,
            lowercase: s.lowercase,
            strip_punctuation: s.strip_punctuation,
            keep_chars,
            collapse_whitespace: s.collapse_whitespace,
        };
        let lsh = self.lsh_params()?;
        let num_perm = s.num_perm.max(lsh.num_perm_used());
        let config = SketchConfig {
            normalizer,
            shingler,
            scheme: s.hash,
            num_perm,
            seed: s.seed,
            lsh,
            band_keys: s.band_keys,
        };
        config.validate().map_err(ConfigError::Sketch)?;
        Ok(config)
    }

    /// The LSH parameters: explicit, or optimal for the threshold and width under the weighting
    /// that `verify` calls for ([`LshWeights::for_verify`]). Checks the threshold, the signature
    /// width (1 to [`MAX_NUM_PERM`]) and that the bands fit it.
    pub fn lsh_params(&self) -> Result<LshParams, Error> {
        let s = &self.sketch;
        let t = self.dedup.threshold;
        if !(0.0..=1.0).contains(&t) {
            return Err(ConfigError::Threshold(t).into());
        }
        if !(1..=MAX_NUM_PERM).contains(&s.num_perm) {
            return Err(ConfigError::NumPerm(s.num_perm).into());
        }
        match (s.bands, s.rows) {
            (Some(b), Some(r)) => {
                if b == 0 || r == 0 {
                    return Err(ConfigError::BandsOrRowsZero { bands: b, rows: r }.into());
                }
                if b.saturating_mul(r) > s.num_perm {
                    return Err(ConfigError::BandsExceedNumPerm {
                        bands: b,
                        rows: r,
                        num_perm: s.num_perm,
                    }
                    .into());
                }
                LshParams::new(b, r).map_err(|e| ConfigError::Bands(e).into())
            }
            (None, None) => {
                let w = LshWeights::for_verify(self.dedup.verify);
                LshParams::optimal(
                    t.clamp(0.01, 0.99),
                    s.num_perm,
                    w.false_positive,
                    w.false_negative,
                )
                .map_err(|e| ConfigError::Lsh(e).into())
            }
            _ => Err(ConfigError::BandsWithoutRows.into()),
        }
    }

    /// The text selection.
    pub fn selector(&self) -> Result<TextSelector, Error> {
        let i = &self.input;
        if i.fields.is_empty() {
            return Err(ConfigError::NoField.into());
        }
        let parse = |f: &String| {
            f.parse::<FieldPath>()
                .map_err(|e| Error::from(ConfigError::FieldPath(e)))
        };
        Ok(TextSelector {
            fields: i.fields.iter().map(parse).collect::<Result<_, _>>()?,
            mode: match i.fields_mode {
                FieldsModeKind::Join => FieldsMode::Join {
                    separator: i.separator.clone(),
                },
                FieldsModeKind::Expand => FieldsMode::Expand,
            },
            id_field: i.id_field.as_ref().map(parse).transpose()?,
            rank_field: None,
        })
    }

    /// The per-sample rule of both stages.
    pub fn row_rule(&self) -> RowRule {
        RowRule {
            band_keys: self.keys.near,
            exact_key: self.keys.exact,
            short_texts: self.keys.short_texts,
        }
    }

    /// Stage 2's decision settings.
    pub fn deduper_config(&self) -> DeduperConfig {
        DeduperConfig {
            threshold: self.dedup.threshold,
            max_reps: self.dedup.max_reps,
            verify: self.dedup.verify,
            verify_memory: self.dedup.verify_memory,
            decision_memory: self.keys.memory_limit.map(decision_memory),
            spill_dir: self.keys.spill_dir.clone(),
        }
    }

    /// The memory for sorting ranked samples and decisions: `dedup.sort_memory`, and at most a
    /// quarter of `keys.memory_limit` (a ranked run's decide holds its decisions beside the
    /// decision state, which takes half).
    pub fn sort_memory(&self) -> usize {
        let within = self.keys.memory_limit.map_or(u64::MAX, |limit| limit / 4);
        usize::try_from(self.dedup.sort_memory.min(within)).unwrap_or(usize::MAX)
    }

    /// Where a hot mask built from saved key tables is kept (stage 2 run apart: `apply`, and
    /// the per-shard `sign` and `write` steps): within `keys.memory_limit`, spilling to
    /// `keys.spill_dir`.
    pub fn mask_memory(&self) -> MaskMemory {
        MaskMemory {
            memory_limit: self.keys.memory_limit,
            spill_dir: self.keys.spill_dir.clone(),
        }
    }

    /// Checks everything that can be checked before reading any input (paths are checked by
    /// [`crate::RunPaths`] once the inputs are known).
    pub fn validate(&self) -> Result<(), Error> {
        self.sketch_config()?;
        self.selector()?;
        self.validate_run()?;
        if !self.keys.near && !self.keys.exact {
            return Err(ConfigError::NothingToDetect.into());
        }
        if self.dedup.max_reps == Some(0) {
            return Err(ConfigError::NoRepresentatives.into());
        }
        if !self.dedup.against.is_empty() || self.output.index_out.is_some() {
            if self.keys.min_key_count != 1 {
                return Err(ConfigError::IndexMinCount(self.keys.min_key_count).into());
            }
            if !self.dedup.prefer.is_input_order() {
                return Err(ConfigError::IndexPrefer.into());
            }
        }
        if self.keys.chunk_bytes == 0 {
            return Err(ConfigError::ChunkBytes.into());
        }
        if self.input.format == Some(Format::Arrow) {
            return Err(ConfigError::TableRun(
                "format \"arrow\" is an in-memory table's, not a file's: give files as jsonl or \
                 parquet, or hand the table to neardup.dedup_table",
            )
            .into());
        }
        Ok(())
    }

    /// Checks the settings every step uses, the sketch aside: the thread count.
    pub fn validate_run(&self) -> Result<(), Error> {
        if self.run.threads > MAX_THREADS {
            return Err(ConfigError::Threads(self.run.threads).into());
        }
        Ok(())
    }
}

/// A settings file read twice: as a whole `Config` (so that its errors carry their line and
/// column, and unknown names are refused), and as the settings it names, to be merged.
fn read_settings_file(path: &Path) -> Result<(Config, serde_json::Value), Error> {
    let bad = |problem: SettingsFileProblem| ConfigError::File {
        path: path.to_path_buf(),
        problem,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(SettingsFileProblem::Read(e)))?;
    if path.extension().is_some_and(|e| e == "toml") {
        let toml = |e| bad(SettingsFileProblem::Toml(e));
        let json = |e| bad(SettingsFileProblem::Json(e));
        let config: Config = toml::from_str(&text).map_err(toml)?;
        let named: toml::Value = toml::from_str(&text).map_err(toml)?;
        Ok((config, serde_json::to_value(named).map_err(json)?))
    } else {
        let json = |e| bad(SettingsFileProblem::Json(e));
        let config: Config = serde_json::from_str(&text).map_err(json)?;
        let named: serde_json::Value = serde_json::from_str(&text).map_err(json)?;
        Ok((config, named))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn tokenize_names_round_trip_and_enter_the_fingerprint() {
        for name in [
            "char",
            "byte",
            "word",
            "ascii-word",
            "jieba",
            "custom:fugashi",
        ] {
            let unit: ShingleUnit = name.parse().unwrap();
            assert_eq!(unit.to_string(), name);
            let json = serde_json::to_value(&unit).unwrap();
            assert_eq!(json, name);
            assert_eq!(serde_json::from_value::<ShingleUnit>(json).unwrap(), unit);
        }
        assert_eq!("alnum".parse(), Ok(ShingleUnit::AsciiWord));
        assert!("custom:".parse::<ShingleUnit>().is_err());
        assert!(
            "mecab"
                .parse::<ShingleUnit>()
                .unwrap_err()
                .contains("jieba")
        );

        let fingerprint = |unit: ShingleUnit| {
            let mut c = Config::default();
            c.sketch.tokenize = unit;
            c.sketch_config().unwrap().fingerprint()
        };
        let prints = [
            fingerprint(ShingleUnit::Char),
            fingerprint(ShingleUnit::Word),
            fingerprint(ShingleUnit::AsciiWord),
            fingerprint(ShingleUnit::Jieba),
        ];
        for (i, a) in prints.iter().enumerate() {
            assert!(prints[i + 1..].iter().all(|b| a != b), "{prints:?}");
        }

        // A custom tokenizer must be handed in, under its name.
        #[derive(Debug)]
        struct Named(&'static str);
        impl neardup_sketch::Tokenizer for Named {
            fn name(&self) -> &str {
                self.0
            }
            fn tokenize(&self, text: &str, emit: &mut dyn FnMut(&str)) {
                text.split_whitespace().for_each(emit);
            }
        }
        let mut c = Config::default();
        c.sketch.tokenize = ShingleUnit::Custom("mine".into());
        let err = c.sketch_config().unwrap_err().to_string();
        assert!(err.contains("custom:mine"), "{err}");
        c.sketch.custom_tokenizer =
            Some(CustomTokenizer(std::sync::Arc::new(Named("custom:other"))));
        assert!(c.sketch_config().is_err(), "another name");
        c.sketch.custom_tokenizer =
            Some(CustomTokenizer(std::sync::Arc::new(Named("custom:mine"))));
        let mine = c.sketch_config().unwrap();
        assert_eq!(mine.shingler.describe(), "token:custom:mine:5:1");
        c.sketch.tokenize = ShingleUnit::Custom("yours".into());
        c.sketch.custom_tokenizer =
            Some(CustomTokenizer(std::sync::Arc::new(Named("custom:yours"))));
        assert_ne!(c.sketch_config().unwrap().fingerprint(), mine.fingerprint());
    }

    #[test]
    fn sorting_takes_at_most_a_quarter_of_the_memory_limit() {
        let mut c = Config::default();
        assert_eq!(c.sort_memory() as u64, DEFAULT_SORT_MEMORY);
        c.keys.memory_limit = Some(100 << 20);
        assert_eq!(c.sort_memory(), 25 << 20);
        c.keys.memory_limit = Some(4 << 30);
        assert_eq!(c.sort_memory() as u64, DEFAULT_SORT_MEMORY);
        c.dedup.sort_memory = 1000;
        assert_eq!(c.sort_memory(), 1000);
    }

    #[test]
    fn a_settings_file_changes_only_what_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let toml = file(&dir, "s.toml", "[dedup]\nthreshold = 0.7\n");
        let mut layers = Layers::new(Some(Preset::Lshcurator), Some(&toml)).unwrap();
        layers.given().sketch.lowercase = true;
        let c = layers.finish();
        assert_eq!(c.dedup.threshold, 0.7);
        // The preset's default survives a file that does not name it, its pins the flags.
        assert_eq!(c.dedup.max_reps, None);
        assert!(!c.sketch.lowercase);
        assert_eq!(c.sketch.hash, HashScheme::Datasketch);
        // Without a preset, the file over the defaults is the file loaded.
        let plain = Layers::new(None, Some(&toml)).unwrap().finish();
        assert_eq!(plain, Config::load(&toml).unwrap());
    }

    #[test]
    fn a_bound_from_the_settings_file_survives_the_preset() {
        let dir = tempfile::tempdir().unwrap();
        let json = file(&dir, "s.json", r#"{"dedup": {"max_reps": 8}}"#);
        let c = Layers::new(Some(Preset::Lshcurator), Some(&json))
            .unwrap()
            .finish();
        assert_eq!(c.dedup.max_reps, Some(8));
        assert_eq!(c.dedup.verify, Verify::Estimate);
    }

    #[test]
    fn zero_representatives_means_unbounded_when_given() {
        let dir = tempfile::tempdir().unwrap();
        let toml = file(&dir, "s.toml", "[dedup]\nmax_reps = 0\n");
        assert_eq!(Config::load(&toml).unwrap().dedup.max_reps, None);
        assert_eq!(DedupSettings::max_reps_given(0), None);
        assert_eq!(DedupSettings::max_reps_given(3), Some(3));
        let mut direct = Config::default();
        direct.dedup.max_reps = Some(0);
        let err = direct.validate().unwrap_err().to_string();
        assert!(err.contains("max_reps must be at least 1"), "{err}");
    }

    #[test]
    fn a_bad_settings_file_names_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let toml = file(&dir, "s.toml", "[dedup]\nthreshold = \"high\"\n");
        let err = Layers::new(None, Some(&toml)).unwrap_err().to_string();
        assert!(err.contains("s.toml") && err.contains("line 2"), "{err}");
    }

    #[test]
    fn default_bands_lean_to_recall_under_exact_verification_only() {
        let lsh = |c: &Config| c.lsh_params().unwrap();
        let mut c = Config::default();
        assert_eq!(c.dedup.verify, Verify::Jaccard);
        assert_eq!(lsh(&c), LshParams::new(20, 6).unwrap());
        c.dedup.verify = Verify::Estimate;
        assert_eq!(lsh(&c), LshParams::new(16, 8).unwrap());
        // The preset estimates, so it keeps the setting it always had.
        assert_eq!(
            lsh(&Config::default().lshcurator()),
            LshParams::new(16, 8).unwrap()
        );
        // Given bands and rows win over any weighting.
        for verify in [Verify::Jaccard, Verify::Estimate] {
            c.dedup.verify = verify;
            (c.sketch.bands, c.sketch.rows) = (Some(9), Some(13));
            assert_eq!(lsh(&c), LshParams::new(9, 13).unwrap());
        }
    }

    #[test]
    fn the_recall_weighting_misses_less_at_every_threshold_and_width() {
        for num_perm in [64, 128, 256] {
            for t in [0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95] {
                let mut c = Config::default();
                c.dedup.threshold = t;
                c.sketch.num_perm = num_perm;
                let exact = c.lsh_params().unwrap();
                c.dedup.verify = Verify::Estimate;
                let estimate = c.lsh_params().unwrap();
                let at = format!("threshold {t}, num_perm {num_perm}");
                assert!(exact.num_perm_used() <= num_perm, "{at}");
                assert!(
                    exact.false_negative_area(t) < estimate.false_negative_area(t),
                    "{at}: {exact:?} misses no less than {estimate:?}"
                );
                // A pair right at the threshold is a candidate at least 98.5% of the time (the
                // lowest is 0.9899, at 0.7 with 128 permutations).
                assert!(exact.collision_probability(t) > 0.985, "{at}: {exact:?}");
            }
        }
    }

    #[test]
    fn presets_parse_by_name() {
        assert_eq!("lshcurator".parse::<Preset>().unwrap(), Preset::Lshcurator);
        let err = "datatrove".parse::<Preset>().unwrap_err().to_string();
        assert!(err.contains("unknown compat preset \"datatrove\""), "{err}");
    }
}
