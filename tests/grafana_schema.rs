//! The shipped Grafana dashboard against Grafana's own schemas: the
//! dashboard model, each panel plugin's options and field config, and the
//! Prometheus query model, as grafana/grafana-foundation-sdk exports them
//! (`tests/fixtures/schemas/README.md`). Unknown keys and wrong types fail;
//! a broken copy of the dashboard proves each check can.
//!
//! Three export artefacts are corrected, each a field Grafana's CUE schema
//! declares as "anything" (or "string or object") that the JSON Schema export
//! turned into "object"; and plugin options skip `required`, because the
//! export marks every field that has a default as required while Grafana
//! fills those defaults in when it loads a panel.

use std::path::Path;

use jsonschema::{Draft, Validator};
use serde_json::{json, Value};

use crate::{grafana::dashboard, schemas::violations};

fn load(name: &str) -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/schemas/grafana/{name}.jsonschema.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn build(schema: &Value) -> Validator {
    jsonschema::options().with_draft(Draft::Draft7).build(schema).unwrap()
}

/// `schema` with every `required` list dropped.
fn without_required(schema: &mut Value) {
    match schema {
        Value::Object(m) => {
            m.remove("required");
            m.values_mut().for_each(without_required);
        }
        Value::Array(a) => a.iter_mut().for_each(without_required),
        _ => {}
    }
}

struct Schemas {
    dashboard: Validator,
    query: Validator,
    /// Panel type -> (options, field config) validators.
    panels: Vec<(String, Option<Validator>, Option<Validator>)>,
}

impl Schemas {
    fn load() -> Schemas {
        let mut d = load("dashboard");
        let defs = &mut d["definitions"];
        for (def, field, any) in [
            ("MatcherConfig", "options", json!({})),
            ("DynamicConfigValue", "value", json!({})),
            ("VariableModel", "query", json!({"anyOf": [{"type": "string"}, {"type": "object"}]})),
        ] {
            let slot = &mut defs[def]["properties"][field];
            assert!(slot.is_object(), "the export no longer has {def}.{field}: revisit this correction");
            *slot = any;
        }
        let panels = ["timeseries", "bargauge", "table"]
            .into_iter()
            .map(|t| {
                let mut s = load(t);
                without_required(&mut s);
                let part = |name: &str| {
                    s["definitions"].get(name).map(|_| {
                        let mut p = s.clone();
                        p["$ref"] = json!(format!("#/definitions/{name}"));
                        build(&p)
                    })
                };
                (t.to_string(), part("Options"), part("FieldConfig"))
            })
            .collect();
        Schemas { dashboard: build(&d), query: build(&load("prometheus")), panels }
    }

    fn errors(&self, dash: &Value) -> Vec<String> {
        let mut out = violations(&self.dashboard, "", dash);
        let top = dash["panels"].as_array().cloned().unwrap_or_default();
        let nested = top.iter().flat_map(|p| p["panels"].as_array().cloned().unwrap_or_default());
        for (i, p) in top.iter().cloned().chain(nested).enumerate() {
            let kind = p["type"].as_str().unwrap_or("?");
            if kind == "row" {
                continue;
            }
            let at = format!("panel {i} `{}` ({kind})", p["title"].as_str().unwrap_or(""));
            let Some((_, options, field)) = self.panels.iter().find(|(t, ..)| t == kind) else {
                out.push(format!("{at}: no schema for panel type `{kind}`"));
                continue;
            };
            if let (Some(v), Some(o)) = (options, p.get("options")) {
                out.extend(violations(v, &format!("{at} options"), o));
            }
            if let (Some(v), Some(c)) = (field, p.pointer("/fieldConfig/defaults/custom")) {
                out.extend(violations(v, &format!("{at} fieldConfig.defaults.custom"), c));
            }
            for (j, q) in p["targets"].as_array().into_iter().flatten().enumerate() {
                out.extend(violations(&self.query, &format!("{at} targets[{j}]"), q));
            }
        }
        out
    }
}

#[test]
fn the_dashboard_matches_grafanas_dashboard_panel_and_query_schemas() {
    let errs = Schemas::load().errors(&dashboard());
    assert!(errs.is_empty(), "Grafana's schemas reject the dashboard:\n{}", errs.join("\n"));
}

/// `v[from]` moved to `v[to]`: a misspelling.
fn rename(v: &mut Value, from: &str, to: &str) {
    let m = v.as_object_mut().unwrap();
    let x = m.remove(from).unwrap_or_else(|| panic!("no `{from}` to misspell"));
    m.insert(to.into(), x);
}

#[test]
fn a_misspelt_key_or_a_wrong_type_anywhere_fails() {
    let schemas = Schemas::load();
    let d = dashboard();
    let first = |kind: &str| d["panels"].as_array().unwrap().iter().position(|p| p["type"] == kind).unwrap();
    let (ts, bar) = (first("timeseries"), first("bargauge"));
    type Break = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Break)> = vec![
        ("dashboard", Box::new(|d| rename(d, "refresh", "refesh"))),
        ("panel", Box::new(move |d| rename(&mut d["panels"][ts], "gridPos", "gridPoss"))),
        ("panel type", Box::new(move |d| d["panels"][ts]["title"] = json!(7))),
        (
            "timeseries options",
            Box::new(move |d| rename(&mut d["panels"][ts]["options"]["legend"], "displayMode", "displayMod")),
        ),
        (
            "timeseries field config",
            Box::new(move |d| d["panels"][ts]["fieldConfig"]["defaults"]["custom"]["lineWidth"] = json!("2")),
        ),
        ("bargauge options", Box::new(move |d| d["panels"][bar]["options"]["orientaton"] = json!("horizontal"))),
        ("query", Box::new(move |d| rename(&mut d["panels"][ts]["targets"][0], "expr", "exp"))),
    ];
    for (what, break_it) in cases {
        let mut bad = d.clone();
        break_it(&mut bad);
        assert!(!schemas.errors(&bad).is_empty(), "a broken {what} passed Grafana's schemas");
    }
}
