//! Normaliser behaviour: each step, their order, borrowing, and the whitespace set.

use std::borrow::Cow;

use neardup_sketch::{CharClassSet, Normalizer, is_blank, py_strip};

fn all_steps(keep: Option<&str>) -> Normalizer {
    Normalizer {
        trim: true,
        nfkc: true,
        lowercase: true,
        strip_punctuation: true,
        keep_chars: keep.map(|k| k.parse().unwrap()),
        collapse_whitespace: true,
    }
}

#[test]
fn py_strip_uses_pythons_whitespace_set() {
    assert_eq!(
        py_strip("\u{1c}\u{1d} abc \u{3000}\u{85}\u{1f}\u{1e}"),
        "abc"
    );
    assert_eq!(py_strip("\t\n\x0b\x0c\r abc\u{a0}\u{2028}"), "abc");
    // Zero-width space and U+180E are not whitespace for Python either.
    assert_eq!(py_strip("\u{200b}abc\u{180e}"), "\u{200b}abc\u{180e}");
    assert!(is_blank(""));
    assert!(is_blank(" \u{1f}\u{3000}\n"));
    assert!(!is_blank(" x "));
}

#[test]
fn nfkc_folds_compatibility_forms() {
    let n = Normalizer {
        nfkc: true,
        ..Normalizer::default()
    };
    assert_eq!(n.normalize("ｆｕｌｌｗｉｄｔｈ ﬁ ①"), "fullwidth fi 1");
    assert_eq!(n.normalize("e\u{301}"), "\u{e9}");
    // NFKC before lowercase: the Roman numeral becomes letters that then lowercase.
    let n = Normalizer {
        nfkc: true,
        lowercase: true,
        ..Normalizer::default()
    };
    assert_eq!(n.normalize("Ⅻ ΟΔΟΣ"), "xii οδος");
}

#[test]
fn punctuation_is_removed_but_symbols_stay() {
    let n = Normalizer {
        strip_punctuation: true,
        ..Normalizer::default()
    };
    assert_eq!(
        n.normalize("Hello, world! (ok) ¿qué? «x» $5+3 a_b 「引用」"),
        "Hello world ok qué x $5+3 ab 引用"
    );
}

#[test]
fn keep_chars_with_korean_ranges() {
    let n = all_steps(Some("0-9a-zA-Z가-힣"));
    // ㅋ (U+314B, a compatibility jamo) is outside 가-힣 and NFKC maps it to U+110F, also outside.
    assert_eq!(
        n.normalize("  안녕하세요, World! 123 ㅋㅋ 😀 "),
        "안녕하세요 world 123"
    );
    let n = Normalizer {
        keep_chars: Some("가-힣".parse().unwrap()),
        ..Normalizer::default()
    };
    assert_eq!(n.normalize("한국어 text"), "한국어 ");
}

#[test]
fn collapse_whitespace_joins_runs_and_trims() {
    let n = Normalizer {
        collapse_whitespace: true,
        ..Normalizer::default()
    };
    assert_eq!(n.normalize(" a \t\n b\u{3000}\u{1c}c  "), "a b c");
    assert_eq!(n.normalize("   "), "");
    assert_eq!(n.normalize(""), "");
}

#[test]
fn unchanged_text_stays_borrowed() {
    let identity = Normalizer::default();
    assert!(identity.is_identity());
    assert!(matches!(
        identity.normalize(" Any Text! "),
        Cow::Borrowed(" Any Text! ")
    ));
    let n = all_steps(Some("a-z0-9"));
    assert!(!n.is_identity());
    assert!(matches!(
        n.normalize("already normal 42"),
        Cow::Borrowed("already normal 42")
    ));
    assert!(matches!(
        n.normalize("  trimmed only  "),
        Cow::Borrowed("trimmed only")
    ));
    assert!(matches!(n.normalize("Changed"), Cow::Owned(_)));
}

#[test]
fn char_class_specs_parse_ranges_escapes_and_errors() {
    let set: CharClassSet = "a-c\\-x".parse().unwrap();
    for c in ['a', 'b', 'c', '-', 'x'] {
        assert!(set.contains(c), "{c}");
    }
    for c in ['d', 'w', 'y', '\\'] {
        assert!(!set.contains(c), "{c}");
    }
    let dash_ends: CharClassSet = "-a".parse().unwrap();
    assert!(dash_ends.contains('-') && dash_ends.contains('a') && !dash_ends.contains('b'));
    assert!("z-a".parse::<CharClassSet>().is_err());
    assert!("ab\\".parse::<CharClassSet>().is_err());
    assert!("".parse::<CharClassSet>().is_err());
    let korean: CharClassSet = "가-힣".parse().unwrap();
    assert!(korean.contains('한') && !korean.contains('ㅋ') && !korean.contains('a'));
    assert_eq!(korean.spec(), "가-힣");
}

#[test]
fn normalizer_serialises_with_the_spec_string() {
    let n = all_steps(Some("0-9a-z가-힣"));
    let json = serde_json::to_string(&n).unwrap();
    assert!(json.contains("\"keep_chars\":\"0-9a-z가-힣\""), "{json}");
    let back: Normalizer = serde_json::from_str(&json).unwrap();
    assert_eq!(back, n);
    assert!(serde_json::from_str::<CharClassSet>("\"z-a\"").is_err());
}
