//! PromQL for the Prometheus source: the default query per signal, the
//! placeholders a template fills in, and batching.
//!
//! **Batching.** Workloads whose selectors differ only in one label's value
//! (`namespace="inference",model_name="a"` and `...,model_name="b"`) are
//! read with one query per signal: the template's `$by` becomes that label,
//! so `sum by ($by)(...)` keeps one series per workload, and `$selector`
//! becomes the shared matchers plus `label=~"a|b"`. Every default query
//! aggregates `by ($by)`, so it answers per workload batched and as one
//! number alone (`$by` empty). A user's template without `$by` cannot keep
//! workloads apart, so those workloads query that signal one at a time.

use std::collections::BTreeMap;

use super::Signal;

/// A selector for vLLM family `name` (given without the `vllm:` prefix)
/// under either spelling a server may have stored: `vllm:x` as vLLM names
/// it (Prometheus 3 with UTF-8 names, VictoriaMetrics, which scrapes text)
/// or `vllm_x` (Prometheus 2.x scraping prometheus_client >= 0.23, which
/// answers its OpenMetrics request with underscore-escaped names). Pods are
/// summed across both, so a fleet mid-upgrade is counted whole; one series
/// is stored under one spelling, so nothing is counted twice.
fn vllm(name: &str, matchers: &str) -> String {
    format!("{{__name__=~\"vllm[:_]{name}\"{matchers},$selector}}")
}

/// The default PromQL template for a signal over vLLM's metric names, in
/// either spelling ([`vllm`]); [`fill`] fills in `$selector`, `$window` and `$by`.
///
/// Optional parts are `or`-ed with a zero of a series every vLLM serves
/// (`x or y * 0`) rather than `vector(0)`: a zero without labels would
/// match no workload's series once the query is grouped by a label.
pub(crate) fn default_query(signal: Signal) -> String {
    let v = |name: &str| vllm(name, "");
    let sum = |e: &str| format!("sum by ($by)({e})");
    let rate = |name: &str| sum(&format!("rate({}[$window])", v(name)));
    let hq = |q: &str, h: &str| {
        format!("histogram_quantile({q}, sum by (le, $by)(rate({}[$window])))", v(&format!("{h}_bucket")))
    };
    let mean = |h: &str| format!("{} / {}", rate(&format!("{h}_sum")), rate(&format!("{h}_count")));
    let deferred = vllm("num_requests_waiting_by_reason", ",reason=\"deferred\"");
    match signal {
        Signal::Concurrency => format!("{} + {}", sum(&v("num_requests_running")), sum(&v("num_requests_waiting"))),
        Signal::Running => sum(&v("num_requests_running")),
        // Older vLLM has no reasons: nothing deferred.
        Signal::QueueDepth => {
            let waiting = sum(&v("num_requests_waiting"));
            format!("{waiting} - ({} or {waiting} * 0)", sum(&deferred))
        }
        Signal::QueueDeferred => sum(&deferred),
        // Refused requests are demand too; older vLLM refuses none by this name.
        Signal::RequestRate => {
            let ok = rate("request_success_total");
            format!("{ok} + ({} or {ok} * 0)", rate("admission_rejections_total"))
        }
        Signal::RejectionRate => rate("admission_rejections_total"),
        Signal::PromptTokensRate => rate("prompt_tokens_total"),
        Signal::GenerationTokensRate => rate("generation_tokens_total"),
        Signal::KvCacheUsage => format!("avg by ($by)({} or {})", v("kv_cache_usage_perc"), v("gpu_cache_usage_perc")),
        Signal::TtftP50 => hq("0.5", "time_to_first_token_seconds"),
        Signal::TtftP90 => hq("0.9", "time_to_first_token_seconds"),
        Signal::TtftP99 => hq("0.99", "time_to_first_token_seconds"),
        // vLLM's name, else its older one.
        Signal::ItlP90 => {
            format!("{} or {}", hq("0.9", "inter_token_latency_seconds"), hq("0.9", "time_per_output_token_seconds"))
        }
        Signal::E2eP50 => hq("0.5", "e2e_request_latency_seconds"),
        Signal::E2eP90 => hq("0.9", "e2e_request_latency_seconds"),
        Signal::E2eP99 => hq("0.99", "e2e_request_latency_seconds"),
        Signal::QueueWaitP50 => hq("0.5", "request_queue_time_seconds"),
        Signal::QueueWaitP90 => hq("0.9", "request_queue_time_seconds"),
        Signal::QueueWaitP99 => hq("0.99", "request_queue_time_seconds"),
        Signal::PromptTokensPerRequest => mean("request_prompt_tokens"),
        Signal::GenerationTokensPerRequest => mean("request_generation_tokens"),
        // vLLM 0.34's names, else the ones it dropped (older releases serve both).
        Signal::PrefixCacheHitFraction => format!(
            "({} / {}) or ({} / {})",
            rate("prefix_cache_hits_total"),
            rate("prefix_cache_queries_total"),
            rate("gpu_prefix_cache_hits_total"),
            rate("gpu_prefix_cache_queries_total")
        ),
    }
}

/// `template` with its placeholders filled in: `$selector` (label matchers,
/// may be empty), `$window` (the `rate()` range) and `$by` (the label that
/// keeps batched workloads apart; `None` for a query of one workload).
pub(crate) fn fill(template: &str, selector: &str, window: &str, by: Option<&str>) -> String {
    let selector = selector.trim();
    // `{a="b",$selector}` with no selector is `{a="b"}`, not a trailing comma.
    let t = if selector.is_empty() { template.replace(",$selector", "") } else { template.to_string() };
    let t = match by {
        Some(label) => t.replace("$by", label),
        None => t.replace(", $by", "").replace(" by ($by)", "").replace("$by", ""),
    };
    t.replace("$selector", selector).replace("$window", window)
}

/// Can `template` answer for several workloads at once?
pub(crate) fn batchable(template: &str) -> bool {
    template.contains("$by")
}

/// One label matcher of a selector, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Matcher {
    label: String,
    op: String,
    /// The value between the quotes, escapes as written.
    value: String,
    text: String,
}

/// The matchers of `selector` (`a="b", c=~"d.*"`), or `None` when it is not
/// a plain list of `label op "value"` (such a workload is queried alone).
fn parse_selector(selector: &str) -> Option<Vec<Matcher>> {
    let mut out = Vec::new();
    let mut rest = selector.trim();
    while !rest.is_empty() {
        let name_len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        let (label, after) = rest.split_at(name_len);
        if label.is_empty() || label.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        let after = after.trim_start();
        let op = ["=~", "!~", "!=", "="].into_iter().find(|op| after.starts_with(op))?;
        let after = after[op.len()..].trim_start();
        let quote = after.chars().next().filter(|c| matches!(c, '"' | '\'' | '`'))?;
        // The closing quote: the first one not escaped by a backslash.
        let body = &after[1..];
        let mut end = None;
        let mut escaped = false;
        for (i, c) in body.char_indices() {
            match c {
                '\\' if quote != '`' && !escaped => escaped = true,
                c if c == quote && !escaped => {
                    end = Some(i);
                    break;
                }
                _ => escaped = false,
            }
        }
        let end = end?;
        let value = &body[..end];
        let text = format!("{label}{op}{quote}{value}{quote}");
        out.push(Matcher { label: label.to_string(), op: op.to_string(), value: value.to_string(), text });
        rest = body[end + quote.len_utf8()..].trim_start();
        match rest.strip_prefix(',') {
            Some(r) => rest = r.trim_start(),
            None if rest.is_empty() => {}
            None => return None,
        }
    }
    Some(out)
}

/// Where a workload sits in a batch: the label whose value is its own, that
/// value, and the matchers it shares with the rest of its batch.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Key {
    pub(crate) label: String,
    pub(crate) value: String,
    /// The other matchers, sorted and joined by commas.
    pub(crate) shared: String,
}

/// For each selector, its batch key, or `None` when it must be queried
/// alone (not a plain list of matchers, or no `label="value"` matcher whose
/// value needs no escaping). Of a selector's equality matchers, the label
/// that puts it in the largest batch is its own; ties go to the first label
/// by name, so the choice is the same in every replica.
pub(crate) fn keys(selectors: &[&str]) -> Vec<Option<Key>> {
    let candidates: Vec<Vec<Key>> = selectors
        .iter()
        .map(|s| {
            let Some(ms) = parse_selector(s) else { return Vec::new() };
            ms.iter()
                .enumerate()
                .filter(|(_, m)| m.op == "=" && !m.value.is_empty() && !m.value.contains(['\\', '"', '\'', '`']))
                .map(|(i, m)| {
                    let mut shared: Vec<&str> =
                        ms.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, o)| o.text.as_str()).collect();
                    shared.sort_unstable();
                    Key { label: m.label.clone(), value: m.value.clone(), shared: shared.join(",") }
                })
                .collect()
        })
        .collect();
    let mut sizes: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for k in candidates.iter().flatten() {
        *sizes.entry((&k.label, &k.shared)).or_default() += 1;
    }
    candidates
        .iter()
        .map(|c| {
            c.iter()
                .max_by(|a, b| {
                    let size = |k: &Key| sizes[&(k.label.as_str(), k.shared.as_str())];
                    size(a).cmp(&size(b)).then_with(|| b.label.cmp(&a.label))
                })
                .cloned()
        })
        .collect()
}

/// The selector for the workloads of one batch whose label has `values`:
/// the shared matchers and an equality (one value) or an alternation.
pub(crate) fn batch_selector(label: &str, shared: &str, values: &[&str]) -> String {
    let own = match values {
        [one] => format!("{label}=\"{one}\""),
        _ => {
            // RE2 metacharacters escaped, then the backslashes escaped for the PromQL string.
            let alternatives: Vec<String> = values
                .iter()
                .map(|v| {
                    v.chars()
                        .flat_map(|c| {
                            let meta = "\\.+*?()|[]{}^$".contains(c);
                            meta.then_some(['\\', '\\']).into_iter().flatten().chain(std::iter::once(c))
                        })
                        .collect()
                })
                .collect();
            format!("{label}=~\"{}\"", alternatives.join("|"))
        }
    };
    if shared.is_empty() {
        own
    } else {
        format!("{shared},{own}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alone_a_template_is_one_number_and_batched_one_per_label_value() {
        let t = default_query(Signal::QueueWaitP99);
        assert_eq!(
            fill(&t, "model_name=\"m\"", "1m", None),
            "histogram_quantile(0.99, sum by (le)(rate({__name__=~\"vllm[:_]request_queue_time_seconds_bucket\",model_name=\"m\"}[1m])))"
        );
        assert_eq!(
            fill(&t, "model_name=~\"a|b\"", "1m", Some("model_name")),
            "histogram_quantile(0.99, sum by (le, model_name)(rate({__name__=~\"vllm[:_]request_queue_time_seconds_bucket\",model_name=~\"a|b\"}[1m])))"
        );
        assert_eq!(
            fill(&default_query(Signal::QueueDepth), "", "1m", None),
            "sum({__name__=~\"vllm[:_]num_requests_waiting\"}) - (sum({__name__=~\"vllm[:_]num_requests_waiting_by_reason\",reason=\"deferred\"}) or sum({__name__=~\"vllm[:_]num_requests_waiting\"}) * 0)"
        );
        assert!(Signal::ALL.iter().all(|s| batchable(&default_query(*s))), "every default query batches");
        assert!(!batchable("max(my_queue{$selector})"));
    }

    #[test]
    fn selectors_that_differ_in_one_label_share_a_batch() {
        let sels = [
            "namespace=\"inf\", model_name=\"a\"",
            "model_name=\"b\",namespace=\"inf\"",
            "namespace=\"inf\",model_name=\"c.1\"",
            "namespace=\"other\",model_name=\"a\"",
            "model_name=~\"x.*\"",
            "not a selector",
            "",
        ];
        let k = keys(&sels);
        let key = |i: usize| k[i].as_ref().map(|k| (k.label.as_str(), k.value.as_str(), k.shared.as_str()));
        assert_eq!(key(0), Some(("model_name", "a", "namespace=\"inf\"")));
        assert_eq!(key(1), Some(("model_name", "b", "namespace=\"inf\"")), "order of matchers does not matter");
        assert_eq!(key(2), Some(("model_name", "c.1", "namespace=\"inf\"")));
        // It could join workload 0 by namespace (2 such selectors), not by model (1): the larger wins.
        assert_eq!(key(3), Some(("namespace", "other", "model_name=\"a\"")));
        assert_eq!((key(4), key(5), key(6)), (None, None, None));
        assert_eq!(
            batch_selector("model_name", "namespace=\"inf\"", &["a", "c.1"]),
            "namespace=\"inf\",model_name=~\"a|c\\\\.1\""
        );
        assert_eq!(batch_selector("model_name", "", &["a"]), "model_name=\"a\"");
    }

    #[test]
    fn selectors_parse_with_quotes_escapes_and_spaces() {
        let m = parse_selector(r#" a = "x\"y" , b!~'z', c=`w\` "#).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!((m[0].label.as_str(), m[0].op.as_str(), m[0].value.as_str()), ("a", "=", r#"x\"y"#));
        assert_eq!((m[1].op.as_str(), m[2].value.as_str()), ("!~", r"w\"));
        assert!(parse_selector("a=\"b\" c=\"d\"").is_none(), "missing comma");
        assert!(parse_selector("a=\"unterminated").is_none());
        assert_eq!(parse_selector("a=\"b\",").unwrap().len(), 1, "a trailing comma is PromQL");
    }
}
