//! Validation of a workload's `roles:`: each role's profile, bounds and shape,
//! and the demand signals role sizing reads.

use std::collections::BTreeMap;

use super::raw::RawRole;
use crate::{
    sizing::{profile::Profile, roles::RoleKind},
    sources::Signal,
    workload::{Role, StatedShape, ROLE_SIGNALS},
};

/// What a role does not state comes from its workload.
pub(super) struct RoleDefaults<'a> {
    pub(super) model: &'a str,
    pub(super) min_replicas: u32,
    pub(super) max_replicas: u32,
}

/// A workload's roles, resolved; `at` names a field of the workload, `bad`
/// collects problems.
pub(super) fn validate_roles(
    raw: BTreeMap<RoleKind, RawRole>,
    d: &RoleDefaults<'_>,
    profiles: &BTreeMap<String, Profile>,
    at: &dyn Fn(&str) -> String,
    bad: &mut impl FnMut(String, String),
) -> Vec<Role> {
    let mut out = Vec::new();
    for (kind, r) in raw {
        let field = |f: &str| at(&format!("roles.{kind}.{f}"));
        let model = r.model.as_deref().unwrap_or(d.model);
        let Some(profile) = profiles.get(model) else {
            // The workload's own unknown model is reported once, on `model`.
            if r.model.is_some() {
                let known: Vec<&str> = profiles.keys().map(String::as_str).collect();
                bad(field("model"), format!("unknown model profile `{model}`; known: {}", known.join(", ")));
            }
            continue;
        };
        let min_replicas = r.min_replicas.unwrap_or(d.min_replicas);
        let max_replicas = r.max_replicas.unwrap_or(d.max_replicas);
        if max_replicas == 0 || max_replicas > super::MAX_REPLICAS {
            bad(field("max_replicas"), format!("must be within 1..={}, got {max_replicas}", super::MAX_REPLICAS));
        }
        if min_replicas > max_replicas {
            bad(field("min_replicas"), format!("{min_replicas} exceeds max_replicas {max_replicas}"));
        }
        if kind == RoleKind::Prefill && profile.prefill_tokens_per_sec.is_none() {
            bad(
                field("model"),
                format!(
                    "profile `{}` states no prefill_tokens_per_sec, which a prefill role is sized on",
                    profile.name
                ),
            );
        }
        if profile.role_capacity().is_none() {
            bad(
                field("model"),
                format!(
                    "profile `{}` states neither generation_tokens_per_sec nor slo.itl_secs: no time per output token to size on",
                    profile.name
                ),
            );
        }
        if let Some(why) = r.shape.as_ref().and_then(|s| shape_problem(profile, s)) {
            bad(field("shape"), why);
        }
        out.push(Role { kind, profile: profile.clone(), min_replicas, max_replicas, shape: r.shape });
    }
    out
}

/// What is wrong with a stated shape over `profile`'s, if anything.
pub(super) fn shape_problem(profile: &Profile, s: &StatedShape) -> Option<String> {
    let g = s.gpus_per_replica.unwrap_or(profile.gpus_per_replica);
    let n = s.nodes_per_replica.unwrap_or(profile.nodes_per_replica);
    (g == 0 || n == 0 || g % n != 0)
        .then(|| format!("gpus_per_replica ({g}) must be a multiple of nodes_per_replica ({n}), both > 0"))
}

/// The signals a workload with roles records: its list plus the demand
/// parts. An explicit list must name the rate and both lengths; the cache
/// share is optional (without it, no prompt token counts as cached).
pub(super) fn role_signals(
    explicit: bool,
    mut signals: Vec<Signal>,
    at: &dyn Fn(&str) -> String,
    bad: &mut impl FnMut(String, String),
) -> Vec<Signal> {
    for s in ROLE_SIGNALS {
        if signals.contains(&s) {
            continue;
        }
        if explicit && s != Signal::PrefixCacheHitFraction {
            bad(at("signals"), format!("must include `{s}`: roles are sized on request rate and lengths"));
        } else if !explicit {
            signals.push(s);
        }
    }
    signals
}
