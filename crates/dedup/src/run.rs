//! One-process stage 2 ([`run_dedup`]): the pass of `stage` deciding in input order, or, with a
//! preference, the ranked steps of `ranked`. The top of the crate's modules.

use neardup_corpus::{Publication, PublishOptions};
use neardup_exec::StepControl;
use neardup_keys::{FileRows, HotMask};

use crate::deduper::Deduper;
use crate::error::{DedupError, SettingsError};
use crate::pass::{Addressing, Decision, DedupStats, Stage2Config};
use crate::ranked::run_ranked_into;
use crate::stage::{output_error, run_stage2};

/// Runs stage 2 over the files stage 1 read (`files`, with their per-chunk counts) given the hot
/// mask of their rows. Calls `observe` with every decision in input order. The filtered dataset
/// (`cfg.output`) and the decisions (`cfg.decisions`) are published together at the end, all or
/// nothing (see [`Publication`]). `control` is watched and looked at between blocks: cancelled,
/// the run fails with [`DedupError::Interrupted`] and publishes nothing.
pub fn run_dedup(
    files: &[FileRows],
    mask: &HotMask,
    cfg: &Stage2Config,
    control: &StepControl,
    observe: &mut dyn FnMut(&Decision),
) -> Result<DedupStats, DedupError> {
    let publication = Publication::begin(&PublishOptions {
        output: cfg.output.clone(),
        outputs: files.iter().map(|f| f.input.relative.clone()).collect(),
        decisions: cfg.decisions.clone(),
        cancel: control.cancel.clone(),
        ..PublishOptions::default()
    })
    .map_err(output_error)?;
    let stats = run_dedup_into(files, mask, cfg, control, &publication, observe)?;
    publication.commit().map_err(output_error)?;
    Ok(stats)
}

/// [`run_dedup`] writing into `publication`, for a caller that publishes more with it (the run
/// report): the dataset goes to the publication's dataset directory (`cfg.output` is not looked
/// at) and the decisions to its file `cfg.decisions`; the caller commits.
pub fn run_dedup_into(
    files: &[FileRows],
    mask: &HotMask,
    cfg: &Stage2Config,
    control: &StepControl,
    publication: &Publication,
    observe: &mut dyn FnMut(&Decision),
) -> Result<DedupStats, DedupError> {
    let mut deduper = Deduper::new(
        cfg.deduper.clone(),
        cfg.sketcher.num_perm(),
        cfg.sketcher.bands(),
        cfg.rule,
    )?;
    let prior_names = cfg.prior.as_ref().map_or(&[][..], |p| &p.names[..]);
    let names: Vec<String> = prior_names
        .iter()
        .cloned()
        .chain(files.iter().map(|f| f.input.path.display().to_string()))
        .collect();
    let addressing = Addressing {
        file_base: u32::try_from(prior_names.len()).expect("fewer than 2^32 files"),
        row_base: 0,
        names: &names,
    };
    if let Some(prior) = &cfg.prior {
        if !cfg.prefer.is_input_order() {
            return Err(SettingsError::PreferAgainstIndex.into());
        }
        deduper.seed(prior);
    }
    if !cfg.prefer.is_input_order() {
        return run_ranked_into(files, mask, cfg, control, publication, observe, &addressing);
    }
    let (stats, _) = run_stage2(
        files,
        mask,
        cfg,
        control,
        publication,
        observe,
        deduper,
        &addressing,
    )?;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{Prefer, PriorState};

    fn cfg(prefer: Prefer, prior: Option<PriorState>) -> Stage2Config {
        Stage2Config {
            prefer,
            prior: prior.map(Arc::new),
            ..crate::pass::test_settings::stage2()
        }
    }

    /// A run with nothing to read decides nothing, with either pass (in input order or
    /// ranked), and against earlier runs' state; a preference against earlier runs' state
    /// (decided in input order) is refused before anything is read.
    #[test]
    fn an_empty_shard_decides_nothing_and_a_preference_against_an_index_is_refused() {
        let mask = HotMask::new(0, 17);
        let prior = || PriorState {
            names: vec!["earlier.jsonl".into()],
            ..PriorState::default()
        };
        for (prefer, prior) in [
            (Prefer::First, None),
            (Prefer::Longest, None),
            (Prefer::First, Some(prior())),
        ] {
            let mut seen = 0;
            let stats = run_dedup(
                &[],
                &mask,
                &cfg(prefer.clone(), prior),
                &StepControl::default(),
                &mut |_| seen += 1,
            )
            .unwrap();
            assert_eq!((seen, stats.samples, stats.records), (0, 0, 0), "{prefer}");
        }
        let r = run_dedup(
            &[],
            &mask,
            &cfg(Prefer::Longest, Some(prior())),
            &StepControl::default(),
            &mut |_| {},
        );
        assert!(matches!(
            r,
            Err(DedupError::Config(SettingsError::PreferAgainstIndex))
        ));
    }
}
