//! Runs against saved indexes (`--against`), saving a run's index (`--index-out`), and building
//! one from a run's key tables and decisions (`neardup index`): the facade's side of
//! `neardup-index`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use neardup_corpus::{AtomicFile, InputFile, SampleAddr, read_decisions};
use neardup_dedup::{Decision, PriorState, Stage2Config};
use neardup_index::{
    DecisionsMismatch, IndexBuilder, IndexError, IndexFile, IndexSettings, IndexSummary,
    IndexedDecision, ResolveOptions, SavedIndex,
};
use neardup_keys::{FileRows, HotKeys, KeysConfig, ShardTables, TableReader};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

use crate::config::Config;
use crate::error::{Error, IndexUseError};
use crate::own_files::OwnFile;
use crate::stage_settings::{keys_config, stage2_config};

/// What a run against saved indexes read of them (in the report).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgainstReport {
    /// The indexes, in order.
    pub indexes: Vec<PathBuf>,
    /// Samples the indexed runs decided.
    pub indexed_samples: u64,
    /// Entries of the indexes (samples that were not exact copies), and kept samples among them.
    pub entries: u64,
    /// Kept samples among the entries.
    pub kept: u64,
    /// Representatives of earlier runs that this run's hot keys reached.
    pub representatives: u64,
    /// First copies of earlier texts that this run's hot content keys reached.
    pub copies: u64,
    /// Records of the indexed runs' files read back (parsed and sketched again; the chunks
    /// holding them are read) for the entries reached (none when the
    /// indexes hold the sketches: made with `--verify estimate`).
    pub records_read: u64,
    /// Whether the indexes hold every sketch the run needed, so that none of the indexed runs'
    /// files was opened.
    pub self_contained: bool,
}

/// The index a run saved (in the report).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IndexReport {
    /// Where.
    pub path: PathBuf,
    /// Input files it covers (with those of the indexes it was made against).
    pub files: u64,
    /// Samples decided by the runs it covers.
    pub samples: u64,
    /// Entries (samples that were not exact copies).
    pub entries: u64,
    /// Kept samples among them.
    pub kept: u64,
    /// Its size.
    pub bytes: u64,
    /// Whether it holds its entries' sketches (made with `--verify estimate`: runs against it
    /// need none of the indexed runs' files).
    pub self_contained: bool,
    /// Records read back from this run's inputs to store their sketches.
    pub records_read: u64,
}

/// Refuses `--index-out` in the distributed stage-2 steps (`sign`, `decide`, `write`), none of
/// which sees a whole run: the index of a distributed run is made from its key tables and
/// decisions by `neardup index`.
pub(crate) fn not_in_steps(config: &Config, step: &'static str) -> Result<(), Error> {
    if config.output.index_out.is_none() {
        return Ok(());
    }
    Err(Error::IndexUse(IndexUseError::NotSaved { step }))
}

/// The part of an index's state a `sign` or `write` step needs: only how many files come
/// before the run's (its own files are numbered after them).
pub(crate) fn numbering_only(index: &IndexSummary) -> Arc<PriorState> {
    Arc::new(PriorState {
        names: index.files().iter().map(|f| f.name.clone()).collect(),
        ..PriorState::default()
    })
}

/// The state a `decide` step of group `group` starts from: the entries the group's hot keys
/// reach, read from the hot-key file the summary was read from.
pub(crate) fn group_start(
    config: &Config,
    index: &SavedIndex,
    hot: &neardup_keys::HotSummary,
    group: u32,
) -> Result<PriorState, Error> {
    let path = hot
        .source()
        .ok_or(Error::IndexUse(IndexUseError::HotKeysInMemory))?;
    let keys = HotKeys::load(path).map_err(Error::KeyFile)?;
    let cfg = stage2_config(config)?;
    let state = index.resolve(
        |k| keys.contains(k) && keys.group_of_row(&[k]) == Some(group),
        &ResolveOptions {
            sketcher: &cfg.sketcher,
            rule: cfg.rule,
            selector: &cfg.selector,
            shingles: cfg.deduper.verify == neardup_dedup::Verify::Jaccard && cfg.rule.band_keys,
            block_bytes: cfg.block_bytes,
            threads: neardup_exec::ExecOptions::threads(cfg.threads).threads,
        },
    )?;
    Ok(state)
}

/// The settings an index records, from a run's.
pub fn index_settings(config: &Config) -> Result<IndexSettings, Error> {
    let keys = keys_config(config)?;
    let d = config.deduper_config();
    Ok(IndexSettings {
        layout: keys.layout(),
        min_count: keys.min_count,
        threshold: d.threshold,
        max_reps: d.max_reps,
        verify: d.verify,
    })
}

/// Loads the indexes `paths` (none: `None`), each checked against the settings `expected`
/// gives for it, combined in order.
fn load_checked(
    paths: &[PathBuf],
    expected: impl Fn(&IndexSettings) -> IndexSettings,
) -> Result<Option<SavedIndex>, Error> {
    if paths.is_empty() {
        return Ok(None);
    }
    let mut loaded = Vec::new();
    for p in paths {
        let index = SavedIndex::load(p)?;
        index.check_settings(&expected(index.settings()), p)?;
        loaded.push((p.clone(), index));
    }
    Ok(Some(SavedIndex::combine(loaded)?))
}

/// Loads the indexes `config` runs against (none: `None`), each checked against the run's
/// settings, combined in order.
pub fn load_against(config: &Config) -> Result<Option<SavedIndex>, Error> {
    if config.dedup.against.is_empty() {
        return Ok(None);
    }
    let settings = index_settings(config)?;
    load_checked(&config.dedup.against, |_| settings.clone())
}

/// Loads the indexes a `hot` step counts against, checked against the key tables' layout and
/// the count (the decision settings are the later steps' to check), combined in order.
pub fn load_against_tables(
    paths: &[PathBuf],
    layout: &neardup_keys::TableLayout,
    min_count: u32,
) -> Result<Option<SavedIndex>, Error> {
    load_checked(paths, |index| IndexSettings {
        layout: layout.clone(),
        min_count,
        ..index.clone()
    })
}

/// The headers of the indexes `config` runs against, checked against the run's settings and
/// combined in order (none: `None`): what a step needs that only numbers its files after the
/// indexed runs' (`sign`, `write`) or names the indexes to the other steps. Reads no entry.
pub fn against_summary(config: &Config) -> Result<Option<IndexSummary>, Error> {
    if config.dedup.against.is_empty() {
        return Ok(None);
    }
    let settings = index_settings(config)?;
    let mut loaded = Vec::new();
    for p in &config.dedup.against {
        let summary = IndexSummary::load(p)?;
        summary.check_settings(&settings, p)?;
        loaded.push((p.clone(), summary));
    }
    Ok(Some(IndexSummary::combine(loaded)?))
}

/// The files of the indexes `config` runs against, as decisions name them, in the numbering of
/// the run's decisions (the indexed runs' files come first), read from the indexes' headers.
pub fn indexed_names(config: &Config) -> Result<Vec<String>, Error> {
    Ok(against_summary(config)?
        .map(|s| s.files().iter().map(|f| f.name.clone()).collect())
        .unwrap_or_default())
}

/// The inputs of the indexed runs (the run must not write over them).
pub fn indexed_inputs(index: &SavedIndex) -> Vec<InputFile> {
    index.files().iter().map(|f| f.input.clone()).collect()
}

/// Stage 1's settings for a run against `index`: its keys count once more.
pub fn with_prior_keys(mut keys: KeysConfig, index: Option<&SavedIndex>) -> KeysConfig {
    keys.prior = index.map(|i| Arc::new(i.prior_keys()));
    keys
}

/// The state stage 2 starts from against `index`, given the run's hot keys; sets it in `cfg`
/// and returns what was read, for the report.
pub fn start_from(
    index: &SavedIndex,
    paths: &[PathBuf],
    hot: &HotKeys,
    cfg: &mut Stage2Config,
) -> Result<AgainstReport, Error> {
    let shingles = cfg.deduper.verify == neardup_dedup::Verify::Jaccard && cfg.rule.band_keys;
    let state: PriorState = index.resolve(
        |k| hot.contains(k),
        &ResolveOptions {
            sketcher: &cfg.sketcher,
            rule: cfg.rule,
            selector: &cfg.selector,
            shingles,
            block_bytes: cfg.block_bytes,
            threads: neardup_exec::ExecOptions::threads(cfg.threads).threads,
        },
    )?;
    let report = AgainstReport {
        indexes: paths.to_vec(),
        indexed_samples: index.samples(),
        entries: index.entries() as u64,
        kept: index.kept() as u64,
        representatives: state.representatives.len() as u64,
        copies: state.copies.len() as u64,
        records_read: state.records_read,
        self_contained: index.self_contained()
            && (!shingles || index.self_contained_with_shingles()),
    };
    cfg.prior = Some(Arc::new(state));
    Ok(report)
}

/// Builds a run's index while its decisions go by, from the rows of stage 1's table.
pub struct IndexRecorder<'a> {
    builder: IndexBuilder,
    keys: &'a [u64],
    columns: usize,
    next_row: usize,
    failed: Option<IndexError>,
}

impl<'a> IndexRecorder<'a> {
    /// A recorder for a run over `files` whose table holds `keys` (row-major), against
    /// `earlier` (the combined indexes of `--against`, whose entries come first).
    pub fn new(
        config: &Config,
        files: &[FileRows],
        keys: &'a [u64],
        earlier: Option<SavedIndex>,
    ) -> Result<IndexRecorder<'a>, Error> {
        let settings = index_settings(config)?;
        let columns = settings.layout.columns();
        let files = files.iter().map(IndexFile::from_rows).collect();
        Ok(IndexRecorder {
            builder: IndexBuilder::new(settings, files, earlier)?,
            keys,
            columns,
            next_row: 0,
            failed: None,
        })
    }

    /// Takes one decision (in input order).
    pub fn record(&mut self, d: &Decision) {
        if self.failed.is_some() {
            return;
        }
        let row = IndexBuilder::has_row(d.reason).then(|| {
            let at = self.next_row * self.columns;
            self.next_row += 1;
            self.keys.get(at..at + self.columns)
        });
        let row = match row {
            Some(None) => {
                self.failed = Some(IndexError::Decisions {
                    path: None,
                    mismatch: DecisionsMismatch::MoreSamplesThanRows,
                });
                return;
            }
            Some(Some(r)) => Some(r),
            None => None,
        };
        if let Err(e) = self.builder.push(IndexedDecision::from(d), row) {
            self.failed = Some(e);
        }
    }

    /// The index, once every decision was recorded.
    pub fn finish(self) -> Result<SavedIndex, Error> {
        if let Some(e) = self.failed {
            return Err(e.into());
        }
        if self.next_row * self.columns != self.keys.len() {
            return Err(IndexError::Decisions {
                path: None,
                mismatch: DecisionsMismatch::FewerSamplesThanRows {
                    samples: self.next_row as u64,
                    rows: (self.keys.len() / self.columns.max(1)) as u64,
                },
            }
            .into());
        }
        Ok(self.builder.finish())
    }
}

/// Completes a run's index for saving: under `--verify estimate` it stores its entries'
/// sketches (reading the run's inputs back once), so that runs against it need none of the
/// indexed files; so it does too when the index it was made against stores them (one the
/// online index saved, whose documents are in no file), with the shingle sets under `--verify
/// exact`. Returns the records read.
pub fn complete_index(config: &Config, index: &mut SavedIndex) -> Result<u64, Error> {
    let exact = config.dedup.verify == neardup_dedup::Verify::Jaccard;
    if exact && !index.has_sketches() {
        return Ok(0);
    }
    let cfg = stage2_config(config)?;
    Ok(index.store_sketches(&ResolveOptions {
        sketcher: &cfg.sketcher,
        rule: cfg.rule,
        selector: &cfg.selector,
        shingles: exact && cfg.rule.band_keys,
        block_bytes: cfg.block_bytes,
        threads: neardup_exec::ExecOptions::threads(cfg.threads).threads,
    })?)
}

/// Writes `index` through `file` (one output of a run's publication); returns its report
/// (`records_read`: what [`complete_index`] read).
pub fn save_index(
    index: &SavedIndex,
    path: &Path,
    mut file: AtomicFile,
    records_read: u64,
) -> Result<IndexReport, Error> {
    let io = |e: std::io::Error| {
        Error::Index(IndexError::Io {
            path: path.to_path_buf(),
            error: e,
        })
    };
    let bytes = index.write_to(&mut file).map_err(io)?;
    file.commit().map_err(io)?;
    Ok(IndexReport {
        path: path.to_path_buf(),
        files: index.files().len() as u64,
        samples: index.samples(),
        entries: index.entries() as u64,
        kept: index.kept() as u64,
        bytes,
        self_contained: index.self_contained(),
        records_read,
    })
}

/// `neardup index`: an index from a finished run's key tables (every shard, in any order) and
/// its decisions file, without running anything again. `config` gives the run's settings (and
/// `dedup.against`, the indexes the run was made against, whose files the decisions may name);
/// the index goes to `out`, published atomically.
pub fn build_index(
    config: &Config,
    tables: &[PathBuf],
    decisions: &Path,
    out: &Path,
) -> Result<IndexReport, Error> {
    config.validate()?;
    let earlier = load_against(config)?;
    let settings = index_settings(config)?;
    let shards = ShardTables::open(tables).map_err(crate::error::wrong_tables)?;
    if shards.layout != settings.layout {
        return Err(Error::Index(IndexError::OtherSettings {
            path: tables.first().cloned().unwrap_or_default(),
            differences: shards.layout.differences(&settings.layout),
        }));
    }
    let mut paths = crate::paths::RunPaths::new();
    let inputs: Vec<InputFile> = shards.files.iter().map(|f| f.input.clone()).collect();
    paths
        .read_inputs(&inputs)
        .read_file("the decisions file", decisions);
    for t in tables {
        paths.read_file("the key table", t);
    }
    for p in &config.dedup.against {
        paths.read_file("the index (--against)", p);
    }
    paths.write_file("the index (-o)", out, OwnFile::Index);
    paths.check()?;
    let _spill_dirs = paths.prepare()?;

    let earlier_names: Vec<String> = earlier
        .as_ref()
        .map(|e| e.files().iter().map(|f| f.name.clone()).collect())
        .unwrap_or_default();
    let files: Vec<IndexFile> = shards.files.iter().map(IndexFile::from_rows).collect();
    let number: HashMap<String, u32> = earlier_names
        .iter()
        .chain(files.iter().map(|f| &f.name))
        .enumerate()
        .map(|(i, n)| (n.clone(), i as u32))
        .collect();
    let base = earlier_names.len() as u32;
    let mut builder = IndexBuilder::new(settings, files, earlier)?;
    let rows = read_decisions(decisions).map_err(|e| {
        Error::IndexUse(IndexUseError::Decisions {
            path: decisions.to_path_buf(),
            error: Box::new(e),
        })
    })?;
    let wrong = |mismatch: DecisionsMismatch| {
        Error::Index(IndexError::Decisions {
            path: Some(decisions.to_path_buf()),
            mismatch,
        })
    };
    let columns = shards.layout.columns();
    let mut decisions_iter = rows.iter().peekable();
    // Rows are read a block at a time, table after table (shard order).
    let mut block: Vec<u64> = Vec::new();
    let mut at = 0usize;
    let mut row_reader: Option<TableReader> = None;
    let mut table_at = 0usize;
    let mut next_row = || -> Result<Option<Vec<u64>>, Error> {
        loop {
            if at < block.len() {
                at += columns;
                return Ok(Some(block[at - columns..at].to_vec()));
            }
            if row_reader.is_none() {
                let Some(p) = shards.paths.get(table_at) else {
                    return Ok(None);
                };
                row_reader = Some(TableReader::open(p).map_err(Error::KeyFile)?);
            }
            block.clear();
            at = 0;
            let reader = row_reader.as_mut().expect("opened above");
            if reader
                .read_keys(columns * 4096, &mut block)
                .map_err(Error::KeyFile)?
                > 0
            {
                continue;
            }
            row_reader
                .take()
                .expect("opened above")
                .finish()
                .map_err(Error::KeyFile)?;
            table_at += 1;
        }
    };
    let mut rows_used = 0u64;
    for (fi, f) in shards.files.iter().enumerate() {
        let name = f.input.path.display().to_string();
        let file = base + fi as u32;
        let mut samples_in_file = 0u64;
        // The decisions of this file's samples, in order.
        while let Some(d) = decisions_iter.next_if(|d| d.file == name) {
            samples_in_file += 1;
            let addr_of =
                |file: &Option<String>, record: Option<u64>| -> Result<SampleAddr, Error> {
                    match (file, record) {
                        (Some(f), Some(r)) => Ok(SampleAddr {
                            file: *number.get(f).ok_or_else(|| {
                                wrong(DecisionsMismatch::UnknownFile { name: f.clone() })
                            })?,
                            record: r,
                            field: 0,
                        }),
                        _ => Err(wrong(DecisionsMismatch::NoCluster {
                            file: d.file.clone(),
                            record: d.record,
                        })),
                    }
                };
            let addr = SampleAddr {
                file,
                record: d.record,
                field: d.field,
            };
            let cluster = if d.keep {
                addr
            } else {
                addr_of(&d.cluster_file, d.cluster_record)?
            };
            let keys = if IndexBuilder::has_row(d.reason) {
                rows_used += 1;
                Some(next_row()?.ok_or_else(|| wrong(DecisionsMismatch::MoreSamplesThanRows))?)
            } else {
                None
            };
            builder.push(
                IndexedDecision {
                    addr,
                    reason: d.reason,
                    keep: d.keep,
                    cluster,
                },
                keys.as_deref(),
            )?;
        }
        if samples_in_file == 0 && f.rows > 0 {
            return Err(wrong(DecisionsMismatch::NoDecisionsFor { name }));
        }
    }
    if let Some(d) = decisions_iter.next() {
        return Err(wrong(DecisionsMismatch::PastTables {
            file: d.file.clone(),
            record: d.record,
        }));
    }
    if next_row()?.is_some() {
        return Err(wrong(DecisionsMismatch::FewerSamplesThanRows {
            samples: rows_used,
            rows: shards.files.iter().map(|f| f.rows).sum(),
        }));
    }
    let mut index = builder.finish();
    let read = complete_index(config, &mut index)?;
    let file = AtomicFile::create(out).map_err(|e| {
        Error::Index(IndexError::Io {
            path: out.to_path_buf(),
            error: e,
        })
    })?;
    save_index(&index, out, file, read)
}
