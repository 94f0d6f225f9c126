//! `--compat lshcurator` reproduces lshcurator 0.2.3 bit for bit: its bucket-key table and hot
//! rows (`Curator.compute_bucket_keys` + `select_deduper_bucket_keys`), and its keep/drop
//! decisions (`Curator.process_corpus`) for every setting in the fixture. The fixtures were made
//! by lshcurator itself (tests/data/compat/gen_bucket_keys.py and shared/compat).

use std::path::PathBuf;

use neardup::corpus::Reason;
use neardup::keys::{TableStore, run_keys};
use neardup::{Config, Pipeline, ShingleUnit};
use serde_json::Value;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/compat")
        .join(name)
}

fn load(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(data(name)).unwrap()).unwrap()
}

fn config_for(setting: &Value, threads: usize) -> Config {
    let mut c = Config::default();
    c.input.inputs = (0..3)
        .map(|i| data(&format!("input-{i}.jsonl")).display().to_string())
        .collect();
    c.input.fields = vec!["text".into()];
    c.sketch.tokenize = if setting["compute_mode"] == "byte" {
        ShingleUnit::Byte
    } else {
        ShingleUnit::Char
    };
    c.sketch.shingle = setting["shingle_k"].as_u64().unwrap() as usize;
    c.sketch.step = setting["shingle_step"].as_u64().unwrap() as usize;
    c.sketch.bands = Some(setting["bands"].as_u64().unwrap() as usize);
    c.sketch.rows = Some(setting["rows"].as_u64().unwrap() as usize);
    c.dedup.threshold = setting["threshold"].as_f64().unwrap();
    c.dedup.max_reps = setting["max_representatives_per_bucket"]
        .as_u64()
        .map(|m| m as usize);
    c.keys.min_key_count = setting["filter_low_freq_bucket_keys"].as_u64().unwrap() as u32;
    c.run.threads = threads;
    c.lshcurator()
}

#[test]
fn bucket_keys_and_hot_rows_equal_lshcurator() {
    let fixture = load("bucket_keys.json");
    for setting in fixture["settings"].as_array().unwrap() {
        let config = config_for(setting, 2);
        let (files, _) = neardup::discover_inputs(&config).unwrap();
        let out = run_keys(
            &files,
            0,
            &neardup::keys_config(&config).unwrap(),
            &neardup::exec::StepControl::default(),
        )
        .unwrap();
        let TableStore::Memory(table) = &out.table else {
            panic!("table spilled")
        };
        let expected: Vec<Vec<u64>> = setting["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                row.as_array()
                    .unwrap()
                    .iter()
                    .map(|k| k.as_str().unwrap().parse().unwrap())
                    .collect()
            })
            .collect();
        // lshcurator has no row for empty (after strip) texts; neardup keeps a blank row for them.
        let ours: Vec<usize> = (0..table.rows())
            .filter(|&r| table.row(r).iter().any(|&k| k != 0))
            .collect();
        assert_eq!(ours.len(), expected.len(), "{setting:?}");
        let mask: Vec<bool> = setting["hot_row_mask"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_bool().unwrap())
            .collect();
        for (i, &r) in ours.iter().enumerate() {
            assert_eq!(table.row(r), expected[i].as_slice(), "row {i}");
            assert_eq!(out.mask.is_hot_row(r), mask[i], "hot row {i}");
        }
        let hot: Vec<u64> = setting["hot_keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap().parse().unwrap())
            .collect();
        assert_eq!(out.hot.keys(), hot.as_slice());
    }
}

#[test]
fn decisions_equal_lshcurator_for_every_setting() {
    let fixture = load("decisions.json");
    for setting in fixture["settings"].as_array().unwrap() {
        for threads in [1, 2] {
            let (decisions, report) = Pipeline::new(config_for(setting, threads))
                .unwrap()
                .decisions()
                .unwrap();
            let ours: Vec<bool> = decisions
                .iter()
                .filter(|d| !matches!(d.reason, Reason::Empty | Reason::Error))
                .map(|d| d.keep)
                .collect();
            let expected: Vec<bool> = setting["results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["keep"].as_bool().unwrap())
                .collect();
            assert_eq!(ours.len(), expected.len());
            let diff: Vec<usize> = (0..ours.len())
                .filter(|&i| ours[i] != expected[i])
                .collect();
            assert!(
                diff.is_empty(),
                "setting {setting:?}: samples {diff:?} differ"
            );
            // Every record is accounted for.
            let t = &report.totals;
            assert_eq!(t.records_in, 210);
            assert_eq!(t.records_in, t.records_kept + t.records_dropped);
            assert_eq!(t.samples, t.unique + t.near + t.exact + t.empty + t.errors);
        }
    }
}
