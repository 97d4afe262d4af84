//! The token level of the text formats: labels, quoted values and their
//! escapes, numbers, timestamps, names and blanks. Each helper takes a line
//! (or its bytes) and a position and says where the token ends, or why the
//! line is malformed.

use std::{borrow::Cow, num::IntErrorKind};

/// After a text-format value ending at `i`: `[timestamp]`, blanks allowed around it.
pub(super) fn text_tail(line: &str, i: usize, name: &str) -> Result<Option<i64>, String> {
    let b = line.as_bytes();
    let start = skip_blanks(b, i);
    if start >= b.len() {
        return Ok(None);
    }
    if b.get(start) == Some(&b'#') {
        return Err(format!("unexpected `#` after the value of `{name}` (exemplars are OpenMetrics-only)"));
    }
    let end = find_blank(b, start);
    let token = &line[start..end];
    let ts = match token.parse::<i64>() {
        Ok(ts) => Some(ts),
        // An integer past i64 milliseconds: the sample stands, without its timestamp.
        Err(e) if matches!(e.kind(), IntErrorKind::PosOverflow | IntErrorKind::NegOverflow) => None,
        Err(_) => return Err(format!("invalid timestamp `{}` for `{name}`", shown(token))),
    };
    let after = skip_blanks(b, end);
    if after < b.len() {
        let rest = line.get(after..).unwrap_or("");
        return Err(format!("unexpected `{}` after the timestamp of `{name}`", shown(rest)));
    }
    Ok(ts)
}

/// A label set after its `{`, into `out`; returns the index after the `}`.
pub(super) fn parse_labels<'a>(
    line: &'a str,
    mut i: usize,
    om: bool,
    out: &mut Vec<(&'a str, Cow<'a, str>)>,
) -> Result<usize, String> {
    let b = line.as_bytes();
    let mut after_comma = false;
    loop {
        if !om {
            i = skip_blanks(b, i);
        }
        match b.get(i) {
            None => return Err("unterminated label set (missing `}`)".to_string()),
            Some(b'}') if om && after_comma => {
                return Err("trailing comma in a label set (not allowed in OpenMetrics)".to_string());
            }
            Some(b'}') => return Ok(i + 1),
            _ => {}
        }
        let start = i;
        i = label_name_len(b, i);
        let name = &line[start..i];
        if name.is_empty() || !matches!(b.get(i), None | Some(b'=' | b' ' | b'\t' | b',' | b'}')) {
            let rest = line.get(start..).unwrap_or("");
            let token = rest.split(['=', ',', '}', ' ', '\t']).next().unwrap_or("");
            return Err(format!("invalid label name `{}`", shown(token)));
        }
        if !om {
            i = skip_blanks(b, i);
        }
        if b.get(i) != Some(&b'=') {
            return Err(format!("expected `=` after label name `{name}`"));
        }
        i += 1;
        if !om {
            i = skip_blanks(b, i);
        }
        if b.get(i) != Some(&b'"') {
            return Err(format!("expected a quoted value for label `{name}`"));
        }
        let (value, next) = parse_quoted(line, i + 1, name)?;
        out.push((name, value));
        i = next;
        if !om {
            i = skip_blanks(b, i);
        }
        match b.get(i) {
            Some(b',') => {
                i += 1;
                after_comma = true;
            }
            Some(b'}') => return Ok(i + 1),
            None => return Err("unterminated label set (missing `}`)".to_string()),
            Some(_) => return Err(format!("expected `,` or `}}` after the value of label `{name}`")),
        }
    }
}

/// A label value starting after its opening quote; returns it and the index after the closing quote.
pub(super) fn parse_quoted<'a>(line: &'a str, start: usize, label: &str) -> Result<(Cow<'a, str>, usize), String> {
    let b = line.as_bytes();
    let unterminated = || format!("unterminated label value for `{label}`");
    let mut i = start;
    while let Some(&c) = b.get(i) {
        match c {
            b'"' => return Ok((Cow::Borrowed(&line[start..i]), i + 1)),
            b'\\' => break,
            _ => i += 1,
        }
    }
    if i >= b.len() {
        return Err(unterminated());
    }
    let mut out = String::with_capacity(i - start + 16);
    out.push_str(&line[start..i]);
    loop {
        match b.get(i) {
            None => return Err(unterminated()),
            Some(b'"') => return Ok((Cow::Owned(out), i + 1)),
            Some(b'\\') => {
                match b.get(i + 1) {
                    Some(b'\\') => out.push('\\'),
                    Some(b'"') => out.push('"'),
                    Some(b'n') => out.push('\n'),
                    // Any other escape is allowed and kept as written, backslash
                    // included, as Prometheus keeps it. The loop goes on from the
                    // escaped character, so a multi-byte one is copied whole.
                    Some(_) => {
                        out.push('\\');
                        i += 1;
                        continue;
                    }
                    None => return Err(unterminated()),
                }
                i += 2;
            }
            Some(_) => {
                let run = i;
                while let Some(&c) = b.get(i) {
                    if c == b'"' || c == b'\\' {
                        break;
                    }
                    i += 1;
                }
                out.push_str(&line[run..i]);
            }
        }
    }
}

/// Help text: `\\` and `\n` escapes, and `\"` in OpenMetrics; any other
/// backslash is kept as written (the grammar allows one before any character).
pub(super) fn unescape_help(raw: &str, om: bool) -> Cow<'_, str> {
    let Some(first) = raw.find('\\') else {
        return Cow::Borrowed(raw);
    };
    let mut out = String::with_capacity(raw.len());
    out.push_str(&raw[..first]);
    let mut chars = raw[first..].chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('"') if om => out.push('"'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    Cow::Owned(out)
}

pub(super) fn check_duplicate_labels(labels: &[(&str, Cow<'_, str>)]) -> Result<(), String> {
    let duplicate = if labels.len() <= 16 {
        labels.iter().enumerate().find_map(|(k, (a, _))| labels[..k].iter().any(|(b, _)| a == b).then_some(*a))
    } else {
        let mut names: Vec<&str> = labels.iter().map(|(k, _)| *k).collect();
        names.sort_unstable();
        names.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
    };
    match duplicate {
        Some(name) => Err(format!("duplicate label `{name}`")),
        None => Ok(()),
    }
}

/// A Go-style float: decimal, exponent, `NaN`, `+Inf`, `-Inf`, `Inf` (any case).
pub(super) fn parse_float(s: &str) -> Option<f64> {
    s.parse::<f64>().ok()
}

/// An OpenMetrics timestamp (float seconds) as milliseconds: `Err` when it
/// is not a number, `Ok(None)` for a number past i64 milliseconds (the
/// sample stands without it).
pub(super) fn om_timestamp(s: &str) -> Result<Option<i64>, ()> {
    let secs = parse_float(s).filter(|v| v.is_finite()).ok_or(())?;
    let ms = (secs * 1000.0).round();
    // i64::MAX as f64 rounds up to 2^63, so `<` keeps the cast exact.
    Ok((ms.is_finite() && ms >= i64::MIN as f64 && ms < i64::MAX as f64).then_some(ms as i64))
}

pub(super) fn check_metric_name(name: &str) -> Result<(), String> {
    if !name.is_empty() && metric_name_len(name.as_bytes()) == name.len() {
        Ok(())
    } else {
        Err(format!("invalid metric name `{}`", shown(name)))
    }
}

/// `name` with every character outside `[a-zA-Z0-9_]` replaced by `_`, as
/// the `underscores` name escaping writes it; `None` when nothing changes.
pub(super) fn escaped(name: &str) -> Option<String> {
    let legacy = |c: char| c.is_ascii_alphanumeric() || c == '_';
    (!name.chars().all(legacy)).then(|| name.chars().map(|c| if legacy(c) { c } else { '_' }).collect())
}

/// Length of the metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`) at the start of `b`.
pub(super) fn metric_name_len(b: &[u8]) -> usize {
    match b.first() {
        Some(&c) if c.is_ascii_alphabetic() || c == b'_' || c == b':' => {
            1 + b.iter().skip(1).take_while(|&&c| c.is_ascii_alphanumeric() || c == b'_' || c == b':').count()
        }
        _ => 0,
    }
}

/// End of the label name (`[a-zA-Z_][a-zA-Z0-9_]*`) starting at `i`.
pub(super) fn label_name_len(b: &[u8], i: usize) -> usize {
    match b.get(i) {
        Some(&c) if c.is_ascii_alphabetic() || c == b'_' => {
            i + 1 + b.iter().skip(i + 1).take_while(|&&c| c.is_ascii_alphanumeric() || c == b'_').count()
        }
        _ => i,
    }
}

pub(super) fn is_blank(c: u8) -> bool {
    c == b' ' || c == b'\t'
}

pub(super) fn skip_blanks(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(|&c| is_blank(c)) {
        i += 1;
    }
    i
}

pub(super) fn find_blank(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(|&c| !is_blank(c)) {
        i += 1;
    }
    i
}

pub(super) fn find_space(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(|&c| c != b' ') {
        i += 1;
    }
    i
}

pub(super) fn trim_start_blanks(s: &str) -> &str {
    s.trim_start_matches([' ', '\t'])
}

/// `s` split before its first blank.
pub(super) fn split_at_blank(s: &str) -> (&str, &str) {
    match s.find([' ', '\t']) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    }
}

/// The start of a sample line up to a blank or `{`, for error messages.
pub(super) fn first_token(line: &str) -> &str {
    line.split([' ', '\t', '{']).next().unwrap_or("")
}

/// `s` for an error message: at most 48 characters.
pub(super) fn shown(s: &str) -> String {
    match s.char_indices().nth(48) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}
