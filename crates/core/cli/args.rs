//! The command line's arguments (clap) and how they become a [`Config`]: defaults, then the
//! settings file (`--config`), then the flags.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use neardup::corpus::Format;
use neardup::dedup::{EmptyPolicy, Prefer, Verify};
use neardup::exec::OnError;
use neardup::sketch::{BandKeyScheme, HashScheme};
use neardup::{Config, DedupSettings, Error, FieldsModeKind, Layers, Preset, ShingleUnit};

/// Near-duplicate detection for large text corpora (MinHash + LSH in two streaming stages).
#[derive(Parser, Debug)]
#[command(name = "neardup", version, about, long_about = None, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    /// Only errors on stderr.
    #[arg(short, long, global = true)]
    pub(crate) quiet: bool,
    /// More log output (-v: debug, -vv: trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Both stages end to end: filtered dataset, decisions and run report.
    Dedup(DedupArgs),
    /// Stage 1 on some inputs: write their key table.
    Keys(KeysArgs),
    /// Merge key tables into the hot-key file.
    Hot(HotArgs),
    /// Distributed stage 2, per shard: re-read one shard and write what deciding its hot
    /// samples needs, split by group (a directory).
    Sign(SignArgs),
    /// Distributed stage 2, per group: decide one group's hot samples from every shard's sign
    /// output, in global order. Opens no input file.
    Decide(DecideArgs),
    /// Distributed stage 2, per shard: re-read one shard and write its filtered dataset and
    /// decisions, the hot samples decided by `decide`.
    Write(WriteArgs),
    /// Stage 2 given the key tables of all shards and their hot-key file.
    Apply(ApplyArgs),
    /// Save the index of a finished run from its key tables and decisions (for `--against`),
    /// without running it again; or move an index between a file and Redis (`push`, `pull`),
    /// or show its statistics (`stats`).
    Index(IndexArgs),
    /// Exact deduplication by content hash of the normalised text.
    Exact(ExactArgs),
    /// Check a run's decisions against exact Jaccard: precision of every drop, recall on a sample.
    Eval(EvalArgs),
    /// Show the LSH setting chosen for a threshold and width, its error areas and S-curve.
    Params(ParamsArgs),
}

/// The arguments of `neardup dedup`.
#[derive(Args, Debug)]
pub(crate) struct DedupArgs {
    /// Input files, directories and glob patterns.
    #[arg(required = true)]
    pub(crate) inputs: Vec<String>,
    #[command(flatten)]
    pub(crate) input: InputOpts,
    #[command(flatten)]
    pub(crate) sketch: SketchOpts,
    #[command(flatten)]
    pub(crate) count: CountOpts,
    #[command(flatten)]
    pub(crate) decide: DecideOpts,
    #[command(flatten)]
    pub(crate) output: OutputOpts,
}

/// The arguments of `neardup keys`.
#[derive(Args, Debug)]
pub(crate) struct KeysArgs {
    /// Input files, directories and glob patterns of this shard.
    #[arg(required = true)]
    pub(crate) inputs: Vec<String>,
    /// Key-table file to write.
    #[arg(long = "output", short = 'o', visible_alias = "out")]
    pub(crate) output: PathBuf,
    /// This shard's number: global row order follows shard numbers.
    #[arg(long, default_value_t = 0)]
    pub(crate) shard: u32,
    /// Stage-1 report of this shard (JSON: records, samples, skipped records and why, speed).
    #[arg(long)]
    pub(crate) report: Option<PathBuf>,
    // A stage-2 output, accepted only to say where it belongs instead of an unknown-flag error.
    #[arg(long, hide = true)]
    pub(crate) decisions: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) input: InputOpts,
    #[command(flatten)]
    pub(crate) sketch: SketchOpts,
    /// How stage 2 will confirm candidates: without --bands and --rows it chooses them, so give
    /// the later steps' --verify here too [default: exact].
    #[arg(long, help_heading = DECISIONS)]
    pub(crate) verify: Option<VerifyArg>,
}

/// The arguments of `neardup hot`.
#[derive(Args, Debug)]
pub(crate) struct HotArgs {
    /// Key tables of all shards.
    #[arg(required = true)]
    pub(crate) tables: Vec<PathBuf>,
    /// Hot-key file to write.
    #[arg(long = "output", short = 'o', visible_alias = "out")]
    pub(crate) output: PathBuf,
    /// A key is hot when seen more than this many times.
    #[arg(long, default_value_t = Config::default().keys.min_key_count)]
    pub(crate) min_key_count: u32,
    /// When all tables' keys exceed this (e.g. 4GiB), count them from spill files
    /// partition by partition instead of in memory; tables are never loaded whole
    /// [default: no limit].
    #[arg(long, value_parser = parse_size)]
    pub(crate) memory_limit: Option<u64>,
    /// Directory for spill files, created if missing [default: the system temp directory].
    #[arg(long)]
    pub(crate) spill_dir: Option<PathBuf>,
    /// Counting threads, at most 1024 [default: 0 = all cores].
    #[arg(long, short = 'j')]
    pub(crate) threads: Option<usize>,
    /// Merge report (JSON: keys, distinct and hot keys, hot samples, the plan, time).
    #[arg(long)]
    pub(crate) report: Option<PathBuf>,
    /// Plan stage 2 for this many `decide` groups: the connected components of hot rows,
    /// packed into G groups of balanced size (stored in the hot-key file).
    #[arg(long, default_value_t = 1)]
    pub(crate) groups: u32,
    /// Count against the saved index of earlier runs (`--index-out`, `neardup index`): its keys
    /// count once more each; repeat for several indexes, in order.
    #[arg(long, value_name = "INDEX")]
    pub(crate) against: Vec<PathBuf>,
}

/// The arguments of `neardup sign`.
#[derive(Args, Debug)]
pub(crate) struct SignArgs {
    /// The shard's key table from `neardup keys`.
    pub(crate) table: PathBuf,
    /// Hot-key file from `neardup hot`.
    #[arg(long)]
    pub(crate) hot: PathBuf,
    /// Output directory (one stream per group and a manifest).
    #[arg(long = "output", short = 'o')]
    pub(crate) output: PathBuf,
    /// Report (JSON: what was signed, per group).
    #[arg(long)]
    pub(crate) report: Option<PathBuf>,
    /// Replace an earlier `sign` output in the output directory (only the files its manifest
    /// lists); without it, a directory that is not empty is refused.
    #[arg(long, help_heading = OUTPUT)]
    pub(crate) overwrite: bool,
    /// Memory bound (e.g. 4GiB): the shard's hot mask goes to a scratch file's mapping past a
    /// sixteenth of it, holding only the rows at hand [default: no limit].
    #[arg(long, value_parser = parse_size, help_heading = KEYS)]
    pub(crate) memory_limit: Option<u64>,
    /// Directory for spill files, created if missing [default: the system temp directory].
    #[arg(long, help_heading = KEYS)]
    pub(crate) spill_dir: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) input: InputOpts,
    #[command(flatten)]
    pub(crate) sketch: SketchOpts,
    #[command(flatten)]
    pub(crate) decide: DecideOpts,
}

/// The arguments of `neardup decide`.
#[derive(Args, Debug)]
pub(crate) struct DecideArgs {
    /// Sign outputs of every shard (any order).
    #[arg(required = true)]
    pub(crate) signed: Vec<PathBuf>,
    /// Hot-key file from `neardup hot`.
    #[arg(long)]
    pub(crate) hot: PathBuf,
    /// The group to decide (0 to G-1).
    #[arg(long)]
    pub(crate) group: u32,
    /// Output directory (one stream per shard and a manifest).
    #[arg(long = "output", short = 'o')]
    pub(crate) output: PathBuf,
    /// Report (JSON: decisions per shard, the decision core's counters).
    #[arg(long)]
    pub(crate) report: Option<PathBuf>,
    /// Replace an earlier `decide` output in the output directory (only the files its manifest
    /// lists); without it, a directory that is not empty is refused.
    #[arg(long, help_heading = OUTPUT)]
    pub(crate) overwrite: bool,
    /// Memory for the group's decision state is half of this (e.g. 4GiB): representatives'
    /// signatures and shingle sets spill to disk past it [default: no limit].
    #[arg(long, value_parser = parse_size, help_heading = KEYS)]
    pub(crate) memory_limit: Option<u64>,
    /// Directory for spill files, created if missing [default: the system temp directory].
    #[arg(long, help_heading = KEYS)]
    pub(crate) spill_dir: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) input: InputOpts,
    #[command(flatten)]
    pub(crate) sketch: SketchOpts,
    #[command(flatten)]
    pub(crate) decide: DecideOpts,
}

/// The arguments of `neardup write`.
#[derive(Args, Debug)]
pub(crate) struct WriteArgs {
    /// The shard's key table from `neardup keys`.
    pub(crate) table: PathBuf,
    /// Hot-key file from `neardup hot`.
    #[arg(long)]
    pub(crate) hot: PathBuf,
    /// Decide outputs of every group (any order).
    #[arg(long, required = true, num_args = 1..)]
    pub(crate) decided: Vec<PathBuf>,
    /// Memory bound (e.g. 4GiB): the shard's hot mask goes to a scratch file's mapping past a
    /// sixteenth of it, holding only the rows at hand [default: no limit].
    #[arg(long, value_parser = parse_size, help_heading = KEYS)]
    pub(crate) memory_limit: Option<u64>,
    #[command(flatten)]
    pub(crate) input: InputOpts,
    #[command(flatten)]
    pub(crate) sketch: SketchOpts,
    #[command(flatten)]
    pub(crate) decide: DecideOpts,
    #[command(flatten)]
    pub(crate) output: OutputOpts,
}

/// The arguments of `neardup apply`.
#[derive(Args, Debug)]
pub(crate) struct ApplyArgs {
    /// Key tables from `neardup keys`, all shards (any order).
    #[arg(required_unless_present = "keys")]
    pub(crate) tables: Vec<PathBuf>,
    /// Hot-key file from `neardup hot`.
    #[arg(long)]
    pub(crate) hot: PathBuf,
    /// More key tables (the earlier spelling; positional tables are the same).
    #[arg(long = "keys", hide = true)]
    pub(crate) keys: Vec<PathBuf>,
    /// Memory bound (e.g. 4GiB): stage 2's decision state takes at most half of it, spilling
    /// to disk past it, and the hot mask goes to a scratch file's mapping past a sixteenth of
    /// it [default: no limit].
    #[arg(long, value_parser = parse_size, help_heading = KEYS)]
    pub(crate) memory_limit: Option<u64>,
    #[command(flatten)]
    pub(crate) input: InputOpts,
    #[command(flatten)]
    pub(crate) sketch: SketchOpts,
    #[command(flatten)]
    pub(crate) decide: DecideOpts,
    #[command(flatten)]
    pub(crate) output: OutputOpts,
}

/// The arguments of `neardup index`.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct IndexArgs {
    /// Move an index between a file and Redis, or show its statistics.
    #[command(subcommand)]
    pub(crate) action: Option<IndexAction>,
    /// Key tables of the run, all shards (any order).
    #[arg(required = true)]
    pub(crate) tables: Vec<PathBuf>,
    /// The run's decisions file (.jsonl or .parquet).
    #[arg(long, required = true)]
    pub(crate) decisions: Option<PathBuf>,
    /// The index to write.
    #[arg(long = "output", short = 'o', visible_alias = "out", required = true)]
    pub(crate) output: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) input: InputOpts,
    #[command(flatten)]
    pub(crate) sketch: SketchOpts,
    #[command(flatten)]
    pub(crate) decide: DecideOpts,
}

/// `neardup index push|pull|stats`.
#[derive(Subcommand, Debug)]
pub(crate) enum IndexAction {
    /// Copy a saved index file (`--index-out`, or one the online index saved) into a Redis
    /// namespace, published in one step; refused when the namespace was made with other
    /// settings, or holds an index (unless --replace).
    Push(IndexPushArgs),
    /// Copy a Redis namespace's index into a saved index file (read in one atomic step,
    /// written atomically; never over anything but an index).
    Pull(IndexPullArgs),
    /// Show an index's statistics (a file or redis://HOST:PORT/DB with --namespace) as JSON:
    /// documents, kept, representatives, buckets, settings, bytes.
    Stats(IndexStatsArgs),
}

/// The arguments of `neardup index push`.
#[derive(Args, Debug)]
pub(crate) struct IndexPushArgs {
    /// The index file.
    pub(crate) index: PathBuf,
    /// The Redis server: redis://HOST:PORT/DB.
    pub(crate) url: String,
    /// The namespace to push into.
    #[arg(long, default_value = "default")]
    pub(crate) namespace: String,
    /// Replace the index the namespace holds (one with the same settings).
    #[arg(long)]
    pub(crate) replace: bool,
}

/// The arguments of `neardup index pull`.
#[derive(Args, Debug)]
pub(crate) struct IndexPullArgs {
    /// The Redis server: redis://HOST:PORT/DB.
    pub(crate) url: String,
    /// The namespace to pull.
    #[arg(long, default_value = "default")]
    pub(crate) namespace: String,
    /// The index file to write (a new path, or an index file to replace).
    #[arg(long = "output", short = 'o', visible_alias = "out")]
    pub(crate) output: PathBuf,
}

/// The arguments of `neardup index stats`.
#[derive(Args, Debug)]
pub(crate) struct IndexStatsArgs {
    /// An index file, or a Redis server: redis://HOST:PORT/DB.
    pub(crate) index: String,
    /// The namespace (with a Redis server).
    #[arg(long, default_value = "default")]
    pub(crate) namespace: String,
}

/// The arguments of `neardup exact`.
#[derive(Args, Debug)]
pub(crate) struct ExactArgs {
    /// Input files, directories and glob patterns.
    #[arg(required = true)]
    pub(crate) inputs: Vec<String>,
    #[command(flatten)]
    pub(crate) input: InputOpts,
    #[command(flatten)]
    pub(crate) normalize: NormalizeOpts,
    #[command(flatten)]
    pub(crate) count: CountOpts,
    #[command(flatten)]
    pub(crate) output: OutputOpts,
}

/// The arguments of `neardup eval`.
#[derive(Args, Debug)]
pub(crate) struct EvalArgs {
    /// The run's inputs, in the same order.
    #[arg(required_unless_present = "inputs_flag")]
    pub(crate) inputs: Vec<String>,
    /// The run's decisions file.
    #[arg(long)]
    pub(crate) decisions: PathBuf,
    /// The run's inputs (the earlier spelling; positional inputs are the same).
    #[arg(long = "inputs", num_args = 1.., hide = true)]
    pub(crate) inputs_flag: Vec<String>,
    /// Documents drawn for the recall estimate.
    #[arg(long, default_value_t = neardup::eval::DEFAULT_RECALL_SAMPLES)]
    pub(crate) samples: usize,
    /// Seed of the draw.
    #[arg(long, default_value_t = 0)]
    pub(crate) sample_seed: u64,
    /// How many of the largest duplicate clusters to show, each with the start of its kept
    /// sample's text beside its first members' (0: none).
    #[arg(long, default_value_t = neardup::eval::DEFAULT_CLUSTERS_SHOWN)]
    pub(crate) clusters: usize,
    /// Write the full evaluation as JSON here.
    #[arg(long = "eval-report")]
    pub(crate) eval_report: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) input: InputOpts,
    #[command(flatten)]
    pub(crate) sketch: SketchOpts,
}

/// The arguments of `neardup params`.
#[derive(Args, Debug)]
pub(crate) struct ParamsArgs {
    /// Similarity threshold.
    #[arg(long, default_value_t = Config::default().dedup.threshold)]
    pub(crate) threshold: f64,
    /// Signature width.
    #[arg(long, default_value_t = Config::default().sketch.num_perm)]
    pub(crate) num_perm: usize,
    /// Explicit bands (with --rows) instead of the optimum [default: optimal for --threshold,
    /// --num-perm and --verify].
    #[arg(long, requires = "rows")]
    pub(crate) bands: Option<usize>,
    /// Rows per band (with --bands) [default: optimal for --threshold, --num-perm and
    /// --verify].
    #[arg(long, requires = "bands")]
    pub(crate) rows: Option<usize>,
    /// How the run confirms candidates, which sets the weighting that chooses bands and rows
    /// (--compat lshcurator estimates) [default: exact].
    #[arg(long)]
    pub(crate) verify: Option<VerifyArg>,
    /// Points of the S-curve table (2 to 10000).
    #[arg(long, default_value_t = 11)]
    pub(crate) points: usize,
}

// Each command takes only the option groups it uses, so its help lists nothing it would ignore.
// A settings file (--config) may still name any setting: a file shared by the staged commands
// holds them all.
//
// A flag that is a setting is listed under a heading naming the settings file's section that
// holds it, whichever option group carries the flag (a test checks every flag against the
// section it writes).

/// The heading of the flags of the settings file's `[input]` section (and the flags that are no
/// settings: `--config`, `--compat`).
const INPUT: &str = "Input [input]";
/// `[run]`.
const RUN: &str = "Run [run]";
/// The normalisation flags, in `[sketch]`.
const NORMALISATION: &str = "Normalisation [sketch]";
/// `[sketch]`.
const SKETCH: &str = "Sketch [sketch]";
/// `[keys]`: stage 1's counting, memory and spilling.
const KEYS: &str = "Keys and memory [keys]";
/// `[dedup]`.
const DECISIONS: &str = "Decisions [dedup]";
/// `[output]`.
const OUTPUT: &str = "Output [output]";

/// Settings file, preset, how inputs are read, and threads.
#[derive(Args, Debug, Default)]
#[command(next_help_heading = INPUT)]
pub(crate) struct InputOpts {
    /// Settings file (TOML or JSON, see docs/tuning.md); flags override it.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Preset reproducing another tool's decisions exactly.
    #[arg(long, value_parser = ["lshcurator"])]
    pub(crate) compat: Option<String>,
    /// Read files whose extension names no format as this format [default: by extension].
    #[arg(long)]
    pub(crate) format: Option<FormatArg>,
    /// Text field (repeatable; dotted paths reach into objects) [default: text].
    #[arg(long = "field")]
    pub(crate) fields: Vec<String>,
    /// Several fields: join into one text per record, or one sample per field [default: join].
    #[arg(long)]
    pub(crate) fields_mode: Option<FieldsModeArg>,
    /// Field carried into every decision as the id.
    #[arg(long)]
    pub(crate) id_field: Option<String>,
    /// Skip bad records (counted, quoted in the report) or stop at the first [default: skip].
    #[arg(long, help_heading = RUN)]
    pub(crate) on_error: Option<OnErrorArg>,
    /// Worker threads, at most 1024 [default: 0 = all cores].
    #[arg(long, short = 'j', help_heading = RUN)]
    pub(crate) threads: Option<usize>,
}

/// Text normalisation before texts are compared (and hashed); outputs keep the original text.
#[derive(Args, Debug, Default)]
#[command(next_help_heading = NORMALISATION)]
pub(crate) struct NormalizeOpts {
    /// Lowercase texts before comparing them.
    #[arg(long)]
    pub(crate) lowercase: bool,
    /// Unicode NFKC before comparing.
    #[arg(long)]
    pub(crate) nfkc: bool,
    /// Collapse whitespace runs.
    #[arg(long)]
    pub(crate) collapse_whitespace: bool,
    /// Remove punctuation.
    #[arg(long)]
    pub(crate) strip_punctuation: bool,
    /// Keep only these characters (e.g. '0-9a-zA-Z가-힣') [default: all].
    #[arg(long)]
    pub(crate) keep_chars: Option<String>,
    /// Do not trim leading/trailing whitespace (trimmed by default).
    #[arg(long)]
    pub(crate) no_trim: bool,
}

/// What the key table holds: shingling, signature, bands. Stage 1 and stage 2 must agree on
/// these (the staged commands check it).
#[derive(Args, Debug, Default)]
#[command(next_help_heading = SKETCH)]
pub(crate) struct SketchOpts {
    /// Signature width, 1 to 16384 [default: 128].
    #[arg(long)]
    pub(crate) num_perm: Option<usize>,
    /// LSH bands (with --rows; bands × rows at most --num-perm) [default: optimal for
    /// --threshold, --num-perm and --verify].
    #[arg(long, requires = "rows")]
    pub(crate) bands: Option<usize>,
    /// Rows per band (with --bands) [default: optimal for --threshold, --num-perm and
    /// --verify].
    #[arg(long, requires = "bands")]
    pub(crate) rows: Option<usize>,
    /// What a shingle is made of; --shingle counts these units (Japanese words: see
    /// docs/tokenizers.md) [default: char].
    #[arg(long)]
    pub(crate) tokenize: Option<TokenizeArg>,
    /// Shingle size [default: 5].
    #[arg(long)]
    pub(crate) shingle: Option<usize>,
    /// Shingle window step [default: 1].
    #[arg(long)]
    pub(crate) step: Option<usize>,
    /// MinHash hash scheme: oph (one-permutation hashing), fast (k-permutation SIMD),
    /// datasketch (bit-exact datasketch 1.9) [default: oph].
    #[arg(long)]
    pub(crate) hash: Option<HashArg>,
    /// Band-key encoding [default: fast].
    #[arg(long)]
    pub(crate) band_keys: Option<BandKeysArg>,
    /// Permutation seed [default: 1].
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    #[command(flatten)]
    pub(crate) normalize: NormalizeOpts,
    // After the flattened group (whose heading would stay in force for the fields after it
    // without a heading of their own): the settings of other sections, listed under theirs.
    /// Similarity threshold, 0 to 1 [default: 0.8].
    #[arg(long, help_heading = DECISIONS)]
    pub(crate) threshold: Option<f64>,
    /// Do not count content hashes (no exact-copy shortcut).
    #[arg(long, help_heading = KEYS)]
    pub(crate) no_exact: bool,
}

/// Stage 1's frequency filter.
#[derive(Args, Debug, Default)]
#[command(next_help_heading = KEYS)]
pub(crate) struct CountOpts {
    /// A key is hot when seen more than this many times [default: 1].
    #[arg(long)]
    pub(crate) min_key_count: Option<u32>,
    /// Memory bound (e.g. 4GiB): the key table spills to disk past half of it, and stage 2's
    /// representatives too; a run holds about 32 MiB beside it and uses at most one thread per
    /// 32 MiB of it (docs/tuning.md) [default: no limit].
    #[arg(long, value_parser = parse_size)]
    pub(crate) memory_limit: Option<u64>,
}

/// Stage 2's decisions.
#[derive(Args, Debug, Default)]
#[command(next_help_heading = DECISIONS)]
pub(crate) struct DecideOpts {
    /// Representatives per hot bucket (0: unbounded) [default: 64].
    #[arg(long)]
    pub(crate) max_reps: Option<usize>,
    /// Confirm candidates with the true Jaccard of the shingle sets (exact) or by the
    /// signatures' estimate [default: exact].
    #[arg(long)]
    pub(crate) verify: Option<VerifyArg>,
    /// Which copy of each duplicate set is kept: first (input order), longest or shortest (UTF-8
    /// bytes of the text after trimming), or FIELD:desc / FIELD:asc (a numeric field, e.g.
    /// quality:desc; records without it rank last) [default: first].
    #[arg(long, value_name = "ORDER")]
    pub(crate) prefer: Option<Prefer>,
    /// Deduplicate against the saved index of earlier runs (`--index-out`, `neardup index`):
    /// records get the decisions they get in one run over the indexed runs' inputs, then
    /// these; repeat for several indexes, in order.
    #[arg(long, value_name = "INDEX")]
    pub(crate) against: Vec<PathBuf>,
}

/// What a deduplicating run writes, and where it spills.
#[derive(Args, Debug, Default)]
#[command(next_help_heading = OUTPUT)]
pub(crate) struct OutputOpts {
    /// Directory for the filtered dataset (same relative paths and formats as the inputs).
    #[arg(long, short = 'o')]
    pub(crate) output: Option<PathBuf>,
    /// Decisions file, one row per sample (.jsonl or .parquet; - for standard output, JSONL,
    /// written once the run has succeeded).
    #[arg(long)]
    pub(crate) decisions: Option<PathBuf>,
    /// Run report (JSON; - for standard output). Alone, without the outputs above: a dry run.
    #[arg(long)]
    pub(crate) report: Option<PathBuf>,
    /// Replace an existing output directory.
    #[arg(long)]
    pub(crate) overwrite: bool,
    /// Split outputs into parts of at most this size (e.g. 512MiB) [default: no split].
    #[arg(long, value_parser = parse_size)]
    pub(crate) max_output_bytes: Option<u64>,
    /// Keep or drop empty / whitespace-only texts [default: keep].
    #[arg(long, help_heading = DECISIONS)]
    pub(crate) empty: Option<EmptyArg>,
    /// Directory for spill files, created if missing [default: the system temp directory].
    #[arg(long, help_heading = KEYS)]
    pub(crate) spill_dir: Option<PathBuf>,
    /// Save this run's index (with those of --against) for later runs to deduplicate
    /// against.
    #[arg(long, value_name = "PATH")]
    pub(crate) index_out: Option<PathBuf>,
}

macro_rules! value_enum {
    ($name:ident => $target:ty { $($(#[doc = $doc:literal])* $variant:ident => $value:expr),+ $(,)? }) => {
        #[derive(Clone, Copy, Debug, clap::ValueEnum)]
        pub(crate) enum $name { $($(#[doc = $doc])* $variant),+ }
        impl From<$name> for $target {
            fn from(v: $name) -> $target { match v { $($name::$variant => $value),+ } }
        }
    };
}
value_enum!(FormatArg => Format { Jsonl => Format::Jsonl, Parquet => Format::Parquet });
value_enum!(HashArg => HashScheme { Fast => HashScheme::Fast, Datasketch => HashScheme::Datasketch, Oph => HashScheme::Oph });
value_enum!(BandKeysArg => BandKeyScheme { Fast => BandKeyScheme::Fast, Lshcurator => BandKeyScheme::Lshcurator });
value_enum!(VerifyArg => Verify { Estimate => Verify::Estimate, Exact => Verify::Jaccard });
value_enum!(OnErrorArg => OnError { Skip => OnError::Skip, Fail => OnError::Fail });
value_enum!(EmptyArg => EmptyPolicy { Keep => EmptyPolicy::Keep, Drop => EmptyPolicy::Drop });
value_enum!(FieldsModeArg => FieldsModeKind {
    /// One sample per record, the fields newline-joined.
    Join => FieldsModeKind::Join,
    /// One sample per field (lshcurator's semantics).
    Expand => FieldsModeKind::Expand,
});
value_enum!(TokenizeArg => ShingleUnit {
    /// Unicode characters.
    Char => ShingleUnit::Char,
    /// UTF-8 bytes.
    Byte => ShingleUnit::Byte,
    /// Words (Unicode word boundaries, UAX #29), joined by one space per shingle.
    Word => ShingleUnit::Word,
    /// Runs of ASCII letters, digits and '_' ([A-Za-z0-9_]); every other character, any non-ASCII
    /// one included, separates; case kept (hojichar's non_alpha_num_splitter). Joined by one space.
    AsciiWord => ShingleUnit::AsciiWord,
    /// The same as ascii-word (hojichar's name for it).
    Alnum => ShingleUnit::AsciiWord,
    /// Chinese words by jieba (its dictionary and HMM, as Python's jieba.lcut). Joined by one space.
    Jieba => ShingleUnit::Jieba,
});

pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("not a size: {s:?} (e.g. 4GiB, 500MB, 1048576)"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0f64.powi(4),
        other => return Err(format!("unknown size unit {other:?} in {s:?}")),
    };
    Ok((n * mult) as u64)
}

/// Builds the settings in the library's one order ([`Layers`]): the defaults, the preset's
/// defaults, the settings file (`--config`), the inputs and each group's flags, then what the
/// preset (`--compat`) pins.
pub(crate) fn build_config(
    inputs: &[String],
    input: &InputOpts,
    groups: &[&dyn Overrides],
) -> Result<Config, Error> {
    let preset = input
        .compat
        .as_deref()
        .map(str::parse::<Preset>)
        .transpose()
        .map_err(|e| Error::Usage(e.to_string()))?;
    let mut layers = Layers::new(preset, input.config.as_deref())?;
    let c = layers.given();
    if !inputs.is_empty() {
        c.input.inputs = inputs.to_vec();
    }
    input.apply(c);
    for g in groups {
        g.apply(c);
    }
    Ok(layers.finish())
}

/// An option group's flags written over the settings.
pub(crate) trait Overrides {
    fn apply(&self, c: &mut Config);
}

impl Overrides for InputOpts {
    fn apply(&self, c: &mut Config) {
        if let Some(v) = self.format {
            c.input.format = Some(v.into());
        }
        if !self.fields.is_empty() {
            c.input.fields = self.fields.clone();
        }
        if let Some(v) = self.fields_mode {
            c.input.fields_mode = v.into();
        }
        if self.id_field.is_some() {
            c.input.id_field = self.id_field.clone();
        }
        if let Some(v) = self.on_error {
            c.run.on_error = v.into();
        }
        if let Some(v) = self.threads {
            c.run.threads = v;
        }
    }
}

impl Overrides for NormalizeOpts {
    fn apply(&self, c: &mut Config) {
        c.sketch.lowercase |= self.lowercase;
        c.sketch.nfkc |= self.nfkc;
        c.sketch.collapse_whitespace |= self.collapse_whitespace;
        c.sketch.strip_punctuation |= self.strip_punctuation;
        if self.keep_chars.is_some() {
            c.sketch.keep_chars = self.keep_chars.clone();
        }
        if self.no_trim {
            c.sketch.trim = false;
        }
    }
}

impl Overrides for SketchOpts {
    fn apply(&self, c: &mut Config) {
        self.normalize.apply(c);
        if let Some(v) = self.threshold {
            c.dedup.threshold = v;
        }
        if let Some(v) = self.num_perm {
            c.sketch.num_perm = v;
        }
        if self.bands.is_some() {
            c.sketch.bands = self.bands;
            c.sketch.rows = self.rows;
        }
        if let Some(v) = self.tokenize {
            c.sketch.tokenize = v.into();
        }
        if let Some(v) = self.shingle {
            c.sketch.shingle = v;
        }
        if let Some(v) = self.step {
            c.sketch.step = v;
        }
        if let Some(v) = self.hash {
            c.sketch.hash = v.into();
        }
        if let Some(v) = self.band_keys {
            c.sketch.band_keys = v.into();
        }
        if let Some(v) = self.seed {
            c.sketch.seed = v;
        }
        if self.no_exact {
            c.keys.exact = false;
        }
    }
}

impl Overrides for CountOpts {
    fn apply(&self, c: &mut Config) {
        if let Some(v) = self.min_key_count {
            c.keys.min_key_count = v;
        }
        if self.memory_limit.is_some() {
            c.keys.memory_limit = self.memory_limit;
        }
    }
}

impl Overrides for DecideOpts {
    fn apply(&self, c: &mut Config) {
        if let Some(v) = self.max_reps {
            c.dedup.max_reps = DedupSettings::max_reps_given(v);
        }
        if let Some(v) = self.verify {
            c.dedup.verify = v.into();
        }
        if let Some(p) = &self.prefer {
            c.dedup.prefer = p.clone();
        }
        if !self.against.is_empty() {
            c.dedup.against = self.against.clone();
        }
    }
}

impl Overrides for OutputOpts {
    fn apply(&self, c: &mut Config) {
        if self.output.is_some() {
            c.output.dir = self.output.clone();
        }
        if self.decisions.is_some() {
            c.output.decisions = self.decisions.clone();
        }
        if self.report.is_some() {
            c.output.report = self.report.clone();
        }
        if self.index_out.is_some() {
            c.output.index_out = self.index_out.clone();
        }
        c.output.overwrite |= self.overwrite;
        if self.max_output_bytes.is_some() {
            c.output.max_output_bytes = self.max_output_bytes;
        }
        if let Some(v) = self.empty {
            c.dedup.empty = v.into();
        }
        if self.spill_dir.is_some() {
            c.keys.spill_dir = self.spill_dir.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use neardup::keys::ShortTextPolicy;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        assert_eq!(parse_size("4GiB").unwrap(), 4 << 30);
        assert_eq!(parse_size("500MB").unwrap(), 500_000_000);
        assert_eq!(parse_size("1.5k").unwrap(), 1500);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3 parsecs").is_err());
    }

    /// The default an option's help states: clap's `[default: …]` for options parsed with one,
    /// the same words in the help text for options a settings file may also set.
    fn stated_default(arg: &clap::Arg) -> Option<String> {
        if let Some(v) = arg.get_default_values().first() {
            return Some(v.to_string_lossy().into_owned());
        }
        let help = arg.get_help()?.to_string();
        let start = help.find("[default: ")? + "[default: ".len();
        Some(help[start..start + help[start..].find(']')?].to_string())
    }

    #[test]
    fn every_option_with_a_default_states_it_in_help() {
        use clap::CommandFactory;
        // Options whose absence means "not written" or "not used": they have no default.
        let without_default = [
            "config",
            "compat",
            "id-field",
            "output",
            "decisions",
            "report",
            "eval-report",
            "hot",
            "against",
            "index-out",
        ];
        let cli = Cli::command();
        for cmd in cli.get_subcommands() {
            for arg in cmd.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if arg.is_hide_set()
                    || arg.is_required_set()
                    || !arg.get_action().takes_values()
                    || without_default.contains(&long)
                {
                    continue;
                }
                assert!(
                    stated_default(arg).is_some(),
                    "`neardup {} --{long}` does not state its default",
                    cmd.get_name()
                );
            }
        }
    }

    #[test]
    fn stated_defaults_are_the_settings_defaults() {
        use clap::CommandFactory;
        let defaults = serde_json::to_value(Config::default()).unwrap();
        let text = |pointer: &str| match &defaults[pointer.split('/').nth(1).unwrap()]
            [pointer.split('/').nth(2).unwrap()]
        {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Array(a) => a[0].as_str().unwrap().to_string(),
            other => other.to_string(),
        };
        let expected = [
            ("threshold", text("/dedup/threshold")),
            ("num-perm", text("/sketch/num_perm")),
            ("tokenize", text("/sketch/tokenize")),
            ("shingle", text("/sketch/shingle")),
            ("step", text("/sketch/step")),
            ("hash", text("/sketch/hash")),
            ("band-keys", text("/sketch/band_keys")),
            ("seed", text("/sketch/seed")),
            ("min-key-count", text("/keys/min_key_count")),
            ("max-reps", text("/dedup/max_reps")),
            ("verify", text("/dedup/verify")),
            ("prefer", text("/dedup/prefer")),
            ("empty", text("/dedup/empty")),
            ("on-error", text("/run/on_error")),
            ("field", text("/input/fields")),
            ("fields-mode", text("/input/fields_mode")),
            ("threads", format!("{} = all cores", text("/run/threads"))),
        ];
        let cli = Cli::command();
        let mut seen = 0;
        for cmd in cli.get_subcommands() {
            // `params` explains one setting on its own defaults, which are the run's too.
            for arg in cmd.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if let Some((_, want)) = expected.iter().find(|(flag, _)| *flag == long) {
                    assert_eq!(
                        stated_default(arg).as_deref(),
                        Some(want.as_str()),
                        "`neardup {} --{long}`",
                        cmd.get_name()
                    );
                    seen += 1;
                }
            }
        }
        assert!(seen >= expected.len(), "{seen}");
    }

    /// Every option group at once, to give any of their flags alone.
    #[derive(Parser, Debug)]
    struct AllGroups {
        #[command(flatten)]
        input: InputOpts,
        #[command(flatten)]
        sketch: SketchOpts,
        #[command(flatten)]
        count: CountOpts,
        #[command(flatten)]
        decide: DecideOpts,
        #[command(flatten)]
        output: OutputOpts,
    }

    /// The settings-file section a help heading names: `Decisions [dedup]` -> `dedup`.
    fn heading_section(heading: &str) -> Option<&str> {
        heading.rsplit_once('[')?.1.strip_suffix(']')
    }

    /// The sections of the settings file that `flag` given alone (with `value`, and what it
    /// requires) changes; `None` when that command line does not parse.
    fn sections_written(flag: &clap::Arg, value: Option<&str>) -> Option<Vec<String>> {
        let long = flag.get_long()?;
        let mut argv = vec!["groups".to_string(), format!("--{long}")];
        argv.extend(value.map(str::to_string));
        // Flags that only come in pairs.
        match long {
            "bands" => argv.extend(["--rows".into(), "4".into()]),
            "rows" => argv.extend(["--bands".into(), "4".into()]),
            _ => {}
        }
        let parsed = AllGroups::try_parse_from(argv).ok()?;
        let mut config = Config::default();
        let groups: [&dyn Overrides; 5] = [
            &parsed.input,
            &parsed.sketch,
            &parsed.count,
            &parsed.decide,
            &parsed.output,
        ];
        for g in groups {
            g.apply(&mut config);
        }
        let (before, after) = (
            serde_json::to_value(Config::default()).unwrap(),
            serde_json::to_value(config).unwrap(),
        );
        let serde_json::Value::Object(sections) = after else {
            unreachable!("a config is an object")
        };
        Some(
            sections
                .into_iter()
                .filter(|(name, fields)| before[name] != *fields)
                .map(|(name, _)| name)
                .collect(),
        )
    }

    /// `--help` lists a flag under a heading naming the settings file's section that holds its
    /// setting (`--threshold` under `Decisions [dedup]`, as `threshold` is in `[dedup]`): each
    /// flag of the option groups is given alone, and the sections of the settings it changes
    /// must be the one its heading names; a flag that changes no setting must be one of those
    /// known to be none. Then every command that takes a settings file lists each such flag
    /// under the same heading, its own flags (`sign --memory-limit`, …) included.
    #[test]
    fn every_flag_is_listed_under_its_settings_file_section() {
        use clap::CommandFactory;
        let not_settings = ["config", "compat"];
        let groups = AllGroups::command();
        let mut heading_of = std::collections::BTreeMap::new();
        for flag in groups.get_arguments() {
            let Some(long) = flag.get_long() else {
                continue;
            };
            if ["help", "version"].contains(&long) {
                continue;
            }
            let heading = flag.get_help_heading().unwrap_or("Options");
            let section = heading_section(heading);
            let values: Vec<Option<String>> = if flag.get_action().takes_values() {
                let named: Vec<String> = flag
                    .get_possible_values()
                    .iter()
                    .map(|v| v.get_name().to_string())
                    .collect();
                let generic = ["0.5", "7", "2MiB", "quality:desc", "some/place", "x"];
                named
                    .into_iter()
                    .chain(generic.map(String::from))
                    .map(Some)
                    .collect()
            } else {
                vec![None]
            };
            let written = values
                .iter()
                .filter_map(|v| sections_written(flag, v.as_deref()))
                .find(|sections| !sections.is_empty())
                .unwrap_or_default();
            if not_settings.contains(&long) {
                assert!(written.is_empty(), "--{long} writes {written:?}");
                assert_eq!(section, Some("input"), "--{long}: {heading}");
                continue;
            }
            assert_eq!(
                written.iter().map(String::as_str).collect::<Vec<_>>(),
                section.into_iter().collect::<Vec<_>>(),
                "--{long} is listed under \"{heading}\" but writes the settings file's {written:?}"
            );
            heading_of.insert(long.to_string(), heading.to_string());
        }
        assert!(heading_of.len() >= 35, "{heading_of:?}");
        assert_eq!(heading_of["threshold"], "Decisions [dedup]");
        let cli = Cli::command();
        let mut checked = 0;
        for cmd in cli.get_subcommands() {
            let takes = |long: &str| cmd.get_arguments().any(|a| a.get_long() == Some(long));
            if !takes("config") {
                continue;
            }
            // A step's own `--output`, `--report` or `--decisions` (a key table, a step's
            // report, the decisions `index` reads) is a path of the step, not the run's setting
            // of that name, which only the commands writing a run's outputs (those taking
            // `--max-output-bytes`) take.
            let step_paths = ["output", "report", "decisions"];
            for flag in cmd.get_arguments() {
                let Some(long) = flag.get_long() else {
                    continue;
                };
                if step_paths.contains(&long) && !takes("max-output-bytes") {
                    continue;
                }
                let Some(want) = heading_of.get(long) else {
                    continue;
                };
                assert_eq!(
                    flag.get_help_heading(),
                    Some(want.as_str()),
                    "`neardup {} --{}`",
                    cmd.get_name(),
                    flag.get_long().unwrap()
                );
                checked += 1;
            }
        }
        assert!(checked > 100, "{checked}");
    }

    #[test]
    fn exact_help_speaks_of_comparing_texts_not_of_shingles() {
        use clap::CommandFactory;
        let mut cli = Cli::command();
        let exact = cli.find_subcommand_mut("exact").unwrap();
        let help = exact.render_long_help().to_string();
        assert!(!help.to_lowercase().contains("shingl"), "{help}");
    }

    #[test]
    fn lshcurator_preset_overrides_hashing_but_keeps_shingles() {
        let input = InputOpts {
            compat: Some("lshcurator".into()),
            ..InputOpts::default()
        };
        let sketch = SketchOpts {
            bands: Some(8),
            rows: Some(4),
            shingle: Some(3),
            step: Some(2),
            tokenize: Some(TokenizeArg::Byte),
            ..SketchOpts::default()
        };
        let c = build_config(&["x.jsonl".into()], &input, &[&sketch]).unwrap();
        assert_eq!(c.sketch.hash, HashScheme::Datasketch);
        assert_eq!(c.sketch.band_keys, BandKeyScheme::Lshcurator);
        assert_eq!(c.sketch.seed, 36);
        assert_eq!(c.sketch.num_perm, 32);
        assert_eq!(
            (c.sketch.shingle, c.sketch.step, c.sketch.tokenize),
            (3, 2, ShingleUnit::Byte)
        );
        assert_eq!(c.keys.short_texts, ShortTextPolicy::EmptySignature);
        assert!(!c.keys.exact);
        assert_eq!(c.dedup.max_reps, None);
        assert_eq!(c.input.fields_mode, FieldsModeKind::Expand);
    }
}
