//! Parser for the bodies metric endpoints serve: the Prometheus text
//! exposition format 0.0.4 and OpenMetrics 1.0 text.
//!
//! It owns turning one `/metrics` body (vLLM, KServe, any exporter) into
//! metric families: `# HELP`/`# TYPE`/`# UNIT` metadata, samples with their
//! labels, values and timestamps, and the grouping of `_bucket`, `_sum`,
//! `_count`, `_created`, `_total` samples into the family that owns them. It
//! does not interpret values (rates, quantiles): the sources do.
//!
//! Hand-written because the rules that matter for LLM servers are the ones
//! parsers get wrong: colons in metric names (every `vllm:` family; a known
//! crate silently drops those lines) and grouping by the family's declared
//! TYPE, never by suffix alone (`vllm:iteration_tokens_total` is a histogram;
//! a gauge named `x_count` is not part of a histogram `x`). It is also a hot
//! path, so names and label values borrow from the body and only escaped
//! strings allocate.
//!
//! Strict like Prometheus: any malformed line fails the whole body, with its
//! 1-based line number. Where the formats leave a choice:
//! - A line ending in `\r` is an error: CRLF bodies are rejected, as
//!   Prometheus does (its lexers leave the `\r` in the value or timestamp).
//! - Text: tokens are separated by runs of spaces or tabs, leading and
//!   trailing whitespace and blank lines are allowed, and the last line may
//!   lack its `\n`. OpenMetrics: single spaces only, no blank lines, only
//!   `# HELP`, `# TYPE`, `# UNIT` and `# EOF` comments, no trailing comma in a
//!   label set, and `# EOF` must end the body (one `\n` may follow it).
//! - Escapes: label values know `\\`, `\"`, `\n`; help texts `\\`, `\n` (and
//!   `\"` in OpenMetrics). Any other backslash is kept as written, as
//!   Prometheus keeps it: the OpenMetrics grammar allows a backslash before
//!   any character, and one odd HELP line must not cost a pod's whole body.
//! - A timestamp that is a number but past i64 milliseconds is dropped; the
//!   sample stands without it.
//! - A sample resolves to the family declared with its exact name first; else
//!   to the family its name minus a known suffix names, if that family's type
//!   has suffixed samples (histogram, gaugehistogram, summary; in OpenMetrics
//!   also counter and info), and it is an error when the type does not allow
//!   that suffix; else it starts an implicit family named after the sample,
//!   [`MetricType::Untyped`] in text, [`MetricType::Unknown`] in OpenMetrics.
//!   Before that last step, a name that is a declared family's name with
//!   every character outside `[a-zA-Z0-9_]` written as `_` resolves to that
//!   family the same way (the sample keeps its name as written): Python's
//!   prometheus_client >= 0.23, asked for OpenMetrics, answers
//!   `escaping=underscores` with `# TYPE vllm:x` over samples named `vllm_x`.
//! - Families that are declared but have no samples are kept. Samples of a
//!   family that reappear after other families are appended to it.
//! - A TYPE after the family's samples, and a second HELP, TYPE or UNIT for
//!   one name, are errors; in OpenMetrics so are HELP and UNIT after samples.
//! - Histogram buckets need a numeric `le` label, summary quantiles a numeric
//!   `quantile` label; a label name twice in one sample is an error.
//! - OpenMetrics exemplars are checked for syntax and dropped.

mod lex;

use lex::*;
use std::{borrow::Cow, collections::HashMap};

/// Which of the two text formats a body is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text exposition format 0.0.4 (`text/plain; version=0.0.4`).
    Text,
    /// OpenMetrics 1.0 (`application/openmetrics-text; version=1.0.0`).
    OpenMetrics,
}

impl Format {
    /// The format a response's `Content-Type` announces: OpenMetrics for
    /// `application/openmetrics-text` (any version), else text.
    pub fn from_content_type(ct: Option<&str>) -> Format {
        let media = ct.and_then(|c| c.split(';').next()).unwrap_or("").trim();
        if media.eq_ignore_ascii_case("application/openmetrics-text") {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }
}

/// A family's type, from its `# TYPE` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
    Summary,
    /// Text format: `# TYPE x untyped`, or samples without a TYPE.
    Untyped,
    /// OpenMetrics only.
    GaugeHistogram,
    /// OpenMetrics only.
    Info,
    /// OpenMetrics only.
    StateSet,
    /// OpenMetrics: `# TYPE x unknown`, or samples without a TYPE.
    Unknown,
}

impl MetricType {
    /// The name as written on a `# TYPE` line.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            MetricType::Summary => "summary",
            MetricType::Untyped => "untyped",
            MetricType::GaugeHistogram => "gaugehistogram",
            MetricType::Info => "info",
            MetricType::StateSet => "stateset",
            MetricType::Unknown => "unknown",
        }
    }

    /// The type a TYPE line names, among those its format has.
    fn from_type_line(s: &str, om: bool) -> Option<MetricType> {
        Some(match (s, om) {
            ("counter", _) => MetricType::Counter,
            ("gauge", _) => MetricType::Gauge,
            ("histogram", _) => MetricType::Histogram,
            ("summary", _) => MetricType::Summary,
            ("untyped", false) => MetricType::Untyped,
            ("gaugehistogram", true) => MetricType::GaugeHistogram,
            ("info", true) => MetricType::Info,
            ("stateset", true) => MetricType::StateSet,
            ("unknown", true) => MetricType::Unknown,
            _ => return None,
        })
    }
}

/// One sample line: the full sample name (`x_bucket`, `x_total`, ...), its
/// labels in input order, the value, and the timestamp in milliseconds
/// (OpenMetrics seconds are converted).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    pub name: &'a str,
    pub labels: Vec<(&'a str, Cow<'a, str>)>,
    pub value: f64,
    pub timestamp_ms: Option<i64>,
}

impl Sample<'_> {
    /// The value of label `name`, if the sample has it.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_ref())
    }
}

/// A metric family: the name its TYPE/HELP lines use (or the sample name for
/// an implicit family), its type, help, unit (OpenMetrics) and samples in
/// input order.
#[derive(Debug, Clone, PartialEq)]
pub struct Family<'a> {
    pub name: &'a str,
    pub kind: MetricType,
    pub help: Option<Cow<'a, str>>,
    pub unit: Option<&'a str>,
    pub samples: Vec<Sample<'a>>,
}

/// Why a body was rejected: the first malformed line (1-based) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

/// Parse a whole body. Families come out in order of first appearance, each
/// family's samples in input order.
pub fn parse(text: &str, format: Format) -> Result<Vec<Family<'_>>, ParseError> {
    let mut parser = Parser::new(format == Format::OpenMetrics);
    let mut rest = text;
    let mut line = 0usize;
    let mut eof = false;
    while !rest.is_empty() {
        line += 1;
        if eof {
            return Err(ParseError { line, message: "content after # EOF".to_string() });
        }
        let (current, next) = match rest.find('\n') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        rest = next;
        eof = parser.line(current).map_err(|message| ParseError { line, message })?;
    }
    if parser.om && !eof {
        let line = if text.is_empty() || text.ends_with('\n') { line + 1 } else { line };
        return Err(ParseError { line, message: "missing # EOF".to_string() });
    }
    Ok(parser.families)
}

/// What a sample is within its family, from its name's suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Bare,
    Bucket,
    Count,
    Sum,
    Created,
    Total,
    GCount,
    GSum,
    Info,
}

impl Role {
    fn suffix(self) -> &'static str {
        match self {
            Role::Bare => "",
            Role::Bucket => "_bucket",
            Role::Count => "_count",
            Role::Sum => "_sum",
            Role::Created => "_created",
            Role::Total => "_total",
            Role::GCount => "_gcount",
            Role::GSum => "_gsum",
            Role::Info => "_info",
        }
    }
}

/// Suffixes a sample name may carry; no name ends in two of them.
const SUFFIXED: [Role; 8] =
    [Role::Bucket, Role::Count, Role::Sum, Role::Created, Role::Total, Role::GCount, Role::GSum, Role::Info];

/// The sample names (as roles) a family of `kind` has.
fn roles(kind: MetricType, om: bool) -> &'static [Role] {
    match kind {
        MetricType::Counter if om => &[Role::Total, Role::Created],
        MetricType::Histogram => &[Role::Bucket, Role::Sum, Role::Count, Role::Created],
        MetricType::GaugeHistogram => &[Role::Bucket, Role::GCount, Role::GSum],
        MetricType::Summary => &[Role::Bare, Role::Sum, Role::Count, Role::Created],
        MetricType::Info if om => &[Role::Info],
        _ => &[Role::Bare],
    }
}

/// Whether a family of `kind` owns suffixed sample names at all.
fn has_suffixed_samples(kind: MetricType, om: bool) -> bool {
    roles(kind, om) != [Role::Bare]
}

/// How many resolved sample names [`Parser`] remembers.
const RECENT: usize = 4;

struct Parser<'a> {
    om: bool,
    families: Vec<Family<'a>>,
    /// Per family: whether a TYPE line declared it.
    typed: Vec<bool>,
    by_name: HashMap<&'a str, usize>,
    /// Families whose names have characters that underscore escaping
    /// replaces (`vllm:x`), by their escaped name (`vllm_x`).
    by_escaped: HashMap<String, usize>,
    /// Sample names resolved lately, with their family and role: a family's
    /// samples cycle through a few names (`_bucket`, `_count`, `_sum`,
    /// `_created`). Cleared whenever a family is added, which can change what
    /// a name resolves to.
    recent: [Option<(&'a str, usize, Role)>; RECENT],
    recent_next: usize,
    /// Label count of the previous sample, to size the next one's vector.
    label_hint: usize,
    /// Exemplar labels, parsed and dropped.
    scratch: Vec<(&'a str, Cow<'a, str>)>,
}

impl<'a> Parser<'a> {
    fn new(om: bool) -> Self {
        Parser {
            om,
            families: Vec::new(),
            typed: Vec::new(),
            by_name: HashMap::new(),
            by_escaped: HashMap::new(),
            recent: [None; RECENT],
            recent_next: 0,
            label_hint: 0,
            scratch: Vec::new(),
        }
    }

    fn implicit_kind(&self) -> MetricType {
        if self.om {
            MetricType::Unknown
        } else {
            MetricType::Untyped
        }
    }

    /// One line without its `\n`; `Ok(true)` for OpenMetrics `# EOF`.
    fn line(&mut self, line: &'a str) -> Result<bool, String> {
        if line.ends_with('\r') {
            return Err("line ends with a carriage return: CRLF line endings are not supported".to_string());
        }
        if self.om {
            match line.as_bytes().first() {
                None => Err("empty line (not allowed in OpenMetrics)".to_string()),
                Some(b'#') => self.om_descriptor(line),
                Some(b' ' | b'\t') => Err("leading whitespace (not allowed in OpenMetrics)".to_string()),
                Some(_) => self.sample(line).map(|()| false),
            }
        } else {
            let line = trim_start_blanks(line);
            match line.as_bytes().first() {
                None => Ok(false),
                Some(b'#') => self.text_comment(line).map(|()| false),
                Some(_) => self.sample(line).map(|()| false),
            }
        }
    }

    /// A text-format line starting with `#`: HELP, TYPE, or a comment.
    fn text_comment(&mut self, line: &'a str) -> Result<(), String> {
        let after_hash = line.get(1..).unwrap_or("");
        if !after_hash.starts_with([' ', '\t']) {
            return Ok(());
        }
        let (keyword, rest) = split_at_blank(trim_start_blanks(after_hash));
        if !(keyword == "HELP" || keyword == "TYPE") || rest.is_empty() {
            return Ok(());
        }
        let rest = trim_start_blanks(rest);
        if rest.is_empty() {
            return Err(format!("expected a metric name after `# {keyword}`"));
        }
        let (name, arg) = split_at_blank(rest);
        check_metric_name(name)?;
        let arg = trim_start_blanks(arg);
        if keyword == "HELP" {
            return self.help(name, arg);
        }
        let (ty, extra) = split_at_blank(arg);
        if ty.is_empty() {
            return Err(format!("expected a metric type after `# TYPE {name}`"));
        }
        let extra = trim_start_blanks(extra);
        if !extra.is_empty() {
            return Err(format!("unexpected `{}` after the type of `{name}`", shown(extra)));
        }
        let kind = MetricType::from_type_line(ty, false)
            .ok_or_else(|| format!("unknown metric type `{}` for `{name}`", shown(ty)))?;
        self.set_type(name, kind)
    }

    /// An OpenMetrics line starting with `#`; `Ok(true)` for `# EOF`.
    fn om_descriptor(&mut self, line: &'a str) -> Result<bool, String> {
        if line == "# EOF" {
            return Ok(true);
        }
        let (keyword, rest) = if let Some(rest) = line.strip_prefix("# HELP ") {
            ("HELP", rest)
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            ("TYPE", rest)
        } else if let Some(rest) = line.strip_prefix("# UNIT ") {
            ("UNIT", rest)
        } else {
            return Err(format!(
                "invalid line `{}`: OpenMetrics allows only # HELP, # TYPE, # UNIT and # EOF comments",
                shown(line)
            ));
        };
        let (name, arg) = match rest.find(' ') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        if name.is_empty() {
            return Err(format!("expected a metric name after `# {keyword}`"));
        }
        check_metric_name(name)?;
        let arg = arg.ok_or_else(|| format!("expected text after `# {keyword} {name}`"))?;
        match keyword {
            "HELP" => self.help(name, arg)?,
            "TYPE" => {
                let kind = MetricType::from_type_line(arg, true)
                    .ok_or_else(|| format!("unknown metric type `{}` for `{name}`", shown(arg)))?;
                self.set_type(name, kind)?;
            }
            _ => self.unit(name, arg)?,
        }
        Ok(false)
    }

    /// The family a metadata line names, created (still untyped) if new.
    fn family_for_metadata(&mut self, name: &'a str) -> usize {
        match self.by_name.get(name) {
            Some(&idx) => idx,
            None => self.push_family(name, self.implicit_kind()),
        }
    }

    fn push_family(&mut self, name: &'a str, kind: MetricType) -> usize {
        let idx = self.families.len();
        self.families.push(Family { name, kind, help: None, unit: None, samples: Vec::new() });
        self.typed.push(false);
        self.by_name.insert(name, idx);
        if let Some(escaped) = escaped(name) {
            self.by_escaped.entry(escaped).or_insert(idx);
        }
        self.recent = [None; RECENT];
        idx
    }

    fn help(&mut self, name: &'a str, raw: &'a str) -> Result<(), String> {
        let idx = self.family_for_metadata(name);
        let om = self.om;
        let family = &mut self.families[idx];
        if family.help.is_some() {
            return Err(format!("duplicate HELP for `{name}`"));
        }
        if om && !family.samples.is_empty() {
            return Err(format!("HELP for `{name}` after its samples"));
        }
        family.help = Some(unescape_help(raw, om));
        Ok(())
    }

    fn set_type(&mut self, name: &'a str, kind: MetricType) -> Result<(), String> {
        let idx = self.family_for_metadata(name);
        if self.typed[idx] {
            return Err(format!("duplicate TYPE for `{name}`"));
        }
        let family = &mut self.families[idx];
        if !family.samples.is_empty() {
            return Err(format!("TYPE for `{name}` after its samples"));
        }
        family.kind = kind;
        self.typed[idx] = true;
        Ok(())
    }

    fn unit(&mut self, name: &'a str, unit: &'a str) -> Result<(), String> {
        let idx = self.family_for_metadata(name);
        let family = &mut self.families[idx];
        if family.unit.is_some() {
            return Err(format!("duplicate UNIT for `{name}`"));
        }
        if !family.samples.is_empty() {
            return Err(format!("UNIT for `{name}` after its samples"));
        }
        if !unit.is_empty() && !name.strip_suffix(unit).is_some_and(|prefix| prefix.ends_with('_')) {
            return Err(format!("unit `{}` is not a suffix of `{name}`", shown(unit)));
        }
        family.unit = Some(unit);
        Ok(())
    }

    /// A sample line: `name[{labels}] value [timestamp] [# exemplar]`.
    fn sample(&mut self, line: &'a str) -> Result<(), String> {
        let b = line.as_bytes();
        let name_len = metric_name_len(b);
        if name_len == 0 || !matches!(b.get(name_len), None | Some(b' ' | b'\t' | b'{')) {
            return Err(format!("invalid metric name `{}`", shown(first_token(line))));
        }
        let name = &line[..name_len];
        let mut i = if self.om { name_len } else { skip_blanks(b, name_len) };
        let mut labels = Vec::new();
        if b.get(i) == Some(&b'{') {
            labels.reserve_exact(self.label_hint);
            i = parse_labels(line, i + 1, self.om, &mut labels)?;
            check_duplicate_labels(&labels)?;
            self.label_hint = labels.len();
        }

        // The value.
        let start = if self.om {
            match b.get(i) {
                Some(b' ') => i + 1,
                None => return Err(format!("expected a value after `{name}`")),
                Some(_) => return Err(format!("expected a space before the value of `{name}`")),
            }
        } else {
            skip_blanks(b, i)
        };
        let end = if self.om { find_space(b, start) } else { find_blank(b, start) };
        let token = &line[start..end];
        if token.is_empty() {
            return Err(if b.get(start).is_some() {
                format!("more than one space before the value of `{name}` (OpenMetrics uses single spaces)")
            } else {
                format!("expected a value after `{name}`")
            });
        }
        let value = parse_float(token).ok_or_else(|| format!("invalid value `{}` for `{name}`", shown(token)))?;

        let timestamp_ms = if self.om { self.om_tail(line, end, name)? } else { text_tail(line, end, name)? };

        let (idx, role) = self.resolve(name)?;
        let family = &mut self.families[idx];
        let check = match role {
            Role::Bucket => Some("le"),
            Role::Bare if family.kind == MetricType::Summary => Some("quantile"),
            _ => None,
        };
        if let Some(label) = check {
            let v = labels
                .iter()
                .find(|(k, _)| *k == label)
                .map(|(_, v)| v)
                .ok_or_else(|| format!("`{name}` has no `{label}` label"))?;
            if parse_float(v).is_none() {
                return Err(format!("invalid `{label}` value `{}` on `{name}`", shown(v)));
            }
        }
        family.samples.push(Sample { name, labels, value, timestamp_ms });
        Ok(())
    }

    /// After an OpenMetrics value ending at `i`: `[ timestamp][ # exemplar]`.
    fn om_tail(&mut self, line: &'a str, i: usize, name: &str) -> Result<Option<i64>, String> {
        let b = line.as_bytes();
        if i >= b.len() {
            return Ok(None);
        }
        // b[i] is the space that ended the value.
        let start = i + 1;
        match b.get(start) {
            None => Err(format!("trailing space after `{name}` (not allowed in OpenMetrics)")),
            Some(b'#') => self.exemplar(line, start, name).map(|()| None),
            Some(b' ') => {
                Err(format!("more than one space after the value of `{name}` (OpenMetrics uses single spaces)"))
            }
            Some(_) => {
                let end = find_space(b, start);
                let token = &line[start..end];
                let ts =
                    om_timestamp(token).map_err(|()| format!("invalid timestamp `{}` for `{name}`", shown(token)))?;
                if end < b.len() {
                    match b.get(end + 1) {
                        Some(b'#') => self.exemplar(line, end + 1, name)?,
                        None => return Err(format!("trailing space after `{name}` (not allowed in OpenMetrics)")),
                        Some(_) => {
                            let rest = line.get(end + 1..).unwrap_or("");
                            return Err(format!("unexpected `{}` after the timestamp of `{name}`", shown(rest)));
                        }
                    }
                }
                Ok(ts)
            }
        }
    }

    /// An OpenMetrics exemplar at `i` (`# {labels} value [timestamp]`), checked and dropped.
    fn exemplar(&mut self, line: &'a str, i: usize, name: &str) -> Result<(), String> {
        let b = line.as_bytes();
        if !b.get(i..).is_some_and(|rest| rest.starts_with(b"# {")) {
            return Err(format!("invalid exemplar on `{name}`: expected `# {{labels}} value [timestamp]`"));
        }
        self.scratch.clear();
        let i = parse_labels(line, i + 3, true, &mut self.scratch)
            .map_err(|e| format!("in the exemplar of `{name}`: {e}"))?;
        if b.get(i) != Some(&b' ') {
            return Err(format!("expected a value after the exemplar labels of `{name}`"));
        }
        let end = find_space(b, i + 1);
        let token = &line[i + 1..end];
        if parse_float(token).is_none() {
            return Err(format!("invalid exemplar value `{}` on `{name}`", shown(token)));
        }
        if end < b.len() {
            let ts_end = find_space(b, end + 1);
            let token = &line[end + 1..ts_end];
            if om_timestamp(token).is_err() {
                return Err(format!("invalid exemplar timestamp `{}` on `{name}`", shown(token)));
            }
            if ts_end < b.len() {
                let rest = line.get(ts_end..).unwrap_or("");
                return Err(format!("unexpected `{}` after the exemplar of `{name}`", shown(rest)));
            }
        }
        Ok(())
    }

    /// The family a sample belongs to, and its role there.
    fn resolve(&mut self, name: &'a str) -> Result<(usize, Role), String> {
        if let Some(&(_, idx, role)) = self.recent.iter().flatten().find(|(recent, _, _)| *recent == name) {
            return Ok((idx, role));
        }
        let (idx, role) = self.resolve_uncached(name)?;
        if let Some(slot) = self.recent.get_mut(self.recent_next) {
            *slot = Some((name, idx, role));
        }
        self.recent_next = (self.recent_next + 1) % RECENT;
        Ok((idx, role))
    }

    fn resolve_uncached(&mut self, name: &'a str) -> Result<(usize, Role), String> {
        if let Some(found) = self.resolve_in(name, |p, n| p.by_name.get(n).copied()) {
            return found;
        }
        // prometheus_client >= 0.23 answering OpenMetrics with `escaping=underscores`
        // keeps `# TYPE vllm:x` but writes samples as `vllm_x`: the same family.
        if !self.by_escaped.is_empty() {
            if let Some(found) = self.resolve_in(name, |p, n| p.by_escaped.get(n).copied()) {
                return found;
            }
        }
        Ok((self.push_family(name, self.implicit_kind()), Role::Bare))
    }

    /// `name` as a sample of a family that `lookup` finds: by its own name,
    /// or by its name minus a suffix that the family's type has.
    fn resolve_in(
        &self,
        name: &str,
        lookup: impl Fn(&Self, &str) -> Option<usize>,
    ) -> Option<Result<(usize, Role), String>> {
        if let Some(idx) = lookup(self, name) {
            if roles(self.families[idx].kind, self.om).contains(&Role::Bare) {
                return Some(Ok((idx, Role::Bare)));
            }
            return Some(Err(self.not_a_sample_of(name, idx)));
        }
        let (base, role) = SUFFIXED.iter().find_map(|&r| name.strip_suffix(r.suffix()).map(|base| (base, r)))?;
        let idx = lookup(self, base)?;
        let kind = self.families[idx].kind;
        if !has_suffixed_samples(kind, self.om) {
            return None;
        }
        Some(if roles(kind, self.om).contains(&role) { Ok((idx, role)) } else { Err(self.not_a_sample_of(name, idx)) })
    }

    fn not_a_sample_of(&self, name: &str, idx: usize) -> String {
        let family = &self.families[idx];
        let names: Vec<String> =
            roles(family.kind, self.om).iter().map(|r| format!("`{}{}`", family.name, r.suffix())).collect();
        let expected = match names.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        };
        format!("`{name}` is not a sample of {} `{}`: expected {expected}", family.kind.as_str(), family.name)
    }
}

#[cfg(test)]
mod tests;
