//! Reading a ScaledObject's trigger metadata.
//!
//! KEDA forwards every trigger metadata entry (its own `scalerAddress`
//! included), so unknown keys are allowed; only Foresight's own keys are
//! checked, and a bad one is an INVALID_ARGUMENT that names it.

use tonic::Status;

use crate::{proto::ScaledObjectRef, sizing::roles::RoleKind};

pub(crate) use crate::workload::{KEY_NAMESPACE, KEY_WORKLOAD};
/// Metadata key choosing the metric encoding (default `replicas`).
pub(crate) const KEY_ENCODING: &str = "encoding";
/// Metadata key naming a role of the workload (`prefill` or `decode`).
pub(crate) const KEY_ROLE: &str = "role";
/// Metadata key naming a node pool: the trigger of a pool's placeholder
/// (balloon) Deployment, instead of `workload`.
pub(crate) const KEY_POOL: &str = "pool";

/// What a trigger asks about: a workload's replicas, or a pool's placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Workload(Query),
    Pool(String),
}

/// Parse metadata naming either a workload or a pool (not both).
pub fn parse_target(r: &ScaledObjectRef) -> Result<Target, Status> {
    let md = &r.scaler_metadata;
    let Some(pool) = md.get(KEY_POOL).map(|s| s.trim()) else {
        return parse(r).map(Target::Workload);
    };
    if md.contains_key(KEY_WORKLOAD) {
        return Err(Status::invalid_argument(format!(
            "trigger metadata has both `{KEY_WORKLOAD}` and `{KEY_POOL}`; a trigger sizes one workload or one pool's placeholders"
        )));
    }
    if pool.is_empty() || pool.len() > MAX_VALUE_LEN {
        return Err(Status::invalid_argument(format!(
            "trigger metadata key `{KEY_POOL}` must name a node pool (1 to {MAX_VALUE_LEN} bytes)"
        )));
    }
    Ok(Target::Pool(pool.to_string()))
}

/// How the answer is encoded for the HPA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// Value = desired replicas, target 1: the HPA's ceil(value / target) is the answer itself.
    Replicas,
    /// Value = load in signal units, target = what one replica handles.
    Load,
}

/// What a ScaledObject asks about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub(crate) namespace: String,
    pub(crate) workload: String,
    pub(crate) encoding: Encoding,
    /// The role of a disaggregated workload the trigger scales, if any.
    pub role: Option<RoleKind>,
}

impl Query {
    pub fn key(&self) -> String {
        crate::workload::workload_key(&self.namespace, &self.workload)
    }
}

/// Longest value accepted for a key of ours (a Kubernetes object name).
const MAX_VALUE_LEN: usize = 253;

/// `s`, cut short for an error message so a huge input is not echoed back.
pub(crate) fn shown(s: &str) -> String {
    match s.char_indices().nth(64) {
        Some((i, _)) => format!("{}... ({} bytes)", &s[..i], s.len()),
        None => s.to_string(),
    }
}

/// Parse a ScaledObjectRef's metadata.
pub(crate) fn parse(r: &ScaledObjectRef) -> Result<Query, Status> {
    let md = &r.scaler_metadata;
    for key in [KEY_WORKLOAD, KEY_NAMESPACE, KEY_ENCODING, KEY_ROLE] {
        if let Some(v) = md.get(key).filter(|v| v.len() > MAX_VALUE_LEN) {
            return Err(Status::invalid_argument(format!(
                "trigger metadata key `{key}` is {} bytes long; at most {MAX_VALUE_LEN} are allowed",
                v.len()
            )));
        }
    }
    let workload = md.get(KEY_WORKLOAD).map(|s| s.trim()).unwrap_or_default();
    if workload.is_empty() {
        return Err(Status::invalid_argument(format!(
            "trigger metadata is missing required key `{KEY_WORKLOAD}` (the Foresight workload this ScaledObject scales)"
        )));
    }
    let namespace = match md.get(KEY_NAMESPACE).map(|s| s.trim()) {
        Some(ns) if !ns.is_empty() => ns,
        _ if !r.namespace.is_empty() => r.namespace.as_str(),
        _ => "default",
    };
    let encoding = match md.get(KEY_ENCODING).map(|s| s.trim()) {
        None | Some("") => Encoding::Replicas,
        Some(e) if e.eq_ignore_ascii_case("replicas") => Encoding::Replicas,
        Some(e) if e.eq_ignore_ascii_case("load") => Encoding::Load,
        Some(other) => {
            return Err(Status::invalid_argument(format!(
                "trigger metadata key `{KEY_ENCODING}` must be `replicas` or `load`, got `{}`",
                shown(other)
            )))
        }
    };
    let role = match md.get(KEY_ROLE).map(|s| s.trim()) {
        None | Some("") => None,
        Some(r) if r.eq_ignore_ascii_case("prefill") => Some(RoleKind::Prefill),
        Some(r) if r.eq_ignore_ascii_case("decode") => Some(RoleKind::Decode),
        Some(other) => {
            return Err(Status::invalid_argument(format!(
                "trigger metadata key `{KEY_ROLE}` must be `prefill` or `decode`, got `{}`",
                shown(other)
            )))
        }
    };
    if role.is_some() && encoding == Encoding::Load {
        return Err(Status::invalid_argument(format!(
            "trigger metadata key `{KEY_ENCODING}`: a role is served as replicas only (its load is tokens and sequences, not one signal)"
        )));
    }
    Ok(Query { namespace: namespace.to_string(), workload: workload.to_string(), encoding, role })
}

/// Does the metric name KEDA asks for match `served`? Case-insensitive
/// (KEDA issue #4954), and tolerant of the `s<index>-` prefix KEDA adds for
/// the HPA in case it is not stripped.
pub(crate) fn metric_matches(requested: &str, served: &str) -> bool {
    if requested.eq_ignore_ascii_case(served) {
        return true;
    }
    let Some(rest) = requested.strip_prefix(['s', 'S']) else { return false };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    digits > 0 && rest[digits..].strip_prefix('-').is_some_and(|r| r.eq_ignore_ascii_case(served))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(ns: &str, kv: &[(&str, &str)]) -> ScaledObjectRef {
        ScaledObjectRef {
            name: "so".into(),
            namespace: ns.into(),
            scaler_metadata: kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    #[test]
    fn namespace_falls_back_to_the_scaled_object_then_default() {
        let q = parse(&r("inference", &[("workload", "a"), ("scalerAddress", "x:6000")])).unwrap();
        assert_eq!((q.namespace.as_str(), q.encoding), ("inference", Encoding::Replicas));
        let q = parse(&r("inference", &[("workload", "a"), ("namespace", "other")])).unwrap();
        assert_eq!(q.namespace, "other");
        assert_eq!(parse(&r("", &[("workload", "a")])).unwrap().namespace, "default");
    }

    #[test]
    fn bad_metadata_names_the_key() {
        for md in [&[][..], &[("workload", " ")][..]] {
            let e = parse(&r("ns", md)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert!(e.message().contains("`workload`"), "{}", e.message());
        }
        let e = parse(&r("ns", &[("workload", "a"), ("encoding", "qps")])).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("`encoding`") && e.message().contains("qps"));
        assert_eq!(parse(&r("ns", &[("workload", "a"), ("encoding", "LOAD")])).unwrap().encoding, Encoding::Load);
    }

    #[test]
    fn metric_names_match_case_insensitively_with_or_without_prefix() {
        let served = "foresight-llama-8b-replicas";
        for ok in
            [served, "Foresight-Llama-8B-Replicas", "s0-foresight-llama-8b-replicas", "S12-FORESIGHT-llama-8b-replicas"]
        {
            assert!(metric_matches(ok, served), "{ok}");
        }
        for bad in ["foresight-llama-8b", "s-foresight-llama-8b-replicas", "sx-foresight-llama-8b-replicas", ""] {
            assert!(!metric_matches(bad, served), "{bad}");
        }
    }
}
