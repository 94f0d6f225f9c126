//! The `neardup` command line.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use clap::{Args, Parser, Subcommand};
use neardup::corpus::{AtomicFile, Format, Publication, PublishOptions, WriteError};
use neardup::dedup::{EmptyPolicy, Verify};
use neardup::keys::{HotKeys, KeysError, OnError, Progress};
use neardup::sketch::{BandKeyScheme, HashScheme, LshParams};
use neardup::{
    CancelToken, Config, Error, FieldsModeSetting, Pipeline, Report, RunControl, RunPaths, Tokenize,
};

/// Near-duplicate detection for large text corpora (MinHash + LSH in two streaming stages).
#[derive(Parser, Debug)]
#[command(name = "neardup", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Only errors on stderr.
    #[arg(short, long, global = true)]
    quiet: bool,
    /// More log output (-v: debug, -vv: trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Both stages end to end: filtered dataset, decisions and run report.
    Dedup {
        /// Input files, directories and glob patterns.
        #[arg(required = true)]
        inputs: Vec<String>,
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
    },
    /// Stage 1 on some inputs: write their key table.
    Keys {
        /// Input files, directories and glob patterns of this shard.
        #[arg(required = true)]
        inputs: Vec<String>,
        /// Key-table file to write.
        #[arg(long = "output", short = 'o', visible_alias = "out")]
        output: PathBuf,
        /// This shard's number: global row order follows shard numbers.
        #[arg(long, default_value_t = 0)]
        shard: u32,
        /// Stage-1 report of this shard (JSON: records, samples, skipped records and why, speed).
        #[arg(long)]
        report: Option<PathBuf>,
        // A stage-2 output, accepted only to say where it belongs instead of an unknown-flag error.
        #[arg(long, hide = true)]
        decisions: Option<PathBuf>,
        #[command(flatten)]
        input: InputOpts,
        #[command(flatten)]
        sketch: SketchOpts,
    },
    /// Merge key tables into the hot-key file.
    Hot {
        /// Key tables of all shards.
        #[arg(required = true)]
        tables: Vec<PathBuf>,
        /// Hot-key file to write.
        #[arg(long = "output", short = 'o', visible_alias = "out")]
        output: PathBuf,
        /// A key is hot when seen more than this many times.
        #[arg(long, default_value_t = 1)]
        min_key_count: u32,
        /// When all tables' keys exceed this (e.g. 4GiB), count them from spill files
        /// partition by partition instead of in memory; tables are never loaded whole
        /// [default: no limit].
        #[arg(long, value_parser = parse_size)]
        memory_limit: Option<u64>,
        /// Directory for spill files, created if missing [default: the system temp directory].
        #[arg(long)]
        spill_dir: Option<PathBuf>,
        /// Counting threads, at most 1024 [default: 0 = all cores].
        #[arg(long, short = 'j')]
        threads: Option<usize>,
        /// Merge report (JSON: keys, distinct and hot keys, hot samples, the plan, time).
        #[arg(long)]
        report: Option<PathBuf>,
        /// Plan stage 2 for this many `decide` groups: the connected components of hot rows,
        /// packed into G groups of balanced size (stored in the hot-key file).
        #[arg(long, default_value_t = 1)]
        groups: u32,
    },
    /// Distributed stage 2, per shard: re-read one shard and write what deciding its hot
    /// samples needs, split by group (a directory).
    Sign {
        /// The shard's key table from `neardup keys`.
        table: PathBuf,
        /// Hot-key file from `neardup hot`.
        #[arg(long)]
        hot: PathBuf,
        /// Output directory (one stream per group and a manifest).
        #[arg(long = "output", short = 'o')]
        output: PathBuf,
        /// Report (JSON: what was signed, per group).
        #[arg(long)]
        report: Option<PathBuf>,
        #[command(flatten)]
        input: InputOpts,
        #[command(flatten)]
        sketch: SketchOpts,
        #[command(flatten)]
        decide: DecideOpts,
    },
    /// Distributed stage 2, per group: decide one group's hot samples from every shard's sign
    /// output, in global order. Opens no input file.
    Decide {
        /// Sign outputs of every shard (any order).
        #[arg(required = true)]
        signed: Vec<PathBuf>,
        /// Hot-key file from `neardup hot`.
        #[arg(long)]
        hot: PathBuf,
        /// The group to decide (0 to G-1).
        #[arg(long)]
        group: u32,
        /// Output directory (one stream per shard and a manifest).
        #[arg(long = "output", short = 'o')]
        output: PathBuf,
        /// Report (JSON: decisions per shard, the decision core's counters).
        #[arg(long)]
        report: Option<PathBuf>,
        #[command(flatten)]
        input: InputOpts,
        #[command(flatten)]
        sketch: SketchOpts,
        #[command(flatten)]
        decide: DecideOpts,
    },
    /// Distributed stage 2, per shard: re-read one shard and write its filtered dataset and
    /// decisions, the hot samples decided by `decide`.
    Write {
        /// The shard's key table from `neardup keys`.
        table: PathBuf,
        /// Hot-key file from `neardup hot`.
        #[arg(long)]
        hot: PathBuf,
        /// Decide outputs of every group (any order).
        #[arg(long, required = true, num_args = 1..)]
        decided: Vec<PathBuf>,
        #[command(flatten)]
        input: InputOpts,
        #[command(flatten)]
        sketch: SketchOpts,
        #[command(flatten)]
        decide: DecideOpts,
        #[command(flatten)]
        output: OutputOpts,
    },
    /// Stage 2 given the key tables of all shards and their hot-key file.
    Apply {
        /// Key tables from `neardup keys`, all shards (any order).
        #[arg(required_unless_present = "keys")]
        tables: Vec<PathBuf>,
        /// Hot-key file from `neardup hot`.
        #[arg(long)]
        hot: PathBuf,
        /// More key tables (the earlier spelling; positional tables are the same).
        #[arg(long = "keys", hide = true)]
        keys: Vec<PathBuf>,
        #[command(flatten)]
        input: InputOpts,
        #[command(flatten)]
        sketch: SketchOpts,
        #[command(flatten)]
        decide: DecideOpts,
        #[command(flatten)]
        output: OutputOpts,
    },
    /// Exact deduplication by content hash of the normalised text.
    Exact {
        /// Input files, directories and glob patterns.
        #[arg(required = true)]
        inputs: Vec<String>,
        #[command(flatten)]
        input: InputOpts,
        #[command(flatten)]
        normalize: NormalizeOpts,
        #[command(flatten)]
        count: CountOpts,
        #[command(flatten)]
        output: OutputOpts,
    },
    /// Check a run's decisions against exact Jaccard: precision of every drop, recall on a sample.
    Eval {
        /// The run's inputs, in the same order.
        #[arg(required_unless_present = "inputs_flag")]
        inputs: Vec<String>,
        /// The run's decisions file.
        #[arg(long)]
        decisions: PathBuf,
        /// The run's inputs (the earlier spelling; positional inputs are the same).
        #[arg(long = "inputs", num_args = 1.., hide = true)]
        inputs_flag: Vec<String>,
        /// Documents drawn for the recall estimate.
        #[arg(long, default_value_t = neardup::eval::DEFAULT_RECALL_SAMPLES)]
        samples: usize,
        /// Seed of the draw.
        #[arg(long, default_value_t = 0)]
        sample_seed: u64,
        /// Write the full evaluation as JSON here.
        #[arg(long = "eval-report")]
        eval_report: Option<PathBuf>,
        #[command(flatten)]
        input: InputOpts,
        #[command(flatten)]
        sketch: SketchOpts,
    },
    /// Show the LSH setting chosen for a threshold and width, its error areas and S-curve.
    Params {
        /// Similarity threshold.
        #[arg(long, default_value_t = 0.8)]
        threshold: f64,
        /// Signature width.
        #[arg(long, default_value_t = 128)]
        num_perm: usize,
        /// Explicit bands (with --rows) instead of the optimum [default: optimal for --threshold
        /// and --num-perm].
        #[arg(long, requires = "rows")]
        bands: Option<usize>,
        /// Rows per band (with --bands) [default: optimal for --threshold and --num-perm].
        #[arg(long, requires = "bands")]
        rows: Option<usize>,
        /// Points of the S-curve table (2 to 10000).
        #[arg(long, default_value_t = 11)]
        points: usize,
    },
}

// Each command takes only the option groups it uses, so its help lists nothing it would ignore.
// A settings file (--config) may still name any setting: a file shared by the staged commands
// holds them all.

/// Settings file, preset, how inputs are read, and threads.
#[derive(Args, Debug, Default)]
#[command(next_help_heading = "Input")]
struct InputOpts {
    /// Settings file (TOML or JSON, see docs/tuning.md); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Preset reproducing another tool's decisions exactly.
    #[arg(long, value_parser = ["lshcurator"])]
    compat: Option<String>,
    /// Read files whose extension names no format as this format [default: by extension].
    #[arg(long)]
    format: Option<FormatArg>,
    /// Text field (repeatable; dotted paths reach into objects) [default: text].
    #[arg(long = "field")]
    fields: Vec<String>,
    /// Several fields: join into one text per record, or one sample per field [default: join].
    #[arg(long)]
    fields_mode: Option<FieldsModeSetting>,
    /// Field carried into every decision as the id.
    #[arg(long)]
    id_field: Option<String>,
    /// Skip bad records (counted, quoted in the report) or stop at the first [default: skip].
    #[arg(long)]
    on_error: Option<OnErrorArg>,
    /// Worker threads, at most 1024 [default: 0 = all cores].
    #[arg(long, short = 'j')]
    threads: Option<usize>,
}

/// Text normalisation before texts are compared (and hashed); outputs keep the original text.
#[derive(Args, Debug, Default)]
#[command(next_help_heading = "Normalisation")]
struct NormalizeOpts {
    /// Lowercase texts before comparing them.
    #[arg(long)]
    lowercase: bool,
    /// Unicode NFKC before comparing.
    #[arg(long)]
    nfkc: bool,
    /// Collapse whitespace runs.
    #[arg(long)]
    collapse_whitespace: bool,
    /// Remove punctuation.
    #[arg(long)]
    strip_punctuation: bool,
    /// Keep only these characters (e.g. '0-9a-zA-Z가-힣') [default: all].
    #[arg(long)]
    keep_chars: Option<String>,
    /// Do not trim leading/trailing whitespace (trimmed by default).
    #[arg(long)]
    no_trim: bool,
}

/// What the key table holds: shingling, signature, bands. Stage 1 and stage 2 must agree on
/// these (the staged commands check it).
#[derive(Args, Debug, Default)]
#[command(next_help_heading = "Sketch")]
struct SketchOpts {
    /// Similarity threshold, 0 to 1 [default: 0.8].
    #[arg(long)]
    threshold: Option<f64>,
    /// Signature width, 1 to 16384 [default: 128].
    #[arg(long)]
    num_perm: Option<usize>,
    /// LSH bands (with --rows; bands × rows at most --num-perm) [default: optimal for
    /// --threshold and --num-perm].
    #[arg(long, requires = "rows")]
    bands: Option<usize>,
    /// Rows per band (with --bands) [default: optimal for --threshold and --num-perm].
    #[arg(long, requires = "bands")]
    rows: Option<usize>,
    /// Shingle unit [default: char].
    #[arg(long)]
    tokenize: Option<Tokenize>,
    /// Shingle size [default: 5].
    #[arg(long)]
    shingle: Option<usize>,
    /// Shingle window step [default: 1].
    #[arg(long)]
    step: Option<usize>,
    /// MinHash hash scheme: oph (one-permutation hashing), fast (k-permutation SIMD),
    /// datasketch (bit-exact datasketch 1.9) [default: oph].
    #[arg(long)]
    hash: Option<HashArg>,
    /// Band-key encoding [default: fast].
    #[arg(long)]
    band_keys: Option<BandKeysArg>,
    /// Permutation seed [default: 1].
    #[arg(long)]
    seed: Option<u64>,
    /// Do not count content hashes (no exact-copy shortcut).
    #[arg(long)]
    no_exact: bool,
    // Last: a flattened group's heading stays in force for the fields after it.
    #[command(flatten)]
    normalize: NormalizeOpts,
}

/// Stage 1's frequency filter.
#[derive(Args, Debug, Default)]
#[command(next_help_heading = "Counting")]
struct CountOpts {
    /// A key is hot when seen more than this many times [default: 1].
    #[arg(long)]
    min_key_count: Option<u32>,
    /// Key-table memory before stage 1 spills to disk (e.g. 4GiB) [default: no limit].
    #[arg(long, value_parser = parse_size)]
    memory_limit: Option<u64>,
}

/// Stage 2's decisions.
#[derive(Args, Debug, Default)]
#[command(next_help_heading = "Decisions")]
struct DecideOpts {
    /// Representatives per hot bucket (0: unbounded) [default: 64].
    #[arg(long)]
    max_reps: Option<usize>,
    /// Confirm candidates with the true Jaccard of the shingle sets (exact) or by the
    /// signatures' estimate [default: exact].
    #[arg(long)]
    verify: Option<VerifyArg>,
}

/// What a deduplicating run writes, and where it spills.
#[derive(Args, Debug, Default)]
#[command(next_help_heading = "Output")]
struct OutputOpts {
    /// Directory for the filtered dataset (same relative paths and formats as the inputs).
    #[arg(long, short = 'o')]
    output: Option<PathBuf>,
    /// Decisions file, one row per sample (.jsonl or .parquet).
    #[arg(long)]
    decisions: Option<PathBuf>,
    /// Run report (JSON).
    #[arg(long)]
    report: Option<PathBuf>,
    /// Replace an existing output directory.
    #[arg(long)]
    overwrite: bool,
    /// Split outputs into parts of at most this size (e.g. 512MiB) [default: no split].
    #[arg(long, value_parser = parse_size)]
    max_output_bytes: Option<u64>,
    /// Keep or drop empty / whitespace-only texts [default: keep].
    #[arg(long)]
    empty: Option<EmptyArg>,
    /// Directory for spill files, created if missing [default: the system temp directory].
    #[arg(long)]
    spill_dir: Option<PathBuf>,
}

macro_rules! value_enum {
    ($name:ident => $target:ty { $($variant:ident => $value:expr),+ $(,)? }) => {
        #[derive(Clone, Copy, Debug, clap::ValueEnum)]
        enum $name { $($variant),+ }
        impl From<$name> for $target {
            fn from(v: $name) -> $target { match v { $($name::$variant => $value),+ } }
        }
    };
}
value_enum!(FormatArg => Format { Jsonl => Format::Jsonl, Parquet => Format::Parquet });
value_enum!(HashArg => HashScheme { Fast => HashScheme::Fast, Datasketch => HashScheme::Datasketch, Oph => HashScheme::Oph });
value_enum!(BandKeysArg => BandKeyScheme { Fast => BandKeyScheme::Fast, Lshcurator => BandKeyScheme::Lshcurator });
value_enum!(VerifyArg => Verify { Estimate => Verify::Estimate, Exact => Verify::Exact });
value_enum!(OnErrorArg => OnError { Skip => OnError::Skip, Fail => OnError::Fail });
value_enum!(EmptyArg => EmptyPolicy { Keep => EmptyPolicy::Keep, Drop => EmptyPolicy::Drop });

fn parse_size(s: &str) -> Result<u64, String> {
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

/// Builds the settings: defaults, then the settings file, then each group's flags, then the
/// compatibility preset (which keeps an explicit --max-reps).
fn build_config(
    inputs: &[String],
    input: &InputOpts,
    groups: &[&dyn Overrides],
    max_reps: Option<usize>,
) -> Result<Config, Error> {
    let mut c = match &input.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    if !inputs.is_empty() {
        c.input.inputs = inputs.to_vec();
    }
    input.apply(&mut c);
    for g in groups {
        g.apply(&mut c);
    }
    if let Some(preset) = &input.compat {
        match preset.as_str() {
            "lshcurator" => {
                c = c.lshcurator();
                if let Some(v) = max_reps {
                    c.dedup.max_reps = (v > 0).then_some(v);
                }
            }
            other => return Err(Error::Usage(format!("unknown --compat preset {other:?}"))),
        }
    }
    Ok(c)
}

/// An option group's flags written over the settings.
trait Overrides {
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
            c.input.fields_mode = v;
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
            c.sketch.tokenize = v;
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
            c.dedup.max_reps = (v > 0).then_some(v);
        }
        if let Some(v) = self.verify {
            c.dedup.verify = v.into();
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

fn init_logging(quiet: bool, verbose: u8) {
    let default = if quiet {
        "error"
    } else {
        match verbose {
            0 => "info",
            1 => "debug",
            _ => "trace",
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}

/// Shows the stages' progress on stderr until dropped: bars on a terminal, a log line every
/// ten seconds otherwise.
struct ProgressView {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ProgressView {
    fn start(stages: [Arc<Progress>; 2], quiet: bool) -> ProgressView {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = (!quiet).then(|| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let terminal = std::io::stderr().is_terminal();
                let started = Instant::now();
                let mut last_log = Instant::now();
                let mut bar: Option<(usize, ProgressBar)> = None;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(200));
                    let stage = if stages[1].bytes() > 0 { 1 } else { 0 };
                    let p = &stages[stage];
                    if terminal {
                        if bar.as_ref().is_none_or(|(s, _)| *s != stage) {
                            if let Some((_, b)) = bar.take() {
                                b.finish_and_clear();
                            }
                            let b = ProgressBar::new(p.total().max(1));
                            b.set_style(
                                ProgressStyle::with_template(
                                    "{prefix} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta} {msg}",
                                )
                                .expect("progress template")
                                .progress_chars("=> "),
                            );
                            b.set_prefix(if stage == 0 { "stage 1 keys " } else { "stage 2 dedup" });
                            bar = Some((stage, b));
                        }
                        let (_, b) = bar.as_ref().expect("bar");
                        b.set_length(p.total().max(p.bytes()).max(1));
                        b.set_position(p.bytes());
                        b.set_message(format!("{} samples", p.samples()));
                    } else if last_log.elapsed() >= Duration::from_secs(10) {
                        last_log = Instant::now();
                        let secs = started.elapsed().as_secs_f64();
                        tracing::info!(
                            "stage {}: {:.0} MB of ~{:.0} MB, {} samples ({:.0} s elapsed)",
                            stage + 1,
                            p.bytes() as f64 / 1e6,
                            p.total() as f64 / 1e6,
                            p.samples(),
                            secs
                        );
                    }
                }
                if let Some((_, b)) = bar {
                    b.finish_and_clear();
                }
            })
        });
        ProgressView { stop, thread }
    }
}

impl Drop for ProgressView {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The first of SIGINT, SIGTERM and SIGHUP that arrived (0: none).
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// The running command's cancel token, set before the signal handlers are installed.
static CANCEL: OnceLock<CancelToken> = OnceLock::new();

/// Only async-signal-safe work: atomics, write(2) and _exit(2).
extern "C" fn on_signal(signal: libc::c_int) {
    if SIGNAL
        .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        const MSG: &[u8] =
            b"\nneardup: second signal: exiting at once; the next run removes what is left\n";
        // SAFETY: write(2) and _exit(2) are async-signal-safe.
        unsafe {
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::_exit(128 + signal);
        }
    }
    if let Some(cancel) = CANCEL.get() {
        cancel.cancel();
    }
}

/// Makes SIGINT, SIGTERM and SIGHUP stop the run cleanly: the first cancels the returned token
/// (the run stops at its next block, removes what it wrote and exits with 128 + the signal's
/// number), a second exits at once. A signal ignored when neardup started (`nohup`, a
/// background job) stays ignored.
fn handle_signals() -> CancelToken {
    let cancel = CANCEL.get_or_init(CancelToken::new).clone();
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: sigaction with a zeroed, then filled, action; the handler only touches atomics.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_IGN
            {
                continue;
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
    cancel
}

fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        n => format!("signal {n}"),
    }
}

fn publish_error(e: WriteError) -> Error {
    if e.kind() == "interrupted" {
        Error::Interrupted
    } else {
        Error::Run(e.to_string())
    }
}

fn run_pipeline(config: Config, quiet: bool) -> Result<Report, Error> {
    let cancel = handle_signals();
    let stages = [Arc::new(Progress::default()), Arc::new(Progress::default())];
    let pipeline = Pipeline::new(config)?
        .with_progress(stages[0].clone(), stages[1].clone())
        .with_cancel(cancel);
    let _view = ProgressView::start(stages, quiet);
    pipeline.run()
}

/// A line for the user on stderr. A closed stderr is no reason to fail a run that succeeded.
fn note(quiet: bool, line: impl std::fmt::Display) {
    if !quiet {
        let _ = writeln!(std::io::stderr(), "{line}");
    }
}

/// Writes a command's answer to stdout. A reader that stopped early (`neardup params | head -1`)
/// ends the command quietly; any other write error is one.
fn answer(text: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Error::Run(format!("cannot write to standard output: {e}")))
        }
        _ => Ok(()),
    }
}

/// Loads a hot-key file given as an argument: a wrong one is a mistake in the arguments, not a
/// failure of stage 1.
fn load_hot_argument(path: &std::path::Path) -> Result<HotKeys, Error> {
    HotKeys::load(path).map_err(|e| match e {
        KeysError::Config(m) => Error::Usage(m),
        other => Error::Run(other.to_string()),
    })
}

fn require_outputs(config: &Config) -> Result<(), Error> {
    if config.output.dir.is_none() && config.output.decisions.is_none() {
        return Err(Error::Usage(
            "give --output DIR and/or --decisions FILE".into(),
        ));
    }
    Ok(())
}

/// Writes `value` as pretty JSON, atomically.
fn save_json(path: &std::path::Path, value: &impl serde::Serialize) -> Result<(), Error> {
    save_json_to(
        AtomicFile::create(path)
            .map_err(|e| Error::Run(format!("cannot write {}: {e}", path.display())))?,
        value,
    )
}

/// Writes `value` as pretty JSON into `file` and commits it.
fn save_json_to(mut file: AtomicFile, value: &impl serde::Serialize) -> Result<(), Error> {
    let path = file.path().to_path_buf();
    let fail =
        |e: &dyn std::fmt::Display| Error::Run(format!("cannot write {}: {e}", path.display()));
    serde_json::to_writer_pretty(&mut file, value).map_err(|e| fail(&e))?;
    file.commit().map_err(|e| fail(&e))
}

fn run(cli: Cli) -> Result<(), Error> {
    let quiet = cli.quiet;
    match cli.command {
        Command::Dedup {
            inputs,
            input,
            sketch,
            count,
            decide,
            output,
        } => {
            let config = build_config(
                &inputs,
                &input,
                &[&sketch, &count, &decide, &output],
                decide.max_reps,
            )?;
            require_outputs(&config)?;
            let report = run_pipeline(config, quiet)?;
            note(quiet, report.summary());
        }
        Command::Exact {
            inputs,
            input,
            normalize,
            count,
            output,
        } => {
            let mut config = build_config(&inputs, &input, &[&normalize, &count, &output], None)?;
            require_outputs(&config)?;
            config.keys.exact = true;
            config.keys.near = false;
            let report = run_pipeline(config, quiet)?;
            note(quiet, report.summary());
        }
        Command::Keys {
            inputs,
            output,
            shard,
            report,
            decisions,
            input,
            sketch,
        } => {
            if decisions.is_some() {
                return Err(Error::Usage(
                    "`neardup keys` writes only the key table (-o/--output); --decisions belongs \
                     to `neardup apply`"
                        .into(),
                ));
            }
            let config = build_config(&inputs, &input, &[&sketch], None)?;
            let mut keys = neardup::keys_config(&config)?;
            let (found, problems) = neardup::discover_inputs_and_sources(&config)?;
            let mut paths = RunPaths::new();
            paths
                .read_discovered(&found)
                .write_file("the key table (--output)", &output);
            if let Some(r) = &report {
                paths.write_file("the report (--report)", r);
            }
            paths.check()?;
            for p in &problems {
                tracing::warn!("input problem: {p}");
            }
            let files = found.files;
            let cancel = handle_signals();
            // The table and its report are published together when the shard is done.
            let publication = Publication::begin(&PublishOptions {
                files: std::iter::once(output.clone())
                    .chain(report.clone())
                    .collect(),
                cancel: cancel.clone(),
                ..PublishOptions::default()
            })
            .map_err(publish_error)?;
            let progress = [Arc::new(Progress::default()), Arc::new(Progress::default())];
            keys.progress = Some(progress[0].clone());
            keys.cancel = cancel;
            let stats = {
                let _view = ProgressView::start(progress, quiet);
                let table = publication.file(&output).map_err(publish_error)?;
                neardup::keys::write_keys_to(&files, shard, &keys, table)?
            };
            if let Some(path) = &report {
                save_json_to(
                    publication.file(path).map_err(publish_error)?,
                    &serde_json::json!({
                        "neardup": env!("CARGO_PKG_VERSION"),
                        "shard": shard,
                        "table": output,
                        "inputs": files.iter().map(|f| &f.path).collect::<Vec<_>>(),
                        "input_problems": problems,
                        "stage1": stats,
                    }),
                )?;
            }
            publication.commit().map_err(publish_error)?;
            note(
                quiet,
                format_args!(
                    "shard {shard}: {} records, {} samples, {} bytes/sample, {:.1} MB/s -> {}",
                    stats.records,
                    stats.samples,
                    stats.bytes_per_sample,
                    stats.mb_per_second,
                    output.display()
                ),
            );
        }
        Command::Hot {
            tables,
            output,
            min_key_count,
            memory_limit,
            spill_dir,
            threads,
            report,
            groups,
        } => {
            if groups == 0 {
                return Err(Error::Usage("--groups must be at least 1".into()));
            }
            let mut config = Config::default();
            config.keys.min_key_count = min_key_count;
            config.keys.memory_limit = memory_limit;
            config.keys.spill_dir = spill_dir;
            config.run.threads = threads.unwrap_or(0);
            config.validate_run()?;
            let mut paths = RunPaths::new();
            for t in &tables {
                paths.read_file("the key table", t);
            }
            paths.write_file("the hot-key file (--output)", &output);
            if let Some(r) = &report {
                paths.write_file("the report (--report)", r);
            }
            if let Some(dir) = &config.keys.spill_dir {
                paths.spill_dir(dir);
            }
            paths.check()?;
            let started = Instant::now();
            let control = RunControl {
                cancel: handle_signals(),
                ..RunControl::default()
            };
            // The hot-key file and its report are published together at the end.
            let publication = Publication::begin(&PublishOptions {
                files: std::iter::once(output.clone())
                    .chain(report.clone())
                    .collect(),
                scratch_dirs: config.keys.spill_dir.iter().cloned().collect(),
                cancel: control.cancel.clone(),
                ..PublishOptions::default()
            })
            .map_err(publish_error)?;
            let (mut hot, mask, stats) =
                neardup::merge_hot_key_files_with(&config, &tables, &control)?;
            if groups > 1 {
                let shards = neardup::keys::ShardTables::open(&tables)?;
                let plan = neardup::keys::plan_from_tables(&shards, &hot, groups, &|| {
                    control.cancel.is_cancelled()
                })?;
                hot = hot.with_plan(plan)?;
            }
            hot.save_to(publication.file(&output).map_err(publish_error)?)?;
            if let Some(path) = &report {
                save_json_to(
                    publication.file(path).map_err(publish_error)?,
                    &serde_json::json!({
                        "neardup": env!("CARGO_PKG_VERSION"),
                        "tables": tables,
                        "hot_keys_file": output,
                        "min_key_count": min_key_count,
                        "count": stats,
                        "samples": mask.rows(),
                        "hot_samples": mask.hot_rows(),
                        "plan": hot.plan().map(|p| serde_json::json!({
                            "groups": p.groups,
                            "group_rows": p.group_rows,
                            "components": p.components,
                            "largest_component": p.largest_component,
                            "hot_rows": p.hot_rows,
                        })),
                        "seconds": started.elapsed().as_secs_f64(),
                    }),
                )?;
            }
            publication.commit().map_err(publish_error)?;
            note(
                quiet,
                format_args!(
                    "{} tables, {} keys, {} distinct, {} hot keys, {} hot samples of {}{} -> {}",
                    tables.len(),
                    stats.keys,
                    stats.distinct_keys,
                    stats.hot_keys,
                    mask.hot_rows(),
                    mask.rows(),
                    if stats.spilled { " (spilled)" } else { "" },
                    output.display()
                ),
            );
        }
        Command::Apply {
            mut tables,
            hot,
            keys,
            input,
            sketch,
            decide,
            output,
        } => {
            tables.extend(keys);
            let config = build_config(&[], &input, &[&sketch, &decide, &output], decide.max_reps)?;
            require_outputs(&config)?;
            config.validate()?;
            // The tables' input files are checked too, by the library, once their headers are read.
            let mut paths = RunPaths::new();
            paths.read_file("the hot-key file (--hot)", &hot);
            for t in &tables {
                paths.read_file("the key table", t);
            }
            paths.write_config_outputs(&config, &[]);
            paths.check()?;
            let hot = load_hot_argument(&hot)?;
            let progress = [Arc::new(Progress::default()), Arc::new(Progress::default())];
            let control = RunControl {
                stage2: Some(progress[1].clone()),
                cancel: handle_signals(),
                ..RunControl::default()
            };
            let report = {
                let _view = ProgressView::start(progress, quiet);
                neardup::apply_files_with(&config, &hot, &tables, &control, &mut |_| {})?
            };
            note(quiet, report.summary());
        }
        Command::Sign {
            table,
            hot,
            output,
            report,
            input,
            sketch,
            decide,
        } => {
            let config = build_config(&[], &input, &[&sketch, &decide], decide.max_reps)?;
            config.validate()?;
            let mut paths = RunPaths::new();
            paths
                .read_file("the hot-key file (--hot)", &hot)
                .read_file("the key table", &table);
            if let Some(r) = &report {
                paths.write_file("the report (--report)", r);
            }
            paths.check()?;
            let hot = load_hot_argument(&hot)?;
            let progress = [Arc::new(Progress::default()), Arc::new(Progress::default())];
            let control = RunControl {
                stage2: Some(progress[1].clone()),
                cancel: handle_signals(),
                ..RunControl::default()
            };
            let signed = {
                let _view = ProgressView::start(progress, quiet);
                neardup::sign_shard(&config, &table, &hot, &output, &control)?
            };
            if let Some(path) = &report {
                save_json(path, &signed)?;
            }
            let m = &signed.manifest;
            note(
                quiet,
                format_args!(
                    "shard {}: {} records, {} hot samples signed ({} as exact copies by hash) \
                     into {} group{}, {} bytes -> {}",
                    m.place.shard,
                    signed.stage2.records,
                    m.signed.samples.iter().sum::<u64>(),
                    m.signed.copies_by_hash,
                    m.groups,
                    if m.groups == 1 { "" } else { "s" },
                    m.bytes.iter().sum::<u64>(),
                    output.display()
                ),
            );
        }
        Command::Decide {
            signed,
            hot,
            group,
            output,
            report,
            input,
            sketch,
            decide,
        } => {
            let config = build_config(&[], &input, &[&sketch, &decide], decide.max_reps)?;
            config.validate()?;
            let mut paths = RunPaths::new();
            paths.read_file("the hot-key file (--hot)", &hot);
            if let Some(r) = &report {
                paths.write_file("the report (--report)", r);
            }
            paths.check()?;
            let hot = load_hot_argument(&hot)?;
            let control = RunControl {
                cancel: handle_signals(),
                ..RunControl::default()
            };
            let signed: Vec<neardup::SignedInput> = signed.iter().map(Into::into).collect();
            let decided =
                neardup::decide_group_dirs(&config, &signed, &hot, group, &output, &control)?;
            if let Some(path) = &report {
                save_json(path, &decided)?;
            }
            let m = &decided.manifest;
            note(
                quiet,
                format_args!(
                    "group {} of {}: {} hot samples of {} shard{} decided ({} near, {} exact) -> {}",
                    m.group,
                    m.groups,
                    m.decided.iter().sum::<u64>(),
                    m.shards,
                    if m.shards == 1 { "" } else { "s" },
                    m.deduper.near,
                    m.deduper.exact,
                    output.display()
                ),
            );
        }
        Command::Write {
            table,
            hot,
            decided,
            input,
            sketch,
            decide,
            output,
        } => {
            let config = build_config(&[], &input, &[&sketch, &decide, &output], decide.max_reps)?;
            require_outputs(&config)?;
            config.validate()?;
            let mut paths = RunPaths::new();
            paths
                .read_file("the hot-key file (--hot)", &hot)
                .read_file("the key table", &table);
            paths.write_config_outputs(&config, &[]);
            paths.check()?;
            let hot = load_hot_argument(&hot)?;
            let progress = [Arc::new(Progress::default()), Arc::new(Progress::default())];
            let control = RunControl {
                stage2: Some(progress[1].clone()),
                cancel: handle_signals(),
                ..RunControl::default()
            };
            let report = {
                let _view = ProgressView::start(progress, quiet);
                let decided: Vec<neardup::DecidedInput> = decided.iter().map(Into::into).collect();
                neardup::write_shard(&config, &table, &hot, &decided, &control)?
            };
            note(quiet, report.summary());
        }
        Command::Eval {
            mut inputs,
            decisions,
            inputs_flag,
            samples,
            sample_seed,
            eval_report,
            input,
            sketch,
        } => {
            inputs.extend(inputs_flag);
            let config = build_config(&inputs, &input, &[&sketch], None)?;
            let sketch = config.sketch_config()?;
            config.validate_run()?;
            let (found, _) = neardup::discover_inputs_and_sources(&config)?;
            let mut paths = RunPaths::new();
            paths
                .read_discovered(&found)
                .read_file("the decisions file (--decisions)", &decisions);
            if let Some(p) = &eval_report {
                paths.write_file("the evaluation report (--eval-report)", p);
            }
            paths.check()?;
            let report = neardup::eval::evaluate(&neardup::eval::EvalOptions {
                decisions,
                inputs,
                format: config.input.format,
                selector: config.selector()?,
                normalizer: sketch.normalizer,
                shingler: sketch.shingler,
                threshold: config.dedup.threshold,
                recall_samples: samples,
                seed: sample_seed,
                threads: config.run.threads,
            })
            .map_err(Error::Run)?;
            if let Some(path) = eval_report {
                save_json(&path, &report)?;
            }
            answer(&format!("{}\n", report.summary()))?;
        }
        Command::Params {
            threshold,
            num_perm,
            bands,
            rows,
            points,
        } => {
            if !(2..=MAX_POINTS).contains(&points) {
                return Err(Error::Usage(format!(
                    "--points must be between 2 and {MAX_POINTS}, got {points}"
                )));
            }
            // The same checks and the same choice as a run with these settings.
            let mut config = Config::default();
            config.dedup.threshold = threshold;
            config.sketch.num_perm = num_perm;
            config.sketch.bands = bands;
            config.sketch.rows = rows;
            let params = config.lsh_params()?;
            answer(&format!(
                "{}\n",
                params_table(&params, threshold, num_perm, points)
            ))?;
        }
    }
    Ok(())
}

/// Most rows `neardup params` prints for the S-curve.
const MAX_POINTS: usize = 10_000;

fn params_table(p: &LshParams, threshold: f64, num_perm: usize, points: usize) -> String {
    let mut s = format!(
        "threshold {threshold}, num_perm {num_perm}: bands = {}, rows = {} (uses {} of {num_perm} permutations)\n",
        p.bands,
        p.rows,
        p.num_perm_used()
    );
    s += &format!(
        "false-positive area (pairs below the threshold that become candidates): {:.5}\n",
        p.false_positive_area(threshold)
    );
    s += &format!(
        "false-negative area (pairs above the threshold that are missed):        {:.5}\n",
        p.false_negative_area(threshold)
    );
    // P(s) rises monotonically from 0 to 1: bisect for P(s) = 1/2.
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if p.collision_probability(mid) < 0.5 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    s += &format!(
        "the S-curve crosses 1/2 at similarity {:.3}\n\n",
        0.5 * (lo + hi)
    );
    s += "similarity  P(candidate)\n";
    for (x, y) in p.s_curve(points) {
        s += &format!("{x:>10.3}  {y:>12.5}\n");
    }
    s
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.quiet, cli.verbose);
    let result = run(cli);
    let signal = SIGNAL.load(Ordering::SeqCst);
    if signal != 0 {
        let name = signal_name(signal);
        match &result {
            Ok(()) => eprintln!(
                "neardup: {name} arrived while the outputs were being published; they are \
                 published whole"
            ),
            Err(Error::Interrupted) => eprintln!(
                "neardup: interrupted by {name}; nothing was published and the files this run had \
                 written were removed"
            ),
            Err(e) => eprintln!("neardup: error: {e}\nneardup: interrupted by {name}"),
        }
        return ExitCode::from((128 + signal) as u8);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "neardup: error: {e}");
            ExitCode::from(e.exit_code() as u8)
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
            tokenize: Some(Tokenize::Byte),
            ..SketchOpts::default()
        };
        let c = build_config(&["x.jsonl".into()], &input, &[&sketch], None).unwrap();
        assert_eq!(c.sketch.hash, HashScheme::Datasketch);
        assert_eq!(c.sketch.band_keys, BandKeyScheme::Lshcurator);
        assert_eq!(c.sketch.seed, 36);
        assert_eq!(c.sketch.num_perm, 32);
        assert_eq!(
            (c.sketch.shingle, c.sketch.step, c.sketch.tokenize),
            (3, 2, Tokenize::Byte)
        );
        assert_eq!(c.keys.short_texts, ShortTextPolicy::EmptySignature);
        assert!(!c.keys.exact);
        assert_eq!(c.dedup.max_reps, None);
        assert_eq!(c.input.fields_mode, FieldsModeSetting::Expand);
    }
}
