//! Stage 1 as steps over files, for schedulers and the CLI: `keys` (one shard's inputs into a
//! key-table file) and `hot` (the shards' tables into a hot-key file, with the plan of stage 2's
//! groups). Each checks its paths before any work, publishes its file and report together at the
//! end (all or nothing), stops at the next block when cancelled, and returns a typed report — the
//! JSON the CLI's `--report` writes.
//!
//! The stage-2 steps (`sign`, `decide`, `write`) are in [`crate::distributed`]'s functions.

use std::path::{Path, PathBuf};
use std::time::Instant;

use neardup_corpus::{Publication, PublishOptions};
use neardup_keys::{CountStats, HotKeys, KeysStats, ShardTables, plan_from_tables};
use serde::{Deserialize, Serialize};

use crate::Config;
use crate::error::Error;
use crate::paths::RunPaths;
use crate::pipeline::{
    RunControl, discover_inputs_and_sources, keys_config, merge_hot_key_files_with, publish_error,
    save_json_to,
};

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

/// The `keys` step: stage 1 over the inputs of `config` as shard `shard`, streamed into the
/// key-table file `table`; with `report`, its JSON is published together with the table.
pub fn keys_shard(
    config: &Config,
    shard: u32,
    table: &Path,
    report: Option<&Path>,
    control: &RunControl,
) -> Result<KeysReport, Error> {
    let mut keys = keys_config(config)?;
    let (found, problems) = discover_inputs_and_sources(config)?;
    let mut paths = RunPaths::new();
    paths
        .read_discovered(&found)
        .write_file("the key table (--output)", table);
    if let Some(r) = report {
        paths.write_file("the report (--report)", r);
    }
    paths.check()?;
    for p in &problems {
        tracing::warn!("input problem: {p}");
    }
    let files = found.files;
    let publication = Publication::begin(&PublishOptions {
        files: std::iter::once(table.to_path_buf())
            .chain(report.map(Path::to_path_buf))
            .collect(),
        cancel: control.cancel.clone(),
        ..PublishOptions::default()
    })
    .map_err(publish_error)?;
    keys.progress = control.stage1.clone();
    keys.cancel = control.cancel.clone();
    let target = publication.file(table).map_err(publish_error)?;
    let stats = neardup_keys::write_keys_to(&files, shard, &keys, target)?;
    let made = KeysReport {
        neardup: env!("CARGO_PKG_VERSION").into(),
        shard,
        table: table.to_path_buf(),
        inputs: files.iter().map(|f| f.path.clone()).collect(),
        input_problems: problems,
        stage1: stats,
    };
    if let Some(path) = report {
        save_json_to(publication.file(path).map_err(publish_error)?, &made)?;
    }
    publication.commit().map_err(publish_error)?;
    Ok(made)
}

/// The `hot` step: merges the key tables `tables` (every shard's, in any order) into the hot
/// keys (`config.keys`: `min_key_count`, `memory_limit`, `spill_dir`; `config.run.threads`),
/// planned in `groups` groups for stage 2 on many machines when more than one, and writes them to
/// `output`; with `report`, its JSON is published together with the file. Returns the hot keys
/// written and the report.
pub fn hot_file(
    config: &Config,
    tables: &[PathBuf],
    groups: u32,
    output: &Path,
    report: Option<&Path>,
    control: &RunControl,
) -> Result<(HotKeys, HotReport), Error> {
    if groups == 0 {
        return Err(Error::Usage("--groups must be at least 1".into()));
    }
    config.validate_run()?;
    let mut paths = RunPaths::new();
    for t in tables {
        paths.read_file("the key table", t);
    }
    paths.write_file("the hot-key file (--output)", output);
    if let Some(r) = report {
        paths.write_file("the report (--report)", r);
    }
    if let Some(dir) = &config.keys.spill_dir {
        paths.spill_dir(dir);
    }
    paths.check()?;
    let started = Instant::now();
    let publication = Publication::begin(&PublishOptions {
        files: std::iter::once(output.to_path_buf())
            .chain(report.map(Path::to_path_buf))
            .collect(),
        scratch_dirs: config.keys.spill_dir.iter().cloned().collect(),
        cancel: control.cancel.clone(),
        ..PublishOptions::default()
    })
    .map_err(publish_error)?;
    let (mut hot, mask, count) = merge_hot_key_files_with(config, tables, control)?;
    if groups > 1 {
        let shards = ShardTables::open(tables)?;
        let plan = plan_from_tables(&shards, &hot, groups, &|| control.cancel.is_cancelled())?;
        hot = hot.with_plan(plan)?;
    }
    hot.save_to(publication.file(output).map_err(publish_error)?)?;
    let made = HotReport {
        neardup: env!("CARGO_PKG_VERSION").into(),
        tables: tables.to_vec(),
        hot_keys_file: output.to_path_buf(),
        min_key_count: config.keys.min_key_count,
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
    Ok((hot, made))
}
