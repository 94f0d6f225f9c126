//! Stage 2 reads only the records it has to decide (where stage 1 noted each record of an
//! uncompressed JSONL file), and decides the others unread; writing the dataset, it reads every
//! record but parses only those, copying the others as they are. The decisions, the dataset and
//! the report's totals are those of a run that reads and parses everything, for any thread
//! count, chunk size, fields mode, output part size and memory limit; the report says how many
//! bytes stage 2 read.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use neardup::{Config, Pipeline, Report};

/// A small random generator (splitmix64), so the corpus is the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The lines of one input: mostly unique texts, some near and exact copies of earlier ones
/// (also across files), and every kind of record that is not plain: blank lines, blank texts,
/// malformed JSON, invalid UTF-8, missing, null and non-string fields, a CRLF line end; a
/// second field `title` that some records lack (for expand mode).
fn lines(rng: &mut Rng, earlier: &mut Vec<String>, n: usize) -> Vec<Vec<u8>> {
    // Words of random letters, so unrelated texts share few character shingles.
    let word = |rng: &mut Rng| {
        (0..3 + rng.below(6))
            .map(|_| (b'a' + rng.below(26) as u8) as char)
            .collect::<String>()
    };
    let mut out = Vec::new();
    for i in 0..n {
        let text = match rng.below(40) {
            0 | 1 if !earlier.is_empty() => {
                // A near copy: a few words changed.
                let base = earlier[rng.below(earlier.len() as u64) as usize].clone();
                let mut words: Vec<String> = base.split(' ').map(str::to_string).collect();
                let k = rng.below(words.len() as u64) as usize;
                words[k] = word(rng);
                words.join(" ")
            }
            2 if !earlier.is_empty() => earlier[rng.below(earlier.len() as u64) as usize].clone(),
            _ => (0..150 + rng.below(300))
                .map(|_| word(rng))
                .collect::<Vec<_>>()
                .join(" "),
        };
        earlier.push(text.clone());
        let title = if i % 9 == 0 {
            String::new()
        } else {
            let words: Vec<String> = (0..4).map(|_| word(rng)).collect();
            format!(",\"title\":\"{}\"", words.join(" "))
        };
        let line = match rng.below(160) {
            0 => Vec::new(),
            1 => b"   ".to_vec(),
            2 => br#"{"text":"   "}"#.to_vec(),
            3 => b"{bad".to_vec(),
            4 => b"{\"text\":\"\xff\"}".to_vec(),
            5 => br#"{"other":1}"#.to_vec(),
            6 => br#"{"text":null,"title":"x"}"#.to_vec(),
            7 => br#"{"text":5}"#.to_vec(),
            8 => format!("{{\"text\":\"{text}\"{title}}}\r").into_bytes(),
            _ => format!("{{\"text\":\"{text}\"{title}}}").into_bytes(),
        };
        out.push(line);
    }
    out
}

/// Three uncompressed JSONL inputs (the last without a final line end) and a gzip one.
fn corpus(dir: &Path) -> PathBuf {
    let input = dir.join("in");
    std::fs::create_dir_all(&input).unwrap();
    let mut rng = Rng(44);
    let mut earlier = Vec::new();
    for (name, n) in [("a.jsonl", 700), ("b.jsonl", 500), ("c.jsonl", 300)] {
        let mut body = Vec::new();
        for line in lines(&mut rng, &mut earlier, n) {
            body.extend_from_slice(&line);
            body.push(b'\n');
        }
        if name == "c.jsonl" {
            body.pop();
        }
        std::fs::write(input.join(name), body).unwrap();
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    for line in lines(&mut rng, &mut earlier, 200) {
        gz.write_all(&line).unwrap();
        gz.write_all(b"\n").unwrap();
    }
    std::fs::write(input.join("d.jsonl.gz"), gz.finish().unwrap()).unwrap();
    input
}

fn input_bytes(input: &Path) -> u64 {
    std::fs::read_dir(input)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// The report's totals and stage 2's counts (what must not depend on what stage 2 read).
fn counts(r: &Report) -> String {
    let s = &r.stage2;
    format!(
        "{:?} records={} kept={} dropped={} samples={} unique={} cold={} near={} exact={} \
         empty={} errors={} skipped={:?} bytes={} clusters={:?}",
        serde_json::to_string(&r.totals).unwrap(),
        s.records,
        s.records_kept,
        s.records_dropped,
        s.samples,
        s.unique,
        s.cold,
        s.near,
        s.exact,
        s.empty,
        s.errors,
        s.skipped,
        s.bytes,
        s.clusters
            .as_ref()
            .map(|c| serde_json::to_string(c).unwrap()),
    )
}

/// What a run gives: its report, its decisions, and its dataset (file by file) when written.
type Ran = (Report, Vec<u8>, BTreeMap<String, Vec<u8>>);

/// Runs `config` with its decisions (and, with `output`, the dataset) under `dir`.
fn run(config: &Config, dir: &Path, output: bool) -> Ran {
    let mut c = config.clone();
    let decisions = dir.join("decisions.jsonl");
    c.output.decisions = Some(decisions.clone());
    if output {
        c.output.dir = Some(dir.join("out"));
    }
    let report = Pipeline::new(c).unwrap().run().unwrap();
    // The data files (the manifest names the run's own directory).
    let dataset = if output {
        let mut files = crate::support::published(&dir.join("out"));
        files.remove(neardup::corpus::MANIFEST);
        files
    } else {
        BTreeMap::new()
    };
    (report, std::fs::read(decisions).unwrap(), dataset)
}

#[test]
fn decisions_read_by_places_equal_a_whole_read_for_any_setting() {
    let tmp = tempfile::tempdir().unwrap();
    let input = corpus(tmp.path());
    let total = input_bytes(&input);
    let gz = std::fs::metadata(input.join("d.jsonl.gz")).unwrap().len();
    let mut n = 0;
    for expand in [false, true] {
        let mut base = Config::default();
        base.input.inputs = vec![input.display().to_string()];
        base.run.on_error = neardup::keys::OnError::Skip;
        if expand {
            base.input.fields = vec!["text".into(), "title".into()];
            base.input.fields_mode = neardup::FieldsModeKind::Expand;
            // The dataset in parts, a part ending between two kept records.
            base.output.max_output_bytes = Some(40_000);
        }
        base.dedup.threshold = 0.7;
        // The reference reads and parses every record: with an id field every decision names
        // its sample's id, so no record is passed over. No record has this one, so its
        // decisions and dataset are those of a run without an id field, byte for byte.
        let mut whole_config = base.clone();
        whole_config.input.id_field = Some("no_such_id".into());
        n += 1;
        let (whole, whole_decisions, whole_dataset) =
            run(&whole_config, &tmp.path().join(format!("whole-{n}")), true);
        assert_eq!(
            whole.stage2.bytes_read, total,
            "a whole read reads every byte"
        );
        assert!(
            whole.stage2.near + whole.stage2.exact > 30,
            "the corpus holds copies"
        );
        assert!(whole.stage2.errors > 20 && whole.stage2.empty > 5);
        assert!(whole.stage2.records_dropped > 20 && whole_dataset.len() >= 4);
        for (threads, chunk_bytes, limit) in [
            (1, 32 << 20, None),
            (2, 4096, None),
            (3, 1500, None),
            (2, 4096, Some(256 << 20)),
        ] {
            let mut c = base.clone();
            c.run.threads = threads;
            c.keys.chunk_bytes = chunk_bytes;
            c.keys.memory_limit = limit;
            let what = format!("expand {expand}, {threads} threads, chunks of {chunk_bytes}");
            // Decisions only: the records to decide are read, the rest passed over unread.
            n += 1;
            let (places, decisions, _) = run(&c, &tmp.path().join(format!("places-{n}")), false);
            assert!(decisions == whole_decisions, "{what}: the same decisions");
            assert_eq!(counts(&places), counts(&whole), "{what}");
            // The gzip input is read whole, as stored; of the rest, the records to decide.
            let read = places.stage2.bytes_read;
            assert!(
                read >= gz && read - gz < (total - gz) / 2,
                "{what}: {read} bytes read of {total}"
            );
            // With the dataset: every record is read, the ones passed over copied unparsed.
            n += 1;
            let (copied, decisions, dataset) =
                run(&c, &tmp.path().join(format!("copied-{n}")), true);
            assert!(
                decisions == whole_decisions,
                "{what}, -o: the same decisions"
            );
            assert!(dataset == whole_dataset, "{what}, -o: the same dataset");
            assert_eq!(counts(&copied), counts(&whole), "{what}, -o");
            assert_eq!(copied.stage2.bytes_read, total, "{what}, -o");
        }
    }
}

/// A run whose places would take more than their share of the memory limit reads everything,
/// and decides the same.
#[test]
fn places_over_their_share_of_the_memory_limit_are_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    let mut rng = Rng(7);
    let mut earlier: Vec<String> = Vec::new();
    // Many records, so their places (two bytes each) pass a 16th of a small limit.
    let mut body = String::new();
    for _ in 0..60_000 {
        let text = match rng.below(200) {
            0 if !earlier.is_empty() => earlier[rng.below(earlier.len() as u64) as usize].clone(),
            _ => (0..12)
                .map(|_| format!("w{}", rng.below(1000)))
                .collect::<Vec<_>>()
                .join(" "),
        };
        earlier.push(text.clone());
        body.push_str(&format!("{{\"text\":\"{text}\"}}\n"));
    }
    std::fs::write(input.join("a.jsonl"), &body).unwrap();
    let mut c = Config::default();
    c.input.inputs = vec![input.display().to_string()];
    let (free, free_decisions, _) = run(&c, &tmp.path().join("free"), false);
    assert!(free.stage2.bytes_read < body.len() as u64);
    c.keys.memory_limit = Some(1 << 20);
    let (limited, limited_decisions, _) = run(&c, &tmp.path().join("limited"), false);
    assert_eq!(limited.stage2.bytes_read, body.len() as u64);
    assert!(limited_decisions == free_decisions);
    assert_eq!(counts(&limited), counts(&free));
}
