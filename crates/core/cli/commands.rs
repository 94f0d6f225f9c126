//! One function per command: each builds its settings, checks, runs the library's step with a
//! progress view and the signal handlers, and says what it did.

use neardup::keys::{HotKeys, HotSummary};
use neardup::sketch::LshParams;
use neardup::{
    ApplyStep, Config, DecideStep, Error, HotStep, KeysStep, LshWeights, OwnFile, Pipeline, Report,
    RunControl, RunPaths, SignStep, Step, StepValue, WriteStep, save_json,
};

use super::args::*;
use super::signals::handle_signals;
use super::stdout::{ToStdout, send_all, take_outputs};
use super::view::{ProgressView, answer, note};

/// Both stages (`dedup`, `exact`) with a progress view, stopped by the signal handlers.
pub(crate) fn run_pipeline(config: Config, quiet: bool) -> Result<Report, Error> {
    super::allocator::keep_freed_memory(config.keys.memory_limit);
    let control = watched_step();
    let (Some(stage1), Some(stage2)) = (control.stage1.clone(), control.stage2.clone()) else {
        unreachable!("a watched control has both stages' counters")
    };
    let pipeline = Pipeline::new(config)?
        .with_progress(stage1, stage2)
        .with_cancel(control.cancel.clone());
    let _view = ProgressView::start(&control, quiet);
    pipeline.run()
}

/// The control of a step the user watches: progress counters for its view, stopped by a signal.
fn watched_step() -> RunControl {
    RunControl {
        cancel: handle_signals(),
        ..RunControl::watched()
    }
}

/// Loads a hot-key file given as an argument: a wrong one is a mistake in the arguments, not a
/// failure of stage 1.
pub(crate) fn load_hot_argument(path: &std::path::Path) -> Result<HotKeys, Error> {
    <HotKeys as StepValue>::load(path)
}

/// A run that writes nothing would throw its work away: refused before any. A run with only
/// `--report` is a dry run: what it would keep and drop, as `dedup()` with no outputs in Python.
pub(crate) fn require_outputs(config: &Config) -> Result<(), Error> {
    if config.output.dir.is_none()
        && config.output.decisions.is_none()
        && config.output.index_out.is_none()
        && config.output.report.is_none()
    {
        return Err(Error::Usage(
            "give --output DIR, --decisions FILE and/or --index-out FILE, or --report FILE \
             alone for a dry run (- for standard output)"
                .into(),
        ));
    }
    Ok(())
}

/// Runs the command line's command.
pub(crate) fn run(command: Command, quiet: bool) -> Result<(), Error> {
    match command {
        Command::Dedup(args) => dedup(args, quiet),
        Command::Keys(args) => keys(args, quiet),
        Command::Hot(args) => hot(args, quiet),
        Command::Sign(args) => sign(args, quiet),
        Command::Decide(args) => decide(args, quiet),
        Command::Write(args) => write(args, quiet),
        Command::Apply(args) => apply(args, quiet),
        Command::Index(args) => index(args, quiet),
        Command::Exact(args) => exact(args, quiet),
        Command::Eval(args) => eval(args),
        Command::Params(args) => params(args),
    }
}

/// `neardup dedup`.
pub(crate) fn dedup(args: DedupArgs, quiet: bool) -> Result<(), Error> {
    let DedupArgs {
        inputs,
        input,
        sketch,
        count,
        decide,
        output,
    } = args;
    let mut config = build_config(&inputs, &input, &[&sketch, &count, &decide, &output])?;
    require_outputs(&config)?;
    let to_stdout = take_outputs(&mut config)?;
    let report = run_pipeline(config, quiet)?;
    send_all(to_stdout, &report)?;
    note(quiet, report.summary());
    Ok(())
}

/// `neardup keys`.
pub(crate) fn keys(args: KeysArgs, quiet: bool) -> Result<(), Error> {
    let KeysArgs {
        inputs,
        output,
        shard,
        report,
        decisions,
        verify,
        input,
        sketch,
    } = args;
    if decisions.is_some() {
        return Err(Error::Usage(
            "`neardup keys` writes only the key table (-o/--output); --decisions belongs \
             to `neardup apply`"
                .into(),
        ));
    }
    let decide = DecideOpts {
        verify,
        ..DecideOpts::default()
    };
    let config = build_config(&inputs, &input, &[&sketch, &decide])?;
    let mut report = report;
    let report_to_stdout = ToStdout::take(&mut report, "report.json", None)?;
    let control = watched_step();
    let made = {
        let _view = ProgressView::start(&control, quiet);
        KeysStep::new(&config, shard)?.write(&output, report.as_deref(), &control)?
    };
    report_to_stdout.map(ToStdout::send).transpose()?;
    let stats = &made.stage1;
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
    Ok(())
}

/// `neardup hot`.
pub(crate) fn hot(args: HotArgs, quiet: bool) -> Result<(), Error> {
    let HotArgs {
        tables,
        output,
        min_key_count,
        memory_limit,
        spill_dir,
        threads,
        report,
        groups,
        against,
    } = args;
    let mut config = Config::default();
    config.dedup.against = against;
    config.keys.min_key_count = min_key_count;
    config.keys.memory_limit = memory_limit;
    config.keys.spill_dir = spill_dir;
    config.run.threads = threads.unwrap_or(0);
    let mut report = report;
    let report_to_stdout = ToStdout::take(&mut report, "report.json", None)?;
    let control = RunControl {
        cancel: handle_signals(),
        ..RunControl::default()
    };
    let made =
        HotStep::new(&config, &tables, groups)?.write(&output, report.as_deref(), &control)?;
    report_to_stdout.map(ToStdout::send).transpose()?;
    let stats = &made.count;
    note(
        quiet,
        format_args!(
            "{} table{}, {} keys, {} distinct, {} hot keys, {} hot samples of {}{} -> {}",
            tables.len(),
            if tables.len() == 1 { "" } else { "s" },
            stats.keys,
            stats.distinct_keys,
            stats.hot_keys,
            made.hot_samples,
            made.samples,
            if stats.spilled { " (spilled)" } else { "" },
            output.display()
        ),
    );
    Ok(())
}

/// `neardup sign`.
pub(crate) fn sign(args: SignArgs, quiet: bool) -> Result<(), Error> {
    let SignArgs {
        table,
        hot,
        output,
        report,
        overwrite,
        memory_limit,
        spill_dir,
        input,
        sketch,
        decide,
    } = args;
    let mut config = build_config(&[], &input, &[&sketch, &decide])?;
    config.keys.memory_limit = memory_limit.or(config.keys.memory_limit);
    config.keys.spill_dir = spill_dir.or(config.keys.spill_dir);
    config.output.overwrite |= overwrite;
    config.validate()?;
    let mut report = report;
    let report_to_stdout = ToStdout::take(&mut report, "report.json", None)?;
    // What can be checked before the hot-key file is read; the step checks the rest (the
    // input files the table names, the directory's files, what the report would replace, so
    // that a report over an input is refused as that) once it knows them.
    let mut paths = RunPaths::new();
    paths
        .inputs_pending()
        .read_file("the hot-key file (--hot)", &hot)
        .read_file("the key table", &table)
        .write_step_dir("the sign output (-o)", &output);
    if let Some(r) = &report {
        paths.write_file("the report (--report)", r, OwnFile::Report);
    }
    if let Some(dir) = &config.keys.spill_dir {
        paths.spill_dir(dir);
    }
    paths.check()?;
    let _spill_dirs = paths.prepare()?;
    let hot = load_hot_argument(&hot)?;
    let control = watched_step();
    let signed = {
        let _view = ProgressView::start(&control, quiet);
        SignStep::new(&config, &table, &hot)?.write(&output, report.as_deref(), &control)?
    };
    report_to_stdout.map(ToStdout::send).transpose()?;
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
    Ok(())
}

/// `neardup decide`.
pub(crate) fn decide(args: DecideArgs, quiet: bool) -> Result<(), Error> {
    let DecideArgs {
        signed,
        hot,
        group,
        output,
        report,
        overwrite,
        memory_limit,
        spill_dir,
        input,
        sketch,
        decide,
    } = args;
    let mut config = build_config(&[], &input, &[&sketch, &decide])?;
    config.keys.memory_limit = memory_limit.or(config.keys.memory_limit);
    config.keys.spill_dir = spill_dir.or(config.keys.spill_dir);
    config.output.overwrite |= overwrite;
    config.validate()?;
    let mut report = report;
    let report_to_stdout = ToStdout::take(&mut report, "report.json", None)?;
    // What can be checked before the hot-key file is read; the step checks the rest (the sign
    // outputs' files, the input files their manifests name, what the report would replace)
    // once it knows them.
    let mut paths = RunPaths::new();
    paths
        .inputs_pending()
        .read_file("the hot-key file (--hot)", &hot)
        .write_step_dir("the decide output (-o)", &output);
    if let Some(r) = &report {
        paths.write_file("the report (--report)", r, OwnFile::Report);
    }
    if let Some(dir) = &config.keys.spill_dir {
        paths.spill_dir(dir);
    }
    paths.check()?;
    let _spill_dirs = paths.prepare()?;
    let hot = HotSummary::load(&hot).map_err(crate::step::key_file_error)?;
    let control = RunControl {
        cancel: handle_signals(),
        ..RunControl::default()
    };
    let signed: Vec<neardup::SignedInput> = signed.iter().map(Into::into).collect();
    let decided = DecideStep::new(&config, &signed, &hot, group)?.write(
        &output,
        report.as_deref(),
        &control,
    )?;
    report_to_stdout.map(ToStdout::send).transpose()?;
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
    Ok(())
}

/// `neardup write`.
pub(crate) fn write(args: WriteArgs, quiet: bool) -> Result<(), Error> {
    let WriteArgs {
        table,
        hot,
        decided,
        memory_limit,
        input,
        sketch,
        decide,
        output,
    } = args;
    let mut config = build_config(&[], &input, &[&sketch, &decide, &output])?;
    config.keys.memory_limit = memory_limit.or(config.keys.memory_limit);
    require_outputs(&config)?;
    config.validate()?;
    let to_stdout = take_outputs(&mut config)?;
    let mut paths = RunPaths::new();
    paths
        .inputs_pending()
        .read_file("the hot-key file (--hot)", &hot)
        .read_file("the key table", &table);
    paths.write_config_outputs(&config, &[]);
    paths.check()?;
    // The shard's mask may go to the spill directory before the step checks its outputs.
    let _spill_dirs = paths.prepare()?;
    let hot = load_hot_argument(&hot)?;
    let control = watched_step();
    let report = {
        let _view = ProgressView::start(&control, quiet);
        let decided: Vec<neardup::DecidedInput> = decided.iter().map(Into::into).collect();
        WriteStep::new(&config, &table, &hot, &decided)?.run(&control, &mut |_| {})?
    };
    send_all(to_stdout, &report)?;
    note(quiet, report.summary());
    Ok(())
}

/// `neardup apply`.
pub(crate) fn apply(args: ApplyArgs, quiet: bool) -> Result<(), Error> {
    let ApplyArgs {
        mut tables,
        hot,
        keys,
        memory_limit,
        input,
        sketch,
        decide,
        output,
    } = args;
    tables.extend(keys);
    let mut config = build_config(&[], &input, &[&sketch, &decide, &output])?;
    config.keys.memory_limit = memory_limit.or(config.keys.memory_limit);
    require_outputs(&config)?;
    config.validate()?;
    let to_stdout = take_outputs(&mut config)?;
    // The tables' input files are checked too, by the library, once their headers are read.
    let mut paths = RunPaths::new();
    paths
        .inputs_pending()
        .read_file("the hot-key file (--hot)", &hot);
    for t in &tables {
        paths.read_file("the key table", t);
    }
    paths.write_config_outputs(&config, &[]);
    paths.check()?;
    let hot = load_hot_argument(&hot)?;
    let control = watched_step();
    let report = {
        let _view = ProgressView::start(&control, quiet);
        ApplyStep::new(&config, &hot, &tables)?.run(&control, &mut |_| {})?
    };
    send_all(to_stdout, &report)?;
    note(quiet, report.summary());
    Ok(())
}

/// `neardup index`.
pub(crate) fn index(args: IndexArgs, quiet: bool) -> Result<(), Error> {
    let IndexArgs {
        action,
        tables,
        decisions,
        output,
        input,
        sketch,
        decide,
    } = args;
    if let Some(action) = action {
        return index_action(action, quiet);
    }
    let (Some(decisions), Some(output)) = (decisions, output) else {
        unreachable!("clap requires --decisions and --output without a subcommand");
    };
    let config = build_config(&[], &input, &[&sketch, &decide])?;
    let made = neardup::against::build_index(&config, &tables, &decisions, &output)?;
    note(
        quiet,
        format_args!(
            "{} file{}, {} samples: {} entries, {} kept, {} bytes -> {}",
            made.files,
            if made.files == 1 { "" } else { "s" },
            made.samples,
            made.entries,
            made.kept,
            made.bytes,
            output.display()
        ),
    );
    Ok(())
}

/// Whether `s` names a Redis server rather than a file.
fn is_redis_url(s: &str) -> bool {
    ["redis://", "rediss://", "unix://"]
        .iter()
        .any(|p| s.starts_with(p))
}

/// `neardup index push|pull|stats`.
fn index_action(action: IndexAction, quiet: bool) -> Result<(), Error> {
    use neardup::online;
    match action {
        IndexAction::Push(a) => {
            let saved = neardup::index::SavedIndex::load(&a.index)?;
            let moved = online::push(&saved, &a.index, &a.url, &a.namespace, a.replace)?;
            note(
                quiet,
                format_args!(
                    "{}: {} ids, {} documents ({} representatives) -> {} namespace {:?}",
                    a.index.display(),
                    moved.ids,
                    moved.documents,
                    moved.representatives,
                    online::shown_address(&a.url),
                    a.namespace
                ),
            );
        }
        IndexAction::Pull(a) => {
            // Refused before anything is pulled, as every command's outputs are.
            RunPaths::new()
                .write_file("the index (-o)", &a.output, OwnFile::Index)
                .check()?;
            let (saved, moved) = online::pull(&a.url, &a.namespace)?;
            let bytes = online::save_file(&saved, &a.output)?;
            note(
                quiet,
                format_args!(
                    "{} namespace {:?}: {} ids, {} documents ({} representatives), {bytes} bytes \
                     -> {}",
                    online::shown_address(&a.url),
                    a.namespace,
                    moved.ids,
                    moved.documents,
                    moved.representatives,
                    a.output.display()
                ),
            );
        }
        IndexAction::Stats(a) => {
            let stats = if is_redis_url(&a.index) {
                online::namespace_stats(&a.index, &a.namespace)?
            } else {
                let path = std::path::Path::new(&a.index);
                let saved = neardup::index::SavedIndex::load(path)?;
                let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
                online::file_stats(&saved, bytes)
            };
            let mut text = serde_json::to_string_pretty(&stats).expect("stats serialise");
            text.push('\n');
            answer(&text)?;
        }
    }
    Ok(())
}

/// `neardup exact`.
pub(crate) fn exact(args: ExactArgs, quiet: bool) -> Result<(), Error> {
    let ExactArgs {
        inputs,
        input,
        normalize,
        count,
        output,
    } = args;
    let mut config = build_config(&inputs, &input, &[&normalize, &count, &output])?;
    require_outputs(&config)?;
    let to_stdout = take_outputs(&mut config)?;
    config.keys.exact = true;
    config.keys.near = false;
    let report = run_pipeline(config, quiet)?;
    send_all(to_stdout, &report)?;
    note(quiet, report.summary());
    Ok(())
}

/// `neardup eval`.
pub(crate) fn eval(args: EvalArgs) -> Result<(), Error> {
    let EvalArgs {
        mut inputs,
        decisions,
        inputs_flag,
        samples,
        sample_seed,
        clusters,
        eval_report,
        input,
        sketch,
    } = args;
    inputs.extend(inputs_flag);
    let config = build_config(&inputs, &input, &[&sketch])?;
    let sketch = config.sketch_config()?;
    config.validate_run()?;
    let (found, _) = neardup::discover_inputs_and_sources(&config)?;
    let mut paths = RunPaths::new();
    paths
        .read_discovered(&found)
        .read_file("the decisions file (--decisions)", &decisions);
    if let Some(p) = &eval_report {
        paths.write_file("the evaluation report (--eval-report)", p, OwnFile::Report);
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
        clusters,
    })
    .map_err(Error::Eval)?;
    if let Some(path) = eval_report {
        save_json(&path, &report)?;
    }
    answer(&format!("{}\n", report.summary()))?;
    Ok(())
}

/// `neardup params`.
pub(crate) fn params(args: ParamsArgs) -> Result<(), Error> {
    let ParamsArgs {
        threshold,
        num_perm,
        bands,
        rows,
        verify,
        points,
    } = args;
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
    if let Some(v) = verify {
        config.dedup.verify = v.into();
    }
    let params = config.lsh_params()?;
    let mut table = params_table(&params, threshold, num_perm, points);
    let choice = if bands.is_some() {
        "bands and rows given (--bands, --rows): no weighting applies\n".to_string()
    } else {
        let v = config.dedup.verify;
        let w = LshWeights::for_verify(v);
        format!(
            "chosen for --verify {}: false-positive area weighted {}, false-negative area {}:\n{}\n",
            match v {
                neardup::dedup::Verify::Estimate => "estimate",
                neardup::dedup::Verify::Jaccard => "exact",
            },
            w.false_positive,
            w.false_negative,
            LshWeights::reason(v)
        )
    };
    let first_line = table.find('\n').map_or(table.len(), |i| i + 1);
    table.insert_str(first_line, &choice);
    answer(&format!("{table}\n"))?;
    Ok(())
}

/// Most rows `neardup params` prints for the S-curve.
pub(crate) const MAX_POINTS: usize = 10_000;

pub(crate) fn params_table(
    p: &LshParams,
    threshold: f64,
    num_perm: usize,
    points: usize,
) -> String {
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
