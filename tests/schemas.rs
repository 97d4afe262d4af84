//! Every object in `deploy/` against the schema the API server will judge it
//! by: Kubernetes core objects against the v1.34 OpenAPI (strict), custom
//! resources against their projects' published CRDs (KEDA, cluster-autoscaler,
//! Prometheus Operator, KServe), with unknown fields rejected as
//! `fieldValidation=Strict` does. A broken copy of each kind must fail, so a
//! schema that accepts anything would show. Sources and versions:
//! `tests/fixtures/schemas/README.md`.

use std::{
    collections::{BTreeMap, HashMap},
    path::Path,
};

use jsonschema::{Draft, Validator};
use serde_json::{json, Value};

use crate::deploy::docs;

fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schemas")
}

/// The Kubernetes definitions (`$defs`), and `apiVersion kind` -> definition name.
fn kubernetes() -> (Value, HashMap<String, String>) {
    let text = std::fs::read_to_string(fixtures().join("kubernetes-v1.34.0-strict.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let defs = doc["$defs"].clone();
    let mut by_kind = HashMap::new();
    for (name, def) in defs.as_object().unwrap() {
        for gvk in def["x-kubernetes-group-version-kind"].as_array().into_iter().flatten() {
            let (g, v, k) = (gvk["group"].as_str().unwrap(), gvk["version"].as_str().unwrap(), &gvk["kind"]);
            let api = if g.is_empty() { v.to_string() } else { format!("{g}/{v}") };
            by_kind.insert(format!("{api} {}", k.as_str().unwrap()), name.clone());
        }
    }
    (defs, by_kind)
}

fn kubernetes_validator(defs: &Value, def: &str) -> Validator {
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": format!("#/$defs/{def}"),
        "$defs": defs,
    });
    jsonschema::options().with_draft(Draft::Draft202012).build(&schema).unwrap()
}

/// A CRD version's schema made strict the way the API server is: an object
/// that lists neither `additionalProperties` nor
/// `x-kubernetes-preserve-unknown-fields` takes no other fields. OpenAPI's
/// `nullable` becomes a `null` type.
fn strict(s: &mut Value) {
    let Some(obj) = s.as_object_mut() else { return };
    if obj.get("nullable") == Some(&Value::Bool(true)) {
        if let Some(t) = obj.get("type").cloned() {
            obj.insert("type".into(), json!([t, "null"]));
        }
    }
    if let Some(Value::Object(props)) = obj.get_mut("properties") {
        props.values_mut().for_each(strict);
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub @ Value::Object(_)) = obj.get_mut(key) {
            strict(sub);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(subs)) = obj.get_mut(key) {
            subs.iter_mut().for_each(strict);
        }
    }
    let is_object =
        obj.get("type").is_some_and(|t| t == "object" || t.as_array().is_some_and(|a| a.contains(&json!("object"))));
    if is_object
        && !obj.contains_key("additionalProperties")
        && obj.get("x-kubernetes-preserve-unknown-fields") != Some(&Value::Bool(true))
    {
        obj.insert("additionalProperties".into(), Value::Bool(false));
    }
}

/// `apiVersion kind` -> strict validator for every served version of every vendored CRD.
fn crd_validators() -> HashMap<String, Validator> {
    let mut out = HashMap::new();
    for entry in std::fs::read_dir(fixtures().join("crds")).unwrap() {
        let path = entry.unwrap().path();
        let crd: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let (group, kind) = (crd["spec"]["group"].as_str().unwrap(), crd["spec"]["names"]["kind"].as_str().unwrap());
        for v in crd["spec"]["versions"].as_array().unwrap().iter().filter(|v| v["served"] == true) {
            let mut schema = v["schema"]["openAPIV3Schema"].clone();
            strict(&mut schema);
            // Checked against ObjectMeta separately, as the API server does.
            schema["properties"]["metadata"] = json!({});
            let validator = jsonschema::options().with_draft(Draft::Draft4).build(&schema).unwrap();
            out.insert(format!("{group}/{} {kind}", v["name"].as_str().unwrap()), validator);
        }
    }
    out
}

/// Checks objects by their `apiVersion` and `kind`.
struct Schemas {
    kubernetes: HashMap<String, Validator>,
    crds: HashMap<String, Validator>,
    object_meta: Validator,
}

impl Schemas {
    fn load(objects: &[(String, Value)]) -> Schemas {
        let (defs, by_kind) = kubernetes();
        let mut kubernetes = HashMap::new();
        for (_, o) in objects {
            let key = gvk(o);
            if let Some(def) = by_kind.get(&key) {
                kubernetes.entry(key).or_insert_with(|| kubernetes_validator(&defs, def));
            }
        }
        let object_meta = kubernetes_validator(&defs, "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta");
        Schemas { kubernetes, crds: crd_validators(), object_meta }
    }

    /// Every way `o` breaks its schema, each as "path: message"; an unknown kind is an error too.
    fn errors(&self, o: &Value) -> Vec<String> {
        let key = gvk(o);
        if let Some(v) = self.kubernetes.get(&key) {
            return violations(v, "", o);
        }
        match self.crds.get(&key) {
            Some(v) => {
                let mut errs = violations(v, "", o);
                errs.extend(violations(&self.object_meta, "/metadata", &o["metadata"]));
                errs
            }
            None => vec![format!("no schema for `{key}` (Kubernetes v1.34 or a vendored CRD)")],
        }
    }
}

/// Every way `inst` breaks `v`, each as "`at` + path: message".
pub(crate) fn violations(v: &Validator, at: &str, inst: &Value) -> Vec<String> {
    v.iter_errors(inst).map(|e| format!("{at}{}: {e}", e.instance_path())).collect()
}

fn gvk(o: &Value) -> String {
    format!("{} {}", o["apiVersion"].as_str().unwrap_or("?"), o["kind"].as_str().unwrap_or("?"))
}

/// Every object in `deploy/`, as JSON, named `file#index`.
pub(crate) fn objects() -> Vec<(String, Value)> {
    docs().into_iter().map(|(name, y)| (name, serde_json::to_value(y).unwrap())).collect()
}

#[test]
fn every_object_in_deploy_matches_the_schema_its_api_server_checks() {
    let objects = objects();
    let schemas = Schemas::load(&objects);
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for (name, o) in &objects {
        *kinds.entry(gvk(o)).or_default() += 1;
        failures.extend(schemas.errors(o).into_iter().map(|e| format!("{name}: {e}")));
    }
    assert!(failures.is_empty(), "manifests that the API server would reject:\n{}", failures.join("\n"));
    eprintln!("{} objects of {} kinds match their schemas: {kinds:?}", objects.len(), kinds.len());
}

/// The object to break: `spec` where there is one, else the object itself,
/// and its first field other than the type fields.
fn target(o: &mut Value) -> (&mut serde_json::Map<String, Value>, String) {
    let has_spec = o.get("spec").is_some_and(Value::is_object);
    let obj = if has_spec { o["spec"].as_object_mut().unwrap() } else { o.as_object_mut().unwrap() };
    let key = obj.keys().find(|k| !["apiVersion", "kind"].contains(&k.as_str())).unwrap().clone();
    (obj, key)
}

/// A scalar somewhere under `v`, as a JSON pointer (first in document order).
fn first_scalar(v: &Value, at: String) -> Option<String> {
    match v {
        Value::Object(m) => m.iter().find_map(|(k, v)| first_scalar(v, format!("{at}/{}", escape(k)))),
        Value::Array(a) => a.iter().enumerate().find_map(|(i, v)| first_scalar(v, format!("{at}/{i}"))),
        Value::Null => None,
        _ => Some(at),
    }
}

/// A key as a JSON pointer segment (RFC 6901).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[test]
fn a_misspelt_field_or_a_wrong_type_fails_for_every_kind() {
    let objects = objects();
    let schemas = Schemas::load(&objects);
    let mut first_of_kind: BTreeMap<String, &Value> = BTreeMap::new();
    for (_, o) in &objects {
        first_of_kind.entry(gvk(o)).or_insert(o);
    }
    for (kind, o) in first_of_kind {
        // A misspelt field: its first field with one letter doubled at the end.
        let mut typo = o.clone();
        let (obj, key) = target(&mut typo);
        let v = obj.remove(&key).unwrap();
        let wrong = format!("{key}{}", key.chars().last().unwrap());
        obj.insert(wrong.clone(), v);
        let errs = schemas.errors(&typo);
        assert!(
            errs.iter().any(|e| e.contains(&wrong)),
            "{kind}: misspelling `{key}` as `{wrong}` was not caught; errors: {errs:?}"
        );

        // A wrong type: the first scalar under that field wrapped in a list.
        let mut bad = o.clone();
        let (obj, key) = target(&mut bad);
        let pointer = first_scalar(&obj[&key], String::new()).map(|p| format!("/{}{p}", escape(&key)));
        let base = if o.get("spec").is_some_and(Value::is_object) { "/spec" } else { "" };
        let pointer = format!("{base}{}", pointer.unwrap_or_else(|| panic!("{kind}: no scalar under `{key}`")));
        let leaf = bad.pointer_mut(&pointer).unwrap();
        *leaf = json!([leaf.take()]);
        let errs = schemas.errors(&bad);
        assert!(
            errs.iter().any(|e| e.starts_with(&pointer) || e.contains(&format!("{pointer}:"))),
            "{kind}: a list at {pointer} was not caught; errors: {errs:?}"
        );
    }
}

#[test]
fn an_unknown_kind_is_reported_not_passed() {
    let schemas = Schemas::load(&[]);
    let errs =
        schemas.errors(&json!({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObjekt", "metadata": {"name": "x"}}));
    assert!(errs.len() == 1 && errs[0].contains("no schema for `keda.sh/v1alpha1 ScaledObjekt`"), "{errs:?}");
}
