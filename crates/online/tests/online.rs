//! The online index against the decision core it is built on: batches decide as single checks,
//! retries change nothing, queries name what a check would.

use neardup_corpus::Reason;
use neardup_dedup::DeduperConfig;
use neardup_keys::RowRule;
use neardup_online::{DocId, Index, IndexSettings, Text};
use neardup_sketch::{LshParams, Shingler, SketchConfig, Sketcher};

fn index(verify: neardup_dedup::Verify) -> Index {
    let sketcher = Sketcher::new(SketchConfig::new(
        Shingler::Chars { k: 5, step: 1 },
        128,
        LshParams::new(16, 8).unwrap(),
    ))
    .unwrap();
    Index::new(IndexSettings {
        sketcher,
        rule: RowRule::default(),
        deduper: DeduperConfig {
            verify,
            max_reps: Some(3),
            ..DeduperConfig::default()
        },
        keep_empty: true,
    })
    .unwrap()
}

/// Texts with near and exact copies: groups of variants of a base text.
fn texts() -> Vec<String> {
    let base = |b: u64| -> String {
        (0..60)
            .map(|i| format!("w{}", (i * 31 + b * 977) % 1009))
            .collect::<Vec<_>>()
            .join(" ")
    };
    (0..200u64)
        .map(|i| match i % 4 {
            0 => base(i / 8),
            1 => format!("{} tail{}", base(i / 8), i % 3),
            2 => base(1000 + i),
            _ => String::new(),
        })
        .collect()
}

#[test]
fn a_batch_decides_as_checks_one_by_one() {
    for verify in [
        neardup_dedup::Verify::Jaccard,
        neardup_dedup::Verify::Estimate,
    ] {
        let texts = texts();
        let as_text: Vec<Text<'_>> = texts.iter().map(|t| Text::Str(t)).collect();
        let mut one = index(verify);
        let singles: Vec<_> = as_text
            .iter()
            .map(|t| one.check(*t, None).unwrap())
            .collect();
        let mut many = index(verify);
        let ids = vec![None; texts.len()];
        let batch = many.check_many(&as_text, ids).unwrap();
        assert_eq!(singles, batch);
        let reasons = |r| batch.iter().filter(|d| d.reason == r).count();
        assert!(
            reasons(Reason::Exact) > 10 && reasons(Reason::Near) > 10,
            "{batch:?}"
        );
        assert_eq!(reasons(Reason::Empty), 50);
        for d in &batch {
            if let Some(of) = &d.dup_of {
                let DocId::Int(of) = of else { panic!() };
                assert!(batch[*of as usize].keep || d.reason == Reason::Exact);
            }
        }
    }
}

#[test]
fn retries_change_nothing_and_queries_name_what_checks_would() {
    let texts = texts();
    let mut idx = index(neardup_dedup::Verify::Jaccard);
    let id = |i: usize| Some(DocId::Str(format!("{i}")));
    for (i, t) in texts.iter().enumerate().take(100) {
        let found = idx.query(t);
        let before = idx.stats();
        let d = idx.check(Text::Str(t), id(i)).unwrap();
        assert_eq!(d.keep, found.is_empty(), "{i}: {d:?} {found:?}");
        if let (Some(of), Some(sim)) = (&d.dup_of, d.similarity) {
            assert!(found.contains(&(of.clone(), sim)));
        }
        // A retry, even with another text, returns the first decision and changes nothing.
        assert_eq!(idx.check(Text::Str("other"), id(i)).unwrap(), d);
        assert_eq!(
            idx.stats().checked,
            before.checked + u64::from(!t.is_empty())
        );
    }
    assert_eq!(idx.len(), 100);
    // 7 and "7" are two documents.
    let seven = idx
        .check(Text::Str(&texts[2]), Some(DocId::Int(7)))
        .unwrap();
    assert_eq!(seven.dup_of, Some(DocId::Str("2".into())));
    assert_eq!(idx.len(), 101);
    // Inserted documents are found, and named by the checks after them.
    let fresh = "an entirely new text about something else that nobody wrote before";
    idx.insert_many(&[Text::Str(fresh)], vec![Some(DocId::Int(-1))])
        .unwrap();
    assert_eq!(idx.query(fresh), vec![(DocId::Int(-1), 1.0)]);
    let near = format!("{fresh} really");
    let d = idx.check(Text::Str(&near), None).unwrap();
    assert_eq!((d.keep, d.dup_of), (false, Some(DocId::Int(-1))));
    // Nothing readable: kept as an error, as a batch run keeps it.
    let e = idx.check(Text::Unreadable, None).unwrap();
    assert_eq!((e.keep, e.reason), (true, Reason::Error));
}
