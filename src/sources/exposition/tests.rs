use super::*;

#[test]
fn floats_follow_go_spelling() {
    for (s, v) in [("1", 1.0), ("-2.5", -2.5), ("1e-05", 1e-5), ("3.0", 3.0), ("+Inf", f64::INFINITY)] {
        assert_eq!(parse_float(s), Some(v), "{s}");
    }
    assert_eq!(parse_float("-Inf"), Some(f64::NEG_INFINITY));
    assert_eq!(parse_float("Inf"), Some(f64::INFINITY));
    assert!(parse_float("NaN").is_some_and(f64::is_nan));
    for bad in ["", "1_000", "0x1p-2", "1,5", "true", "1e", "."] {
        assert_eq!(parse_float(bad), None, "{bad}");
    }
}

#[test]
fn openmetrics_timestamps_become_milliseconds() {
    assert_eq!(om_timestamp("1520879607.789"), Ok(Some(1_520_879_607_789)));
    assert_eq!(om_timestamp("123.4"), Ok(Some(123_400)));
    assert_eq!(om_timestamp("-1.5"), Ok(Some(-1_500)));
    assert_eq!(om_timestamp("1e3"), Ok(Some(1_000_000)));
    // A number past i64 milliseconds: the sample stands without its timestamp.
    assert_eq!(om_timestamp("1e300"), Ok(None));
    for bad in ["NaN", "+Inf", "-Inf", "x"] {
        assert_eq!(om_timestamp(bad), Err(()), "{bad}");
    }
}

#[test]
fn names_allow_colons_only_in_metric_names() {
    assert_eq!(metric_name_len(b"vllm:num_requests_running{"), 25);
    assert_eq!(metric_name_len(b":a 1"), 2);
    assert_eq!(metric_name_len(b"9x"), 0);
    assert_eq!(label_name_len(b"{model_name=", 1), 11);
    assert_eq!(label_name_len(b"{a:b=", 1), 2);
    assert_eq!(label_name_len(b"{:a=", 1), 1);
}

#[test]
fn roles_by_type_and_format() {
    assert_eq!(roles(MetricType::Counter, false), [Role::Bare]);
    assert_eq!(roles(MetricType::Counter, true), [Role::Total, Role::Created]);
    assert!(has_suffixed_samples(MetricType::Histogram, false));
    assert!(!has_suffixed_samples(MetricType::Gauge, true));
    // No sample name ends in two of the suffixes.
    for a in SUFFIXED {
        for b in SUFFIXED {
            assert!(a == b || !a.suffix().ends_with(b.suffix()), "{a:?} {b:?}");
        }
    }
}

#[test]
fn quoted_values_borrow_unless_escaped() {
    let (v, next) = parse_quoted(r#"a="x}y,z" 1"#, 3, "a").unwrap();
    assert!(matches!(v, Cow::Borrowed("x}y,z")));
    assert_eq!(next, 9);
    let (v, _) = parse_quoted(r#"a="q\"\\\nr""#, 3, "a").unwrap();
    assert!(matches!(v, Cow::Owned(_)));
    assert_eq!(v, "q\"\\\nr");
    assert_eq!(parse_quoted(r#"a="x\t""#, 3, "a").unwrap().0, "x\\t", "kept as written");
    assert!(parse_quoted(r#"a="x\"#, 3, "a").unwrap_err().contains("unterminated label value"));
    assert!(parse_quoted(r#"a="x"#, 3, "a").unwrap_err().contains("unterminated label value"));
}

#[test]
fn help_escapes_differ_by_format() {
    assert!(matches!(unescape_help("plain text", false), Cow::Borrowed("plain text")));
    assert_eq!(unescape_help(r"a\\b\nc", false), "a\\b\nc");
    assert_eq!(unescape_help(r#"say \"hi\""#, false), r#"say \"hi\""#, "no escape in text help");
    assert_eq!(unescape_help(r#"say \"hi\""#, true), "say \"hi\"");
    assert_eq!(unescape_help(r"tab\t end\", true), r"tab\t end\", "other backslashes kept");
}

#[test]
fn resolution_cache_is_dropped_when_a_family_appears() {
    let text = "# TYPE x histogram\nx_count 1\n# TYPE x_count gauge\nx_count 2\n";
    let families = parse(text, Format::Text).unwrap();
    assert_eq!(families.len(), 2);
    assert_eq!(families[0].samples.len(), 1);
    assert_eq!((families[1].name, families[1].samples[0].value), ("x_count", 2.0));
}

#[test]
fn error_snippets_are_bounded_and_cut_on_char_boundaries() {
    let long = "é".repeat(100);
    let s = shown(&long);
    assert_eq!(s.chars().count(), 48 + 3);
    assert_eq!(shown("short"), "short");
}

#[test]
fn duplicate_labels_are_found_in_small_and_large_sets() {
    let small: Vec<(&str, Cow<str>)> = vec![("a", "1".into()), ("b", "2".into()), ("a", "3".into())];
    assert_eq!(check_duplicate_labels(&small).unwrap_err(), "duplicate label `a`");
    let names: Vec<String> = (0..40).map(|i| format!("l{i}")).collect();
    let mut large: Vec<(&str, Cow<str>)> = names.iter().map(|n| (n.as_str(), "v".into())).collect();
    assert!(check_duplicate_labels(&large).is_ok());
    large.push(("l7", "w".into()));
    assert_eq!(check_duplicate_labels(&large).unwrap_err(), "duplicate label `l7`");
}
