//! Black-box tests of the exposition parser: table tests for each rule of the
//! text 0.0.4 and OpenMetrics 1.0 formats, a corpus of real bodies (vLLM V1
//! and V0, KServe, OpenMetrics), and property tests (no panic on any input;
//! render -> parse round trip). `PROPTEST_CASES` sets the number of cases per
//! property (default 2048).

use std::{borrow::Cow, collections::BTreeMap, path::Path};

use foresight::sources::exposition::{parse, Family, Format, MetricType, ParseError, Sample};
use proptest::prelude::*;

fn text(body: &str) -> Vec<Family<'_>> {
    parse(body, Format::Text).unwrap_or_else(|e| panic!("{e}\n--- body:\n{body}"))
}

fn om(body: &str) -> Vec<Family<'_>> {
    parse(body, Format::OpenMetrics).unwrap_or_else(|e| panic!("{e}\n--- body:\n{body}"))
}

fn error(body: &str, format: Format) -> ParseError {
    match parse(body, format) {
        Ok(families) => panic!("expected an error for {body:?}, got {families:#?}"),
        Err(e) => e,
    }
}

fn family<'f, 'a>(families: &'f [Family<'a>], name: &str) -> &'f Family<'a> {
    families.iter().find(|f| f.name == name).unwrap_or_else(|| {
        let names: Vec<_> = families.iter().map(|f| f.name).collect();
        panic!("no family `{name}` among {names:?}")
    })
}

fn names<'a>(families: &[Family<'a>]) -> Vec<&'a str> {
    families.iter().map(|f| f.name).collect()
}

fn sample_names<'a>(family: &Family<'a>) -> Vec<&'a str> {
    family.samples.iter().map(|s| s.name).collect()
}

fn labels<'a>(sample: &'a Sample<'_>) -> Vec<(&'a str, &'a str)> {
    sample.labels.iter().map(|(k, v)| (*k, v.as_ref())).collect()
}

// ---------------------------------------------------------------- names, labels, escapes

/// prometheus_client >= 0.23 asked for OpenMetrics answers `escaping=underscores`:
/// TYPE lines keep `vllm:`, samples say `vllm_`. They are still that family's samples.
#[test]
fn underscore_escaped_samples_belong_to_their_declared_family() {
    let f = om(concat!(
        "# TYPE vllm:num_requests_running gauge\n",
        "vllm_num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n",
        "# TYPE vllm:request_success counter\n",
        "vllm_request_success_total{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"} 5.0\n",
        "vllm_request_success_created{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"} 1.7e+09\n",
        "# TYPE vllm:request_queue_time_seconds histogram\n",
        "vllm_request_queue_time_seconds_bucket{engine=\"0\",le=\"0.1\",model_name=\"m\"} 0.0\n",
        "vllm_request_queue_time_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 1.0\n",
        "vllm_request_queue_time_seconds_count{engine=\"0\",model_name=\"m\"} 1.0\n",
        "vllm_request_queue_time_seconds_sum{engine=\"0\",model_name=\"m\"} 0.5\n",
        "# EOF\n",
    ));
    assert_eq!(names(&f), ["vllm:num_requests_running", "vllm:request_success", "vllm:request_queue_time_seconds"]);
    assert_eq!(f[0].kind, MetricType::Gauge);
    assert_eq!(sample_names(&f[0]), ["vllm_num_requests_running"], "samples keep the name as written");
    assert_eq!(sample_names(&f[1]), ["vllm_request_success_total", "vllm_request_success_created"]);
    assert_eq!(f[2].kind, MetricType::Histogram);
    assert_eq!(f[2].samples.len(), 4);
    // Text bodies too (a proxy may rewrite either way); an exact name still wins.
    let f = text("# TYPE a:b gauge\na_b 1\n# TYPE c:d gauge\n# TYPE c_d counter\nc_d 2\n");
    assert_eq!(sample_names(family(&f, "a:b")), ["a_b"]);
    assert!(family(&f, "c:d").samples.is_empty());
    assert_eq!(sample_names(family(&f, "c_d")), ["c_d"]);
    // A suffix the declared type does not have is an error, as for the exact spelling.
    let e = error("# TYPE vllm:g gauge\n# TYPE vllm:h histogram\nvllm_h_total 1\n", Format::Text);
    assert!(e.message.contains("is not a sample of histogram `vllm:h`"), "{e}");
}

#[test]
fn metric_names_keep_their_colons() {
    let f = text(concat!(
        "# TYPE vllm:num_requests_running gauge\n",
        "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n",
        ":leading 1\n",
        "a:b:c 2\n",
        "_under 3\n",
    ));
    assert_eq!(names(&f), ["vllm:num_requests_running", ":leading", "a:b:c", "_under"]);
    assert_eq!(f[0].kind, MetricType::Gauge);
    assert_eq!(f[0].samples[0].name, "vllm:num_requests_running");
    assert_eq!(f[0].samples[0].value, 3.0);
    let f = om("# TYPE vllm:x gauge\nvllm:x 1\n# EOF\n");
    assert_eq!(f[0].samples[0].name, "vllm:x");
}

#[test]
fn invalid_names_are_errors() {
    for (body, line, message) in [
        ("9x 1\n", 1, "invalid metric name `9x`"),
        ("ok 1\nbad-name 1\n", 2, "invalid metric name `bad-name`"),
        ("x{a:b=\"1\"} 1\n", 1, "invalid label name `a:b`"),
        ("x{9a=\"1\"} 1\n", 1, "invalid label name `9a`"),
        ("x{=\"1\"} 1\n", 1, "invalid label name ``"),
        ("x{,} 1\n", 1, "invalid label name ``"),
        ("x{a=\"1\",,b=\"2\"} 1\n", 1, "invalid label name ``"),
        ("# TYPE 9x gauge\n", 1, "invalid metric name `9x`"),
        ("# HELP a.b help\n", 1, "invalid metric name `a.b`"),
        ("é 1\n", 1, "invalid metric name `é`"),
        ("{a=\"b\"} 1\n", 1, "invalid metric name ``"),
    ] {
        let e = error(body, Format::Text);
        assert_eq!((e.line, e.message.as_str()), (line, message), "{body:?}");
    }
}

#[test]
fn label_values_unescape_and_may_hold_braces_and_commas() {
    let body = concat!(r#"x{a="q\"uote",b="back\\slash",c="new\nline",d="}",e=",",f="{=#} , }",g="",h="é ✓"} 1"#, "\n");
    let f = text(body);
    let s = &f[0].samples[0];
    assert_eq!(
        labels(s),
        [
            ("a", "q\"uote"),
            ("b", "back\\slash"),
            ("c", "new\nline"),
            ("d", "}"),
            ("e", ","),
            ("f", "{=#} , }"),
            ("g", ""),
            ("h", "é ✓")
        ]
    );
    assert_eq!(s.value, 1.0);
    // The same line is valid OpenMetrics.
    let body_om = format!("{body}# EOF\n");
    assert_eq!(om(&body_om)[0].samples[0].labels, s.labels);
}

#[test]
fn label_values_borrow_from_the_body_unless_escaped() {
    let f = text("x{plain=\"abc\",escaped=\"a\\\"b\"} 1\n# HELP y plain help\ny 2\n");
    let s = &f[0].samples[0];
    assert!(matches!(s.labels[0].1, Cow::Borrowed("abc")));
    assert!(matches!(s.labels[1].1, Cow::Owned(_)));
    assert!(matches!(f[1].help, Some(Cow::Borrowed("plain help"))));
}

#[test]
fn label_value_errors() {
    for (body, line, message) in [
        ("x{a=\"open} 1\n", 1, "unterminated label value for `a`"),
        ("ok 1\nx{a=\"ends\\\"} 1\n", 2, "unterminated label value for `a`"),
        ("x{a=unquoted} 1\n", 1, "expected a quoted value for label `a`"),
        ("x{a='single'} 1\n", 1, "expected a quoted value for label `a`"),
        ("x{a} 1\n", 1, "expected `=` after label name `a`"),
        ("x{a=\"1\" b=\"2\"} 1\n", 1, "expected `,` or `}` after the value of label `a`"),
        ("x{a=\"1\"\n", 1, "unterminated label set (missing `}`)"),
        ("x{a=\"1\",\n", 1, "unterminated label set (missing `}`)"),
        ("x{a=\"1\",a=\"2\"} 1\n", 1, "duplicate label `a`"),
    ] {
        let e = error(body, Format::Text);
        assert_eq!((e.line, e.message.as_str()), (line, message), "{body:?}");
    }
}

#[test]
fn trailing_comma_is_text_only() {
    let f = text("x{a=\"1\",} 1\ny{} 2\n");
    assert_eq!(labels(&f[0].samples[0]), [("a", "1")]);
    assert!(f[1].samples[0].labels.is_empty());
    om("y{} 2\n# EOF\n");
    let e = error("x{a=\"1\",} 1\n# EOF\n", Format::OpenMetrics);
    assert_eq!((e.line, e.message.as_str()), (1, "trailing comma in a label set (not allowed in OpenMetrics)"));
}

#[test]
fn help_text_escapes() {
    let f = text("# HELP x Line one\\nline two, a \\\\ backslash and \"quotes\".\n# HELP y\n# HELP z \t \nx 1\n");
    assert_eq!(f[0].help.as_deref(), Some("Line one\nline two, a \\ backslash and \"quotes\"."));
    assert_eq!(f[1].help.as_deref(), Some(""));
    assert_eq!(f[2].help.as_deref(), Some(""), "blanks after the name are separators");
    // `\"` is an escape in OpenMetrics help only: text keeps it as written.
    assert_eq!(text("# HELP x say \\\"hi\\\"\n")[0].help.as_deref(), Some("say \\\"hi\\\""));
    let f = om("# HELP x say \\\"hi\\\" \\\\ \\n\n# EOF\n");
    assert_eq!(f[0].help.as_deref(), Some("say \"hi\" \\ \n"));
    let f = om("# HELP x \n# HELP y  two leading spaces kept\n# EOF\n");
    assert_eq!(f[0].help.as_deref(), Some(""));
    assert_eq!(f[1].help.as_deref(), Some(" two leading spaces kept"));
    assert_eq!(error("# HELP x\n# EOF\n", Format::OpenMetrics).message, "expected text after `# HELP x`");
}

/// The OpenMetrics grammar allows a backslash before any character; what is
/// not one of the known escapes is kept as written, backslash included (as
/// Prometheus keeps it), in help texts and label values, in both formats. A
/// pod whose HELP holds a `\t` still has its samples read.
#[test]
fn other_escapes_are_kept_as_written() {
    let body = "# HELP x tab\\there, \\f, \\z and a lone \\\nx{a=\"b\\\\a\\z\",c=\"\\\u{e9}\\t\"} 3\n";
    for f in [text(body), om(&format!("{body}# EOF\n"))] {
        assert_eq!(f[0].help.as_deref(), Some("tab\\there, \\f, \\z and a lone \\"));
        assert_eq!(labels(&f[0].samples[0]), [("a", "b\\a\\z"), ("c", "\\\u{e9}\\t")]);
        assert_eq!(f[0].samples[0].value, 3.0);
    }
}

// ---------------------------------------------------------------- whitespace, lines, comments

#[test]
fn text_whitespace_is_spaces_or_tabs() {
    let f = text("  \tx { a = \"1\" ,\tb=\"2\" }\t 7 \t 1700000000000 \t\n\t# TYPE\ty\tgauge\t\ny\t8\n");
    assert_eq!(labels(&f[0].samples[0]), [("a", "1"), ("b", "2")]);
    assert_eq!((f[0].samples[0].value, f[0].samples[0].timestamp_ms), (7.0, Some(1_700_000_000_000)));
    assert_eq!((f[1].kind, f[1].samples[0].value), (MetricType::Gauge, 8.0));
    // A value may follow the closing brace directly, as Prometheus accepts.
    assert_eq!(text("x{a=\"1\"}5\n")[0].samples[0].value, 5.0);
}

#[test]
fn openmetrics_whitespace_is_single_spaces() {
    for (body, message) in [
        (" x 1\n# EOF\n", "leading whitespace (not allowed in OpenMetrics)"),
        ("x\t1\n# EOF\n", "expected a space before the value of `x`"),
        ("x  1\n# EOF\n", "more than one space before the value of `x` (OpenMetrics uses single spaces)"),
        ("x 1 \n# EOF\n", "trailing space after `x` (not allowed in OpenMetrics)"),
        ("x 1  2\n# EOF\n", "more than one space after the value of `x` (OpenMetrics uses single spaces)"),
        ("x 1 2 \n# EOF\n", "trailing space after `x` (not allowed in OpenMetrics)"),
        ("x{a=\"1\"}1\n# EOF\n", "expected a space before the value of `x`"),
        ("x {a=\"1\"} 1\n# EOF\n", "invalid value `{a=\"1\"}` for `x`"),
        ("x{a = \"1\"} 1\n# EOF\n", "expected `=` after label name `a`"),
        ("# TYPE x  gauge\n# EOF\n", "unknown metric type ` gauge` for `x`"),
        ("# TYPE x gauge \n# EOF\n", "unknown metric type `gauge ` for `x`"),
        ("#  TYPE x gauge\n# EOF\n", "OpenMetrics allows only # HELP, # TYPE, # UNIT and # EOF comments"),
    ] {
        let e = error(body, Format::OpenMetrics);
        assert_eq!(e.line, 1, "{body:?}");
        assert!(e.message.contains(message), "{body:?}: {}", e.message);
    }
}

#[test]
fn text_comments_and_blank_lines_are_ignored() {
    let f = text(concat!(
        "\n",
        "# a free comment\n",
        "#no space after the hash\n",
        "#\n",
        "# HELP\n",
        "# TYPE\n",
        "# UNIT x seconds\n",
        "# EOF\n",
        "   \t \n",
        "# HELP x The x.\n",
        "\n",
        "# TYPE x counter\n",
        "x 1\n",
        "# another comment between samples\n",
        "x{a=\"b\"} 2\n",
    ));
    assert_eq!(f.len(), 1);
    assert_eq!((f[0].kind, f[0].help.as_deref(), f[0].unit), (MetricType::Counter, Some("The x."), None));
    assert_eq!(f[0].samples.len(), 2);
}

#[test]
fn openmetrics_rejects_comments_and_blank_lines() {
    for (body, line, message) in [
        ("# a comment\n# EOF\n", 1, "invalid line `# a comment`"),
        ("x 1\n\n# EOF\n", 2, "empty line (not allowed in OpenMetrics)"),
        ("#\n# EOF\n", 1, "invalid line `#`"),
        ("# HELP\n# EOF\n", 1, "invalid line `# HELP`"),
        ("# TYPE \n# EOF\n", 1, "expected a metric name after `# TYPE`"),
    ] {
        let e = error(body, Format::OpenMetrics);
        assert_eq!(e.line, line, "{body:?}");
        assert!(e.message.contains(message), "{body:?}: {}", e.message);
    }
}

/// CRLF is rejected: Prometheus's own lexers leave the `\r` in the value or
/// timestamp token and fail; we say why instead.
#[test]
fn crlf_line_endings_are_rejected() {
    for format in [Format::Text, Format::OpenMetrics] {
        let e = error("# TYPE x gauge\r\nx 1\r\n# EOF\r\n", format);
        assert_eq!(e.line, 1);
        assert!(e.message.contains("CRLF line endings are not supported"), "{}", e.message);
    }
    let e = error("x 1\n\r\n", Format::Text);
    assert_eq!(e.line, 2);
    // A carriage return inside a label value is data.
    assert_eq!(text("x{a=\"1\r2\"} 1\n")[0].samples[0].label("a"), Some("1\r2"));
}

#[test]
fn the_last_text_line_may_lack_its_newline() {
    let f = text("# TYPE x gauge\nx 1");
    assert_eq!(f[0].samples[0].value, 1.0);
    assert!(text("").is_empty());
    assert!(text("\n\n").is_empty());
}

// ---------------------------------------------------------------- values and timestamps

#[test]
fn values_are_go_floats() {
    let body =
        "a NaN\nb +Inf\nc -Inf\nd Inf\ne 1e-05\nf -0.0\ng 1.5E+10\nh 42\ni 3.0\nj .5\nk 1.7452287345487082e+09\n";
    let f = text(body);
    let v: Vec<f64> = f.iter().map(|f| f.samples[0].value).collect();
    assert!(v[0].is_nan());
    assert_eq!(
        &v[1..],
        [f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY, 1e-5, -0.0, 1.5e10, 42.0, 3.0, 0.5, 1_745_228_734.548_708_2]
    );
    assert!(v[5].is_sign_negative());
    let om_body = format!("{body}# EOF\n");
    let g = om(&om_body);
    assert!(g[0].samples[0].value.is_nan());
    assert_eq!(g[1].samples[0].value, f64::INFINITY);
    for bad in ["1,5", "0x1p-3", "1_000", "true", "--1", "1e"] {
        let e = error(&format!("x {bad}\n"), Format::Text);
        assert_eq!(e.message, format!("invalid value `{bad}` for `x`"));
    }
    for body in ["x\n", "x{a=\"b\"}\n", "x{a=\"b\"}   \n", "x"] {
        assert_eq!(error(body, Format::Text).message, "expected a value after `x`", "{body:?}");
    }
    assert_eq!(error("x\n# EOF\n", Format::OpenMetrics).message, "expected a value after `x`");
}

#[test]
fn text_timestamps_are_integer_milliseconds() {
    let f = text("a 1 1700000000123\nb 1 -5\nc 1 +7\n");
    let ts: Vec<_> = f.iter().map(|f| f.samples[0].timestamp_ms).collect();
    assert_eq!(ts, [Some(1_700_000_000_123), Some(-5), Some(7)]);
    // An integer past i64 milliseconds costs the sample its timestamp, not the body its samples.
    let f = text("a 1 99999999999999999999\nb 2 -99999999999999999999\n");
    assert_eq!(
        f.iter().map(|f| (f.samples[0].value, f.samples[0].timestamp_ms)).collect::<Vec<_>>(),
        [(1.0, None), (2.0, None)]
    );
    for (body, message) in [
        ("a 1 1.5\n", "invalid timestamp `1.5` for `a`"),
        ("a 1 1e3\n", "invalid timestamp `1e3` for `a`"),
        ("a 1 2 3\n", "unexpected `3` after the timestamp of `a`"),
        ("a 1 # {t=\"1\"} 1\n", "unexpected `#` after the value of `a` (exemplars are OpenMetrics-only)"),
    ] {
        assert_eq!(error(body, Format::Text).message, message, "{body:?}");
    }
}

#[test]
fn openmetrics_timestamps_are_float_seconds() {
    let f = om("a 1 1700000000.123\nb 1 1700000000\nc 1 -1.5\nd 1 1.7e9\n# EOF\n");
    let ts: Vec<_> = f.iter().map(|f| f.samples[0].timestamp_ms).collect();
    assert_eq!(ts, [Some(1_700_000_000_123), Some(1_700_000_000_000), Some(-1_500), Some(1_700_000_000_000)]);
    let f = om("a 1 12345678901234567890.1234567890\nb 2 -1e300\n# EOF\n");
    assert_eq!(
        f.iter().map(|f| (f.samples[0].value, f.samples[0].timestamp_ms)).collect::<Vec<_>>(),
        [(1.0, None), (2.0, None)]
    );
    for bad in ["NaN", "+Inf", "-Inf", "x"] {
        let e = error(&format!("a 1 {bad}\n# EOF\n"), Format::OpenMetrics);
        assert_eq!(e.message, format!("invalid timestamp `{bad}` for `a`"));
    }
    let e = error("a 1 2 3\n# EOF\n", Format::OpenMetrics);
    assert_eq!(e.message, "unexpected `3` after the timestamp of `a`");
}

// ---------------------------------------------------------------- families by TYPE

#[test]
fn histograms_are_grouped_by_type_not_suffix() {
    let body = concat!(
        "# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.\n",
        "# TYPE vllm:iteration_tokens_total histogram\n",
        "vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"1.0\",model_name=\"m\"} 3.0\n",
        "vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 5.0\n",
        "vllm:iteration_tokens_total_count{engine=\"0\",model_name=\"m\"} 5.0\n",
        "vllm:iteration_tokens_total_sum{engine=\"0\",model_name=\"m\"} 70.0\n",
        "# HELP vllm:iteration_tokens_total_created Histogram of number of tokens per engine_step.\n",
        "# TYPE vllm:iteration_tokens_total_created gauge\n",
        "vllm:iteration_tokens_total_created{engine=\"0\",model_name=\"m\"} 1.7e+09\n",
    );
    let f = text(body);
    assert_eq!(names(&f), ["vllm:iteration_tokens_total", "vllm:iteration_tokens_total_created"]);
    let h = &f[0];
    assert_eq!(h.kind, MetricType::Histogram);
    assert_eq!(
        sample_names(h),
        [
            "vllm:iteration_tokens_total_bucket",
            "vllm:iteration_tokens_total_bucket",
            "vllm:iteration_tokens_total_count",
            "vllm:iteration_tokens_total_sum"
        ]
    );
    assert_eq!(h.samples[1].label("le"), Some("+Inf"));
    assert_eq!(f[1].kind, MetricType::Gauge);
}

#[test]
fn a_gauge_named_x_count_is_not_part_of_histogram_x() {
    // The gauge declared after and before the histogram.
    for body in [
        concat!(
            "# TYPE x histogram\nx_bucket{le=\"+Inf\"} 2\nx_count 2\nx_sum 3\n",
            "# TYPE x_count gauge\nx_count{pool=\"a\"} 99\n"
        ),
        "# TYPE x_count gauge\nx_count{pool=\"a\"} 99\n# TYPE x histogram\nx_bucket{le=\"+Inf\"} 2\nx_sum 3\n",
    ] {
        let f = text(body);
        let gauge = family(&f, "x_count");
        assert_eq!(gauge.kind, MetricType::Gauge);
        assert_eq!(gauge.samples.len(), 1, "{body}");
        assert_eq!((gauge.samples[0].value, gauge.samples[0].label("pool")), (99.0, Some("a")));
        let x = family(&f, "x");
        assert_eq!(x.kind, MetricType::Histogram);
        assert!(x.samples.iter().all(|s| s.value != 99.0), "{body}");
    }
    // A counter whose name ends in `_sum` beside a summary.
    let f = text("# TYPE y summary\ny_count 1\n# TYPE y_sum counter\ny_sum 5\n");
    assert_eq!(family(&f, "y_sum").kind, MetricType::Counter);
    assert_eq!(sample_names(family(&f, "y_sum")), ["y_sum"]);
    assert_eq!(sample_names(family(&f, "y")), ["y_count"]);
}

#[test]
fn suffixed_names_without_a_claiming_family_are_their_own_families() {
    // Gauges and untyped families own only their exact name.
    let f = text("# TYPE g gauge\ng 1\ng_count 2\nu 1\nu_bucket{le=\"1\"} 2\nlone_sum 3\n");
    assert_eq!(names(&f), ["g", "g_count", "u", "u_bucket", "lone_sum"]);
    assert_eq!(f[1].kind, MetricType::Untyped);
    assert_eq!(f[4].kind, MetricType::Untyped);
}

#[test]
fn suffixes_the_type_does_not_allow_are_errors() {
    for (body, format, line, message) in [
        (
            "# TYPE x histogram\nx 1\n",
            Format::Text,
            2,
            "`x` is not a sample of histogram `x`: expected `x_bucket`, `x_sum`, `x_count` or `x_created`",
        ),
        ("# TYPE x histogram\nx_total 1\n", Format::Text, 2, "`x_total` is not a sample of histogram `x`"),
        ("# TYPE x histogram\nx_gsum 1\n", Format::Text, 2, "`x_gsum` is not a sample of histogram `x`"),
        (
            "# TYPE x summary\nx_bucket{le=\"1\"} 1\n",
            Format::Text,
            2,
            "`x_bucket` is not a sample of summary `x`: expected `x`, `x_sum`, `x_count` or `x_created`",
        ),
        (
            "# TYPE x counter\nx 1\n# EOF\n",
            Format::OpenMetrics,
            2,
            "`x` is not a sample of counter `x`: expected `x_total` or `x_created`",
        ),
        ("# TYPE x counter\nx_count 1\n# EOF\n", Format::OpenMetrics, 2, "`x_count` is not a sample of counter `x`"),
        (
            "# TYPE x gaugehistogram\nx_sum 1\n# EOF\n",
            Format::OpenMetrics,
            2,
            "expected `x_bucket`, `x_gcount` or `x_gsum`",
        ),
        ("# TYPE x info\nx 1\n# EOF\n", Format::OpenMetrics, 2, "`x` is not a sample of info `x`: expected `x_info`"),
        ("# TYPE x histogram\nx_bucket 1\n", Format::Text, 2, "`x_bucket` has no `le` label"),
        ("# TYPE x histogram\nx_bucket{le=\"big\"} 1\n", Format::Text, 2, "invalid `le` value `big` on `x_bucket`"),
        ("# TYPE x summary\nx 1\n", Format::Text, 2, "`x` has no `quantile` label"),
        ("# TYPE x summary\nx{quantile=\"p99\"} 1\n", Format::Text, 2, "invalid `quantile` value `p99` on `x`"),
    ] {
        let e = error(body, format);
        assert_eq!(e.line, line, "{body:?}");
        assert!(e.message.contains(message), "{body:?}: {}", e.message);
    }
}

#[test]
fn summaries_own_quantiles_sum_count_and_created() {
    let f = text(concat!(
        "# TYPE rpc summary\n",
        "rpc{quantile=\"0.5\"} 0.2\n",
        "rpc{quantile=\"0.99\"} 1.5\n",
        "rpc_sum 120.5\n",
        "rpc_count 600\n",
        "rpc_created 1.7e9\n",
    ));
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].kind, MetricType::Summary);
    assert_eq!(sample_names(&f[0]), ["rpc", "rpc", "rpc_sum", "rpc_count", "rpc_created"]);
    assert_eq!(f[0].samples[1].label("quantile"), Some("0.99"));
}

#[test]
fn counters_text_vs_openmetrics_naming() {
    // Text (as Python's prometheus_client writes it): TYPE names the `_total`
    // sample, `_created` is its own gauge family.
    let f = text(concat!(
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n",
        "# TYPE vllm:prompt_tokens_total counter\n",
        "vllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"} 1.048804e+06\n",
        "# HELP vllm:prompt_tokens_created Number of prefill tokens processed.\n",
        "# TYPE vllm:prompt_tokens_created gauge\n",
        "vllm:prompt_tokens_created{engine=\"0\",model_name=\"m\"} 1.7452287345487082e+09\n",
    ));
    assert_eq!(names(&f), ["vllm:prompt_tokens_total", "vllm:prompt_tokens_created"]);
    assert_eq!((f[0].kind, f[0].samples[0].value), (MetricType::Counter, 1_048_804.0));
    assert_eq!(f[1].kind, MetricType::Gauge);
    // In text a counter owns only its exact name: `foo_total` under `# TYPE foo counter` is untyped.
    let f = text("# TYPE foo counter\nfoo_total 1\n");
    assert_eq!((f[0].name, f[0].samples.len()), ("foo", 0));
    assert_eq!((f[1].name, f[1].kind), ("foo_total", MetricType::Untyped));
    // OpenMetrics: TYPE names the family, samples carry `_total` and `_created`.
    let f = om(concat!(
        "# HELP vllm:prompt_tokens Number of prefill tokens processed.\n",
        "# TYPE vllm:prompt_tokens counter\n",
        "vllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"} 1.048804e+06\n",
        "vllm:prompt_tokens_created{engine=\"0\",model_name=\"m\"} 1.7452287345487082e+09\n",
        "# EOF\n",
    ));
    assert_eq!(names(&f), ["vllm:prompt_tokens"]);
    assert_eq!(sample_names(&f[0]), ["vllm:prompt_tokens_total", "vllm:prompt_tokens_created"]);
}

#[test]
fn created_samples_join_histograms_unless_declared_apart() {
    let f = text("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum 2\nh_created 1.7e9\n");
    assert_eq!(sample_names(&f[0]), ["h_bucket", "h_count", "h_sum", "h_created"]);
    let f = om("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum 2\nh_created 1.7e9\n# EOF\n");
    assert_eq!(f[0].samples[3].value, 1.7e9);
}

#[test]
fn openmetrics_only_types() {
    let f = om(concat!(
        "# TYPE q gaugehistogram\n",
        "q_bucket{le=\"1\"} 2\n",
        "q_bucket{le=\"+Inf\"} 3\n",
        "q_gcount 3\n",
        "q_gsum 2.5\n",
        "# TYPE build info\n",
        "build_info{version=\"1.2\"} 1\n",
        "# TYPE state stateset\n",
        "state{state=\"a\"} 1\n",
        "state{state=\"b\"} 0\n",
        "# TYPE u unknown\n",
        "u 1\n",
        "# EOF\n",
    ));
    let kinds: Vec<_> = f.iter().map(|f| (f.name, f.kind, f.samples.len())).collect();
    assert_eq!(
        kinds,
        [
            ("q", MetricType::GaugeHistogram, 4),
            ("build", MetricType::Info, 1),
            ("state", MetricType::StateSet, 2),
            ("u", MetricType::Unknown, 1)
        ]
    );
    for (body, format, message) in [
        ("# TYPE u untyped\n# EOF\n", Format::OpenMetrics, "unknown metric type `untyped` for `u`"),
        ("# TYPE i info\n", Format::Text, "unknown metric type `info` for `i`"),
        ("# TYPE g Gauge\n", Format::Text, "unknown metric type `Gauge` for `g`"),
        ("# TYPE g gauge extra\n", Format::Text, "unexpected `extra` after the type of `g`"),
        ("# TYPE g\n", Format::Text, "expected a metric type after `# TYPE g`"),
        ("# TYPE g\n# EOF\n", Format::OpenMetrics, "expected text after `# TYPE g`"),
    ] {
        assert_eq!(error(body, format).message, message, "{body:?}");
    }
}

#[test]
fn samples_without_type_are_implicit_families() {
    let f = text("a 1\nb 2\na{x=\"y\"} 3\n");
    assert_eq!(names(&f), ["a", "b"], "first-appearance order; a returning family is appended to");
    assert_eq!((f[0].kind, f[0].samples.len()), (MetricType::Untyped, 2));
    assert_eq!(f[0].samples[1].value, 3.0);
    let f = om("a 1\n# EOF\n");
    assert_eq!(f[0].kind, MetricType::Unknown);
    // A family with HELP only is still implicit in type.
    let f = text("# HELP h Help only.\nh 1\n");
    assert_eq!((f[0].kind, f[0].help.as_deref()), (MetricType::Untyped, Some("Help only.")));
}

#[test]
fn declared_families_without_samples_are_kept() {
    let f = text("# HELP empty Nothing observed yet.\n# TYPE empty histogram\n# TYPE next gauge\nnext 1\n");
    assert_eq!(names(&f), ["empty", "next"]);
    assert_eq!((f[0].kind, f[0].samples.len()), (MetricType::Histogram, 0));
}

#[test]
fn metadata_rules() {
    for (body, format, line, message) in [
        ("# TYPE x gauge\n# TYPE x counter\n", Format::Text, 2, "duplicate TYPE for `x`"),
        ("# HELP x a\n# HELP x b\n", Format::Text, 2, "duplicate HELP for `x`"),
        ("x 1\n# TYPE x gauge\n", Format::Text, 2, "TYPE for `x` after its samples"),
        ("x 1\n# HELP x late\n# EOF\n", Format::OpenMetrics, 2, "HELP for `x` after its samples"),
        (
            "# TYPE x_seconds gauge\nx_seconds 1\n# UNIT x_seconds seconds\n# EOF\n",
            Format::OpenMetrics,
            3,
            "UNIT for `x_seconds` after its samples",
        ),
        (
            "# UNIT x_seconds seconds\n# UNIT x_seconds seconds\n# EOF\n",
            Format::OpenMetrics,
            2,
            "duplicate UNIT for `x_seconds`",
        ),
        ("# UNIT x seconds\n# EOF\n", Format::OpenMetrics, 1, "unit `seconds` is not a suffix of `x`"),
        ("# UNIT xseconds seconds\n# EOF\n", Format::OpenMetrics, 1, "unit `seconds` is not a suffix of `xseconds`"),
        ("# UNIT x_seconds\n# EOF\n", Format::OpenMetrics, 1, "expected text after `# UNIT x_seconds`"),
        ("# HELP \n", Format::Text, 1, "expected a metric name after `# HELP`"),
    ] {
        let e = error(body, format);
        assert_eq!((e.line, e.message.as_str()), (line, message), "{body:?}");
    }
    // HELP after samples is fine in text (Prometheus's text parser allows it).
    let f = text("x 1\n# HELP x late\n");
    assert_eq!(f[0].help.as_deref(), Some("late"));
}

#[test]
fn units_are_openmetrics_only() {
    let f = om(concat!(
        "# TYPE vllm:e2e_request_latency_seconds histogram\n",
        "# UNIT vllm:e2e_request_latency_seconds seconds\n",
        "# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.\n",
        "vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\"} 0\n",
        "# UNIT nothing \n",
        "# EOF\n",
    ));
    assert_eq!(f[0].unit, Some("seconds"));
    assert_eq!(f[1].unit, Some(""), "an empty unit is allowed");
    // In text, `# UNIT` is a comment.
    let f = text("# UNIT x_seconds seconds\nx_seconds 1\n");
    assert_eq!(f[0].unit, None);
}

// ---------------------------------------------------------------- exemplars and # EOF

#[test]
fn exemplars_are_parsed_and_dropped() {
    let f = om(concat!(
        "# TYPE x histogram\n",
        "x_bucket{le=\"1\"} 3 # {trace_id=\"a\"} 0.5 123.4\n",
        "x_bucket{le=\"+Inf\"} 4 # {trace_id=\"b\",span_id=\"c\\\"d\"} 2\n",
        "x_bucket{le=\"+Inf\",z=\"1\"} 4 1700000000.5 # {} 2 1700000000.25\n",
        "x_count 4\n",
        "# TYPE c counter\n",
        "c_total 7 # {request_id=\"r-1\"} 1.0 1745228734.5757082\n",
        "# EOF\n",
    ));
    let x = &f[0];
    assert_eq!(x.samples[0].value, 3.0);
    assert_eq!(labels(&x.samples[1]), [("le", "+Inf")]);
    assert_eq!(x.samples[2].timestamp_ms, Some(1_700_000_000_500));
    assert_eq!(f[1].samples[0].value, 7.0);
    for (body, message) in [
        ("c_total 1 #{a=\"b\"} 1\n# EOF\n", "invalid exemplar on `c_total`"),
        ("c_total 1 # {a=\"b\"}\n# EOF\n", "expected a value after the exemplar labels of `c_total`"),
        ("c_total 1 # {a=\"b\"} x\n# EOF\n", "invalid exemplar value `x` on `c_total`"),
        ("c_total 1 # {a=\"b\"} 1 NaN\n# EOF\n", "invalid exemplar timestamp `NaN` on `c_total`"),
        ("c_total 1 # {a=\"b\"} 1 2 3\n# EOF\n", "unexpected ` 3` after the exemplar of `c_total`"),
        ("c_total 1 # {a=b} 1\n# EOF\n", "in the exemplar of `c_total`: expected a quoted value for label `a`"),
        ("c_total 1 # {a=\"b\n# EOF\n", "in the exemplar of `c_total`: unterminated label value for `a`"),
    ] {
        let e = error(body, Format::OpenMetrics);
        assert_eq!(e.line, 1, "{body:?}");
        assert!(e.message.contains(message), "{body:?}: {}", e.message);
    }
}

#[test]
fn openmetrics_eof_rules() {
    assert!(om("# EOF\n").is_empty());
    assert!(om("# EOF").is_empty());
    assert_eq!(om("x 1\n# EOF")[0].samples.len(), 1);
    for (body, line, message) in [
        ("", 1, "missing # EOF"),
        ("x 1\n", 2, "missing # EOF"),
        ("x 1", 1, "missing # EOF"),
        ("x 1\n# TYPE y gauge\n", 3, "missing # EOF"),
        ("# EOF\nx 1\n", 2, "content after # EOF"),
        ("# EOF\n\n", 2, "content after # EOF"),
        ("x 1\n# EOF\n# EOF\n", 3, "content after # EOF"),
        ("# EOF \n", 1, "invalid line `# EOF `"),
        ("# EOFx\n", 1, "invalid line `# EOFx`"),
    ] {
        let e = error(body, Format::OpenMetrics);
        assert_eq!(e.line, line, "{body:?}");
        assert!(e.message.contains(message), "{body:?}: {}", e.message);
    }
}

#[test]
fn errors_report_the_first_bad_line() {
    let body = "# TYPE a gauge\na 1\n\n# comment\nb{x=\"1\"} 2\nc{x=\"1} 3\nd 4 5 6\n";
    let e = error(body, Format::Text);
    assert_eq!(e.line, 6);
    assert_eq!(e.to_string(), "line 6: unterminated label value for `x`");
}

// ---------------------------------------------------------------- small API

#[test]
fn format_from_content_type() {
    for (ct, format) in [
        (Some("application/openmetrics-text; version=1.0.0; charset=utf-8"), Format::OpenMetrics),
        (Some("Application/OpenMetrics-Text"), Format::OpenMetrics),
        (Some("application/openmetrics-text;version=0.0.1"), Format::OpenMetrics),
        (Some("text/plain; version=0.0.4; charset=utf-8"), Format::Text),
        (Some("text/plain"), Format::Text),
        (Some(""), Format::Text),
        (None, Format::Text),
    ] {
        assert_eq!(Format::from_content_type(ct), format, "{ct:?}");
    }
}

#[test]
fn sample_label_lookup() {
    let f = text("x{engine=\"1\",model_name=\"m\"} 1\n");
    let s = &f[0].samples[0];
    assert_eq!(s.label("engine"), Some("1"));
    assert_eq!(s.label("model_name"), Some("m"));
    assert_eq!(s.label("le"), None);
}

// ---------------------------------------------------------------- corpus

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/exposition").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn value(families: &[Family<'_>], sample: &str, want: &[(&str, &str)]) -> f64 {
    let hits: Vec<f64> = families
        .iter()
        .flat_map(|f| &f.samples)
        .filter(|s| s.name == sample && want.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .map(|s| s.value)
        .collect();
    assert_eq!(hits.len(), 1, "{sample} {want:?}: {hits:?}");
    hits[0]
}

/// For every label set of every histogram: buckets are cumulative, the `+Inf`
/// bucket equals `_count`, and `_sum` is there. Returns the label sets checked.
fn check_histograms(families: &[Family<'_>]) -> usize {
    let mut checked = 0;
    for f in families.iter().filter(|f| f.kind == MetricType::Histogram) {
        // Per label set (without `le`): bucket values, `_count`, `_sum`.
        type Series = (Vec<f64>, Option<f64>, Option<f64>);
        let mut series: BTreeMap<Vec<(&str, &str)>, Series> = BTreeMap::new();
        for s in &f.samples {
            let key: Vec<(&str, &str)> =
                s.labels.iter().filter(|(k, _)| *k != "le").map(|(k, v)| (*k, v.as_ref())).collect();
            let entry = series.entry(key).or_default();
            match s.name.strip_prefix(f.name) {
                Some("_bucket") => entry.0.push(s.value),
                Some("_count") => entry.1 = Some(s.value),
                Some("_sum") => entry.2 = Some(s.value),
                Some("_created") => {}
                other => panic!("{}: unexpected sample {other:?}", f.name),
            }
            if s.name.ends_with("_bucket") {
                assert!(s.label("le").is_some());
            }
        }
        for (key, (buckets, count, sum)) in &series {
            assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{} {key:?} not cumulative", f.name);
            assert_eq!(buckets.last().copied(), *count, "{} {key:?}: +Inf bucket != _count", f.name);
            assert!(sum.is_some(), "{} {key:?}: no _sum", f.name);
            checked += 1;
        }
    }
    checked
}

#[test]
fn corpus_vllm_v1_two_engines() {
    let body = fixture("vllm-v1.txt");
    let f = text(&body);
    let m = "meta-llama/Llama-3.1-8B-Instruct";
    assert_eq!(f.len(), 46);
    assert_eq!(value(&f, "vllm:num_requests_running", &[("engine", "0")]), 37.0);
    assert_eq!(value(&f, "vllm:num_requests_running", &[("engine", "1")]), 35.0);
    assert_eq!(value(&f, "vllm:num_requests_waiting", &[("engine", "0"), ("model_name", m)]), 4.0);
    assert_eq!(value(&f, "vllm:kv_cache_usage_perc", &[("engine", "1")]), 0.3895);
    assert_eq!(value(&f, "vllm:prompt_tokens_total", &[("engine", "0")]), 1_048_804.0);
    assert_eq!(value(&f, "vllm:generation_tokens_total", &[("engine", "1")]), 233_454.0);
    assert_eq!(value(&f, "vllm:num_preemptions_total", &[("engine", "0")]), 3.0);
    assert_eq!(value(&f, "vllm:request_success_total", &[("engine", "0"), ("finished_reason", "stop")]), 960.0);
    assert_eq!(value(&f, "vllm:request_success_total", &[("engine", "1"), ("finished_reason", "abort")]), 110.0);
    assert_eq!(value(&f, "vllm:time_to_first_token_seconds_bucket", &[("engine", "0"), ("le", "0.25")]), 1058.0);
    assert_eq!(value(&f, "vllm:time_to_first_token_seconds_count", &[("engine", "1")]), 1100.0);

    for (name, kind, samples) in [
        ("vllm:num_requests_running", MetricType::Gauge, 2),
        ("vllm:num_requests_waiting", MetricType::Gauge, 2),
        ("vllm:kv_cache_usage_perc", MetricType::Gauge, 2),
        ("vllm:prompt_tokens_total", MetricType::Counter, 2),
        ("vllm:prompt_tokens_created", MetricType::Gauge, 2),
        ("vllm:generation_tokens_total", MetricType::Counter, 2),
        ("vllm:generation_tokens_created", MetricType::Gauge, 2),
        ("vllm:request_success_total", MetricType::Counter, 6),
        ("vllm:request_success_created", MetricType::Gauge, 6),
        ("vllm:num_preemptions_total", MetricType::Counter, 2),
        ("vllm:num_preemptions_created", MetricType::Gauge, 2),
        // 2 engines x (22 buckets + +Inf + count + sum)
        ("vllm:time_to_first_token_seconds", MetricType::Histogram, 50),
        ("vllm:inter_token_latency_seconds", MetricType::Histogram, 44),
        ("vllm:e2e_request_latency_seconds", MetricType::Histogram, 48),
        ("vllm:request_queue_time_seconds", MetricType::Histogram, 48),
        ("vllm:iteration_tokens_total", MetricType::Histogram, 32),
        ("vllm:iteration_tokens_total_created", MetricType::Gauge, 2),
        ("python_gc_objects_collected_total", MetricType::Counter, 3),
        ("process_resident_memory_bytes", MetricType::Gauge, 1),
    ] {
        let fam = family(&f, name);
        assert_eq!((fam.kind, fam.samples.len()), (kind, samples), "{name}");
        assert!(fam.help.is_some(), "{name}");
    }
    let iteration = family(&f, "vllm:iteration_tokens_total");
    assert!(iteration.samples.iter().all(|s| s.name.starts_with("vllm:iteration_tokens_total_")));
    assert_eq!(iteration.help.as_deref(), Some("Fixture series vllm:iteration_tokens_total."));

    // Every vLLM sample has `engine` and `model_name`; label names come sorted.
    let labelled = f.iter().filter(|f| f.name.starts_with("vllm:") && f.name != "vllm:cache_config_info");
    for s in labelled.flat_map(|f| &f.samples) {
        assert_eq!(s.label("model_name"), Some(m), "{}", s.name);
        assert!(matches!(s.label("engine"), Some("0" | "1")), "{}", s.name);
        assert!(s.labels.windows(2).all(|w| w[0].0 < w[1].0), "{}", s.name);
    }
    assert_eq!(check_histograms(&f), 2 * 10);
    // Not OpenMetrics: text counters name `_total` in TYPE.
    let e = error(&body, Format::OpenMetrics);
    assert!(e.message.contains("is not a sample of counter"), "{e}");
}

#[test]
fn corpus_vllm_v0_old_names() {
    let body = fixture("vllm-v0-old-names.txt");
    let f = text(&body);
    let m = "mistralai/Mistral-7B-Instruct-v0.3";
    assert_eq!(value(&f, "vllm:gpu_cache_usage_perc", &[("model_name", m)]), 0.2634);
    assert_eq!(value(&f, "vllm:num_requests_running", &[]), 12.0);
    let tpot = family(&f, "vllm:time_per_output_token_seconds");
    assert_eq!((tpot.kind, tpot.samples.len()), (MetricType::Histogram, 16));
    assert_eq!(value(&f, "vllm:time_per_output_token_seconds_count", &[]), 2560.0);
    assert_eq!(value(&f, "vllm:time_per_output_token_seconds_bucket", &[("le", "+Inf")]), 2560.0);
    assert!(f.iter().all(|f| f.name != "vllm:kv_cache_usage_perc" && f.name != "vllm:inter_token_latency_seconds"));
    assert!(f.iter().flat_map(|f| &f.samples).all(|s| s.label("engine").is_none()), "V0 has no engine label");
    assert_eq!(family(&f, "vllm:iteration_tokens_total").kind, MetricType::Histogram);
    assert_eq!(check_histograms(&f), 4);
}

#[test]
fn corpus_kserve() {
    let body = fixture("kserve.txt");
    let f = text(&body);
    for name in ["request_preprocess_seconds", "request_postprocess_seconds", "request_predict_seconds"] {
        let fam = family(&f, name);
        assert_eq!((fam.kind, fam.samples.len()), (MetricType::Histogram, 2 * 17), "{name}");
        assert_eq!(family(&f, &format!("{name}_created")).kind, MetricType::Gauge);
    }
    // Declared with one label set that has seen no request.
    assert_eq!(value(&f, "request_explain_seconds_count", &[("model_name", "llama-31-8b")]), 0.0);
    assert_eq!(value(&f, "request_predict_seconds_count", &[("model_name", "llama-31-8b")]), 420.0);
    assert_eq!(value(&f, "request_predict_seconds_bucket", &[("model_name", "llama-31-8b"), ("le", "+Inf")]), 420.0);
    assert_eq!(value(&f, "request_predict_seconds_bucket", &[("model_name", "qwen25-7b"), ("le", "0.5")]), 4.0);
    assert_eq!(value(&f, "vllm:num_requests_running", &[("engine", "0")]), 37.0);
    assert_eq!(family(&f, "vllm:iteration_tokens_total").samples.len(), 16);
    for name in ["python_gc_objects_collected_total", "python_gc_collections_total", "process_cpu_seconds_total"] {
        assert_eq!(family(&f, name).kind, MetricType::Counter, "{name}");
    }
    assert_eq!(family(&f, "python_info").samples[0].label("implementation"), Some("CPython"));
    assert_eq!(check_histograms(&f), 7 + 10);
}

#[test]
fn corpus_openmetrics_matches_the_text_body() {
    let om_body = fixture("openmetrics.txt");
    let text_body = fixture("vllm-v1.txt");
    let o = om(&om_body);
    let t = text(&text_body);
    assert!(om_body.ends_with("# EOF\n"));
    assert!(om_body.contains(" # {trace_id="), "the fixture has exemplars");

    let counter = family(&o, "vllm:prompt_tokens");
    assert_eq!(counter.kind, MetricType::Counter);
    assert_eq!(
        sample_names(counter),
        [
            "vllm:prompt_tokens_total",
            "vllm:prompt_tokens_created",
            "vllm:prompt_tokens_total",
            "vllm:prompt_tokens_created"
        ]
    );
    let ttft = family(&o, "vllm:time_to_first_token_seconds");
    assert_eq!((ttft.kind, ttft.unit, ttft.samples.len()), (MetricType::Histogram, Some("seconds"), 52));
    assert_eq!(family(&o, "vllm:iteration_tokens_total").unit, None);
    assert_eq!(value(&o, "vllm:time_to_first_token_seconds_bucket", &[("engine", "0"), ("le", "0.25")]), 1058.0);
    assert_eq!(check_histograms(&o), 2 * 10);

    // Same registry, two formats: every vLLM sample has the same value in both.
    let index = |families: &[Family<'_>]| -> BTreeMap<(String, Vec<(String, String)>), f64> {
        families
            .iter()
            .filter(|f| f.name.starts_with("vllm:"))
            .flat_map(|f| &f.samples)
            .map(|s| {
                let labels = s.labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
                ((s.name.to_string(), labels), s.value)
            })
            .collect()
    };
    let (from_text, from_om) = (index(&t), index(&o));
    assert_eq!(from_text.len(), 486);
    assert_eq!(from_text, from_om);

    // Exemplars are not text format.
    let e = error(&om_body, Format::Text);
    assert!(e.message.contains("exemplars are OpenMetrics-only"), "{e}");
}

// ---------------------------------------------------------------- properties

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2048)
}

fn config() -> ProptestConfig {
    ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() }
}

const TOKENS: &[&str] = &[
    "{",
    "}",
    "\"",
    "\\",
    "=",
    ",",
    "#",
    " ",
    "  ",
    "\t",
    "\n",
    "\n",
    "\r",
    "\r\n",
    "# HELP ",
    "# TYPE ",
    "# UNIT ",
    "# EOF",
    "# EOF\n",
    " # {",
    "x",
    "vllm:a",
    "a_b",
    ":",
    "_bucket",
    "_count",
    "_sum",
    "_total",
    "_created",
    "_info",
    "_gsum",
    "le",
    "quantile",
    "=\"",
    "\",",
    "\"}",
    "1",
    "-2.5",
    "1e-05",
    "NaN",
    "+Inf",
    "-Inf",
    "1700000000",
    "1.5e9",
    "counter",
    "gauge",
    "histogram",
    "summary",
    "untyped",
    "unknown",
    "info",
    "stateset",
    "gaugehistogram",
    "seconds",
    "é",
    "\\n",
    "\\\"",
    "\\\\",
    "\u{0}",
];

fn token_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(TOKENS), 0..64).prop_map(|t| t.concat())
}

fn mutated_fixture() -> impl Strategy<Value = String> {
    let lines: Vec<String> = fixture("openmetrics.txt").lines().map(|l| format!("{l}\n")).collect();
    let n = lines.len();
    (0..n, 1..40usize, prop::collection::vec((any::<prop::sample::Index>(), 0..4u8, any::<char>()), 0..4)).prop_map(
        move |(start, len, edits)| {
            let mut s: String = lines[start..(start + len).min(n)].concat();
            for (at, op, c) in edits {
                let chars: Vec<char> = s.chars().collect();
                if chars.is_empty() {
                    break;
                }
                let i = at.index(chars.len());
                let mut chars = chars;
                match op {
                    0 => {
                        chars.remove(i);
                    }
                    1 => chars.insert(i, c),
                    2 => chars[i] = c,
                    _ => chars.truncate(i),
                }
                s = chars.into_iter().collect();
            }
            s
        },
    )
}

fn parse_both(s: &str) {
    for format in [Format::Text, Format::OpenMetrics] {
        if let Ok(families) = parse(s, format) {
            for f in &families {
                assert!(!f.name.is_empty());
                assert!(f.samples.iter().all(|s| s.name.starts_with(f.name)));
            }
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn never_panics_on_arbitrary_strings(s in any::<String>()) {
        parse_both(&s);
    }

    #[test]
    fn never_panics_on_arbitrary_bytes(b in prop::collection::vec(any::<u8>(), 0..256)) {
        parse_both(&String::from_utf8_lossy(&b));
    }

    #[test]
    fn never_panics_on_token_soup(s in token_soup()) {
        parse_both(&s);
    }

    #[test]
    fn never_panics_on_mutated_bodies(s in mutated_fixture()) {
        parse_both(&s);
    }
}

// Round trip: random families -> rendered body -> parse -> the same families.

type GenLabels = Vec<(String, String)>;

#[derive(Debug, Clone)]
struct GenSample {
    suffix: &'static str,
    labels: GenLabels,
    value: f64,
    timestamp_ms: Option<i64>,
    /// Labels, value, timestamp (ms); rendered in OpenMetrics only.
    exemplar: Option<(GenLabels, f64, Option<i64>)>,
}

#[derive(Debug, Clone)]
struct GenFamily {
    name: String,
    /// None: no metadata lines (an implicit family).
    kind: Option<MetricType>,
    help: Option<String>,
    unit: Option<String>,
    type_first: bool,
    samples: Vec<GenSample>,
}

#[derive(Debug, Clone)]
struct Style {
    sep: &'static str,
    trailing_comma: bool,
    blank_lines: bool,
    final_newline: bool,
}

fn suffixes(kind: Option<MetricType>, om: bool) -> &'static [&'static str] {
    match kind {
        Some(MetricType::Counter) if om => &["_total", "_created"],
        Some(MetricType::Histogram) => &["_bucket", "_sum", "_count", "_created"],
        Some(MetricType::GaugeHistogram) => &["_bucket", "_gcount", "_gsum"],
        Some(MetricType::Summary) => &["", "_sum", "_count", "_created"],
        Some(MetricType::Info) => &["_info"],
        _ => &[""],
    }
}

fn go_float(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v == f64::INFINITY {
        "+Inf".to_string()
    } else if v == f64::NEG_INFINITY {
        "-Inf".to_string()
    } else {
        format!("{v:?}")
    }
}

fn om_seconds(ms: i64) -> String {
    let sign = if ms < 0 { "-" } else { "" };
    let abs = ms.unsigned_abs();
    format!("{sign}{}.{:03}", abs / 1000, abs % 1000)
}

fn escape_value(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn escape_help(s: &str, om: bool) -> String {
    let s = s.replace('\\', "\\\\").replace('\n', "\\n");
    if om {
        s.replace('"', "\\\"")
    } else {
        s
    }
}

fn render_labels(out: &mut String, labels: &[(String, String)], trailing_comma: bool) {
    out.push('{');
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!("{k}=\"{}\"", escape_value(v)));
    }
    if trailing_comma && !labels.is_empty() {
        out.push(',');
    }
    out.push('}');
}

fn render(families: &[GenFamily], om: bool, style: &Style) -> String {
    let sep = if om { " " } else { style.sep };
    let mut out = String::new();
    for f in families {
        if style.blank_lines && !om {
            out.push_str("\n# a comment\n");
        }
        if let Some(kind) = f.kind {
            let type_line = format!("# TYPE {} {}\n", f.name, kind.as_str());
            if f.type_first {
                out.push_str(&type_line);
            }
            if let Some(help) = &f.help {
                out.push_str(&format!("# HELP {} {}\n", f.name, escape_help(help, om)));
            }
            if !f.type_first {
                out.push_str(&type_line);
            }
            if let Some(unit) = &f.unit {
                out.push_str(&format!("# UNIT {} {unit}\n", f.name));
            }
        }
        for s in &f.samples {
            out.push_str(&f.name);
            out.push_str(s.suffix);
            if !s.labels.is_empty() || style.trailing_comma {
                render_labels(&mut out, &s.labels, style.trailing_comma && !om);
            }
            out.push_str(sep);
            out.push_str(&go_float(s.value));
            if let Some(ts) = s.timestamp_ms {
                out.push_str(sep);
                out.push_str(&if om { om_seconds(ts) } else { ts.to_string() });
            }
            if let (true, Some((labels, value, ts))) = (om, &s.exemplar) {
                out.push_str(" # ");
                render_labels(&mut out, labels, false);
                out.push(' ');
                out.push_str(&go_float(*value));
                if let Some(ts) = ts {
                    out.push(' ');
                    out.push_str(&om_seconds(*ts));
                }
            }
            out.push('\n');
        }
    }
    if om {
        out.push_str("# EOF\n");
    }
    if !style.final_newline && out.ends_with('\n') {
        out.pop();
    }
    out
}

fn any_value() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
        (-1000i32..1000).prop_map(f64::from),
        (0u32..100_000).prop_map(|n| f64::from(n) / 1000.0),
    ]
}

fn text_string(max: usize) -> impl Strategy<Value = String> {
    // Mostly characters the formats treat specially; `select` is much cheaper than `any::<char>()`.
    let special: Vec<char> = "\\\"\n}{,=# \tab_:09é\u{0}\u{7f}\u{a0}\u{2028}\u{1F600}✓".chars().collect();
    let c = prop_oneof![9 => prop::sample::select(special), 1 => any::<char>()];
    prop::collection::vec(c, 0..max).prop_map(|v| v.into_iter().collect())
}

const LETTERS: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_";
const METRIC_FIRST: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:";
const DIGITS: &str = "0123456789";

/// A name: one of `first`, then up to `max` of `first`, `rest` and digits (no regex: those compile per case).
fn ident(first: &str, rest: &str, max: usize) -> impl Strategy<Value = String> {
    let head: Vec<char> = first.chars().collect();
    let tail: Vec<char> = first.chars().chain(rest.chars()).chain(DIGITS.chars()).collect();
    (prop::sample::select(head), prop::collection::vec(prop::sample::select(tail), 0..=max))
        .prop_map(|(c, rest)| std::iter::once(c).chain(rest).collect())
}

fn label_set(max: usize) -> impl Strategy<Value = Vec<(String, String)>> {
    let name = ident(LETTERS, "", 8).prop_filter("reserved", |n| n != "le" && n != "quantile");
    prop::collection::btree_map(name, text_string(10), 0..max).prop_map(|m| m.into_iter().collect())
}

fn gen_sample(kind: Option<MetricType>, om: bool) -> impl Strategy<Value = GenSample> {
    let suffix = prop::sample::select(suffixes(kind, om));
    let ts = if om { (-100_000_000_000_000i64..100_000_000_000_000).boxed() } else { any::<i64>().boxed() };
    let exemplar = (label_set(3), any_value(), prop::option::of(0i64..2_000_000_000_000));
    (suffix, label_set(4), any_value(), prop::option::of(ts), any_value(), prop::option::of(exemplar)).prop_map(
        move |(suffix, mut labels, value, timestamp_ms, bound, exemplar)| {
            if suffix == "_bucket" {
                labels.push(("le".to_string(), go_float(bound)));
            } else if suffix.is_empty() && kind == Some(MetricType::Summary) {
                labels.insert(0, ("quantile".to_string(), go_float(bound)));
            }
            let exemplar = exemplar.filter(|_| suffix == "_bucket" || suffix == "_total");
            GenSample { suffix, labels, value, timestamp_ms, exemplar }
        },
    )
}

fn gen_family(index: usize, om: bool) -> impl Strategy<Value = GenFamily> {
    let kinds: &'static [MetricType] = if om {
        &[
            MetricType::Gauge,
            MetricType::Counter,
            MetricType::Unknown,
            MetricType::Histogram,
            MetricType::Summary,
            MetricType::GaugeHistogram,
            MetricType::Info,
            MetricType::StateSet,
        ]
    } else {
        &[MetricType::Gauge, MetricType::Counter, MetricType::Untyped, MetricType::Histogram, MetricType::Summary]
    };
    let kind = prop_oneof![1 => Just(None), 6 => prop::sample::select(kinds).prop_map(Some)];
    (ident(METRIC_FIRST, "", 12), kind).prop_flat_map(move |(base, kind)| {
        // `_f<index>` keeps names distinct and free of the suffixes families claim.
        let name = format!("{base}_f{index}");
        let unit_name = format!("f{index}");
        let help = text_string(24).prop_map(move |h| {
            let h = h.replace('\r', "");
            if om {
                h
            } else {
                // Text: blanks after the name are separators, not help.
                h.trim_start_matches([' ', '\t']).to_string()
            }
        });
        let unit = prop_oneof![Just(None), Just(Some(unit_name)), Just(Some(String::new()))];
        let min = usize::from(kind.is_none());
        (
            Just(name),
            Just(kind),
            prop::option::of(help),
            unit,
            any::<bool>(),
            prop::collection::vec(gen_sample(kind, om), min..8),
        )
            .prop_map(move |(name, kind, help, unit, type_first, samples)| {
                let declared = kind.is_some();
                GenFamily {
                    name,
                    kind,
                    help: help.filter(|_| declared),
                    unit: unit.filter(|_| declared && om),
                    type_first,
                    samples,
                }
            })
    })
}

fn gen_body(om: bool) -> impl Strategy<Value = (Vec<GenFamily>, Style)> {
    let families = (0..6usize).prop_flat_map(move |n| (0..n).map(|i| gen_family(i, om)).collect::<Vec<_>>());
    let style = (prop::sample::select(&[" ", "\t", " \t ", "  "][..]), any::<bool>(), any::<bool>(), any::<bool>())
        .prop_map(|(sep, trailing_comma, blank_lines, final_newline)| Style {
            sep,
            trailing_comma,
            blank_lines,
            final_newline,
        });
    (families, style)
}

fn same_value(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b
}

fn check_round_trip(generated: &[GenFamily], om: bool, style: &Style) -> Result<(), TestCaseError> {
    let body = render(generated, om, style);
    let format = if om { Format::OpenMetrics } else { Format::Text };
    let parsed = parse(&body, format).map_err(|e| TestCaseError::fail(format!("{e}\n--- body:\n{body}")))?;
    prop_assert_eq!(parsed.len(), generated.len(), "{}", body);
    let implicit = if om { MetricType::Unknown } else { MetricType::Untyped };
    for (p, g) in parsed.iter().zip(generated) {
        prop_assert_eq!(p.name, g.name.as_str());
        prop_assert_eq!(p.kind, g.kind.unwrap_or(implicit));
        prop_assert_eq!(p.help.as_deref(), g.help.as_deref(), "{}", body);
        prop_assert_eq!(p.unit, g.unit.as_deref());
        prop_assert_eq!(p.samples.len(), g.samples.len(), "{}", body);
        for (ps, gs) in p.samples.iter().zip(&g.samples) {
            prop_assert_eq!(ps.name.to_string(), format!("{}{}", g.name, gs.suffix));
            let labels: Vec<(&str, &str)> = gs.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            prop_assert_eq!(self::labels(ps), labels, "{}", body);
            prop_assert!(same_value(ps.value, gs.value), "{} != {}", ps.value, gs.value);
            prop_assert_eq!(ps.timestamp_ms, gs.timestamp_ms);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn text_round_trip((families, style) in gen_body(false)) {
        check_round_trip(&families, false, &style)?;
    }

    #[test]
    fn openmetrics_round_trip((families, style) in gen_body(true)) {
        check_round_trip(&families, true, &style)?;
    }
}

// ---------------------------------------------------------------- the OpenMetrics conformance suite

/// Every case of the OpenMetrics project's own parser suite
/// (tests/fixtures/openmetrics): no valid body refused, none panics, and the
/// malformed ones refused as often as before. The parser is strict where it
/// reads (values, labels, names, grouping by TYPE) and lenient where the
/// rest of a body does not change what it reads (bucket order, exemplar
/// sizes), so it refuses some but not all of the malformed cases.
#[test]
fn the_openmetrics_suite() {
    #[derive(serde::Deserialize)]
    struct Case {
        name: String,
        #[serde(rename = "shouldParse")]
        should_parse: bool,
        metrics: String,
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openmetrics/parsers.json");
    let cases: Vec<Case> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let (mut valid, mut refused_valid, mut malformed, mut refused_malformed) = (0, Vec::new(), 0, 0);
    for c in &cases {
        let parsed = std::panic::catch_unwind(|| parse(&c.metrics, Format::OpenMetrics).map(|f| f.len()))
            .unwrap_or_else(|_| panic!("case `{}` panicked", c.name));
        if c.should_parse {
            valid += 1;
            if let Err(e) = parsed {
                refused_valid.push(format!("{}: {e}", c.name));
            }
        } else {
            malformed += 1;
            refused_malformed += usize::from(parsed.is_err());
        }
    }
    eprintln!(
        "OpenMetrics suite: {} of {valid} valid cases parsed, {refused_malformed} of {malformed} malformed refused",
        valid - refused_valid.len()
    );
    assert_eq!((valid, malformed), (44, 167), "the suite as vendored");
    assert!(refused_valid.is_empty(), "valid cases refused:\n{}", refused_valid.join("\n"));
    assert!(refused_malformed >= 105, "{refused_malformed} of {malformed} malformed cases refused, was 105");
}
