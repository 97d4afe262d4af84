//! The tree's shape, as a reader relies on it: the top-level modules of
//! `src/` form a one-way data flow (sources -> store -> forecast ->
//! sizing/capacity -> serve -> scaler/api), so no two of them import each
//! other, directly or round a loop. Imports are read from `crate::` paths,
//! doc links included (a doc link that points back up the flow is a
//! dependency a reader has to follow too); unit-test modules are left out.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

/// The top-level modules `text` names through `crate::` paths, grouped
/// imports (`crate::{a::x, b::{y, z}}`) included.
fn named_modules(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect() };
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The first identifier of each top-level item in the braces.
            let (mut depth, mut item_start) = (0usize, true);
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_ascii_alphabetic() || c == '_') => {
                        out.insert(ident(&group[j..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if name.starts_with(|c: char| c.is_ascii_lowercase()) {
                out.insert(name);
            }
        }
    }
    out
}

/// Each top-level module of `src/` and the others it imports.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, files);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
        let top = first.trim_end_matches(".rs").to_string();
        if top == "main" || top == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        // Unit tests may reach anywhere: they sit at the end of a file.
        let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
        g.entry(top.clone()).or_default().extend(named_modules(text).into_iter().filter(|m| *m != top));
    }
    let tops: BTreeSet<String> = g.keys().cloned().collect();
    for deps in g.values_mut() {
        deps.retain(|d| tops.contains(d));
    }
    g
}

/// One cycle through `g`, if any (depth-first search with colours).
fn find_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == n) {
            let mut cycle = path[at..].to_vec();
            cycle.push(n.to_string());
            return Some(cycle);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for d in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(d, g, done, path) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys().find_map(|n| visit(n, g, &mut done, &mut Vec::new()))
}

#[test]
fn the_top_level_modules_import_each_other_one_way_only() {
    let g = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(g.len() > 10, "read {} top-level modules", g.len());
    if let Some(cycle) = find_cycle(&g) {
        panic!("import cycle between top-level modules: {}", cycle.join(" -> "));
    }
}

#[test]
fn the_check_sees_imports_of_every_form_and_finds_a_loop() {
    let text = "use crate::{\n    capacity::{Pool, Shape},\n    sources::Signal,\n};\n/// See [`crate::store::Store`].\nfn f() -> crate::time::Instant {}";
    let found: Vec<String> = named_modules(text).into_iter().collect();
    assert_eq!(found, ["capacity", "sources", "store", "time"]);
    let g: BTreeMap<String, BTreeSet<String>> =
        [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"]), ("d", vec!["a"])]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
            .collect();
    assert_eq!(find_cycle(&g).unwrap(), ["a", "b", "c", "a"]);
    let mut one_way = g.clone();
    one_way.get_mut("c").unwrap().clear();
    assert_eq!(find_cycle(&one_way), None);
}
