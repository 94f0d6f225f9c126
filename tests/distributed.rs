//! Stage 2 on many machines, run as separate processes of the built binary exactly as the
//! issue's acceptance check runs it:
//!
//! ```text
//! neardup keys SHARD_INPUTS... --shard I -o keys-I.ndk
//! neardup hot keys-*.ndk --groups G -o hot.ndh
//! neardup sign keys-I.ndk --hot hot.ndh -o sig-I
//! neardup decide sig-0 sig-1 ... --hot hot.ndh --group g -o decided-g
//! neardup write keys-I.ndk --hot hot.ndh --decided decided-0 ... -o OUT --decisions d-I.jsonl
//! ```
//!
//! The concatenated decisions must be byte-identical to one `neardup dedup` over the same inputs
//! in shard order, and the data files identical to its outputs, for any number of groups and
//! shards; mismatched step outputs are refused.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use proptest::prelude::*;

fn neardup() -> Command {
    Command::new(env!("CARGO_BIN_EXE_neardup"))
}

fn exec(cmd: &mut Command) -> Output {
    cmd.arg("-q");
    let out = cmd.output().expect("run neardup");
    if !out.status.success() {
        eprintln!("{cmd:?}\nstderr: {}", String::from_utf8_lossy(&out.stderr));
    }
    out
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = exec(cmd);
    assert!(out.status.success(), "{cmd:?} failed: {:?}", out.status);
    out
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A small deterministic generator (xorshift), so corpora are the same on every machine.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Texts with many near and exact duplicates across files: most records are a base text with a
/// few words changed; `bases` sets how many distinct bases there are (1 base: one component
/// holding nearly every hot row).
fn texts(rng: &mut Rng, n: usize, bases: u64) -> Vec<String> {
    let word = |rng: &mut Rng| format!("w{}", rng.below(300));
    let base_texts: Vec<Vec<String>> = (0..bases)
        .map(|b| {
            let mut r = Rng(0x9e37_79b9_7f4a_7c15 ^ (b + 1));
            (0..48).map(|_| word(&mut r)).collect()
        })
        .collect();
    (0..n)
        .map(|_| match rng.below(10) {
            0 => String::new(),
            1 | 2 => (0..40).map(|_| word(rng)).collect::<Vec<_>>().join(" "),
            3 => base_texts[rng.below(bases) as usize].join(" "),
            _ => {
                let mut t = base_texts[rng.below(bases) as usize].clone();
                for _ in 0..rng.below(5) {
                    let i = rng.below(t.len() as u64) as usize;
                    t[i] = word(rng);
                }
                t.join(" ")
            }
        })
        .collect()
}

/// The quality score of record `i` (for `--prefer score:…`): a few records have none (missing
/// in JSONL, null in both formats), and values repeat, so ties occur.
fn score(i: usize) -> Option<f64> {
    (i % 11 != 5 && i % 13 != 7).then(|| ((i * 37) % 23) as f64 / 4.0 - 2.0)
}

fn jsonl_lines(prefix: &str, texts: &[String], titles: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, (t, title)) in texts.iter().zip(titles).enumerate() {
        let mut record =
            serde_json::json!({"id": format!("{prefix}-{i}"), "text": t, "title": title});
        if i % 11 != 5 {
            record["score"] = score(i).into();
        }
        writeln!(out, "{record}").unwrap();
    }
    out
}

fn write_parquet(path: &Path, prefix: &str, texts: &[String], titles: &[String]) {
    use arrow_array::{ArrayRef, Float64Array, RecordBatch, StringArray};
    let ids: Vec<String> = (0..texts.len()).map(|i| format!("{prefix}-{i}")).collect();
    let scores: Vec<Option<f64>> = (0..texts.len()).map(score).collect();
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(StringArray::from(ids)) as ArrayRef),
        ("score", Arc::new(Float64Array::from(scores)) as ArrayRef),
        (
            "text",
            Arc::new(StringArray::from(texts.to_vec())) as ArrayRef,
        ),
        (
            "title",
            Arc::new(StringArray::from(titles.to_vec())) as ArrayRef,
        ),
    ])
    .unwrap();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(64))
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// Four inputs in three formats (plain JSONL, zstd JSONL, Parquet); returns their paths in order.
fn corpus(dir: &Path, seed: u64, records: usize, bases: u64) -> Vec<PathBuf> {
    corpus_with_texts(dir, seed, records, bases).0
}

/// What a record offers to `--prefer`, by (file as decisions name it, record).
type Preferences = BTreeMap<(String, u64), (usize, Option<f64>)>;

/// [`corpus`], with each record's text length after trimming and score.
fn corpus_with_texts(
    dir: &Path,
    seed: u64,
    records: usize,
    bases: u64,
) -> (Vec<PathBuf>, Preferences) {
    std::fs::create_dir_all(dir).unwrap();
    let mut rng = Rng(seed | 1);
    let mut prefs = Preferences::new();
    let mut part = |n: usize| {
        let t = texts(&mut rng, n, bases);
        let titles = texts(&mut rng, n, bases);
        (t, titles)
    };
    let mut note = |path: &Path, texts: &[String]| {
        for (i, t) in texts.iter().enumerate() {
            prefs.insert(
                (path.display().to_string(), i as u64),
                (t.trim().len(), score(i)),
            );
        }
    };
    let per = records / 4;
    let a = dir.join("a.jsonl");
    let (t, ti) = part(per);
    std::fs::write(&a, jsonl_lines("a", &t, &ti)).unwrap();
    note(&a, &t);
    let b = dir.join("b.jsonl.zst");
    let (t, ti) = part(per);
    std::fs::write(
        &b,
        zstd::encode_all(&jsonl_lines("b", &t, &ti)[..], 3).unwrap(),
    )
    .unwrap();
    note(&b, &t);
    let c = dir.join("c.parquet");
    let (t, ti) = part(per);
    write_parquet(&c, "c", &t, &ti);
    note(&c, &t);
    let d = dir.join("d.jsonl");
    let (t, ti) = part(records - 3 * per);
    std::fs::write(&d, jsonl_lines("d", &t, &ti)).unwrap();
    note(&d, &t);
    (vec![a, b, c, d], prefs)
}

/// `files` cut into `shards` contiguous non-empty shards.
fn split(files: &[PathBuf], shards: usize) -> Vec<Vec<PathBuf>> {
    let per = files.len().div_ceil(shards);
    files.chunks(per).map(|c| c.to_vec()).collect()
}

/// Data files under `dir` (manifests, which name their run, left out).
fn data_files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("_SUCCESS") {
            out.insert(PathBuf::from(name), std::fs::read(&path).unwrap());
        }
    }
    out
}

/// The manifest at `path`, or `None` when there is none.
fn manifest(path: &Path) -> Option<serde_json::Value> {
    let bytes = std::fs::read(path).ok()?;
    Some(serde_json::from_slice(&bytes).unwrap())
}

struct Run<'a> {
    work: &'a Path,
    /// Stage-1 flags (also given to every later step).
    keys_flags: &'a [&'a str],
    /// Decision flags (`dedup`, `sign`, `decide`, `write`).
    decide_flags: &'a [&'a str],
}

impl Run<'_> {
    /// One process: decisions and outputs.
    fn single(&self, files: &[PathBuf]) -> (Vec<u8>, BTreeMap<PathBuf, Vec<u8>>) {
        let out = self.work.join("one");
        let dec = self.work.join("one.jsonl");
        run_ok(
            neardup()
                .arg("dedup")
                .args(files)
                .arg("-o")
                .arg(&out)
                .arg("--decisions")
                .arg(&dec)
                .arg("--report")
                .arg(self.work.join("one-report.json"))
                .args(self.keys_flags)
                .args(self.decide_flags),
        );
        (std::fs::read(&dec).unwrap(), data_files(&out))
    }

    fn keys_and_hot(&self, shards: &[Vec<PathBuf>], groups: u32) -> (Vec<PathBuf>, PathBuf) {
        let tables: Vec<PathBuf> = shards
            .iter()
            .enumerate()
            .map(|(i, files)| {
                let table = self.work.join(format!("keys-{i}.ndk"));
                run_ok(
                    neardup()
                        .arg("keys")
                        .args(files)
                        .arg("--shard")
                        .arg(i.to_string())
                        .arg("-o")
                        .arg(&table)
                        .args(self.keys_flags),
                );
                table
            })
            .collect();
        let hot = self.work.join("hot.ndh");
        run_ok(
            neardup()
                .arg("hot")
                .args(&tables)
                .arg("--groups")
                .arg(groups.to_string())
                .arg("-o")
                .arg(&hot)
                .arg("--report")
                .arg(self.work.join("hot.json")),
        );
        (tables, hot)
    }

    fn sign(&self, tables: &[PathBuf], hot: &Path) -> Vec<PathBuf> {
        tables
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let sig = self.work.join(format!("sig-{i}"));
                run_ok(
                    neardup()
                        .arg("sign")
                        .arg(t)
                        .arg("--hot")
                        .arg(hot)
                        .arg("-o")
                        .arg(&sig)
                        .args(self.keys_flags)
                        .args(self.decide_flags),
                );
                sig
            })
            .collect()
    }

    fn decide(&self, sigs: &[PathBuf], hot: &Path, groups: u32) -> Vec<PathBuf> {
        (0..groups)
            .map(|g| {
                let decided = self.work.join(format!("decided-{g}"));
                run_ok(
                    neardup()
                        .arg("decide")
                        .args(sigs)
                        .arg("--hot")
                        .arg(hot)
                        .arg("--group")
                        .arg(g.to_string())
                        .arg("-o")
                        .arg(&decided)
                        .args(self.keys_flags)
                        .args(self.decide_flags),
                );
                decided
            })
            .collect()
    }

    fn write(
        &self,
        tables: &[PathBuf],
        hot: &Path,
        decided: &[PathBuf],
    ) -> (Vec<u8>, BTreeMap<PathBuf, Vec<u8>>) {
        let out = self.work.join("OUT");
        let mut all = Vec::new();
        for (i, t) in tables.iter().enumerate() {
            let dec = self.work.join(format!("d-{i}.jsonl"));
            run_ok(
                neardup()
                    .arg("write")
                    .arg(t)
                    .arg("--hot")
                    .arg(hot)
                    .arg("--decided")
                    .args(decided)
                    .arg("-o")
                    .arg(&out)
                    .arg("--decisions")
                    .arg(&dec)
                    .args(self.keys_flags)
                    .args(self.decide_flags),
            );
            all.extend(std::fs::read(&dec).unwrap());
        }
        (all, data_files(&out))
    }

    /// The whole distributed run; asserts it equals the single run. Returns how many drops
    /// name a dropped `dup_of` (whose cluster is not their `dup_of`).
    fn check(&self, files: &[PathBuf], shards: usize, groups: u32) -> usize {
        let (one_decisions, one_outputs) = self.single(files);
        let shards = split(files, shards);
        let (tables, hot) = self.keys_and_hot(&shards, groups);
        let sigs = self.sign(&tables, &hot);
        let decided = self.decide(&sigs, &hot, groups);
        let (decisions, outputs) = self.write(&tables, &hot, &decided);
        assert!(
            decisions == one_decisions,
            "decisions differ from the single run ({} shards, {groups} groups, {:?} {:?})",
            shards.len(),
            self.keys_flags,
            self.decide_flags
        );
        assert_eq!(
            outputs.keys().collect::<Vec<_>>(),
            one_outputs.keys().collect::<Vec<_>>()
        );
        assert!(outputs == one_outputs, "outputs differ from the single run");
        // The whole output's manifest, published by the last write step, lists what the one
        // process's lists.
        let listed = |dir: &str| {
            let m = manifest(&self.work.join(dir).join("_SUCCESS"))
                .unwrap_or_else(|| panic!("{dir} has no _SUCCESS"));
            m["files"].clone()
        };
        assert_eq!(
            listed("OUT"),
            listed("one"),
            "the manifests list other files"
        );
        // The decisions hold real work: near and exact drops.
        let text = String::from_utf8(one_decisions).unwrap();
        assert!(
            text.contains("\"reason\":\"near\""),
            "no near duplicate in the corpus"
        );
        assert!(
            text.contains("\"reason\":\"exact\""),
            "no exact duplicate in the corpus"
        );
        // The groups' cluster counts add up to the one-process report's.
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(self.work.join("one-report.json")).unwrap())
                .unwrap();
        let mut merged = neardup::dedup::ClusterStats::default();
        for d in &decided {
            let manifest: serde_json::Value =
                serde_json::from_slice(&std::fs::read(d.join("manifest.json")).unwrap()).unwrap();
            let group: neardup::dedup::ClusterStats =
                serde_json::from_value(manifest["clusters"].clone()).unwrap();
            merged.merge(&group);
        }
        let single: neardup::dedup::ClusterStats =
            serde_json::from_value(report["stage2"]["clusters"].clone()).unwrap();
        assert_eq!(
            merged, single,
            "the groups' clusters differ from the single run's"
        );
        check_clusters(&text, &single)
    }
}

/// Every decision's cluster is the kept sample its `dup_of` chain ends at (itself when kept),
/// and the cluster sizes are those of the decisions. Returns how many drops name a dropped
/// `dup_of`. Decisions name a `dup_of` by record, not field: with several samples per record
/// (expand mode) a chain cannot be followed from them, and only the cluster being a kept record
/// is checked.
fn check_clusters(decisions: &str, stats: &neardup::dedup::ClusterStats) -> usize {
    type Key = (String, u64);
    let rows: Vec<serde_json::Value> = decisions
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let key = |r: &serde_json::Value, file: &str, record: &str| -> Option<Key> {
        Some((r[file].as_str()?.to_string(), r[record].as_u64()?))
    };
    // Records with a kept sample, and the dup_of of each dropped record (expand mode has several
    // samples per record: a record is "kept" when any of its samples is).
    let mut kept = std::collections::HashSet::new();
    let mut dup_of: BTreeMap<Key, Key> = BTreeMap::new();
    for r in &rows {
        let me = key(r, "file", "record").unwrap();
        if r["keep"].as_bool().unwrap() {
            kept.insert(me);
        } else if let Some(target) = key(r, "dup_of_file", "dup_of_record") {
            dup_of.insert(me, target);
        }
    }
    let expanded = rows.iter().any(|r| r["field"].as_u64() != Some(0));
    let mut through_dropped = 0;
    let mut sizes: BTreeMap<Key, u64> = BTreeMap::new();
    for r in &rows {
        let me = key(r, "file", "record").unwrap();
        let cluster =
            key(r, "cluster_file", "cluster_record").expect("every decision names a cluster");
        // An empty text dropped by `--empty drop` duplicates nothing and is its own cluster.
        if r["reason"] != "empty" {
            assert!(kept.contains(&cluster), "the cluster of {me:?} is not kept");
        }
        if expanded {
            continue;
        }
        let Some(mut at) = key(r, "dup_of_file", "dup_of_record") else {
            assert_eq!(
                cluster, me,
                "a sample that duplicates nothing is its own cluster"
            );
            continue;
        };
        if !kept.contains(&at) {
            through_dropped += 1;
        }
        while !kept.contains(&at) {
            at = dup_of
                .get(&at)
                .expect("a dropped dup_of names its own dup_of")
                .clone();
        }
        assert_eq!(cluster, at, "cluster of {me:?}");
        *sizes.entry(cluster).or_insert(1) += 1;
    }
    if expanded {
        return 0;
    }
    let mut histogram = BTreeMap::new();
    for n in sizes.values() {
        *histogram.entry(*n).or_insert(0u64) += 1;
    }
    let reported: BTreeMap<u64, u64> = stats.sizes.iter().map(|s| (s.size, s.clusters)).collect();
    assert_eq!(reported, histogram, "cluster sizes of the report");
    let largest = stats.largest.first().expect("clusters are listed");
    assert_eq!(largest.size, *histogram.keys().last().unwrap());
    through_dropped
}

fn as_args(files: &[PathBuf]) -> Vec<PathBuf> {
    files.to_vec()
}

#[test]
fn distributed_runs_equal_one_process_for_any_groups_and_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let files = corpus(&tmp.path().join("in"), 11, 800, 40);
    let cases: &[(&[&str], &[&str], usize, u32)] = &[
        (&["--id-field", "id"], &[], 1, 1),
        (&["--id-field", "id"], &[], 2, 2),
        (&["--id-field", "id"], &[], 3, 3),
        (&["--id-field", "id"], &[], 4, 8),
        // --verify chooses the bands, so stage 1 is given it too.
        (&["--verify", "estimate"], &["--max-reps", "2"], 2, 3),
        (&["--id-field", "id"], &["--max-reps", "1"], 4, 2),
        (&[], &["--max-reps", "0"], 3, 8),
        (
            &[
                "--field",
                "text",
                "--field",
                "title",
                "--fields-mode",
                "expand",
                "--id-field",
                "id",
            ],
            &[],
            3,
            3,
        ),
    ];
    let mut through_dropped = 0;
    for (n, (keys_flags, decide_flags, shards, groups)) in cases.iter().enumerate() {
        let work = tmp.path().join(format!("case-{n}"));
        std::fs::create_dir_all(&work).unwrap();
        through_dropped += Run {
            work: &work,
            keys_flags,
            decide_flags,
        }
        .check(&as_args(&files), *shards, *groups);
    }
    // Clusters are more than dup_of: some chains pass through a dropped sample.
    assert!(through_dropped > 0, "no drop names a dropped dup_of");
}

/// A corpus (`corpus(seed, records, bases)`) run in one process and as steps over `shards` shards
/// and `groups` groups, checked equal ([`Run::check`], ids by `id`); returns the work directory
/// holding the steps' outputs.
fn checked_run(
    tmp: &Path,
    (seed, records, bases): (u64, usize, u64),
    shards: usize,
    groups: u32,
) -> PathBuf {
    let files = corpus(&tmp.join("in"), seed, records, bases);
    let work = tmp.join("w");
    std::fs::create_dir_all(&work).unwrap();
    Run {
        work: &work,
        keys_flags: &["--id-field", "id"],
        decide_flags: &[],
    }
    .check(&files, shards, groups);
    work
}

/// A `decide` step under `--memory-limit` spills its representatives and writes the same
/// decided streams.
#[test]
fn decide_under_a_memory_limit_spills_and_decides_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let work = checked_run(tmp.path(), (11, 800, 40), 2, 2);
    let sigs: Vec<PathBuf> = (0..2).map(|i| work.join(format!("sig-{i}"))).collect();
    let streams = |dir: &Path| {
        let mut files = data_files(dir);
        files.remove(Path::new("manifest.json"));
        files
    };
    let mut spilled = 0;
    for g in 0..2 {
        let limited = work.join(format!("limited-{g}"));
        let report = work.join(format!("limited-{g}.json"));
        run_ok(
            neardup()
                .arg("decide")
                .args(&sigs)
                .arg("--hot")
                .arg(work.join("hot.ndh"))
                .arg("--group")
                .arg(g.to_string())
                .arg("-o")
                .arg(&limited)
                .arg("--report")
                .arg(&report)
                .args(["--id-field", "id", "--memory-limit", "1KB", "--spill-dir"])
                .arg(work.join("spill")),
        );
        let expected = streams(&work.join(format!("decided-{g}")));
        assert!(!expected.is_empty());
        assert_eq!(streams(&limited), expected, "group {g}");
        let report: neardup::DecideReport =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        spilled += report.manifest.deduper.spilled_bytes;
    }
    assert!(spilled > 0, "nothing spilled under a 1 KB limit");
}

/// `sign` and `write` under `--memory-limit` keep the shard's hot mask in a scratch mapping in
/// the spill directory and write the same streams, decisions and dataset.
#[test]
fn sign_and_write_under_a_memory_limit_write_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let work = checked_run(tmp.path(), (13, 800, 40), 2, 2);
    let spill = work.join("spill");
    // Shard `i`'s step `step`, within 1 KB.
    let limited = |step: &str, i: usize| {
        let mut cmd = neardup();
        cmd.arg(step)
            .arg(work.join(format!("keys-{i}.ndk")))
            .arg("--hot")
            .arg(work.join("hot.ndh"))
            .args(["--id-field", "id", "--memory-limit", "1KB", "--spill-dir"])
            .arg(&spill);
        cmd
    };
    for i in 0..2 {
        let signed = work.join(format!("limited-sig-{i}"));
        run_ok(limited("sign", i).arg("-o").arg(&signed));
        // Made for the step (it spilled there) and removed after it.
        assert!(!spill.exists(), "the spill directory was left behind");
        assert_eq!(
            data_files(&signed),
            data_files(&work.join(format!("sig-{i}"))),
            "shard {i}"
        );
    }
    let decided: Vec<PathBuf> = (0..2).map(|g| work.join(format!("decided-{g}"))).collect();
    let out = work.join("LIMITED");
    let mut decisions = Vec::new();
    let mut expected = Vec::new();
    for i in 0..2 {
        let dec = work.join(format!("limited-d-{i}.jsonl"));
        run_ok(
            limited("write", i)
                .arg("--decided")
                .args(&decided)
                .arg("-o")
                .arg(&out)
                .arg("--decisions")
                .arg(&dec),
        );
        decisions.extend(std::fs::read(&dec).unwrap());
        expected.extend(std::fs::read(work.join(format!("d-{i}.jsonl"))).unwrap());
    }
    assert!(
        decisions == expected,
        "write decided otherwise under a limit"
    );
    assert!(data_files(&out) == data_files(&work.join("OUT")));
}

#[test]
fn one_component_holding_most_hot_rows_is_decided_by_one_group() {
    let tmp = tempfile::tempdir().unwrap();
    // Two bases only: nearly every record is in one of two components.
    let work = checked_run(tmp.path(), (5, 600, 2), 4, 4);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(work.join("hot.json")).unwrap()).unwrap();
    let plan = &report["plan"];
    let largest = plan["largest_component"].as_u64().unwrap();
    let hot_rows = plan["hot_rows"].as_u64().unwrap();
    assert!(
        largest * 3 > hot_rows,
        "one component holds a large share of the hot rows: {plan}"
    );
    let rows: Vec<u64> = plan["group_rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(rows.iter().sum::<u64>(), hot_rows);
    assert!(rows.contains(&largest) || rows.iter().any(|r| *r >= largest));
    // Groups left without a component decide nothing, and still work.
    assert!(rows.len() == 4);
}

#[test]
fn decide_opens_no_input_and_mismatched_step_outputs_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    let files = corpus(&input, 23, 400, 20);
    let work = tmp.path().join("w");
    std::fs::create_dir_all(&work).unwrap();
    let run = Run {
        work: &work,
        keys_flags: &[],
        decide_flags: &[],
    };
    let (one_decisions, _) = run.single(&files);
    let shards = split(&files, 2);
    let (tables, hot) = run.keys_and_hot(&shards, 3);
    let sigs = run.sign(&tables, &hot);

    // Decide works with the inputs moved away.
    let moved = tmp.path().join("moved");
    std::fs::rename(&input, &moved).unwrap();
    let decided = run.decide(&sigs, &hot, 3);
    std::fs::rename(&moved, &input).unwrap();

    // A group out of range.
    let o = exec(
        neardup()
            .arg("decide")
            .args(&sigs)
            .arg("--hot")
            .arg(&hot)
            .arg("--group")
            .arg("3")
            .arg("-o")
            .arg(work.join("bad")),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--group 3 is out of range"),
        "{}",
        stderr(&o)
    );
    // A missing shard's sign output.
    let o = exec(
        neardup()
            .arg("decide")
            .arg(&sigs[0])
            .arg("--hot")
            .arg(&hot)
            .arg("--group")
            .arg("0")
            .arg("-o")
            .arg(work.join("bad")),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("shard 1 are missing"), "{}", stderr(&o));
    // The same shard twice.
    let o = exec(
        neardup()
            .arg("decide")
            .arg(&sigs[0])
            .arg(&sigs[0])
            .arg("--hot")
            .arg(&hot)
            .arg("--group")
            .arg("0")
            .arg("-o")
            .arg(work.join("bad")),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("both the sign output of shard 0"),
        "{}",
        stderr(&o)
    );
    // Sign outputs of another hot-key file (other groups).
    let other_hot = work.join("other.ndh");
    run_ok(
        neardup()
            .arg("hot")
            .args(&tables)
            .arg("--groups")
            .arg("2")
            .arg("-o")
            .arg(&other_hot),
    );
    let o = exec(
        neardup()
            .arg("decide")
            .args(&sigs)
            .arg("--hot")
            .arg(&other_hot)
            .arg("--group")
            .arg("0")
            .arg("-o")
            .arg(work.join("bad")),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("another hot-key file"),
        "{}",
        stderr(&o)
    );
    // Other decision settings than sign's.
    let o = exec(
        neardup()
            .arg("decide")
            .args(&sigs)
            .arg("--hot")
            .arg(&hot)
            .arg("--group")
            .arg("0")
            .arg("--max-reps")
            .arg("3")
            .arg("-o")
            .arg(work.join("bad")),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--max-reps: 3 here, 64 there"),
        "{}",
        stderr(&o)
    );
    assert!(!work.join("bad").exists(), "a refused step writes nothing");
    // Write without every group's decisions.
    let o = exec(
        neardup()
            .arg("write")
            .arg(&tables[0])
            .arg("--hot")
            .arg(&hot)
            .arg("--decided")
            .arg(&decided[0])
            .arg(&decided[2])
            .arg("--decisions")
            .arg(work.join("bad.jsonl")),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("group 1 are missing"), "{}", stderr(&o));
    assert!(!work.join("bad.jsonl").exists());
    // A damaged decided stream is refused, and nothing is published.
    let stream = decided[1].join("shard-00000.bin");
    let mut bytes = std::fs::read(&stream).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    let damaged = work.join("damaged");
    std::fs::create_dir_all(&damaged).unwrap();
    for entry in std::fs::read_dir(&decided[1]).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, damaged.join(p.file_name().unwrap())).unwrap();
    }
    std::fs::write(damaged.join("shard-00000.bin"), &bytes).unwrap();
    let o = exec(
        neardup()
            .arg("write")
            .arg(&tables[0])
            .arg("--hot")
            .arg(&hot)
            .arg("--decided")
            .arg(&decided[0])
            .arg(&damaged)
            .arg(&decided[2])
            .arg("--decisions")
            .arg(work.join("bad.jsonl")),
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("checksum"), "{}", stderr(&o));
    assert!(!work.join("bad.jsonl").exists());
    // A flipped byte in a decide output's manifest (its group, 1 made 3) is a checksum error,
    // found before the manifest is used, not a group missing.
    std::fs::copy(&stream, damaged.join("shard-00000.bin")).unwrap();
    let manifest = std::fs::read_to_string(damaged.join("manifest.json")).unwrap();
    assert!(manifest.contains("\"group\": 1,"), "{manifest}");
    std::fs::write(
        damaged.join("manifest.json"),
        manifest.replacen("\"group\": 1,", "\"group\": 3,", 1),
    )
    .unwrap();
    let o = exec(
        neardup()
            .arg("write")
            .arg(&tables[0])
            .arg("--hot")
            .arg(&hot)
            .arg("--decided")
            .arg(&decided[0])
            .arg(&damaged)
            .arg(&decided[2])
            .arg("--decisions")
            .arg(work.join("bad.jsonl")),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("manifest.json is damaged: its checksum does not match"),
        "{}",
        stderr(&o)
    );
    assert!(!work.join("bad.jsonl").exists());

    // The good steps still give the single run's decisions.
    let (decisions, _) = run.write(&tables, &hot, &decided);
    assert!(decisions == one_decisions);
}

#[test]
fn write_steps_share_one_output_directory_safely() {
    let tmp = tempfile::tempdir().unwrap();
    let files = corpus(&tmp.path().join("in"), 31, 400, 20);
    let work = tmp.path().join("w");
    std::fs::create_dir_all(&work).unwrap();
    let run = Run {
        work: &work,
        keys_flags: &[],
        decide_flags: &[],
    };
    let shards = split(&files, 2);
    let (tables, hot) = run.keys_and_hot(&shards, 2);
    let sigs = run.sign(&tables, &hot);
    let decided = run.decide(&sigs, &hot, 2);
    run.write(&tables, &hot, &decided);
    let out = work.join("OUT");
    assert!(out.join("_SUCCESS.shard-00000").is_file());
    assert!(out.join("_SUCCESS.shard-00001").is_file());
    // Writing shard 0 again into the same directory is refused without --overwrite (its files
    // are there), and replaces only its own files with it.
    let write0 = |extra: &[&str]| {
        exec(
            neardup()
                .arg("write")
                .arg(&tables[0])
                .arg("--hot")
                .arg(&hot)
                .arg("--decided")
                .args(&decided)
                .arg("-o")
                .arg(&out)
                .args(extra),
        )
    };
    let before = data_files(&out);
    let o = write0(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("already exists"), "{}", stderr(&o));
    let o = write0(&["--overwrite"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(data_files(&out), before);
}

/// A Parquet input read in other blocks by the steps than by one process (here its key table
/// was planned in smaller chunks; on real corpora a shard alone is planned otherwise than the
/// whole input) is written byte for byte as one process writes it: the encoder's pages are cut
/// where the kept rows say, not where the blocks ended, and the row groups kept whole are
/// copied by both, as the input stores them.
#[test]
fn parquet_outputs_do_not_depend_on_the_blocks_the_steps_read() {
    use arrow_array::{ArrayRef, RecordBatch, StringArray};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("in");
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = Rng(29);
    let mut letters = |n: usize| -> String {
        (0..n)
            .map(|_| (b'a' + rng.below(26) as u8) as char)
            .collect()
    };
    // Row groups of small then large texts, of other row counts each, so that chunks of about
    // 1 MiB (one process) and of 64 KiB (the steps) group them differently, and the output's
    // row groups (of the largest input row group's rows) hold several 1 MB pages of text.
    let path = dir.join("p.parquet");
    let file = std::fs::File::create(&path).unwrap();
    let schema = Arc::new(arrow_schema::Schema::new(vec![
        arrow_schema::Field::new("id", arrow_schema::DataType::Utf8, false),
        arrow_schema::Field::new("text", arrow_schema::DataType::Utf8, false),
    ]));
    let mut w = parquet::arrow::ArrowWriter::try_new(file, schema.clone(), None).unwrap();
    let mut row = 0;
    let mut last = String::new();
    for (rows, size, copies) in [
        (1500, 100, true),
        (300, 3000, true),
        (300, 3000, true),
        (200, 4000, true),
        (300, 2000, true),
        (400, 1500, false),
    ] {
        let mut ids = Vec::new();
        let mut texts = Vec::new();
        for _ in 0..rows {
            // Every fifth text repeats the one before, but in the last group: exact copies
            // to drop, and a group kept whole.
            if row % 5 != 4 || !copies {
                last = letters(size / 2 + rng_len(row, size));
            }
            ids.push(format!("p-{row}"));
            texts.push(last.clone());
            row += 1;
        }
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(ids)) as ArrayRef,
                Arc::new(StringArray::from(texts)) as ArrayRef,
            ],
        )
        .unwrap();
        w.write(&batch).unwrap();
        w.flush().unwrap();
    }
    w.close().unwrap();
    let a = dir.join("a.jsonl");
    let mut lines = Vec::new();
    for i in 0..50 {
        writeln!(lines, "{}", serde_json::json!({"id": format!("a-{i}"), "text": format!("short text number {}", i % 20)})).unwrap();
    }
    std::fs::write(&a, lines).unwrap();
    let files = vec![a, path.clone()];

    let work = tmp.path().join("w");
    std::fs::create_dir_all(&work).unwrap();
    let one = Run {
        work: &work,
        keys_flags: &[],
        decide_flags: &[],
    };
    let (one_decisions, one_outputs) = one.single(&files);
    let settings = work.join("small-chunks.toml");
    std::fs::write(&settings, "[keys]\nchunk_bytes = 65536\n").unwrap();
    let settings = settings.to_str().unwrap().to_string();
    let flags = ["--config", settings.as_str()];
    let steps = Run {
        work: &work,
        keys_flags: &flags,
        decide_flags: &[],
    };
    let (tables, hot) = steps.keys_and_hot(&split(&files, 2), 2);
    let sigs = steps.sign(&tables, &hot);
    let decided = steps.decide(&sigs, &hot, 2);
    let (decisions, outputs) = steps.write(&tables, &hot, &decided);
    assert!(decisions == one_decisions, "the steps decided otherwise");
    assert!(
        String::from_utf8_lossy(&decisions).contains("\"reason\":\"exact\""),
        "nothing was dropped"
    );
    let (p, q) = (
        &outputs[Path::new("p.parquet")],
        &one_outputs[Path::new("p.parquet")],
    );
    assert!(
        p == q,
        "the steps' Parquet output differs from one process's ({} and {} bytes)",
        p.len(),
        q.len()
    );
    let copy = tmp.path().join("out.parquet");
    std::fs::write(&copy, p).unwrap();
    let footer = |f: &Path| {
        parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&std::fs::File::open(f).unwrap())
            .unwrap()
    };
    let input = std::fs::read(&path).unwrap();
    let (in_meta, out_meta) = (footer(&path), footer(&copy));
    let rows: Vec<i64> = out_meta.row_groups().iter().map(|g| g.num_rows()).collect();
    assert_eq!(rows, [1200, 240, 240, 160, 240, 400]);
    for (i, o) in in_meta
        .row_group(5)
        .columns()
        .iter()
        .zip(out_meta.row_group(5).columns())
    {
        let ((ia, il), (oa, ol)) = (i.byte_range(), o.byte_range());
        assert!(
            input[ia as usize..(ia + il) as usize] == p[oa as usize..(oa + ol) as usize],
            "the row group kept whole was not copied"
        );
    }
}

/// A text length's spread for [`parquet_outputs_do_not_depend_on_the_blocks_the_steps_read`].
fn rng_len(row: usize, size: usize) -> usize {
    (row * 7919) % size
}

/// The whole output's `_SUCCESS` appears once the last shard's `write` step is in, never before;
/// it lists every shard's files in shard order, goes as a shard writes its files again and comes
/// back when that shard is in; a `_SUCCESS` that is not neardup's is refused before any work.
#[test]
fn the_last_write_step_publishes_the_whole_outputs_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let files = corpus(&tmp.path().join("in"), 37, 400, 20);
    let work = tmp.path().join("w");
    std::fs::create_dir_all(&work).unwrap();
    let run = Run {
        work: &work,
        keys_flags: &[],
        decide_flags: &[],
    };
    let shards = split(&files, 4);
    let (tables, hot) = run.keys_and_hot(&shards, 2);
    let sigs = run.sign(&tables, &hot);
    let decided = run.decide(&sigs, &hot, 2);
    let out = work.join("OUT");
    let write = |i: usize, extra: &[&str]| {
        exec(
            neardup()
                .arg("write")
                .arg(&tables[i])
                .arg("--hot")
                .arg(&hot)
                .arg("--decided")
                .args(&decided)
                .arg("-o")
                .arg(&out)
                .args(extra),
        )
    };
    let whole = out.join("_SUCCESS");
    // Out of order: the output is whole only with the last of them.
    for i in [3, 0, 2] {
        let o = write(i, &[]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(!whole.exists(), "_SUCCESS before every shard was in");
    }
    let o = write(1, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let m = manifest(&whole).expect("no _SUCCESS once every shard was in");
    assert_eq!(m["format"], "neardup-manifest");
    assert_eq!(m["distributed"]["shards"], 4);
    let mut expected = Vec::new();
    for i in 0..4 {
        let shard = manifest(&out.join(format!("_SUCCESS.shard-{i:05}"))).unwrap();
        assert_eq!(shard["distributed"]["shard"], i);
        assert_eq!(shard["distributed"]["dataset"], m["distributed"]["dataset"]);
        expected.extend(shard["files"].as_array().unwrap().iter().cloned());
    }
    assert_eq!(m["files"], serde_json::Value::Array(expected.clone()));
    let data = data_files(&out);
    let listed: Vec<PathBuf> = expected
        .iter()
        .map(|f| PathBuf::from(f["path"].as_str().unwrap()))
        .collect();
    assert_eq!(
        data.keys()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>(),
        listed.iter().cloned().collect(),
        "_SUCCESS does not list exactly the data files"
    );
    for f in &expected {
        let path = f["path"].as_str().unwrap();
        assert_eq!(
            data[Path::new(path)].len() as u64,
            f["bytes"].as_u64().unwrap()
        );
    }

    // A shard written again: the whole manifest is published again once it is in, listing the
    // same files.
    let o = write(1, &["--overwrite"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(manifest(&whole).unwrap()["files"], m["files"]);

    // A shard that fails before its commit leaves the whole output's manifest as it was.
    let o = write(0, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(manifest(&whole).unwrap()["files"], m["files"]);

    // Hadoop's empty marker is not neardup's: a write step refuses to change what it vouches for.
    std::fs::write(&whole, b"").unwrap();
    let o = write(0, &["--overwrite"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("not a neardup manifest"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(&whole).unwrap(), b"");
    assert_eq!(data_files(&out), data);
}

/// How much a record is preferred under `--prefer` (higher is kept), with input order breaking
/// ties (an earlier record is preferred).
fn preference(
    prefer: &str,
    prefs: &Preferences,
    at: &(String, u64),
) -> (f64, std::cmp::Reverse<(usize, u64)>) {
    let (len, score) = prefs[at];
    let value = match prefer {
        "longest" => len as f64,
        "shortest" => -(len as f64),
        "score:desc" => score.unwrap_or(f64::NEG_INFINITY),
        "score:asc" => score.map_or(f64::NEG_INFINITY, |s| -s),
        other => panic!("unknown preference {other}"),
    };
    let file_order = at.0.rsplit('/').next().unwrap().as_bytes()[0] as usize;
    (value, std::cmp::Reverse((file_order, at.1)))
}

/// Every drop's `dup_of` and cluster are at least as preferred as the drop; returns how many
/// drops name a `dup_of` later in input order (which input order never gives).
fn check_preferred(decisions: &[u8], prefer: &str, prefs: &Preferences) -> usize {
    let mut later = 0;
    for line in String::from_utf8(decisions.to_vec()).unwrap().lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        if r["keep"].as_bool().unwrap() || r["reason"] == "empty" {
            continue;
        }
        let at = |file: &str, record: &str| {
            (
                r[file].as_str().unwrap().to_string(),
                r[record].as_u64().unwrap(),
            )
        };
        let me = at("file", "record");
        let of = at("dup_of_file", "dup_of_record");
        let cluster = at("cluster_file", "cluster_record");
        let mine = preference(prefer, prefs, &me);
        for other in [&of, &cluster] {
            let theirs = preference(prefer, prefs, other);
            assert!(
                theirs.0 >= mine.0,
                "--prefer {prefer}: {me:?} ({:?}) was dropped for {other:?} ({:?})",
                prefs[&me],
                prefs[other]
            );
            if theirs.0 == mine.0 {
                assert!(
                    theirs > mine,
                    "--prefer {prefer}: a tie kept the later record {other:?} over {me:?}"
                );
            }
        }
        if preference(prefer, prefs, &of).1 < mine.1 {
            later += 1;
        }
    }
    later
}

#[test]
fn prefer_keeps_the_preferred_copy_in_one_process_and_in_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let (files, prefs) = corpus_with_texts(&tmp.path().join("in"), 23, 800, 30);
    let cases: &[(&[&str], &[&str], usize, u32)] = &[
        (&["--id-field", "id"], &["--prefer", "longest"], 3, 3),
        (
            &["--verify", "estimate"],
            &["--prefer", "shortest", "--max-reps", "2"],
            2,
            4,
        ),
        (&["--id-field", "id"], &["--prefer", "score:desc"], 4, 2),
        (&[], &["--prefer", "score:asc", "--max-reps", "1"], 1, 1),
    ];
    let first = {
        let work = tmp.path().join("first");
        std::fs::create_dir_all(&work).unwrap();
        Run {
            work: &work,
            keys_flags: &[],
            decide_flags: &[],
        }
        .single(&files)
        .0
    };
    for (n, (keys_flags, decide_flags, shards, groups)) in cases.iter().enumerate() {
        let work = tmp.path().join(format!("case-{n}"));
        std::fs::create_dir_all(&work).unwrap();
        let run = Run {
            work: &work,
            keys_flags,
            decide_flags,
        };
        // The steps give the one-process decisions and outputs, whatever the groups and shards.
        run.check(&files, *shards, *groups);
        let one = std::fs::read(work.join("one.jsonl")).unwrap();
        let prefer = decide_flags[1];
        let later = check_preferred(&one, prefer, &prefs);
        assert!(
            later > 0,
            "--prefer {prefer} never kept a later copy over an earlier one"
        );
        assert_ne!(one, first, "--prefer {prefer} decided as input order does");
        // Thread counts do not matter, nor does how much of the sort spills.
        for (threads, settings) in [("1", None), ("2", Some("[dedup]\nsort_memory = 2000\n"))] {
            let dec = work.join(format!("threads-{threads}.jsonl"));
            let mut cmd = neardup();
            cmd.arg("dedup")
                .args(&files)
                .arg("--decisions")
                .arg(&dec)
                .arg("--threads")
                .arg(threads);
            if let Some(settings) = settings {
                let path = work.join("settings.toml");
                std::fs::write(&path, settings).unwrap();
                cmd.arg("--config").arg(&path);
            }
            run_ok(cmd.args(*keys_flags).args(*decide_flags));
            assert!(
                std::fs::read(&dec).unwrap() == one,
                "--threads {threads} {settings:?} decided otherwise"
            );
        }
    }
}

#[test]
fn a_preference_field_that_is_not_a_number_stops_the_run_and_steps_must_agree_on_it() {
    let tmp = tempfile::tempdir().unwrap();
    let files = corpus(&tmp.path().join("in"), 5, 200, 4);
    // A hot record whose score is a string.
    let bad = tmp.path().join("in").join("e.jsonl");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let first: serde_json::Value =
        serde_json::from_str(text.lines().find(|l| l.contains("\"w")).unwrap()).unwrap();
    let mut copy = first.clone();
    copy["score"] = "high".into();
    std::fs::write(&bad, format!("{first}\n{copy}\n")).unwrap();
    let out = tmp.path().join("out");
    let o = exec(
        neardup()
            .arg("dedup")
            .arg(&bad)
            .arg("-o")
            .arg(&out)
            .args(["--prefer", "score:desc"]),
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "{}: record 1: the field `score` holds a string",
            bad.display()
        )) && err.contains("--prefer score:desc"),
        "{err}"
    );
    assert!(!out.exists(), "a failed run published its output");
    // The same corpus ranked by length runs.
    run_ok(
        neardup()
            .arg("dedup")
            .arg(&bad)
            .arg("--decisions")
            .arg(tmp.path().join("d.jsonl"))
            .args(["--prefer", "longest"]),
    );

    // Decide refuses sign outputs made with another preference, naming it.
    let work = tmp.path().join("w");
    std::fs::create_dir_all(&work).unwrap();
    let run = Run {
        work: &work,
        keys_flags: &[],
        decide_flags: &["--prefer", "longest"],
    };
    let (tables, hot) = run.keys_and_hot(&split(&files, 2), 2);
    let sigs = run.sign(&tables, &hot);
    let o = exec(
        neardup()
            .arg("decide")
            .args(&sigs)
            .arg("--hot")
            .arg(&hot)
            .args(["--group", "0", "-o"])
            .arg(work.join("decided"))
            .args(["--prefer", "shortest"]),
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--prefer: shortest here, longest there"),
        "{}",
        stderr(&o)
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    /// Generated corpora with many colliding keys: any number of groups, any shard split, the
    /// same decisions as one process.
    #[test]
    fn any_groups_and_split_give_the_single_runs_decisions(
        seed in 1u64..u64::MAX,
        bases in 1u64..12,
        shards in 1usize..=4,
        groups in 1u32..=6,
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let files = corpus(&tmp.path().join("in"), seed, 240, bases);
        let work = tmp.path().join("w");
        std::fs::create_dir_all(&work).unwrap();
        let prefer: &[&str] = match seed % 3 {
            0 => &[],
            1 => &["--prefer", "longest"],
            _ => &["--prefer", "score:desc"],
        };
        let run = Run { work: &work, keys_flags: &["--id-field", "id"], decide_flags: prefer };
        let (one, _) = run.single(&files);
        let split = split(&files, shards);
        let (tables, hot) = run.keys_and_hot(&split, groups);
        let sigs = run.sign(&tables, &hot);
        let decided = run.decide(&sigs, &hot, groups);
        let (decisions, _) = run.write(&tables, &hot, &decided);
        prop_assert!(decisions == one);
    }
}
