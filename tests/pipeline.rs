//! End-to-end runs of the library on the bundled sample corpus (real Rust documentation pages
//! with real near-copies) and on generated corpora.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use neardup::corpus::Reason;
use neardup::dedup::Verify;
use neardup::keys::{HotMask, TableStore, run_keys};
use neardup::{Config, HotStep, KeysStep, Pipeline, RunControl, Step};

use crate::support;

fn sample_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/sample")
}

fn sample_config(threads: usize) -> Config {
    let mut c = Config::default();
    c.input.inputs = vec![sample_dir().display().to_string()];
    c.input.id_field = Some("id".into());
    c.run.threads = threads;
    c
}

/// The ideal greedy first-seen keep set from exact Jaccard of character 5-gram sets
/// (shared/bench/exact_pairs.py), one 0/1 per sample.
fn truth(threshold: &str) -> Vec<bool> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/data/sample-truth/keep-{threshold}.txt"));
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| l.trim() == "1")
        .collect()
}

fn precision_recall(keep: &[bool], ideal: &[bool]) -> (f64, f64) {
    assert_eq!(keep.len(), ideal.len());
    let dropped: Vec<usize> = (0..keep.len()).filter(|&i| !keep[i]).collect();
    let ideal_dropped = ideal.iter().filter(|k| !**k).count();
    let tp = dropped.iter().filter(|&&i| !ideal[i]).count();
    (
        tp as f64 / dropped.len().max(1) as f64,
        tp as f64 / ideal_dropped.max(1) as f64,
    )
}

#[test]
fn sample_quality_meets_the_bar_at_default_settings() {
    let (decisions, report) = Pipeline::new(sample_config(2))
        .unwrap()
        .decisions()
        .unwrap();
    let keep: Vec<bool> = decisions.iter().map(|d| d.keep).collect();
    let (p, r) = precision_recall(&keep, &truth("0.8"));
    assert!(p >= 0.95 && r >= 0.95, "precision {p:.3} recall {r:.3}");
    assert_eq!(report.totals.records_in, 500);
    assert_eq!(
        report.totals.records_in,
        report.totals.records_kept + report.totals.records_dropped
    );
    // Every drop names an earlier sample it duplicates, with its id.
    for d in decisions.iter().filter(|d| !d.keep) {
        let of = d.dup_of.expect("dup_of");
        assert!((of.file, of.record) < (d.addr.file, d.addr.record), "{d:?}");
        assert!(d.dup_of_id.is_some() && d.similarity.unwrap() >= 0.8);
    }
}

#[test]
fn default_exact_verification_reproduces_the_ideal_greedy_set() {
    // Exact verification (the default) confirms every drop with the true Jaccard, and its
    // candidate floor finds pairs whose estimate fell short: on this corpus the decisions are the
    // ideal greedy first-seen set itself.
    let (decisions, report) = Pipeline::new(sample_config(2))
        .unwrap()
        .decisions()
        .unwrap();
    let keep: Vec<bool> = decisions.iter().map(|d| d.keep).collect();
    assert_eq!(keep, truth("0.8"));
    assert!(report.stage2.deduper.verifications > 0);
    assert!(report.stage2.deduper.shingle_set_bytes > 0);
}

#[test]
fn estimate_only_mode_stays_close_to_the_ideal_set() {
    let mut c = sample_config(2);
    c.dedup.verify = Verify::Estimate;
    let (decisions, report) = Pipeline::new(c).unwrap().decisions().unwrap();
    let keep: Vec<bool> = decisions.iter().map(|d| d.keep).collect();
    let (p, r) = precision_recall(&keep, &truth("0.8"));
    assert!(p >= 0.9 && r >= 0.9, "precision {p:.3} recall {r:.3}");
    assert_eq!(report.stage2.deduper.verifications, 0);
}

/// The data files of an output directory with their bytes; the manifest (which names its run)
/// is checked to list exactly them.
fn read_dir_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .filter(|(name, _)| name != neardup::corpus::MANIFEST)
        .collect();
    out.sort();
    let manifest = neardup::corpus::read_manifest(dir, neardup::corpus::MANIFEST)
        .unwrap()
        .expect("a published directory has its manifest");
    let mut listed: Vec<(String, u64)> = manifest
        .files
        .iter()
        .map(|f| (f.path.clone(), f.bytes))
        .collect();
    listed.sort();
    let on_disk: Vec<(String, u64)> = out
        .iter()
        .map(|(n, b)| (n.clone(), b.len() as u64))
        .collect();
    assert_eq!(listed, on_disk, "the manifest lists the files");
    out
}

#[test]
fn outputs_and_decisions_are_byte_identical_for_any_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for threads in [1, 2, 8] {
        let mut c = sample_config(threads);
        // Small chunks so that several workers really share files.
        c.keys.chunk_bytes = 16 * 1024;
        let out = tmp.path().join(format!("out-{threads}"));
        let dec = tmp.path().join(format!("decisions-{threads}.jsonl"));
        c.output.dir = Some(out.clone());
        c.output.decisions = Some(dec.clone());
        Pipeline::new(c).unwrap().run().unwrap();
        runs.push((read_dir_bytes(&out), std::fs::read(&dec).unwrap()));
    }
    assert!(!runs[0].0.is_empty());
    assert_eq!(runs[0], runs[1]);
    assert_eq!(runs[0], runs[2]);
}

/// Under `--memory-limit`, stage 2's representatives spill their signatures and sets past half
/// the limit and are read back when compared: the decisions and the dataset stay byte-identical,
/// under both kinds of verification, with one thread or two.
#[test]
fn a_memory_limit_spills_representatives_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    for verify in [Verify::Jaccard, Verify::Estimate] {
        let mut runs = Vec::new();
        for (threads, limit) in [(2, None), (1, Some(256 * 1024)), (2, Some(1))] {
            let mut c = sample_config(threads);
            c.dedup.verify = verify;
            c.keys.memory_limit = limit;
            c.keys.spill_dir = Some(tmp.path().join("spill"));
            let name = format!("{verify:?}-{threads}-{limit:?}");
            let out = tmp.path().join(format!("out-{name}"));
            let dec = tmp.path().join(format!("decisions-{name}.jsonl"));
            c.output.dir = Some(out.clone());
            c.output.decisions = Some(dec.clone());
            let report = Pipeline::new(c).unwrap().run().unwrap();
            let d = &report.stage2.deduper;
            assert!(d.representatives > 0, "{name}");
            match limit {
                None => {
                    assert_eq!(d.spilled_bytes, 0, "{name}");
                    assert_eq!(d.bookkeeping_releases, 0, "{name}");
                }
                Some(1) => {
                    // Nor does the bookkeeping: its pages are handed back as lookups map them in.
                    assert!(d.bookkeeping_releases > 0, "{name}: {d:?}");
                    // Nothing fits: every signature (and set) is on disk.
                    let sets = if verify == Verify::Jaccard {
                        d.shingle_set_bytes
                    } else {
                        0
                    };
                    // A signature record is the signature and the 16-byte sample address.
                    assert_eq!(
                        d.spilled_bytes,
                        d.representatives * (4 * 128 + 16) + sets,
                        "{name}"
                    );
                }
                Some(limit) => {
                    assert!(d.spilled_bytes > 0, "{name}");
                    // A record stays in memory only while the state fits the budget; the bucket
                    // index may grow (by its last doubling at most) after the last such check.
                    assert!(
                        d.representative_memory_bytes
                            <= neardup::decision_memory(limit) + d.bucket_index_bytes,
                        "{name}: {d:?}"
                    );
                }
            }
            assert!(d.near > 0 && d.comparisons > 0, "{name}");
            runs.push((read_dir_bytes(&out), std::fs::read(&dec).unwrap()));
        }
        assert!(!runs[0].0.is_empty());
        assert_eq!(runs[0], runs[1], "{verify:?}");
        assert_eq!(runs[0], runs[2], "{verify:?}");
    }
}

#[test]
fn key_tables_are_identical_across_threads_and_spilling_and_match_brute_force() {
    let base = sample_config(1);
    let (files, _) = neardup::discover_inputs(&base).unwrap();
    let mut reference = None;
    for (threads, limit) in [(1, None), (2, None), (4, None), (2, Some(64 * 1024))] {
        let mut c = sample_config(threads);
        c.keys.chunk_bytes = 32 * 1024;
        c.keys.memory_limit = limit;
        let out = run_keys(
            &files,
            0,
            &neardup::keys_config(&c).unwrap(),
            &neardup::exec::StepControl::default(),
        )
        .unwrap();
        assert_eq!(out.stats.count.spilled, limit.is_some());
        let got = (out.hot.keys().to_vec(), out.mask.clone(), out.files.clone());
        match &reference {
            None => {
                let TableStore::Memory(table) = &out.table else {
                    panic!()
                };
                // Brute force: a HashMap count over every key of the table.
                let mut counts: HashMap<u64, u32> = HashMap::new();
                for &k in table.keys().iter().filter(|&&k| k != 0) {
                    *counts.entry(k).or_default() += 1;
                }
                let mut hot: Vec<u64> = counts
                    .iter()
                    .filter(|(_, n)| **n > 1)
                    .map(|(k, _)| *k)
                    .collect();
                hot.sort_unstable();
                assert_eq!(out.hot.keys(), hot.as_slice());
                assert_eq!(HotMask::from_tables(&[table], &out.hot).unwrap(), out.mask);
                reference = Some(got);
            }
            Some(r) => assert_eq!(&got, r, "threads {threads}, limit {limit:?}"),
        }
    }
}

/// Paths under tests/data, as inputs.
fn test_data(paths: &[&str]) -> Vec<String> {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    paths
        .iter()
        .map(|p| data.join(p).display().to_string())
        .collect()
}

#[test]
fn whole_file_blocks_sketched_by_all_threads_give_the_same_rows() {
    // Compressed files are read front to back by one thread, which hands its blocks to the
    // others; tiny blocks make many of them. A truncated file must still end in its read error
    // after the rows read before it, and problems keep their record numbers.
    let inputs = test_data(&[
        "corpus/sample.jsonl.gz",
        "bad/malformed.jsonl",
        "corpus/sample.jsonl.zst",
        "bad/truncated.jsonl.gz",
        "corpus/sample.parquet",
        "bad/truncated.jsonl.zst",
        "sample/part-0.jsonl",
    ]);
    let mut reference = None;
    for threads in [1, 2, 3, 8] {
        let mut c = Config::default();
        c.input.inputs = inputs.clone();
        c.run.threads = threads;
        let (files, _) = neardup::discover_inputs(&c).unwrap();
        let mut keys = neardup::keys_config(&c).unwrap();
        keys.block_bytes = 700;
        let out = run_keys(&files, 0, &keys, &neardup::exec::StepControl::default()).unwrap();
        let TableStore::Memory(table) = &out.table else {
            panic!("in memory")
        };
        let stats = &out.stats;
        let got = (
            table.keys().to_vec(),
            out.files.clone(),
            stats.records,
            stats.samples,
            stats.skipped.clone(),
            stats.read_errors.clone(),
            format!("{:?}", stats.problems),
        );
        match &reference {
            None => {
                assert!(stats.samples > 500, "{stats:?}");
                assert!(!stats.read_errors.is_empty(), "{stats:?}");
                assert!(!stats.skipped.is_empty(), "{stats:?}");
                reference = Some(got);
            }
            Some(r) => assert!(&got == r, "threads {threads}"),
        }
    }
}

/// A Parquet file of the texts of `source` (a JSONL file), `group_rows` rows per row group, so
/// that small chunks split it by row groups.
fn write_grouped_parquet(path: &Path, source: &Path, group_rows: usize) {
    use arrow_array::{ArrayRef, RecordBatch, StringArray};
    let texts: Vec<String> = std::fs::read_to_string(source)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["text"].as_str().unwrap().to_string()
        })
        .collect();
    let texts: ArrayRef = std::sync::Arc::new(StringArray::from(texts));
    let batch = RecordBatch::try_from_iter([("text", texts)]).unwrap();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(group_rows))
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

#[test]
fn stage1_tables_are_identical_across_threads_and_chunk_sizes() {
    // Whole-file chunks (gzip, zstd, a broken gzip stream) whose blocks every free thread
    // sketches, and files split into many chunks at small chunk sizes (plain JSONL by bytes,
    // Parquet by row groups): the rows, the per-file counts and the accounting must not depend
    // on the thread count or the chunking, and the table file not on the thread count.
    let tmp = tempfile::tempdir().unwrap();
    let grouped = tmp.path().join("grouped.parquet");
    write_grouped_parquet(&grouped, &sample_dir().join("part-1.jsonl"), 40);
    let mut inputs = test_data(&[
        "corpus/sample.jsonl.gz",
        "sample/part-0.jsonl",
        "bad/truncated.jsonl.gz",
        "bad/malformed.jsonl",
        "corpus/sample.jsonl.zst",
        "sample/part-2.parquet",
    ]);
    inputs.insert(3, grouped.display().to_string());
    let split = |files: &[neardup::keys::FileRows], name: &str| {
        let f = files.iter().find(|f| f.input.path.ends_with(name)).unwrap();
        f.chunks.len()
    };
    let mut across_chunkings = None;
    for chunk_bytes in [8u64 << 10, 48 << 10, 32 << 20] {
        let mut across_threads = None;
        for threads in [1, 2, 3, 8] {
            let case = format!("chunks of {chunk_bytes} bytes, {threads} threads");
            let mut c = Config::default();
            c.input.inputs = inputs.clone();
            c.run.threads = threads;
            let (files, _) = neardup::discover_inputs(&c).unwrap();
            let mut keys = neardup::keys_config(&c).unwrap();
            keys.chunk_bytes = chunk_bytes;
            keys.block_bytes = 3000;
            let path = tmp.path().join(format!("{chunk_bytes}-{threads}.ndk"));
            let target = neardup::corpus::AtomicFile::create(&path).unwrap();
            let written = neardup::keys::write_keys(
                &files,
                0,
                &keys,
                &neardup::exec::StepControl::default(),
                target,
            )
            .unwrap();
            let file = std::fs::read(&path).unwrap();
            let (table, stats) = neardup::keys::collect_keys(
                &files,
                0,
                &keys,
                &neardup::exec::StepControl::default(),
            )
            .unwrap();
            assert_eq!(table.to_bytes(), file, "{case}");
            let out = run_keys(&files, 0, &keys, &neardup::exec::StepControl::default()).unwrap();
            let TableStore::Memory(counted) = &out.table else {
                panic!("{case}: in memory")
            };
            // A one-process run's table holds no places of records (stage 2 takes them from the
            // run's files, which hold them once): the same keys, files and counts.
            let placeless = |files: &[neardup::keys::FileRows]| {
                let mut files = files.to_vec();
                for c in files.iter_mut().flat_map(|f| f.chunks.iter_mut()) {
                    c.places = None;
                }
                files
            };
            assert_eq!(counted.keys(), table.keys(), "{case}");
            assert_eq!(counted.files(), placeless(table.files()), "{case}");
            assert_eq!(out.files, table.files(), "{case}");
            assert!(
                table
                    .files()
                    .iter()
                    .any(|f| f.chunks.iter().any(|c| c.places.is_some())),
                "{case}: the table holds places"
            );
            if chunk_bytes == 8 << 10 {
                assert!(split(table.files(), "part-0.jsonl") > 10, "{case}");
                assert!(split(table.files(), "grouped.parquet") > 2, "{case}");
            }
            assert_eq!(split(table.files(), "sample.jsonl.gz"), 1, "{case}");
            let accounting = |s: &neardup::keys::KeysStats| {
                (
                    s.records,
                    s.records_unreadable,
                    format!("{:?}", s.unreadable),
                    s.samples,
                    s.blank_samples,
                    s.short_samples,
                    s.skipped.clone(),
                    s.read_errors.clone(),
                    format!("{:?}", s.problems),
                    s.bytes,
                )
            };
            assert!(
                !stats.unreadable.is_empty() && !stats.skipped.is_empty(),
                "{case}"
            );
            assert_eq!(accounting(&written), accounting(&stats), "{case}");
            assert_eq!(accounting(&out.stats), accounting(&stats), "{case}");
            match &across_threads {
                None => across_threads = Some(file),
                Some(first) => assert!(first == &file, "{case}: another table file"),
            }
            let per_file: Vec<(PathBuf, u64, u64)> = table
                .files()
                .iter()
                .map(|f| (f.input.path.clone(), f.records, f.rows))
                .collect();
            let got = (table.keys().to_vec(), per_file, accounting(&stats));
            match &across_chunkings {
                None => across_chunkings = Some(got),
                Some(first) => assert!(first == &got, "{case}: other rows"),
            }
        }
    }
}

#[test]
fn a_cancel_stops_stage1_between_blocks() {
    // Before the run, nothing is read; during the run, the workers stop at the next block, long
    // before the inputs end (many small blocks in plain and compressed files).
    let tmp = tempfile::tempdir().unwrap();
    let body = std::fs::read(sample_dir().join("part-0.jsonl")).unwrap();
    let mut inputs = Vec::new();
    for i in 0..8 {
        let plain = tmp.path().join(format!("copy-{i}.jsonl"));
        std::fs::write(&plain, body.repeat(10)).unwrap();
        let gz = tmp.path().join(format!("copy-{i}.jsonl.gz"));
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut e, &body.repeat(10)).unwrap();
        std::fs::write(&gz, e.finish().unwrap()).unwrap();
        inputs.extend([plain.display().to_string(), gz.display().to_string()]);
    }
    for threads in [1, 2, 3] {
        for before in [true, false] {
            let case = format!("{threads} threads, cancelled before: {before}");
            let mut c = Config::default();
            c.input.inputs = inputs.clone();
            c.run.threads = threads;
            let (files, _) = neardup::discover_inputs(&c).unwrap();
            let mut keys = neardup::keys_config(&c).unwrap();
            keys.block_bytes = 2000;
            keys.chunk_bytes = 256 << 10;
            let progress = std::sync::Arc::new(neardup::keys::Progress::default());
            let control =
                neardup::exec::StepControl::new(Some(progress.clone()), Default::default());
            let cancel = control.cancel.clone();
            if before {
                cancel.cancel();
            }
            let result = std::thread::scope(|s| {
                if !before {
                    s.spawn(|| {
                        while progress.bytes() == 0 {
                            std::thread::yield_now();
                        }
                        cancel.cancel();
                    });
                }
                neardup::keys::collect_keys(&files, 0, &keys, &control)
            });
            assert!(
                matches!(result, Err(neardup::keys::KeysError::Interrupted)),
                "{case}"
            );
            let read = progress.bytes();
            if before {
                assert_eq!(read, 0, "{case}");
            } else {
                let all = 16 * 10 * body.len() as u64;
                assert!(
                    read > 0 && read < all / 2,
                    "{case}: {read} of {all} bytes read"
                );
            }
        }
    }
}

#[test]
fn whole_file_blocks_prepared_by_all_threads_give_the_same_decisions() {
    // Stage 2 on whole-file chunks in tiny blocks: each block's rows start where the block
    // before it ended, whichever thread parsed it; outputs and decisions must not depend on the
    // thread count, and a truncated file still ends in its read error.
    let inputs = test_data(&[
        "corpus/sample.jsonl.gz",
        "sample/part-0.jsonl",
        "bad/truncated.jsonl.gz",
        "corpus/sample.jsonl.zst",
        "sample/part-1.jsonl",
        "bad/malformed.jsonl",
        "sample/part-2.parquet",
    ]);
    let tmp = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for threads in [1, 2, 3, 8] {
        let mut c = Config::default();
        c.input.inputs = inputs.clone();
        c.run.threads = threads;
        let out_dir = tmp.path().join(format!("out-{threads}"));
        let dec = tmp.path().join(format!("decisions-{threads}.jsonl"));
        c.output.dir = Some(out_dir.clone());
        c.output.decisions = Some(dec.clone());
        let (files, _) = neardup::discover_inputs(&c).unwrap();
        let mut keys = neardup::keys_config(&c).unwrap();
        keys.block_bytes = 700;
        let stage1 = run_keys(&files, 0, &keys, &neardup::exec::StepControl::default()).unwrap();
        let mut apply = neardup::stage2_config(&c).unwrap();
        apply.block_bytes = 700;
        let mut decisions = Vec::new();
        let stats = neardup::dedup::run_dedup(
            &stage1.files,
            &stage1.mask,
            &apply,
            &neardup::exec::StepControl::default(),
            &mut |d| decisions.push(d.clone()),
        )
        .unwrap();
        let dropped = decisions.iter().filter(|d| !d.keep).count();
        runs.push((
            decisions,
            stats.records,
            read_dir_bytes(&out_dir),
            std::fs::read(&dec).unwrap(),
        ));
        assert!(dropped > 100, "{dropped} dropped");
    }
    for (i, run) in runs.iter().enumerate().skip(1) {
        assert!(run == &runs[0], "run {i} differs from the 1-thread run");
    }
}

#[test]
fn sharded_keys_hot_apply_equal_a_single_run() {
    let tmp = tempfile::tempdir().unwrap();
    let single = sample_config(2);
    let (all, _) = Pipeline::new(single.clone()).unwrap().decisions().unwrap();

    let (files, _) = neardup::discover_inputs(&single).unwrap();
    let mut tables = Vec::new();
    for (shard, part) in files.chunks(2).enumerate() {
        let (table, _) = KeysStep::with_files(&single, part, shard as u32)
            .unwrap()
            .run(&RunControl::default())
            .unwrap();
        let path = tmp.path().join(format!("keys-{shard}.ndk"));
        table.save(&path).unwrap();
        tables.push(neardup::keys::KeyTable::load(&path).unwrap());
    }
    // Shards can be merged in any order: shard numbers decide.
    tables.reverse();
    let (hot, _, _) = HotStep::new(&single, &tables, 1)
        .unwrap()
        .merge(&RunControl::default())
        .unwrap();
    let hot_path = tmp.path().join("hot.ndh");
    hot.save(&hot_path).unwrap();
    let hot = neardup::keys::HotKeys::load(&hot_path).unwrap();
    let mut sharded = Vec::new();
    let control = RunControl::default();
    neardup::ApplyStep::new(&single, &hot, &tables)
        .and_then(|s| s.run(&control, &mut |d| sharded.push(d.clone())))
        .unwrap();
    assert_eq!(sharded, all);
}

/// The steps over table files (`HotStep`, `apply`) give what they give over tables in memory, with the count in memory and spilled; a truncated or corrupted table is refused.
#[test]
fn streamed_table_files_merge_and_apply_like_loaded_tables() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = sample_config(2);
    let (all, _) = Pipeline::new(config.clone()).unwrap().decisions().unwrap();
    let (files, _) = neardup::discover_inputs(&config).unwrap();
    let mut paths = Vec::new();
    let mut tables = Vec::new();
    for (shard, part) in files.chunks(2).enumerate() {
        let (table, _) = KeysStep::with_files(&config, part, shard as u32)
            .unwrap()
            .run(&RunControl::default())
            .unwrap();
        let path = tmp.path().join(format!("keys-{shard}.ndk"));
        table.save(&path).unwrap();
        paths.push(path);
        tables.push(table);
    }
    paths.reverse();
    let control = RunControl::default();
    let (hot, mask, stats) = HotStep::new(&config, &tables, 1)
        .unwrap()
        .merge(&control)
        .unwrap();
    assert!(!stats.spilled);
    for limit in [None, Some(1u64)] {
        config.keys.memory_limit = limit;
        config.keys.spill_dir = Some(tmp.path().to_path_buf());
        let (hot_f, mask_f, stats_f) = HotStep::new(&config, &paths, 1)
            .unwrap()
            .merge(&control)
            .unwrap();
        assert_eq!(stats_f.spilled, limit.is_some());
        assert_eq!(hot_f.keys(), hot.keys(), "limit {limit:?}");
        assert_eq!(mask_f.rows(), mask.rows());
        assert_eq!(mask_f.hot_rows(), mask.hot_rows());
        let mut streamed = Vec::new();
        neardup::ApplyStep::new(&config, &hot_f, &paths)
            .and_then(|s| s.run(&control, &mut |d| streamed.push(d.clone())))
            .unwrap();
        assert_eq!(streamed, all, "limit {limit:?}");
    }
    // Planned for stage 2 on several machines, values and files give the same plan.
    let planned = |tables: neardup::KeyTables| {
        let (hot, _, _) = HotStep::new(&config, tables, 3)
            .unwrap()
            .merge(&control)
            .unwrap();
        hot.plan().cloned().expect("a plan for 3 groups")
    };
    assert_eq!(planned((&tables).into()), planned((&paths).into()));
    let progress = std::sync::Arc::new(neardup::keys::Progress::default());
    let watched = RunControl {
        stage2: Some(progress.clone()),
        ..RunControl::default()
    };
    let report = neardup::ApplyStep::new(&config, &hot, &paths)
        .and_then(|s| s.run(&watched, &mut |_| {}))
        .unwrap();
    assert_eq!(progress.samples(), report.totals.samples);
    // Progress counts bytes on disk: a whole pass ends on the inputs' sizes, whatever their
    // formats decode to.
    let on_disk: u64 = files.iter().map(|f| f.size).sum();
    assert_eq!(progress.bytes(), on_disk);

    // A table cut short, and one with a flipped byte in its keys, are refused by name.
    let bytes = std::fs::read(&paths[0]).unwrap();
    let cut = tmp.path().join("cut.ndk");
    std::fs::write(&cut, &bytes[..bytes.len() - 40]).unwrap();
    let mut flipped_bytes = bytes.clone();
    let at = bytes.len() - 100;
    flipped_bytes[at] ^= 0x40;
    let flipped = tmp.path().join("flipped.ndk");
    std::fs::write(&flipped, &flipped_bytes).unwrap();
    for bad in [cut, flipped] {
        let mut with_bad = paths.clone();
        with_bad[0] = bad.clone();
        let Err(err) = HotStep::new(&config, &with_bad, 1).unwrap().merge(&control) else {
            panic!("a damaged table was accepted");
        };
        let msg = err.to_string();
        assert!(
            msg.contains(&bad.display().to_string())
                && (msg.contains("truncated") || msg.contains("checksum")),
            "unclear error: {msg}"
        );
    }
}

/// A shard's table streamed to a file (`KeysStep::write`, the CLI's `keys` step) is the file that
/// saving the in-memory table writes, byte for byte, for every thread count; only the table file
/// is left in its directory, and a run that fails leaves nothing.
#[test]
fn streamed_shard_tables_equal_saved_in_memory_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let config = |threads| {
        let mut c = sample_config(threads);
        // Small chunks, so that several threads share the files (chunks are part of the table).
        c.keys.chunk_bytes = 64 * 1024;
        c
    };
    let (files, _) = neardup::discover_inputs(&config(1)).unwrap();
    let (table, stats) = KeysStep::with_files(&config(1), &files, 3)
        .unwrap()
        .run(&RunControl::default())
        .unwrap();
    assert_eq!(stats.samples as usize, table.rows());
    let saved = tmp.path().join("saved.ndk");
    table.save(&saved).unwrap();
    let saved = std::fs::read(&saved).unwrap();
    for threads in [1, 2, 4] {
        let dir = tmp.path().join(format!("t{threads}"));
        std::fs::create_dir(&dir).unwrap();
        let out = dir.join("keys-3.ndk");
        let streamed = KeysStep::with_files(&config(threads), &files, 3)
            .unwrap()
            .write(&out, None, &RunControl::default())
            .unwrap()
            .stage1;
        assert_eq!(streamed.samples, stats.samples);
        assert_eq!(streamed.records, stats.records);
        assert!(std::fs::read(&out).unwrap() == saved, "threads {threads}");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("keys-3.ndk")]);
    }

    // Bad input with `on_error = fail`: an error, and no table (nor temporary file) left behind.
    let bad_dir = tmp.path().join("bad-in");
    std::fs::create_dir(&bad_dir).unwrap();
    std::fs::write(
        bad_dir.join("a.jsonl"),
        "{\"text\":\"a fine first line of text\"}\n{broken\n",
    )
    .unwrap();
    let out_dir = tmp.path().join("bad-out");
    std::fs::create_dir(&out_dir).unwrap();
    let mut c = Config::default();
    c.input.inputs = vec![bad_dir.display().to_string()];
    c.run.on_error = neardup::keys::OnError::Fail;
    let (bad_files, _) = neardup::discover_inputs(&c).unwrap();
    let err = KeysStep::with_files(&c, &bad_files, 0)
        .unwrap()
        .write(&out_dir.join("k.ndk"), None, &RunControl::default())
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("a.jsonl: record 1: not valid JSON"), "{msg}");
    assert_eq!(std::fs::read_dir(&out_dir).unwrap().count(), 0);
}

#[test]
fn exact_only_mode_drops_only_identical_texts() {
    let mut c = sample_config(2);
    c.keys.near = false;
    let (decisions, _) = Pipeline::new(c).unwrap().decisions().unwrap();
    let exact = decisions
        .iter()
        .filter(|d| d.reason == Reason::Exact)
        .count();
    assert!(exact > 100, "{exact}");
    assert!(decisions.iter().all(|d| d.reason != Reason::Near));
    // Compare with the texts themselves.
    let mut texts = Vec::new();
    for f in ["part-0.jsonl", "part-1.jsonl"] {
        for line in std::fs::read_to_string(sample_dir().join(f))
            .unwrap()
            .lines()
        {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            texts.push(v["text"].as_str().unwrap().trim().to_string());
        }
    }
    for (i, d) in decisions.iter().enumerate().take(texts.len()) {
        let seen_before = texts[..i].contains(&texts[i]);
        assert_eq!(!d.keep, seen_before, "sample {i}");
    }
}

#[test]
fn streamed_decisions_equal_collected_ones() {
    let (all, report) = Pipeline::new(sample_config(2))
        .unwrap()
        .decisions()
        .unwrap();
    let mut stream = Pipeline::new(sample_config(2)).unwrap().stream();
    let streamed: Vec<_> = stream.by_ref().collect();
    let streamed_report = stream.finish().unwrap();
    assert_eq!(streamed, all);
    assert_eq!(streamed_report.totals, report.totals);
}

#[test]
fn stage_level_values_are_send() {
    fn send<T: Send>() {}
    send::<neardup::keys::KeyTable>();
    send::<neardup::keys::HotKeys>();
    send::<neardup::keys::HotMask>();
    send::<neardup::dedup::TextDeduper>();
    send::<neardup::Pipeline>();
    send::<neardup::Report>();
}

#[test]
fn progress_counters_follow_both_stages() {
    let stage1 = std::sync::Arc::new(neardup::keys::Progress::default());
    let stage2 = std::sync::Arc::new(neardup::keys::Progress::default());
    let report = Pipeline::new(sample_config(2))
        .unwrap()
        .with_progress(stage1.clone(), stage2.clone())
        .run()
        .unwrap();
    let keys = report.stage1.as_ref().unwrap();
    assert_eq!(stage1.samples(), keys.samples);
    assert_eq!(stage2.samples(), report.totals.samples);
    // Both stages count the inputs' bytes on disk, to the end (the sample holds a Parquet file).
    let on_disk: u64 = std::fs::read_dir(sample_dir())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    for stage in [&stage1, &stage2] {
        assert_eq!(stage.total(), on_disk);
        assert_eq!(stage.bytes(), on_disk);
    }
}

/// Compressed and Parquet inputs decode to more bytes than they take on disk (a Parquet block
/// was counted by its text columns' bytes alone): counted so, a stage's count passed its total
/// (the inputs' sizes on disk) and the bar's total grew mid-run, so a full bar fell back. Counted
/// in bytes on disk, each stage's count only grows, never passes the total and ends on it, for
/// every kind of input, split into chunks or not, whatever the thread count and block size.
#[test]
fn progress_counts_bytes_on_disk_never_passes_its_total_and_ends_on_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("in");
    std::fs::create_dir(&dir).unwrap();
    let plain = support::unique_lines("plain", 6000);
    std::fs::write(dir.join("a.jsonl"), &plain).unwrap();
    support::write_compressed(
        &dir.join("b.jsonl.gz"),
        support::unique_lines("gz", 6000).as_bytes(),
    );
    support::write_compressed(
        &dir.join("c.jsonl.zst"),
        support::unique_lines("zst", 6000).as_bytes(),
    );
    // Near copies of the plain file's records, so that stage 2 has hot samples to sign.
    std::fs::write(
        dir.join("d.jsonl"),
        plain.replace("\",\"text\":\"", "\",\"text\":\"x "),
    )
    .unwrap();
    let lines: Vec<serde_json::Value> = support::unique_lines("parquet", 6000)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let field = |k: &str| -> Vec<String> {
        lines
            .iter()
            .map(|v| v[k].as_str().unwrap().to_string())
            .collect()
    };
    support::write_parquet_in_groups(
        &dir.join("e.parquet"),
        &field("id"),
        &field("text"),
        Some(500),
    );
    let on_disk: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    for (threads, memory_limit) in [(1, None), (3, Some(64u64 << 20))] {
        let mut config = Config::default();
        config.input.inputs = vec![dir.display().to_string()];
        config.run.threads = threads;
        // Chunks of 256 KiB: the plain files by byte ranges, the Parquet file by row groups;
        // under the limit, blocks of a few hundred KiB: several per compressed file.
        config.keys.chunk_bytes = 256 << 10;
        config.keys.memory_limit = memory_limit;
        let stages = [
            std::sync::Arc::new(neardup::keys::Progress::default()),
            std::sync::Arc::new(neardup::keys::Progress::default()),
        ];
        let done = std::sync::atomic::AtomicBool::new(false);
        let seen = std::thread::scope(|scope| {
            let watcher = scope.spawn(|| {
                let mut seen = [Vec::new(), Vec::new()];
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    for (stage, p) in stages.iter().enumerate() {
                        seen[stage].push((p.bytes(), p.total()));
                    }
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                seen
            });
            let report = Pipeline::new(config)
                .unwrap()
                .with_progress(stages[0].clone(), stages[1].clone())
                .run();
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            let report = report.unwrap();
            assert!(report.totals.near > 1000, "{:?}", report.totals);
            watcher.join().unwrap()
        });
        for (stage, p) in stages.iter().enumerate() {
            assert_eq!(
                (p.bytes(), p.total()),
                (on_disk, on_disk),
                "stage {}",
                stage + 1
            );
            let looks = &seen[stage];
            assert!(
                looks.iter().filter(|(b, _)| *b > 0 && *b < on_disk).count() > 3,
                "the watcher saw stage {} run: {looks:?}",
                stage + 1
            );
            for w in looks.windows(2) {
                assert!(
                    w[1].0 >= w[0].0,
                    "stage {}: the count went back: {w:?}",
                    stage + 1
                );
            }
            for (bytes, total) in looks {
                assert!(
                    bytes <= total || *total == 0,
                    "stage {}: {bytes} of {total}",
                    stage + 1
                );
                assert!(
                    *total == 0 || *total == on_disk,
                    "stage {}: total {total}",
                    stage + 1
                );
            }
        }
    }
}

#[test]
fn errors_carry_what_failed_and_their_source() {
    use std::error::Error as _;
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-input.jsonl");
    let mut c = Config::default();
    c.input.inputs = vec![missing.display().to_string()];
    match neardup::discover_inputs(&c).unwrap_err() {
        neardup::Error::Inputs(e @ neardup::InputsError::Unusable(_)) => {
            assert_eq!(e.problems().len(), 1);
            assert_eq!(e.problems()[0].input, missing.display().to_string());
            assert!(e.to_string().starts_with("input "), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // A regular file where the report's directory should be.
    std::fs::write(tmp.path().join("a-file"), b"").unwrap();
    let unwritable = tmp.path().join("a-file").join("report.json");
    let err = neardup::save_json(&unwritable, &serde_json::json!({})).unwrap_err();
    match &err {
        neardup::Error::Io {
            op: neardup::IoOp::Write,
            target: neardup::IoTarget::Path(p),
            error,
        } => {
            assert_eq!(p, &unwritable);
            assert!(!error.to_string().is_empty());
            // The message holds the system's error, so it is not also the source (a reporter
            // printing the chain would show it twice).
            assert!(err.to_string().ends_with(&error.to_string()), "{err}");
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().starts_with("cannot write "), "{err}");
    assert!(err.source().is_none());

    // Settings: the setting and its value, exit code 2.
    let mut c = Config::default();
    c.dedup.threshold = 1.5;
    let err = c.validate().unwrap_err();
    assert!(
        matches!(err, neardup::Error::Config(neardup::ConfigError::Threshold(t)) if t == 1.5),
        "{err:?}"
    );
    assert_eq!(neardup::cli::exit_code(&err), 2);
    assert_eq!(
        err.to_string(),
        "--threshold must be within [0, 1], got 1.5"
    );
    // A settings file that is not TOML: the file, and the parser's error (its data, and in the
    // message, so not also the source: a chain-printing reporter would show it twice).
    let bad = tmp.path().join("bad.toml");
    std::fs::write(&bad, "[sketch\n").unwrap();
    let err = Config::load(&bad).unwrap_err();
    match &err {
        neardup::Error::Config(neardup::ConfigError::File {
            path,
            problem: neardup::SettingsFileProblem::Toml(_),
        }) => assert_eq!(path, &bad),
        other => panic!("{other:?}"),
    }
    assert!(
        err.source().is_none() && err.to_string().contains("bad.toml"),
        "{err}"
    );
    assert_eq!(neardup::cli::exit_code(&err), 2);
}
