//! The online index against the decision core it is built on: batches decide as single checks,
//! retries change nothing, queries name what a check would.

mod support;

use neardup_corpus::Reason;
use neardup_online::{DocId, Index, Text};
use support::{settings, texts};

fn index(verify: neardup_dedup::Verify) -> Index {
    Index::new(settings(verify, Some(3))).unwrap()
}

fn checked(idx: &mut Index) -> u64 {
    idx.stats().unwrap()["checked"].as_u64().unwrap()
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
        let found = idx.query(t).unwrap();
        let before = checked(&mut idx);
        let d = idx.check(Text::Str(t), id(i)).unwrap();
        assert_eq!(d.keep, found.is_empty(), "{i}: {d:?} {found:?}");
        if let (Some(of), Some(sim)) = (&d.dup_of, d.similarity) {
            assert!(found.contains(&(of.clone(), sim)));
        }
        // A retry, even with another text, returns the first decision and changes nothing.
        assert_eq!(idx.check(Text::Str("other"), id(i)).unwrap(), d);
        assert_eq!(checked(&mut idx), before + u64::from(!t.is_empty()));
    }
    assert_eq!(idx.len().unwrap(), 100);
    // 7 and "7" are two documents.
    let seven = idx
        .check(Text::Str(&texts[2]), Some(DocId::Int(7)))
        .unwrap();
    assert_eq!(seven.dup_of, Some(DocId::Str("2".into())));
    assert_eq!(idx.len().unwrap(), 101);
    // Inserted documents are found, and named by the checks after them.
    let fresh = "an entirely new text about something else that nobody wrote before";
    idx.insert_many(&[Text::Str(fresh)], vec![Some(DocId::Int(-1))])
        .unwrap();
    assert_eq!(idx.query(fresh).unwrap(), vec![(DocId::Int(-1), 1.0)]);
    let near = format!("{fresh} really");
    let d = idx.check(Text::Str(&near), None).unwrap();
    assert_eq!((d.keep, d.dup_of), (false, Some(DocId::Int(-1))));
    // Nothing readable: kept as an error, as a batch run keeps it.
    let e = idx.check(Text::Unreadable, None).unwrap();
    assert_eq!((e.keep, e.reason), (true, Reason::Error));
}
