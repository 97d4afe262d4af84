//! Node labels and taints, matched the way the scheduler matches them: a
//! pod's node selector terms (ORed; each term's requirements ANDed) against
//! a node's labels, and its tolerations against the node's taints. Only what
//! decides *whether* a pod may land on a node is modelled; preferences
//! (preferred affinity, `PreferNoSchedule`) never exclude a pool.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One `matchExpressions` entry (a `nodeSelector` key is `In [value]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub(crate) struct LabelRequirement {
    pub(crate) key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt` or `Lt`.
    pub(crate) operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) values: Vec<String>,
}

impl LabelRequirement {
    pub(crate) fn is_in(key: &str, value: &str) -> Self {
        LabelRequirement { key: key.to_string(), operator: "In".to_string(), values: vec![value.to_string()] }
    }

    /// Whether `labels` satisfy it; an unknown operator never matches, as the API server would have refused it.
    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let v = labels.get(&self.key);
        let num = |s: &String| s.parse::<i64>().ok();
        match self.operator.as_str() {
            "In" => v.is_some_and(|v| self.values.contains(v)),
            "NotIn" => v.is_none_or(|v| !self.values.contains(v)),
            "Exists" => v.is_some(),
            "DoesNotExist" => v.is_none(),
            "Gt" => matches!((v.and_then(num), self.values.first().and_then(num)), (Some(a), Some(b)) if a > b),
            "Lt" => matches!((v.and_then(num), self.values.first().and_then(num)), (Some(a), Some(b)) if a < b),
            _ => false,
        }
    }
}

impl std::fmt::Display for LabelRequirement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.operator.as_str() {
            "In" if self.values.len() == 1 => write!(f, "{}={}", self.key, self.values[0]),
            "Exists" | "DoesNotExist" => write!(f, "{} {}", self.key, self.operator),
            op => write!(f, "{} {op} ({})", self.key, self.values.join(",")),
        }
    }
}

/// A node taint. Only `NoSchedule` and `NoExecute` keep pods off.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Taint {
    pub(crate) key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<String>,
    pub(crate) effect: String,
}

impl std::fmt::Display for Taint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{}={}:{}", self.key, v, self.effect),
            None => write!(f, "{}:{}", self.key, self.effect),
        }
    }
}

/// A pod toleration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub(crate) struct Toleration {
    /// Empty with `Exists`: tolerates every taint.
    #[serde(default)]
    pub(crate) key: String,
    /// `Equal` (the default) or `Exists`.
    #[serde(default)]
    pub(crate) operator: String,
    #[serde(default)]
    pub(crate) value: String,
    /// Empty: every effect.
    #[serde(default)]
    pub(crate) effect: String,
}

impl Toleration {
    pub(crate) fn tolerates(&self, t: &Taint) -> bool {
        let exists = self.operator == "Exists";
        let key_ok = (self.key.is_empty() && exists) || self.key == t.key;
        let value_ok = exists || t.value.as_deref().unwrap_or("") == self.value;
        let effect_ok = self.effect.is_empty() || self.effect == t.effect;
        key_ok && value_ok && effect_ok
    }
}

/// Where a replica's pods may run, beyond GPU count and topology.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, utoipa::ToSchema)]
pub struct Constraints {
    /// Node selector terms, ORed; a term's requirements are ANDed. Empty: any node.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) node_terms: Vec<Vec<LabelRequirement>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) tolerations: Vec<Toleration>,
}

impl Constraints {
    /// Why nodes with these labels and taints cannot run the pods, if they cannot.
    pub(crate) fn refusal(&self, labels: &BTreeMap<String, String>, taints: &[Taint]) -> Option<String> {
        if !self.node_terms.is_empty() && !self.node_terms.iter().any(|term| term.iter().all(|r| r.matches(labels))) {
            // Name the first unmet requirement of the closest term.
            let unmet: Vec<String> = self
                .node_terms
                .iter()
                .filter_map(|term| term.iter().find(|r| !r.matches(labels)))
                .map(|r| r.to_string())
                .collect();
            return Some(format!("nodes do not match the pod's node selector ({})", unmet.join(" or ")));
        }
        let blocking = taints.iter().filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute");
        for t in blocking {
            if !self.tolerations.iter().any(|tol| tol.tolerates(t)) {
                return Some(format!("nodes are tainted {t} and the pod does not tolerate it"));
            }
        }
        None
    }
}

/// GPU product names compared as the same product: case and separators
/// ignored, and one name may extend the other at a `-` (a profile's
/// `nvidia-h100-80gb` is GPU feature discovery's `NVIDIA-H100-80GB-HBM3`).
pub(crate) fn gpu_matches(want: &str, have: &str) -> bool {
    let (w, h) = (normalize_gpu(want), normalize_gpu(have));
    if w.is_empty() || h.is_empty() {
        return false;
    }
    let extends = |long: &str, short: &str| long.strip_prefix(short).is_some_and(|rest| rest.starts_with('-'));
    w == h || extends(&h, &w) || extends(&w, &h)
}

/// Lower case, spaces and underscores as `-`.
pub(crate) fn normalize_gpu(name: &str) -> String {
    name.trim().to_ascii_lowercase().replace([' ', '_'], "-")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn requirements_follow_the_scheduler() {
        let l = labels(&[("pool", "a"), ("gpus", "8")]);
        let req = |k: &str, op: &str, v: &[&str]| LabelRequirement {
            key: k.into(),
            operator: op.into(),
            values: v.iter().map(|s| s.to_string()).collect(),
        };
        let cases = [
            (req("pool", "In", &["a", "b"]), true),
            (req("pool", "In", &["b"]), false),
            (req("pool", "NotIn", &["b"]), true),
            (req("zone", "NotIn", &["b"]), true),
            (req("pool", "Exists", &[]), true),
            (req("zone", "DoesNotExist", &[]), true),
            (req("gpus", "Gt", &["4"]), true),
            (req("gpus", "Lt", &["4"]), false),
            (req("pool", "Gt", &["4"]), false),
            (req("pool", "Near", &["a"]), false),
        ];
        for (r, want) in cases {
            assert_eq!(r.matches(&l), want, "{r:?}");
        }
    }

    #[test]
    fn terms_are_ored_and_taints_need_tolerations() {
        let l = labels(&[("pool", "a")]);
        let c = Constraints {
            node_terms: vec![vec![LabelRequirement::is_in("pool", "b")], vec![LabelRequirement::is_in("pool", "a")]],
            tolerations: vec![],
        };
        assert_eq!(c.refusal(&l, &[]), None);
        let gpu = Taint { key: "nvidia.com/gpu".into(), value: None, effect: "NoSchedule".into() };
        let soft = Taint { key: "x".into(), value: None, effect: "PreferNoSchedule".into() };
        assert!(c.refusal(&l, std::slice::from_ref(&gpu)).unwrap().contains("nvidia.com/gpu:NoSchedule"));
        assert_eq!(c.refusal(&l, &[soft]), None);
        let tol = Toleration { key: "nvidia.com/gpu".into(), operator: "Exists".into(), ..Default::default() };
        let c = Constraints { tolerations: vec![tol], ..c };
        assert_eq!(c.refusal(&l, std::slice::from_ref(&gpu)), None);
        let wrong_value = Toleration {
            key: "nvidia.com/gpu".into(),
            operator: "Equal".into(),
            value: "x".into(),
            effect: String::new(),
        };
        let c2 = Constraints { tolerations: vec![wrong_value], node_terms: vec![] };
        assert!(c2.refusal(&l, &[gpu]).is_some());
        let c3 = Constraints { node_terms: vec![vec![LabelRequirement::is_in("pool", "b")]], tolerations: vec![] };
        assert!(c3.refusal(&l, &[]).unwrap().contains("pool=b"));
    }

    #[test]
    fn gpu_names_match_across_spellings() {
        assert!(gpu_matches("nvidia-h100-80gb", "NVIDIA-H100-80GB-HBM3"));
        assert!(gpu_matches("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb"));
        assert!(!gpu_matches("nvidia-h100", "nvidia-h1000"));
        assert!(!gpu_matches("nvidia-a100-80gb", "nvidia-h100-80gb"));
        assert!(!gpu_matches("", "x"));
    }
}
