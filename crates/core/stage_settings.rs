//! A run's [`Config`] turned into the settings of each stage: what the pipeline, the staged
//! steps and the runs against a saved index all start from. A leaf of the facade: it names no
//! other module of it but the config and the errors.

use neardup_corpus::OutputOptions;
use neardup_dedup::Stage2Config;
use neardup_keys::{KeysConfig, TableLayout};
use neardup_sketch::Sketcher;

use crate::config::Config;
use crate::error::{ConfigError, Error};

/// The worker threads a run of `config` uses: `run.threads` (0: one per core), and under
/// `keys.memory_limit` no more than the limit has room for ([`crate::threads_within`]).
pub fn run_threads(config: &Config) -> usize {
    let threads = neardup_exec::ExecOptions::threads(config.run.threads).threads;
    match config.keys.memory_limit {
        Some(limit) => crate::config::threads_within(limit, threads),
        None => threads,
    }
}

/// Stage-1 settings from a config.
pub fn keys_config(config: &Config) -> Result<KeysConfig, Error> {
    config.validate()?;
    let sketcher = Sketcher::new(config.sketch_config()?).map_err(ConfigError::Sketch)?;
    let mut k = KeysConfig::new(sketcher, config.selector()?);
    k.rule = config.row_rule();
    k.min_count = config.keys.min_key_count;
    k.threads = run_threads(config);
    k.chunk_bytes = match config.keys.memory_limit {
        Some(limit) => config
            .keys
            .chunk_bytes
            .min(crate::config::chunk_bytes_within(limit)),
        None => config.keys.chunk_bytes,
    };
    if let Some(limit) = config.keys.memory_limit {
        let threads = k.threads;
        k.block_bytes = crate::config::block_bytes_within(limit, threads);
        k.block_memory = Some(crate::config::block_memory_within(limit));
    }
    k.memory_limit = config.keys.memory_limit;
    k.spill_dir = config.keys.spill_dir.clone();
    k.on_error = config.run.on_error;
    Ok(k)
}

/// Stage-2 settings from a config.
pub fn stage2_config(config: &Config) -> Result<Stage2Config, Error> {
    let k = keys_config(config)?;
    let mut selector = k.selector;
    selector.rank_field = config.dedup.prefer.rank_field().cloned();
    Ok(Stage2Config {
        sketcher: k.sketcher,
        rule: k.rule,
        selector,
        deduper: config.deduper_config(),
        empty: config.dedup.empty,
        prefer: config.dedup.prefer.clone(),
        sort_memory: config.sort_memory(),
        threads: k.threads,
        block_bytes: k.block_bytes,
        block_memory: k.block_memory,
        on_error: config.run.on_error,
        output: config.output.dir.as_ref().map(|dir| OutputOptions {
            dir: dir.clone(),
            overwrite: config.output.overwrite,
            max_output_bytes: config.output.max_output_bytes,
        }),
        decisions: config.output.decisions.clone(),
        prior: None,
    })
}

/// Refuses hot keys (a hot-key file or its summary: `hot` is the layout it records) made with
/// other sketch or field settings than `config`'s.
pub(crate) fn check_hot_layout(config: &Config, hot: &TableLayout) -> Result<(), Error> {
    let layout = keys_config(config)?.layout();
    if *hot == layout {
        return Ok(());
    }
    Err(ConfigError::HotLayout {
        differences: hot.setting_differences(&layout),
    }
    .into())
}
