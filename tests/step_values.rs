//! Stage 2 on many machines over values: `sign` → [`SignedShard`], `decide` over signed values
//! → [`DecidedGroup`], `write` taking decided values, in one process through the library, as a
//! scheduler with an object store (no paths) runs them. The decisions and outputs must be those
//! of one `neardup dedup`; values and directories mix; the values' bytes round-trip and refuse
//! damage; and the checks of the directory forms hold for values too, naming the value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use neardup::keys::{HotKeys, HotSummary, KeyTable};
use neardup::{
    Config, DecidedGroup, DecidedInput, Error, RunControl, SignedInput, SignedShard, Step,
    StepInput, StepKind, StepOutputsError, StepValue, TableInput,
};

fn neardup() -> Command {
    Command::new(env!("CARGO_BIN_EXE_neardup"))
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.arg("-q").output().expect("run neardup");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const FLAGS: [&str; 4] = ["--threshold", "0.7", "--max-reps", "2"];

fn sample() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sample");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

fn config(max_reps: usize) -> Config {
    let mut c = Config::default();
    c.dedup.threshold = 0.7;
    c.dedup.max_reps = Some(max_reps);
    c
}

fn control() -> RunControl {
    RunControl::default()
}

/// Files under `dir`, by name (write steps' manifests left out: they name their run).
fn files_in(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            !name.starts_with("_SUCCESS") && !name.starts_with('.')
        })
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

struct Setup {
    work: tempfile::TempDir,
    /// Key-table files, in shard order.
    tables: Vec<PathBuf>,
    hot: HotKeys,
    /// What `decide` takes of it.
    summary: HotSummary,
    hot_path: PathBuf,
    /// One `neardup dedup`'s decisions and outputs.
    one_decisions: Vec<u8>,
    one_outputs: BTreeMap<String, Vec<u8>>,
}

/// The CLI's one-process run, and its stage 1 per shard (`keys`, `hot --groups`).
fn setup(shards: &[&[usize]], groups: u32) -> Setup {
    let work = tempfile::tempdir().unwrap();
    let files = sample();
    let ordered: Vec<&PathBuf> = shards
        .iter()
        .flat_map(|s| s.iter().map(|&i| &files[i]))
        .collect();
    run_ok(
        neardup()
            .arg("dedup")
            .args(&ordered)
            .arg("-o")
            .arg(work.path().join("one"))
            .arg("--decisions")
            .arg(work.path().join("one.jsonl"))
            .args(FLAGS),
    );
    let tables: Vec<PathBuf> = shards
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let t = work.path().join(format!("keys-{i}.ndk"));
            run_ok(
                neardup()
                    .arg("keys")
                    .args(s.iter().map(|&f| &files[f]))
                    .arg("--shard")
                    .arg(i.to_string())
                    .arg("-o")
                    .arg(&t)
                    .args(&FLAGS[..2]),
            );
            t
        })
        .collect();
    let hot_path = work.path().join("hot.ndh");
    run_ok(
        neardup()
            .arg("hot")
            .args(&tables)
            .arg("--groups")
            .arg(groups.to_string())
            .arg("-o")
            .arg(&hot_path),
    );
    let one_decisions = std::fs::read(work.path().join("one.jsonl")).unwrap();
    let one_outputs = files_in(&work.path().join("one"));
    Setup {
        hot: HotKeys::load(&hot_path).unwrap(),
        summary: HotSummary::load(&hot_path).unwrap(),
        work,
        tables,
        hot_path,
        one_decisions,
        one_outputs,
    }
}

impl Setup {
    fn path(&self, name: &str) -> PathBuf {
        self.work.path().join(name)
    }

    /// Writes every shard from `decided` (shard `i` given `for_shard(i)`); returns the
    /// concatenated decisions and the outputs.
    fn write_all<'a>(
        &self,
        out: &str,
        for_shard: impl Fn(usize) -> Vec<DecidedInput<'a>>,
    ) -> (Vec<u8>, BTreeMap<String, Vec<u8>>) {
        self.write_all_with(&config(2), out, for_shard)
    }

    /// [`Setup::write_all`] with `base`'s settings.
    fn write_all_with<'a>(
        &self,
        base: &Config,
        out: &str,
        for_shard: impl Fn(usize) -> Vec<DecidedInput<'a>>,
    ) -> (Vec<u8>, BTreeMap<String, Vec<u8>>) {
        let mut decisions = Vec::new();
        for (i, t) in self.tables.iter().enumerate() {
            let mut c = base.clone();
            c.output.dir = Some(self.path(out));
            let d = self.path(&format!("{out}-d-{i}.jsonl"));
            c.output.decisions = Some(d.clone());
            let table = KeyTable::load(t).unwrap();
            let input = if i % 2 == 0 {
                TableInput::Value(&table)
            } else {
                TableInput::File(t)
            };
            neardup::WriteStep::new(&c, input, &self.hot, &for_shard(i))
                .and_then(|s| s.run(&control(), &mut |_| {}))
                .unwrap();
            decisions.extend(std::fs::read(&d).unwrap());
        }
        (decisions, files_in(&self.path(out)))
    }

    fn check(&self, (decisions, outputs): (Vec<u8>, BTreeMap<String, Vec<u8>>), what: &str) {
        assert!(
            decisions == self.one_decisions,
            "{what}: decisions differ from one `neardup dedup`"
        );
        assert!(
            outputs == self.one_outputs,
            "{what}: outputs differ from one `neardup dedup`"
        );
    }
}

const SPLITS: [&[&[usize]]; 3] = [&[&[0, 1, 2]], &[&[0, 1], &[2]], &[&[0], &[1], &[2]]];

/// The files a step value is saved as: a directory's (by name), or a file's alone.
fn saved_files(path: &Path) -> BTreeMap<String, Vec<u8>> {
    if path.is_dir() {
        files_in(path)
    } else {
        BTreeMap::from([(String::new(), std::fs::read(path).unwrap())])
    }
}

/// One step's shape: what [`Step::write`] saves is [`Step::run`]'s value saved, byte for byte;
/// the value loads back from it and through its bytes unchanged.
fn check_step<S: Step>(step: &S, name: &str, dir: &Path) -> S::Value {
    let (value, _stats) = step.run(&control()).unwrap();
    let bytes = value.to_bytes().unwrap();
    let saved = dir.join(format!("{name}-saved"));
    value.save(&saved).unwrap();
    let written = dir.join(format!("{name}-written"));
    let report = step.write(&written, None, &control()).unwrap();
    assert!(serde_json::to_value(&report).unwrap().is_object(), "{name}");
    assert!(
        saved_files(&saved) == saved_files(&written),
        "{name}: `write` saved other bytes than `run`'s value"
    );
    let loaded = S::Value::load(&written).unwrap();
    assert!(loaded.to_bytes().unwrap() == bytes, "{name}: loaded");
    let rebuilt = S::Value::from_bytes(&bytes).unwrap();
    assert!(rebuilt.to_bytes().unwrap() == bytes, "{name}: from bytes");
    value
}

/// Every step has the one shape, its value made in memory or saved where the CLI saves it, for
/// stage 1 (`keys`, `hot`) and the distributed stage 2 (`sign`, `decide`).
#[test]
fn every_step_writes_its_value_saved_and_the_value_round_trips() {
    let s = setup(SPLITS[1], 3);
    let work = s.path("shapes");
    std::fs::create_dir(&work).unwrap();
    let files = sample();
    let mut c = config(2);
    c.input.inputs = files[..2].iter().map(|f| f.display().to_string()).collect();
    check_step(&neardup::KeysStep::new(&c, 0).unwrap(), "keys", &work);
    let c2 = config(2);
    let hot = check_step(
        &neardup::HotStep::new(&c2, &s.tables, 3).unwrap(),
        "hot",
        &work,
    );
    assert!(
        hot.to_bytes().unwrap() == s.hot.to_bytes().unwrap(),
        "hot as `neardup hot`"
    );
    let signed: Vec<SignedShard> = s
        .tables
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let step = neardup::SignStep::new(&c2, t, &s.hot).unwrap();
            check_step(&step, &format!("sign-{i}"), &work)
        })
        .collect();
    let inputs: Vec<SignedInput> = signed.iter().map(Into::into).collect();
    for g in 0..3 {
        let step = neardup::DecideStep::new(&c2, &inputs, &s.summary, g).unwrap();
        check_step(&step, &format!("decide-{g}"), &work);
    }
}

/// The library's `sign` and `write` under a memory limit make their spill directory before they
/// build the shard's mask (which may go there; they would fail without it), write what they write
/// without the limit, and remove the directory they made once they are done with it.
#[test]
fn steps_within_a_memory_limit_make_their_spill_directory_and_write_the_same() {
    let s = setup(SPLITS[1], 3);
    let spill = s.path("spill/not/made/yet");
    let mut limited = config(2);
    limited.keys.memory_limit = Some(1024);
    limited.keys.spill_dir = Some(spill.clone());
    let mut signed = Vec::new();
    for (i, t) in s.tables.iter().enumerate() {
        let plain = s.path(&format!("sig-{i}"));
        neardup::SignStep::new(&config(2), t, &s.hot)
            .and_then(|s| s.write(&plain, None, &control()))
            .unwrap();
        let within = s.path(&format!("limited-sig-{i}"));
        neardup::SignStep::new(&limited, t, &s.hot)
            .and_then(|s| s.write(&within, None, &control()))
            .unwrap();
        assert!(
            !s.path("spill").exists(),
            "sign left the spill directory it made"
        );
        assert_eq!(files_in(&within), files_in(&plain), "shard {i}");
        signed.push(within);
    }
    let inputs: Vec<SignedInput> = signed.iter().map(|d| StepInput::Dir(d.as_path())).collect();
    let decided: Vec<DecidedGroup> = (0..3)
        .map(|g| {
            neardup::DecideStep::new(&limited, &inputs, &s.summary, g)
                .and_then(|s| s.run(&control()))
                .map(|(v, ())| v)
                .unwrap()
        })
        .collect();
    let result = s.write_all_with(&limited, "out", |_| {
        decided.iter().map(Into::into).collect()
    });
    assert!(
        !s.path("spill").exists(),
        "write left the spill directory it made"
    );
    s.check(result, "sign, decide and write within 1 KB");
}

#[test]
fn values_alone_make_one_runs_decisions_and_outputs() {
    let text = {
        let s = setup(SPLITS[0], 1);
        String::from_utf8(s.one_decisions.clone()).unwrap()
    };
    assert!(text.contains("\"reason\":\"near\"") && text.contains("\"reason\":\"exact\""));
    for shards in SPLITS {
        for groups in [1, 3] {
            let s = setup(shards, groups);
            let what = format!("{} shards, {groups} groups", shards.len());
            // sign from tables in memory; no directory anywhere between the steps.
            let signed: Vec<SignedShard> = s
                .tables
                .iter()
                .map(|t| {
                    let table = KeyTable::load(t).unwrap();
                    let (v, stats) = neardup::SignStep::new(&config(2), &table, &s.hot)
                        .and_then(|s| s.run(&control()))
                        .unwrap();
                    assert!(stats.records > 0);
                    v
                })
                .collect();
            // Through bytes, as an object store carries them; decide tasks get their group's part.
            let signed: Vec<SignedShard> = signed
                .iter()
                .map(|v| SignedShard::from_bytes(&v.to_bytes()).unwrap())
                .collect();
            let decided: Vec<DecidedGroup> = (0..groups)
                .map(|g| {
                    let parts: Vec<SignedShard> =
                        signed.iter().map(|v| v.group(g).unwrap()).collect();
                    let inputs: Vec<SignedInput> = parts.iter().rev().map(Into::into).collect();
                    let v = neardup::DecideStep::new(&config(2), &inputs, &s.summary, g)
                        .and_then(|s| s.run(&control()))
                        .map(|(v, ())| v)
                        .unwrap();
                    DecidedGroup::from_bytes(&v.to_bytes()).unwrap()
                })
                .collect();
            let parts: Vec<Vec<DecidedGroup>> = (0..shards.len() as u32)
                .map(|i| decided.iter().map(|d| d.shard(i).unwrap()).collect())
                .collect();
            let result = s.write_all("out", |i| parts[i].iter().map(Into::into).collect());
            s.check(result, &what);
            // Whole values work as well as parts.
            let whole = s.write_all("out-whole", |_| decided.iter().map(Into::into).collect());
            s.check(whole, &what);
        }
    }
}

#[test]
fn values_and_directories_mix_and_are_the_same_bytes() {
    let s = setup(SPLITS[2], 3);
    // The CLI's sign directories, and the values the library signs in memory.
    let mut signed = Vec::new();
    for (i, t) in s.tables.iter().enumerate() {
        let dir = s.path(&format!("sig-{i}"));
        run_ok(
            neardup()
                .arg("sign")
                .arg(t)
                .arg("--hot")
                .arg(&s.hot_path)
                .arg("-o")
                .arg(&dir)
                .args(FLAGS),
        );
        let (value, _) = neardup::SignStep::new(&config(2), t, &s.hot)
            .and_then(|s| s.run(&control()))
            .unwrap();
        let loaded = SignedShard::load(&dir).unwrap();
        assert!(
            loaded == value,
            "shard {i}: the loaded directory is the value"
        );
        assert!(
            loaded.to_bytes() == value.to_bytes(),
            "shard {i}: to_bytes of the CLI's directory and of the value differ"
        );
        // save writes exactly the CLI's directory; save → load → to_bytes round-trips.
        let saved = s.path(&format!("saved-sig-{i}"));
        value.save(&saved).unwrap();
        assert_eq!(
            files_in(&saved),
            files_in(&dir),
            "shard {i}: saved directory"
        );
        assert!(SignedShard::load(&saved).unwrap().to_bytes() == value.to_bytes());
        signed.push((dir, value));
    }
    // decide: group 0 into a directory from mixed inputs, groups 1 and 2 in memory (mixed too).
    let mixed: Vec<SignedInput> = signed
        .iter()
        .enumerate()
        .map(|(i, (dir, v))| {
            if i == 1 {
                StepInput::Dir(dir.as_path())
            } else {
                StepInput::Value(v)
            }
        })
        .collect();
    let d0 = s.path("decided-0");
    neardup::DecideStep::new(&config(2), &mixed, &s.summary, 0)
        .and_then(|s| s.write(&d0, None, &control()))
        .unwrap();
    let cli0 = s.path("cli-decided-0");
    run_ok(
        neardup()
            .arg("decide")
            .args(signed.iter().map(|(d, _)| d))
            .arg("--hot")
            .arg(&s.hot_path)
            .arg("--group")
            .arg("0")
            .arg("-o")
            .arg(&cli0)
            .args(FLAGS),
    );
    assert_eq!(files_in(&d0), files_in(&cli0), "decide from mixed inputs");
    let v0 = neardup::DecideStep::new(&config(2), &mixed, &s.summary, 0)
        .and_then(|s| s.run(&control()))
        .map(|(v, ())| v)
        .unwrap();
    assert!(DecidedGroup::load(&cli0).unwrap().to_bytes() == v0.to_bytes());
    let saved0 = s.path("saved-decided-0");
    v0.save(&saved0).unwrap();
    assert_eq!(files_in(&saved0), files_in(&cli0));
    let rest: Vec<DecidedGroup> = (1..3)
        .map(|g| {
            neardup::DecideStep::new(&config(2), &mixed, &s.summary, g)
                .and_then(|s| s.run(&control()))
                .map(|(v, ())| v)
                .unwrap()
        })
        .collect();
    // write: the directory of group 0 with the values of groups 1 and 2.
    let result = s.write_all("out", |_| {
        let mut inputs: Vec<DecidedInput> = vec![StepInput::Dir(d0.as_path())];
        inputs.extend(rest.iter().map(DecidedInput::from));
        inputs
    });
    s.check(result, "mixed values and directories");
}

fn corrupt(e: Error) -> String {
    match e {
        Error::Corrupt(c) => c.to_string(),
        other => panic!("expected a corrupt-bytes error, got {other:?}"),
    }
}

#[test]
fn bytes_round_trip_and_damage_is_refused() {
    let s = setup(SPLITS[1], 3);
    let (signed, _) = neardup::SignStep::new(&config(2), &s.tables[0], &s.hot)
        .and_then(|s| s.run(&control()))
        .unwrap();
    let bytes = signed.to_bytes();
    let back = SignedShard::from_bytes(&bytes).unwrap();
    assert!(back == signed && back.to_bytes() == bytes);
    assert_eq!(back.groups_held(), vec![0, 1, 2]);
    let part = signed.group(1).unwrap();
    assert_eq!(part.groups_held(), vec![1]);
    assert_eq!(part.stream(1), signed.stream(1));
    assert!(SignedShard::from_bytes(&part.to_bytes()).unwrap() == part);
    let e = part.group(2).unwrap_err().to_string();
    assert_eq!(
        e,
        "the signed value of shard 0 holds no stream for group 2 (it is a part holding groups \
         [1]): take the part from the whole value"
    );

    // Every truncation and every single flipped byte is refused, without a panic.
    let step = (bytes.len() / 400).max(1);
    for cut in (0..256).chain((256..bytes.len()).step_by(step)) {
        let e = SignedShard::from_bytes(&bytes[..cut]).unwrap_err();
        let m = corrupt(e);
        assert!(
            m.contains("truncated") || m.contains("not a neardup step value"),
            "cut at {cut}: {m}"
        );
    }
    for at in (0..256)
        .chain((256..bytes.len()).step_by(step))
        .chain([bytes.len() - 9])
    {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x20;
        let m = corrupt(SignedShard::from_bytes(&damaged).unwrap_err());
        assert!(
            m.contains("damaged")
                || m.contains("truncated")
                || m.contains("not a neardup step value")
                || m.contains("format version"),
            "byte {at} flipped: {m}"
        );
    }
    let m = corrupt(SignedShard::from_bytes(b"{\"format\":\"neardup-sign\"}").unwrap_err());
    assert!(m.contains("not a neardup step value"), "{m}");

    // A decided value is not a signed one.
    let (other, _) = neardup::SignStep::new(&config(2), &s.tables[1], &s.hot)
        .and_then(|s| s.run(&control()))
        .unwrap();
    let decided = neardup::DecideStep::new(
        &config(2),
        &[(&signed).into(), (&other).into()],
        &s.summary,
        0,
    )
    .and_then(|s| s.run(&control()))
    .map(|(v, ())| v)
    .unwrap();
    let dbytes = decided.to_bytes();
    assert!(DecidedGroup::from_bytes(&dbytes).unwrap() == decided);
    let e = SignedShard::from_bytes(&dbytes).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::StepOutputs(StepOutputsError::OtherKind {
                expected: StepKind::Sign,
                found: Some(StepKind::Decide)
            })
        ) && e.to_string().contains("a DecidedGroup, not a SignedShard"),
        "{e}"
    );
    assert_eq!(decided.shards_held(), vec![0, 1]);
    assert_eq!(decided.manifest().decided.len(), 2);
}

/// The message of a refused step (an error in the arguments: exit code 2).
fn refused<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
    match r {
        Err(e) if neardup::cli::exit_code(&e) == 2 => e.to_string(),
        other => panic!("expected a usage error, got {other:?}"),
    }
}

#[test]
fn values_are_refused_where_directories_are_and_messages_name_the_value() {
    let s = setup(SPLITS[1], 3);
    let sign_dir = |i: usize, hot: &HotKeys, c: &Config| {
        let dir = s.path(&format!("sig-{i}-{}", hot.groups()));
        neardup::SignStep::new(c, &s.tables[i], hot)
            .and_then(|s| s.write(&dir, None, &control()))
            .unwrap();
        dir
    };
    let (v0, _) = neardup::SignStep::new(&config(2), &s.tables[0], &s.hot)
        .and_then(|s| s.run(&control()))
        .unwrap();
    let (v1, _) = neardup::SignStep::new(&config(2), &s.tables[1], &s.hot)
        .and_then(|s| s.run(&control()))
        .unwrap();
    let d0 = sign_dir(0, &s.hot, &config(2));
    let d1 = sign_dir(1, &s.hot, &config(2));

    // Another hot-key file (another plan): its values and directories are refused alike.
    let other_path = s.path("hot-2.ndh");
    run_ok(
        neardup()
            .args(["hot", "--groups", "2", "-o"])
            .arg(&other_path)
            .args(&s.tables),
    );
    let other_hot = HotKeys::load(&other_path).unwrap();
    let (x0, _) = neardup::SignStep::new(&config(2), &s.tables[0], &other_hot)
        .and_then(|s| s.run(&control()))
        .unwrap();
    let x_dir = sign_dir(0, &other_hot, &config(2));
    let decide = |inputs: &[SignedInput], group: u32, c: &Config| {
        neardup::DecideStep::new(c, inputs, &s.summary, group)
            .and_then(|s| s.run(&control()))
            .map(|(v, ())| v)
    };
    let by_value = refused(decide(&[(&x0).into(), (&v1).into()], 0, &config(2)));
    let by_dir = refused(decide(&[(&x_dir).into(), (&v1).into()], 0, &config(2)));
    assert!(
        by_value.starts_with("the signed value of shard 0 was signed with another hot-key file"),
        "{by_value}"
    );
    assert_eq!(
        by_value.replace("the signed value of shard 0", "X"),
        by_dir.replace(&x_dir.display().to_string(), "X")
    );

    // Other decision settings.
    let by_value = refused(decide(&[(&v0).into(), (&v1).into()], 0, &config(1)));
    let by_dir = refused(decide(&[(&d0).into(), (&d1).into()], 0, &config(1)));
    assert!(by_value.contains("the signed value of shard 0 was made by `neardup sign` with other decision settings (--max-reps: 1 here, 2 there)"), "{by_value}");
    assert_eq!(
        by_value.replace("the signed value of shard 0", "X"),
        by_dir.replace(&d0.display().to_string(), "X")
    );

    // A shard twice, a shard missing, a group out of range.
    let twice = refused(decide(
        &[(&v0).into(), (&d0).into(), (&v1).into()],
        0,
        &config(2),
    ));
    assert!(
        twice.contains(&format!(
            "the signed value of shard 0 and {} are both the sign output of shard 0",
            d0.display()
        )),
        "{twice}"
    );
    let missing = refused(decide(&[(&v1).into()], 0, &config(2)));
    assert!(
        missing.contains("the sign outputs of shard 0 are missing"),
        "{missing}"
    );
    let range = refused(decide(&[(&v0).into(), (&v1).into()], 3, &config(2)));
    assert!(range.contains("--group 3 is out of range"), "{range}");

    // A part without the group asked for.
    let part = v0.group(2).unwrap();
    let lacking = refused(decide(&[(&part).into(), (&v1).into()], 1, &config(2)));
    assert!(
        lacking.contains("the signed value of shard 0 holds the stream of group 2 only, and `decide --group 1` needs group 1's"),
        "{lacking}"
    );

    // write: a group missing, a group twice, a part of another shard, another hot-key file.
    let g: Vec<DecidedGroup> = (0..3)
        .map(|g| decide(&[(&v0).into(), (&v1).into()], g, &config(2)).unwrap())
        .collect();
    let write = |decided: &[DecidedInput]| {
        let mut c = config(2);
        c.output.decisions = Some(s.path("d.jsonl"));
        neardup::WriteStep::new(&c, &s.tables[0], &s.hot, decided)
            .and_then(|s| s.run(&control(), &mut |_| {}))
    };
    let m = refused(write(&[(&g[0]).into(), (&g[2]).into()]));
    assert!(
        m.contains("the decide outputs of group 1 are missing"),
        "{m}"
    );
    let m = refused(write(&[
        (&g[0]).into(),
        (&g[1]).into(),
        (&g[1]).into(),
        (&g[2]).into(),
    ]));
    assert!(
        m.contains(
            "the decided value of group 1 and the decided value of group 1 both decided group 1"
        ),
        "{m}"
    );
    let wrong = g[1].shard(1).unwrap();
    let m = refused(write(&[(&g[0]).into(), (&wrong).into(), (&g[2]).into()]));
    assert!(
        m.contains("the decided value of group 1 holds the stream of shard 1 only, and `write` of shard 0 needs shard 0's"),
        "{m}"
    );
    let xg = neardup::DecideStep::new(
        &config(2),
        &[
            (&x0).into(),
            (&neardup::SignStep::new(&config(2), &s.tables[1], &other_hot)
                .and_then(|s| s.run(&control()))
                .unwrap()
                .0)
                .into(),
        ],
        &other_hot.summary().unwrap(),
        0,
    )
    .and_then(|s| s.run(&control()))
    .map(|(v, ())| v)
    .unwrap();
    let m = refused(write(&[(&xg).into(), (&g[1]).into(), (&g[2]).into()]));
    assert!(
        m.starts_with("the decided value of group 0 was decided with another hot-key file"),
        "{m}"
    );
    assert!(!s.path("d.jsonl").exists(), "a refused write wrote nothing");
}
