//! Stage 1's steps ([`Step`]s), for schedulers, the CLI and the Python package: [`KeysStep`] (one
//! shard's inputs into a [`KeyTable`]) and [`HotStep`] (the shards' tables into the [`HotKeys`],
//! with the plan of stage 2's groups). Each checks its settings before any work, its paths before
//! it runs, stops at the next block when cancelled, and reports what it did in the JSON the
//! CLI's `--report` writes.
//!
//! Stage 2 is [`crate::ApplyStep`] in one step, or the [`crate::SignStep`],
//! [`crate::DecideStep`] and [`crate::WriteStep`] of `distributed.rs`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use neardup_corpus::{Discovery, InputFile, Publication, PublishOptions};
use neardup_keys::{
    CountStats, HotKeys, HotMask, KeyTable, KeysConfig, KeysStats, PlanBuilder, ShardTables,
    collect_keys, merge_table_files, merge_tables, plan_from_tables,
};
use serde::{Deserialize, Serialize};

use crate::Config;
use crate::error::publish_error;
use crate::error::{ConfigError, Error};
use crate::own_files::OwnFile;
use crate::paths::RunPaths;
use crate::pipeline::{KeyTables, RunControl, discover_inputs_and_sources, save_json_to};
use crate::stage_settings::keys_config;
use crate::step::Step;

/// What the `keys` step did (the JSON of `neardup keys --report`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeysReport {
    /// The version of neardup that made the table.
    pub neardup: String,
    /// The shard number.
    pub shard: u32,
    /// The key-table file written.
    pub table: PathBuf,
    /// The shard's input files, in order.
    pub inputs: Vec<PathBuf>,
    /// Inputs that could not be used (unreadable paths met while listing directories).
    pub input_problems: Vec<String>,
    /// Stage 1's statistics.
    pub stage1: KeysStats,
}

/// The plan of a hot-key file, as the `hot` step reports it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlanSummary {
    /// Groups (one `decide` step each).
    pub groups: u32,
    /// Hot rows per group.
    pub group_rows: Vec<u64>,
    /// Connected components of hot rows.
    pub components: u64,
    /// Hot rows of the largest component (the smallest possible largest group).
    pub largest_component: u64,
    /// Hot rows planned.
    pub hot_rows: u64,
}

/// What the `hot` step did (the JSON of `neardup hot --report`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HotReport {
    /// The version of neardup that made the file.
    pub neardup: String,
    /// The key tables merged.
    pub tables: Vec<PathBuf>,
    /// The hot-key file written.
    pub hot_keys_file: PathBuf,
    /// Keys seen more than this many times are hot.
    pub min_key_count: u32,
    /// The frequency filter's statistics.
    pub count: CountStats,
    /// Samples in the tables.
    pub samples: u64,
    /// Samples with at least one hot key.
    pub hot_samples: u64,
    /// The plan, when more than one group was asked for.
    pub plan: Option<PlanSummary>,
    /// Wall time of the step.
    pub seconds: f64,
}

/// Stage 1 of one shard, a [`Step`]: its settings checked and its inputs listed once, then run
/// into a table in memory ([`Step::run`]; `keys.memory_limit` does not apply) or streamed into a
/// key-table file ([`Step::write`], the `keys` command: the bytes [`KeyTable::save`] writes, memory
/// bounded however large the shard; input problems are logged). Nothing is counted: the hot keys
/// come from merging all shards' tables ([`HotStep`]).
#[derive(Debug)]
pub struct KeysStep {
    keys: KeysConfig,
    shard: u32,
    inputs: Discovery,
    problems: Vec<String>,
}

impl KeysStep {
    /// The shard `shard` of the inputs `config.input.inputs`, listed as [`crate::discover_inputs`]
    /// lists them (failing as it does).
    pub fn new(config: &Config, shard: u32) -> Result<KeysStep, Error> {
        let keys = keys_config(config)?;
        let (inputs, problems) = discover_inputs_and_sources(config)?;
        Ok(KeysStep {
            keys,
            shard,
            inputs,
            problems,
        })
    }

    /// The shard `shard` made of `files`, already listed (a scheduler's share of
    /// [`crate::discover_inputs`]' files); `config.input.inputs` is not looked at.
    pub fn with_files(config: &Config, files: &[InputFile], shard: u32) -> Result<KeysStep, Error> {
        Ok(KeysStep {
            keys: keys_config(config)?,
            shard,
            inputs: Discovery {
                files: files.to_vec(),
                problems: Vec::new(),
                sources: Vec::new(),
            },
            problems: Vec::new(),
        })
    }

    /// The shard's input files, in order.
    pub fn files(&self) -> &[InputFile] {
        &self.inputs.files
    }

    /// The problems met while listing the inputs (left out; the report lists them).
    pub fn problems(&self) -> &[String] {
        &self.problems
    }
}

impl Step for KeysStep {
    type Value = KeyTable;
    type Stats = KeysStats;
    type Report = KeysReport;

    fn run(&self, control: &RunControl) -> Result<(KeyTable, KeysStats), Error> {
        Ok(collect_keys(
            self.files(),
            self.shard,
            &self.keys,
            &control.stage1_step(),
        )?)
    }

    fn write(
        &self,
        table: &Path,
        report: Option<&Path>,
        control: &RunControl,
    ) -> Result<KeysReport, Error> {
        let mut paths = RunPaths::new();
        paths
            .read_discovered(&self.inputs)
            .write_file("the key table (--output)", table, OwnFile::KeyTable)
            .spill_location(
                self.keys.spill_dir.as_deref(),
                self.keys.memory_limit,
                self.keys.threads,
            );
        if let Some(r) = report {
            paths.write_file("the report (--report)", r, OwnFile::Report);
        }
        paths.check()?;
        let _spill_dirs = paths.prepare()?;
        for p in &self.problems {
            tracing::warn!("input problem: {p}");
        }
        let publication = Publication::begin(&PublishOptions {
            files: std::iter::once(table.to_path_buf())
                .chain(report.map(Path::to_path_buf))
                .collect(),
            cancel: control.cancel.clone(),
            ..PublishOptions::default()
        })
        .map_err(publish_error)?;
        let target = publication.file(table).map_err(publish_error)?;
        let stats = neardup_keys::write_keys(
            self.files(),
            self.shard,
            &self.keys,
            &control.stage1_step(),
            target,
        )?;
        let made = KeysReport {
            neardup: env!("CARGO_PKG_VERSION").into(),
            shard: self.shard,
            table: table.to_path_buf(),
            inputs: self.files().iter().map(|f| f.path.clone()).collect(),
            input_problems: self.problems.clone(),
            stage1: stats,
        };
        if let Some(path) = report {
            save_json_to(publication.file(path).map_err(publish_error)?, &made)?;
        }
        publication.commit().map_err(publish_error)?;
        Ok(made)
    }
}

/// The merge of all shards' key tables into the hot keys (`config.keys`: `min_key_count`, and
/// for files `memory_limit` and `spill_dir`; `config.run.threads`, 0: the current rayon pool,
/// all cores by default), planned for stage 2 on many machines in `groups` groups when more
/// than one, a [`Step`]: into a value ([`Step::run`]; [`HotStep::merge`] gives the mask of every
/// row too) or a hot-key file ([`Step::write`], the `hot` command). Files stream in shard order and are never loaded whole; when their keys
/// exceed the memory limit they are counted partition by partition from spill files.
#[derive(Debug)]
pub struct HotStep<'a> {
    config: &'a Config,
    tables: KeyTables<'a>,
    groups: u32,
}

impl<'a> HotStep<'a> {
    /// Checks the settings the merge uses and the number of groups.
    pub fn new(
        config: &'a Config,
        tables: impl Into<KeyTables<'a>>,
        groups: u32,
    ) -> Result<HotStep<'a>, Error> {
        if groups == 0 {
            return Err(ConfigError::NoGroups.into());
        }
        config.validate_run()?;
        Ok(HotStep {
            config,
            tables: tables.into(),
            groups,
        })
    }

    /// The paths the merge reads (the tables, and the input files they name) and spills to.
    fn paths(&self) -> Result<RunPaths, Error> {
        let mut paths = RunPaths::new();
        self.tables.read_by(&mut paths)?;
        for p in &self.config.dedup.against {
            paths.read_file("the index (--against)", p);
        }
        paths.config_spill_dir(self.config);
        Ok(paths)
    }

    /// [`Step::run`]'s hot keys (with their plan when more than one group) and statistics, with
    /// the mask of all the tables' rows in shard order; stopped by `control.cancel` between
    /// blocks of keys read and between partitions counted.
    pub fn merge(&self, control: &RunControl) -> Result<(HotKeys, HotMask, CountStats), Error> {
        let paths = self.paths()?;
        paths.check()?;
        let _spill_dirs = paths.prepare()?;
        self.count_and_plan(control)
    }

    fn count_and_plan(
        &self,
        control: &RunControl,
    ) -> Result<(HotKeys, HotMask, CountStats), Error> {
        let keys = &self.config.keys;
        let cancelled = || control.cancel.is_cancelled();
        let work = || -> Result<(HotKeys, HotMask, CountStats), Error> {
            match &self.tables {
                KeyTables::Files(paths) => {
                    let shards = ShardTables::open(paths)?;
                    // Against saved indexes, their keys count once more each (see
                    // `neardup_keys::PriorKeys`).
                    let against = crate::against::load_against_tables(
                        &self.config.dedup.against,
                        &shards.layout,
                        keys.min_key_count,
                    )?;
                    let prior = against.as_ref().map(|i| i.prior_keys());
                    let (hot, mask, count) = merge_table_files(
                        &shards,
                        keys.min_key_count,
                        prior.as_ref(),
                        keys.memory_limit,
                        keys.spill_dir.as_deref(),
                        &control.cancel,
                    )?;
                    if self.groups == 1 {
                        return Ok((hot, mask, count));
                    }
                    let plan = plan_from_tables(&shards, &hot, self.groups, &cancelled)?;
                    Ok((hot.with_plan(plan)?, mask, count))
                }
                KeyTables::Values(tables) => {
                    if !self.config.dedup.against.is_empty() {
                        return Err(Error::IndexUse(crate::error::IndexUseError::TablesInMemory));
                    }
                    let (hot, mask, count) = merge_tables(tables, keys.min_key_count)?;
                    if self.groups == 1 {
                        return Ok((hot, mask, count));
                    }
                    let mut ordered = tables.clone();
                    ordered.sort_by_key(|t| t.shard());
                    let mut builder = PlanBuilder::new(hot.keys())?;
                    for table in ordered {
                        if cancelled() {
                            return Err(Error::Interrupted);
                        }
                        builder.add_rows(table.keys(), table.columns());
                    }
                    let plan = builder.finish(self.groups)?;
                    Ok((hot.with_plan(plan)?, mask, count))
                }
            }
        };
        match self.config.run.threads {
            0 => work(),
            n => rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .map_err(|e| Error::Threads {
                    threads: n,
                    error: e,
                })?
                .install(work),
        }
    }
}

impl Step for HotStep<'_> {
    type Value = HotKeys;
    type Stats = CountStats;
    type Report = HotReport;

    fn run(&self, control: &RunControl) -> Result<(HotKeys, CountStats), Error> {
        let (hot, _mask, count) = self.merge(control)?;
        Ok((hot, count))
    }

    fn write(
        &self,
        output: &Path,
        report: Option<&Path>,
        control: &RunControl,
    ) -> Result<HotReport, Error> {
        let mut paths = self.paths()?;
        paths.write_file("the hot-key file (--output)", output, OwnFile::HotKeys);
        if let Some(r) = report {
            paths.write_file("the report (--report)", r, OwnFile::Report);
        }
        paths.check()?;
        let started = Instant::now();
        let publication = Publication::begin(&PublishOptions {
            files: std::iter::once(output.to_path_buf())
                .chain(report.map(Path::to_path_buf))
                .collect(),
            scratch_dirs: self.config.keys.spill_dir.iter().cloned().collect(),
            cancel: control.cancel.clone(),
            ..PublishOptions::default()
        })
        .map_err(publish_error)?;
        let _spill_dirs = paths.prepare()?;
        let (hot, mask, count) = self.count_and_plan(control)?;
        hot.save_to(publication.file(output).map_err(publish_error)?)?;
        let made = HotReport {
            neardup: env!("CARGO_PKG_VERSION").into(),
            tables: match &self.tables {
                KeyTables::Files(paths) => paths.to_vec(),
                KeyTables::Values(_) => Vec::new(),
            },
            hot_keys_file: output.to_path_buf(),
            min_key_count: self.config.keys.min_key_count,
            count,
            samples: mask.rows() as u64,
            hot_samples: mask.hot_rows() as u64,
            plan: hot.plan().map(|p| PlanSummary {
                groups: p.groups,
                group_rows: p.group_rows.clone(),
                components: p.components,
                largest_component: p.largest_component,
                hot_rows: p.hot_rows,
            }),
            seconds: started.elapsed().as_secs_f64(),
        };
        if let Some(path) = report {
            save_json_to(publication.file(path).map_err(publish_error)?, &made)?;
        }
        publication.commit().map_err(publish_error)?;
        Ok(made)
    }
}
