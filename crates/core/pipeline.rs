//! The two stages wired together, and the stage-level steps a custom scheduler runs apart.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use neardup_corpus::{
    AtomicFile, DiscoverOptions, Discovery, InputFile, InputProblem, OutputOptions, Publication,
    PublishOptions, UnreadableRange, discover,
};
use neardup_dedup::{Decision, DedupStats, Stage2Config, run_dedup_into};
use neardup_exec::{CancelToken, OnError, Progress, StepControl};
use neardup_keys::{
    FileRows, HotKeys, HotMask, KeyTable, KeysOutput, KeysStats, ShardTables, TableStore, run_keys,
};
use serde::{Deserialize, Serialize};

use crate::against;
use crate::config::Config;
use crate::error::{ConfigError, Error, InputsError, IoOp, publish_error, wrong_tables};
use crate::paths::RunPaths;
use crate::stage_settings::{check_hot_layout, keys_config, stage2_config};

/// Everything a run did, as written to `--report`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// neardup's version.
    pub version: String,
    /// The settings of the run, without where it read and wrote ([`Config::without_run_paths`]):
    /// a settings file that repeats its decisions on inputs and outputs named anew.
    pub config: Config,
    /// Where the run read and wrote, as it was given.
    #[serde(default)]
    pub paths: ReportPaths,
    /// Input files read.
    pub files: Vec<PathBuf>,
    /// Inputs that could not be used (missing paths, unknown extensions, …).
    pub input_problems: Vec<String>,
    /// Stage 1's statistics (absent for `apply`, which reuses stage 1's tables; the totals come
    /// from stage 2 alone, so they are complete either way).
    pub stage1: Option<KeysStats>,
    /// Stage 2's statistics.
    pub stage2: DedupStats,
    /// The accounting every user checks first.
    pub totals: Totals,
    /// What a run against saved indexes (`--against`) read of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against: Option<against::AgainstReport>,
    /// The index this run saved (`--index-out`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<against::IndexReport>,
    /// How the run held `--memory-limit`: the threads it used (fewer than asked when the limit
    /// has no room for more), the blocks it read; absent without a limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<crate::config::MemoryPlan>,
}

/// Where a run read and wrote, as its settings named them: the paths a report's `config` leaves
/// out ([`Config::without_run_paths`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReportPaths {
    /// The inputs as given (files, directories, glob patterns); `files` lists what they held.
    pub inputs: Vec<String>,
    /// The filtered dataset's directory.
    pub output: Option<PathBuf>,
    /// The decisions file; `-` when the decisions went to standard output.
    pub decisions: Option<PathBuf>,
    /// The report; `-` when it went to standard output.
    pub report: Option<PathBuf>,
    /// The saved index.
    pub index_out: Option<PathBuf>,
    /// Where spill files went.
    pub spill_dir: Option<PathBuf>,
    /// Whether the run was allowed to replace an earlier run's output directory.
    pub overwrite: bool,
}

impl ReportPaths {
    /// The paths `config` names.
    pub fn of(config: &Config) -> ReportPaths {
        let output = &config.output;
        ReportPaths {
            inputs: config.input.inputs.clone(),
            output: output.dir.clone(),
            decisions: if output.decisions_to_stdout {
                Some(PathBuf::from("-"))
            } else {
                output.decisions.clone()
            },
            report: output.report.clone(),
            index_out: output.index_out.clone(),
            spill_dir: config.keys.spill_dir.clone(),
            overwrite: output.overwrite,
        }
    }
}

/// Record and sample accounting, from what stage 2 read:
/// `records_in = records_kept + records_dropped + records_unreadable`, and
/// `samples = unique + near + exact + empty + errors` (one decision per sample).
///
/// Every record of every input is in exactly one of kept, dropped and unreadable, except where a
/// count cannot be known (the records after the break of a truncated gzip/zstd stream, a file
/// that cannot be opened, a Parquet file without a readable footer): those are listed in
/// `unreadable` with a `null` count, and no number includes them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Records the inputs hold, as far as known: those read and those unreadable.
    pub records_in: u64,
    /// Records written out (including records whose text could not be read: they are passed
    /// through, decision reason `error`).
    pub records_kept: u64,
    /// Records left out.
    pub records_dropped: u64,
    /// Records that could not be read at all (a corrupt Parquet row group, …), as far as their
    /// number is known; each is in a range of `unreadable`.
    #[serde(default)]
    pub records_unreadable: u64,
    /// Sample slots decided.
    pub samples: u64,
    /// Kept as unique.
    pub unique: u64,
    /// Dropped as near duplicates.
    pub near: u64,
    /// Dropped as exact duplicates.
    pub exact: u64,
    /// Empty texts.
    pub empty: u64,
    /// Sample slots without a readable text: malformed JSON, invalid UTF-8, a missing, null or
    /// non-string field. Their records are passed through (kept, decision reason `error`).
    pub errors: u64,
    /// Every part of an input that could not be read: file, first record, record count (`null`
    /// when unknowable), kind, reason, row group or byte offset.
    #[serde(default)]
    pub unreadable: Vec<UnreadableRange>,
    /// Inputs of which nothing could be read; no output file is written for them.
    #[serde(default)]
    pub files_unreadable: Vec<PathBuf>,
}

impl Report {
    pub(crate) fn new(
        config: &Config,
        files: &[InputFile],
        problems: Vec<String>,
        stage1: Option<KeysStats>,
        stage2: DedupStats,
    ) -> Report {
        let totals = Totals {
            records_in: stage2.records + stage2.records_unreadable,
            records_kept: stage2.records_kept,
            records_dropped: stage2.records_dropped,
            records_unreadable: stage2.records_unreadable,
            samples: stage2.samples,
            unique: stage2.unique,
            near: stage2.near,
            exact: stage2.exact,
            empty: stage2.empty,
            errors: stage2.errors,
            unreadable: stage2.unreadable.clone(),
            files_unreadable: stage2.files_unreadable.clone(),
        };
        Report {
            version: env!("CARGO_PKG_VERSION").to_string(),
            config: config.without_run_paths(),
            paths: ReportPaths::of(config),
            files: files.iter().map(|f| f.path.clone()).collect(),
            input_problems: problems,
            stage1,
            stage2,
            totals,
            against: None,
            index: None,
            memory: crate::config::MemoryPlan::of(config),
        }
    }

    /// A few lines for a terminal: the accounting first, then every unreadable part of the
    /// inputs (up to a few), then each stage's numbers.
    pub fn summary(&self) -> String {
        let t = &self.totals;
        let mut s = format!(
            "{} records in {} file{}: kept {}, dropped {} ({} near, {} exact duplicates); {} empty, {} unreadable",
            t.records_in,
            self.files.len(),
            if self.files.len() == 1 { "" } else { "s" },
            t.records_kept,
            t.records_dropped,
            t.near,
            t.exact,
            t.empty,
            t.records_unreadable
        );
        let unknown: Vec<&UnreadableRange> = t
            .unreadable
            .iter()
            .filter(|u| u.lost.records.is_none())
            .collect();
        if !unknown.is_empty() {
            let mut files: Vec<&Path> = unknown.iter().map(|u| u.file.as_path()).collect();
            files.dedup();
            s += &format!(
                ", plus an unknown number in {} file{}",
                files.len(),
                if files.len() == 1 { "" } else { "s" }
            );
        }
        if t.errors > 0 {
            let kinds: Vec<String> = self
                .stage2
                .skipped
                .iter()
                .map(|(kind, n)| format!("{n} {kind}"))
                .collect();
            s += &format!(
                "; {} texts unreadable, their records passed through ({})",
                t.errors,
                kinds.join(", ")
            );
        }
        s.push('\n');
        const SHOWN: usize = 5;
        for u in t.unreadable.iter().take(SHOWN) {
            s += &format!("  {u}\n");
        }
        if t.unreadable.len() > SHOWN {
            s += &format!(
                "  … and {} more unreadable parts (listed in the report)\n",
                t.unreadable.len() - SHOWN
            );
        }
        for f in &t.files_unreadable {
            s += &format!(
                "  no output for {}: nothing of it could be read\n",
                f.display()
            );
        }
        if let Some(k) = &self.stage1 {
            s += &format!(
                "stage 1: {} samples{}, {} keys, {} distinct, {} hot keys; {} hot samples ({:.1}%); {:.1} MB/s, {:.2} s + {:.2} s counting{}\n",
                k.samples,
                if k.reused_samples > 0 {
                    format!(" ({} exact copies not signed again)", k.reused_samples)
                } else {
                    String::new()
                },
                k.count.keys,
                k.count.distinct_keys,
                k.count.hot_keys,
                k.hot_samples,
                100.0 * k.hot_share,
                k.mb_per_second,
                k.sketch_seconds,
                k.count_seconds,
                if k.count.spilled { " (spilled)" } else { "" }
            );
            for (kind, n) in &k.skipped {
                s += &format!("  skipped {n} sample slots: {kind}\n");
            }
            // Unreadable parts are listed above; these are the records without a text.
            for p in k.problems.iter().filter(|p| p.field.is_some()).take(5) {
                s += &format!("  {p}\n");
            }
        }
        let d = &self.stage2;
        if d.clusters.is_none() && d.deduper.checked == 0 {
            // A distributed `write` step: the `decide` steps checked the hot samples.
            s += &format!(
                "stage 2: the decide steps' decisions applied; {:.1} MB/s, {:.2} s",
                d.mb_per_second, d.seconds
            );
        } else {
            s += &format!(
                "stage 2: {} hot samples checked, {} comparisons, {} representatives in {} buckets; {:.1} MB/s, {:.2} s",
                d.deduper.checked,
                d.deduper.comparisons,
                d.deduper.representatives,
                d.deduper.buckets,
                d.mb_per_second,
                d.seconds
            );
        }
        for p in &self.input_problems {
            s += &format!("\ninput problem: {p}");
        }
        s
    }

    /// Writes the report as JSON, atomically.
    pub fn save(&self, path: &Path) -> Result<(), Error> {
        save_json(path, self)
    }

    /// Writes the report as JSON into `file` and commits it (for a file of a [`Publication`]:
    /// marks it ready to be published with the run's other outputs).
    pub fn save_to(&self, file: AtomicFile) -> Result<(), Error> {
        save_json_to(file, self)
    }
}

/// Writes `value` (a step's report) as pretty JSON and a newline to `path`, atomically: the file
/// has its name only once whole.
pub fn save_json(path: &Path, value: &impl Serialize) -> Result<(), Error> {
    save_json_to(
        AtomicFile::create(path).map_err(|e| Error::io(IoOp::Write, path, e))?,
        value,
    )
}

/// Writes `value` as pretty JSON (and a newline) into `file` and commits it.
pub(crate) fn save_json_to(mut file: AtomicFile, value: &impl Serialize) -> Result<(), Error> {
    let path = file.path().to_path_buf();
    let fail = |e: std::io::Error| Error::io(IoOp::Write, &path, e);
    serde_json::to_writer_pretty(&mut file, value).map_err(|e| fail(e.into()))?;
    std::io::Write::write_all(&mut file, b"\n").map_err(fail)?;
    file.commit().map_err(fail)
}

/// What a caller watches a run by and stops it with.
#[derive(Clone, Debug, Default)]
pub struct RunControl {
    /// Counters of stage 1 (bytes and samples read), updated as blocks finish.
    pub stage1: Option<Arc<Progress>>,
    /// Counters of stage 2.
    pub stage2: Option<Arc<Progress>>,
    /// Set it (from any thread, or a signal handler) to stop the run at its next block or
    /// partition: the run then fails with [`Error::Interrupted`], and nothing it would have
    /// written is published.
    pub cancel: CancelToken,
}

impl RunControl {
    /// Fresh counters for both stages and a token not cancelled: what a caller that shows
    /// progress hands a run or a step (a step updates its stage's counters only).
    pub fn watched() -> RunControl {
        RunControl {
            stage1: Some(Arc::new(Progress::default())),
            stage2: Some(Arc::new(Progress::default())),
            cancel: CancelToken::new(),
        }
    }

    /// The stage running now (1 or 2: stage 2 once it has read anything) and its counters, for
    /// a progress bar; `None` when no counters are watched.
    pub fn current(&self) -> Option<(u8, &Progress)> {
        match (&self.stage1, &self.stage2) {
            (_, Some(two)) if two.bytes() > 0 => Some((2, two)),
            (Some(one), _) => Some((1, one)),
            (None, Some(two)) => Some((2, two)),
            (None, None) => None,
        }
    }

    /// The handles stage 1 runs with ([`neardup_keys::run_keys`] and the keys step): its
    /// counters and the run's token.
    pub fn stage1_step(&self) -> StepControl {
        StepControl::new(self.stage1.clone(), self.cancel.clone())
    }

    /// The handles stage 2 runs with (apply, sign, write): its counters and the run's token.
    pub fn stage2_step(&self) -> StepControl {
        StepControl::new(self.stage2.clone(), self.cancel.clone())
    }
}

/// Begins publishing a deduplicating run's outputs (dataset, decisions, report), before any work:
/// the checks of [`Publication::begin`] run here.
fn begin_publication(
    config: &Config,
    inputs: &[InputFile],
    cancel: &CancelToken,
) -> Result<Publication, Error> {
    Publication::begin(&PublishOptions {
        output: config.output.dir.as_ref().map(|dir| OutputOptions {
            dir: dir.clone(),
            overwrite: config.output.overwrite,
            max_output_bytes: config.output.max_output_bytes,
        }),
        outputs: inputs.iter().map(|f| f.relative.clone()).collect(),
        decisions: config.output.decisions.clone(),
        decisions_named: config
            .output
            .decisions_to_stdout
            .then(|| PathBuf::from("-")),
        report: config.output.report.clone(),
        files: config.output.index_out.iter().cloned().collect(),
        scratch_dirs: config.keys.spill_dir.iter().cloned().collect(),
        cancel: cancel.clone(),
        ..PublishOptions::default()
    })
    .map_err(publish_error)
}

/// Adds the report to the run's outputs and publishes them all.
fn publish_with_report(
    publication: Publication,
    config: &Config,
    report: &Report,
) -> Result<(), Error> {
    if let Some(p) = &config.output.report {
        report.save_to(publication.file(p).map_err(publish_error)?)?;
    }
    publication.commit().map_err(publish_error)?;
    Ok(())
}

/// Discovers the configured inputs; fails when an argument cannot be used as given (a missing
/// path, a glob without a match, a file named explicitly whose format is unknown, standard input
/// or a pipe, a name that is not UTF-8: see [`neardup_corpus::InputProblem::fatal`]), when nothing
/// usable is found, or, with `on_error = fail`, when any input is unusable. Returns the files and
/// the problems met while walking directories (reported, and left out).
pub fn discover_inputs(config: &Config) -> Result<(Vec<InputFile>, Vec<String>), Error> {
    let (found, problems) = discover_inputs_and_sources(config)?;
    Ok((found.files, problems))
}

/// [`discover_inputs`], keeping the whole [`Discovery`]: where each argument reads from is what
/// [`RunPaths::read_discovered`] keeps outputs out of.
pub fn discover_inputs_and_sources(config: &Config) -> Result<(Discovery, Vec<String>), Error> {
    if config.input.inputs.is_empty() {
        return Err(ConfigError::NoInputs.into());
    }
    let found = discover(
        &config.input.inputs,
        &DiscoverOptions {
            format: config.input.format,
        },
    );
    let errors: Vec<InputProblem> = found.errors().cloned().collect();
    if !errors.is_empty() {
        return Err(Error::Inputs(InputsError::Unusable(errors)));
    }
    if !found.problems.is_empty() && config.run.on_error == OnError::Fail {
        return Err(Error::Inputs(InputsError::FailOnProblem(
            found.problems.clone(),
        )));
    }
    if found.files.is_empty() {
        return Err(Error::Inputs(InputsError::NoneFound(
            found.problems.clone(),
        )));
    }
    let problems: Vec<String> = found
        .problems
        .iter()
        .map(|p| format!("{}: {}", p.input, p.message))
        .collect();
    Ok((found, problems))
}

/// Key tables as the `hot` and `apply` steps take them: the shards' files, read as streams and
/// never loaded whole, or tables in memory. Either all files or all values, in any order: shard
/// numbers decide the order of the rows.
#[derive(Clone, Debug)]
pub enum KeyTables<'a> {
    /// Key-table files (`neardup keys -o`, [`crate::KeysStep`]'s `write`, [`KeyTable::save`]).
    Files(&'a [PathBuf]),
    /// Tables in memory ([`crate::KeysStep`]'s `run`, [`KeyTable::load`]).
    Values(Vec<&'a KeyTable>),
}

impl<'a> From<&'a [PathBuf]> for KeyTables<'a> {
    fn from(paths: &'a [PathBuf]) -> Self {
        KeyTables::Files(paths)
    }
}

impl<'a> From<&'a Vec<PathBuf>> for KeyTables<'a> {
    fn from(paths: &'a Vec<PathBuf>) -> Self {
        KeyTables::Files(paths)
    }
}

impl<'a> From<&'a [KeyTable]> for KeyTables<'a> {
    fn from(tables: &'a [KeyTable]) -> Self {
        KeyTables::Values(tables.iter().collect())
    }
}

impl<'a> From<&'a Vec<KeyTable>> for KeyTables<'a> {
    fn from(tables: &'a Vec<KeyTable>) -> Self {
        KeyTables::Values(tables.iter().collect())
    }
}

impl<'a> From<&[&'a KeyTable]> for KeyTables<'a> {
    fn from(tables: &[&'a KeyTable]) -> Self {
        KeyTables::Values(tables.to_vec())
    }
}

impl KeyTables<'_> {
    /// Adds the tables' files to the paths a step reads, and the input files the tables name
    /// (read from their headers): every later step of the run reads those, so no output of this
    /// one may replace them.
    pub(crate) fn read_by(&self, paths: &mut RunPaths) -> Result<(), Error> {
        match self {
            KeyTables::Files(files) => {
                for t in *files {
                    paths.read_file("the key table", t);
                    let header = neardup_keys::TableReader::open(t).map_err(wrong_tables)?;
                    read_table_inputs(paths, header.files());
                }
            }
            KeyTables::Values(tables) => {
                for t in tables {
                    read_table_inputs(paths, t.files());
                }
            }
        }
        Ok(())
    }
}

/// Registers the input files a key table names as read.
fn read_table_inputs(paths: &mut RunPaths, files: &[FileRows]) {
    let inputs: Vec<InputFile> = files.iter().map(|f| f.input.clone()).collect();
    paths.read_inputs(&inputs);
}

/// Stage 2 over all shards' key tables and a hot-key set counted from exactly them (the `apply`
/// step, which ends a staged run by writing `config.output`). Of key-table files only their
/// headers and the hot mask (two bits per key) are held, never the tables themselves.
///
/// The stage-level steps a custom scheduler runs on separate machines — stage 1 per shard
/// ([`crate::KeysStep`]), one merge ([`crate::HotStep`]), stage 2 — give exactly the decisions
/// of one [`Pipeline`] run over the shards in order:
///
/// ```no_run
/// use neardup::{ApplyStep, Config, HotStep, KeysStep, RunControl, Step, StepValue, discover_inputs};
/// use neardup::keys::HotKeys;
///
/// let mut config = Config::default();
/// config.input.inputs = vec!["shard-0/".into(), "shard-1/".into()];
/// config.output.decisions = Some("decisions.jsonl".into());
/// let (files, _problems) = discover_inputs(&config)?;
/// let control = RunControl::default();
///
/// // On each worker: stage 1 for its shard, saved as a file.
/// let mut tables = Vec::new();
/// for (shard, part) in files.chunks(1).enumerate() {
///     let path = std::path::PathBuf::from(format!("keys-{shard}.ndk"));
///     KeysStep::with_files(&config, part, shard as u32)?.write(&path, None, &control)?;
///     tables.push(path);
/// }
/// // Once: merge the shards' counts into the hot keys.
/// let (hot, _stats) = HotStep::new(&config, &tables, 1)?.run(&control)?;
/// StepValue::save(&hot, "hot.ndh".as_ref())?;
/// // Stage 2 over all shards, in shard order.
/// let hot = <HotKeys as StepValue>::load("hot.ndh".as_ref())?;
/// let report = ApplyStep::new(&config, &hot, &tables)?.run(&control, &mut |_decision| {})?;
/// println!("{}", report.summary());
/// # Ok::<(), neardup::Error>(())
/// ```
#[derive(Debug)]
pub struct ApplyStep<'a> {
    config: &'a Config,
    hot: &'a HotKeys,
    tables: KeyTables<'a>,
}

impl<'a> ApplyStep<'a> {
    /// Checks the hot keys against the settings (an index to save is refused: `apply` saves
    /// none).
    pub fn new(
        config: &'a Config,
        hot: &'a HotKeys,
        tables: impl Into<KeyTables<'a>>,
    ) -> Result<ApplyStep<'a>, Error> {
        check_hot_layout(config, hot.layout())?;
        if config.output.index_out.is_some() {
            return Err(Error::IndexUse(crate::error::IndexUseError::NotSaved {
                step: "apply",
            }));
        }
        Ok(ApplyStep {
            config,
            hot,
            tables: tables.into(),
        })
    }

    /// Writes the outputs and returns the run report, watched by `control.stage2` and stopped by
    /// `control.cancel`, handing every decision to `observe` in input order.
    pub fn run(
        &self,
        control: &RunControl,
        observe: &mut dyn FnMut(&Decision),
    ) -> Result<Report, Error> {
        apply(self.config, self.hot, self.tables.clone(), control, observe)
    }
}

fn apply(
    config: &Config,
    hot: &HotKeys,
    tables: KeyTables<'_>,
    control: &RunControl,
    observe: &mut dyn FnMut(&Decision),
) -> Result<Report, Error> {
    let against = against::load_against(config)?;
    let start = |cfg: &mut Stage2Config| -> Result<Option<against::AgainstReport>, Error> {
        match &against {
            Some(index) => Ok(Some(against::start_from(
                index,
                &config.dedup.against,
                hot,
                cfg,
            )?)),
            None => Ok(None),
        }
    };
    match tables {
        KeyTables::Values(mut ordered) => {
            ordered.sort_by_key(|t| t.shard());
            let files: Vec<FileRows> = ordered
                .iter()
                .flat_map(|t| t.files().iter().cloned())
                .collect();
            let _spill_dirs = check_apply_paths(config, &files, &[], against.as_ref())?;
            let inputs: Vec<InputFile> = files.iter().map(|f| f.input.clone()).collect();
            let publication = begin_publication(config, &inputs, &control.cancel)?;
            let mask = HotMask::from_tables(&ordered, hot).map_err(wrong_tables)?;
            apply_with_mask(config, &files, &mask, publication, control, observe, &start)
        }
        KeyTables::Files(tables) => {
            let shards = ShardTables::open(tables).map_err(wrong_tables)?;
            hot.check_tables(&shards.identities, Some(&shards.paths))
                .map_err(wrong_tables)?;
            let _spill_dirs = check_apply_paths(config, &shards.files, tables, against.as_ref())?;
            let inputs: Vec<InputFile> = shards.files.iter().map(|f| f.input.clone()).collect();
            let publication = begin_publication(config, &inputs, &control.cancel)?;
            let (mask, files) = HotMask::from_table_files(&shards, hot, &config.mask_memory())?;
            apply_with_mask(config, &files, &mask, publication, control, observe, &start)
        }
    }
}

/// The path checks of stage 2 run apart: outputs against the inputs the tables list and the
/// tables themselves; returns what [`RunPaths::prepare`] made, held for the run.
fn check_apply_paths(
    config: &Config,
    files: &[FileRows],
    tables: &[PathBuf],
    against: Option<&neardup_index::SavedIndex>,
) -> Result<crate::PreparedDirs, Error> {
    let inputs: Vec<InputFile> = files.iter().map(|f| f.input.clone()).collect();
    let mut paths = RunPaths::new();
    paths.read_inputs(&inputs);
    if let Some(index) = against {
        paths.read_inputs(&against::indexed_inputs(index));
    }
    for t in tables {
        paths.read_file("the key table", t);
    }
    paths.write_config_outputs(config, &inputs);
    paths.check()?;
    paths.prepare()
}

fn apply_with_mask(
    config: &Config,
    files: &[FileRows],
    mask: &HotMask,
    publication: Publication,
    control: &RunControl,
    observe: &mut dyn FnMut(&Decision),
    start: &dyn Fn(&mut Stage2Config) -> Result<Option<against::AgainstReport>, Error>,
) -> Result<Report, Error> {
    let mut cfg = stage2_config(config)?;
    let against_report = start(&mut cfg)?;
    let inputs: Vec<InputFile> = files.iter().map(|f| f.input.clone()).collect();
    let stage2 = run_dedup_into(
        files,
        mask,
        &cfg,
        &control.stage2_step(),
        &publication,
        observe,
    )?;
    let mut report = Report::new(config, &inputs, Vec::new(), None, stage2);
    report.against = against_report;
    publish_with_report(publication, config, &report)?;
    Ok(report)
}

/// A whole run: both stages end to end. Its outputs (dataset, decisions, report) are published
/// together when it ends, all or nothing (see `docs/formats.md`, "How outputs are published").
pub struct Pipeline {
    config: Config,
    control: RunControl,
}

impl Pipeline {
    /// Checks the settings.
    pub fn new(config: Config) -> Result<Pipeline, Error> {
        config.validate()?;
        Ok(Pipeline {
            config,
            control: RunControl::default(),
        })
    }

    /// Counters to watch stage 1 and stage 2 by, while [`Pipeline::run`] goes.
    pub fn with_progress(mut self, stage1: Arc<Progress>, stage2: Arc<Progress>) -> Pipeline {
        self.control.stage1 = Some(stage1);
        self.control.stage2 = Some(stage2);
        self
    }

    /// A token that stops the run when cancelled (e.g. on Ctrl-C): both stages stop at their
    /// next block or partition, the run fails with [`Error::Interrupted`], and nothing is
    /// published; what it wrote is removed. Cancelled after the commit has begun, it no longer
    /// stops anything: the run's outputs are then published whole.
    pub fn with_cancel(mut self, cancel: CancelToken) -> Pipeline {
        self.control.cancel = cancel;
        self
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Runs both stages, writes the configured outputs and returns the report.
    pub fn run(&self) -> Result<Report, Error> {
        self.run_with(&mut |_| {})
    }

    /// Like [`Pipeline::run`], handing every decision to `observe` in input order (for callers who
    /// filter in their own process).
    pub fn run_with(&self, observe: &mut dyn FnMut(&Decision)) -> Result<Report, Error> {
        let (found, problems) = discover_inputs_and_sources(&self.config)?;
        let against = against::load_against(&self.config)?;
        let mut paths = RunPaths::new();
        paths
            .read_discovered(&found)
            .write_config_outputs(&self.config, &found.files);
        if let Some(index) = &against {
            // The indexed runs' files are read back too: nothing may be written over them.
            paths.read_inputs(&against::indexed_inputs(index));
        }
        paths.check()?;
        // The spill directories it made live as long as the run.
        let _spill_dirs = paths.prepare()?;
        self.run_inputs(found.files, problems, against, observe)
    }

    /// Like [`Pipeline::run_with`] over in-memory Arrow tables instead of the configured inputs
    /// (which are not read): each table is one input, its rows its records, so a decision's
    /// `addr.file` is the table's place in `tables` and `addr.record` its row. The tables cannot
    /// be written out, so `output` and `index_out` must not be set; the decisions file and the
    /// report may be.
    pub fn run_tables(
        &self,
        tables: &[&neardup_corpus::ArrowTable],
        observe: &mut dyn FnMut(&Decision),
    ) -> Result<Report, Error> {
        if self.config.output.dir.is_some() {
            return Err(ConfigError::TableRun(
                "an in-memory table has no output directory: filter it with its decisions \
                 (neardup.drop_duplicates) instead of giving `output`",
            )
            .into());
        }
        if self.config.output.index_out.is_some() {
            return Err(ConfigError::TableRun(
                "an index saved from an in-memory table could not be read back by a later run: \
                 write the table to Parquet and save the index of a run over that file",
            )
            .into());
        }
        let files: Vec<InputFile> = tables.iter().map(|t| t.input().clone()).collect();
        let against = against::load_against(&self.config)?;
        let mut paths = RunPaths::new();
        paths.write_config_outputs(&self.config, &files);
        if let Some(index) = &against {
            paths.read_inputs(&against::indexed_inputs(index));
        }
        paths.check()?;
        let _spill_dirs = paths.prepare()?;
        self.run_inputs(files, Vec::new(), against, observe)
    }

    /// Both stages over `files`, whose paths have been checked.
    fn run_inputs(
        &self,
        files: Vec<InputFile>,
        problems: Vec<String>,
        against: Option<neardup_index::SavedIndex>,
        observe: &mut dyn FnMut(&Decision),
    ) -> Result<Report, Error> {
        let publication = begin_publication(&self.config, &files, &self.control.cancel)?;
        let keys = against::with_prior_keys(keys_config(&self.config)?, against.as_ref());
        let KeysOutput {
            files: rows,
            mask,
            stats,
            hot,
            table,
            ..
        } = run_keys(&files, 0, &keys, &self.control.stage1_step())?;
        let mut cfg = stage2_config(&self.config)?;
        let against_report = match &against {
            Some(index) => Some(against::start_from(
                index,
                &self.config.dedup.against,
                &hot,
                &mut cfg,
            )?),
            None => None,
        };
        // Stage 2 needs neither the hot keys nor, unless it saves an index, the key table:
        // they are freed before it starts instead of being held through it.
        drop(hot);
        let table = self.config.output.index_out.as_ref().map(|_| table);
        let mut recorder = match &table {
            None => None,
            Some(TableStore::Memory(t)) => Some(against::IndexRecorder::new(
                &self.config,
                &rows,
                t.keys(),
                against,
            )?),
            Some(TableStore::Spilled) => {
                return Err(Error::IndexUse(crate::error::IndexUseError::TableSpilled));
            }
        };
        let stage2 = run_dedup_into(
            &rows,
            &mask,
            &cfg,
            &self.control.stage2_step(),
            &publication,
            &mut |d| {
                if let Some(r) = &mut recorder {
                    r.record(d);
                }
                observe(d)
            },
        )?;
        let mut report = Report::new(&self.config, &files, problems, Some(stats), stage2);
        report.against = against_report;
        if let (Some(path), Some(recorder)) = (&self.config.output.index_out, recorder) {
            let mut index = recorder.finish()?;
            let read = against::complete_index(&self.config, &mut index)?;
            let file = publication.file(path).map_err(publish_error)?;
            report.index = Some(against::save_index(&index, path, file, read)?);
        }
        publish_with_report(publication, &self.config, &report)?;
        Ok(report)
    }

    /// Runs both stages and returns every decision, in input order.
    pub fn decisions(&self) -> Result<(Vec<Decision>, Report), Error> {
        let mut all = Vec::new();
        let report = self.run_with(&mut |d| all.push(d.clone()))?;
        Ok((all, report))
    }

    /// Runs both stages on a background thread and yields every decision in input order as it
    /// is made, for callers who filter in their own process without holding all decisions.
    /// Decisions flow through a bounded channel, so a slow consumer slows the run instead of
    /// growing memory. Call [`DecisionStream::finish`] for the report (or the error).
    ///
    /// ```no_run
    /// let mut config = neardup::Config::default();
    /// config.input.inputs = vec!["crawl/".into()];
    /// let mut stream = neardup::Pipeline::new(config)?.stream();
    /// for decision in stream.by_ref() {
    ///     if !decision.keep {
    ///         println!("{:?} duplicates {:?}", decision.addr, decision.dup_of);
    ///     }
    /// }
    /// let report = stream.finish()?;
    /// # Ok::<(), neardup::Error>(())
    /// ```
    pub fn stream(self) -> DecisionStream {
        let (tx, rx) = crossbeam_channel::bounded(4096);
        let cancel = self.control.cancel.clone();
        let handle = std::thread::spawn(move || {
            // A dropped receiver only means the caller stopped listening; the run still completes.
            self.run_with(&mut |d| {
                let _ = tx.send(d.clone());
            })
        });
        DecisionStream {
            rx,
            handle: Some(handle),
            cancel,
        }
    }
}

/// Decisions of a running [`Pipeline`], in input order; see [`Pipeline::stream`].
pub struct DecisionStream {
    rx: crossbeam_channel::Receiver<Decision>,
    handle: Option<std::thread::JoinHandle<Result<Report, Error>>>,
    cancel: CancelToken,
}

/// What [`DecisionStream::next_within`] found.
#[derive(Debug)]
pub enum NextDecision {
    /// The next decision.
    Decision(Decision),
    /// None came within the time given; the run goes on.
    Pending,
    /// The decisions have ended; [`DecisionStream::finish`] has the report or the error.
    Ended,
}

impl Iterator for DecisionStream {
    type Item = Decision;
    fn next(&mut self) -> Option<Decision> {
        self.rx.recv().ok()
    }
}

impl DecisionStream {
    /// The next decision if one comes within `timeout`, for callers that must look at something
    /// else while they wait (a Python binding checking for Ctrl-C).
    pub fn next_within(&mut self, timeout: std::time::Duration) -> NextDecision {
        match self.rx.recv_timeout(timeout) {
            Ok(d) => NextDecision::Decision(d),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => NextDecision::Pending,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => NextDecision::Ended,
        }
    }

    /// Stops the run at its next block, as a cancelled [`Pipeline::with_cancel`] token does:
    /// [`DecisionStream::finish`] then returns [`Error::Interrupted`] (unless the run had already
    /// begun publishing), and nothing is published.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Waits for the run to end (draining decisions not yet taken) and returns its report.
    pub fn finish(mut self) -> Result<Report, Error> {
        for _ in self.rx.iter() {}
        let handle = self.handle.take().expect("finish is called once");
        handle.join().map_err(|_| Error::ThreadLost {
            thread: "the pipeline thread",
        })?
    }
}
