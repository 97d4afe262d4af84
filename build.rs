//! Build steps: compile `proto/externalscaler.proto` with protox (pure Rust,
//! no system `protoc`), and embed the capacity profiles in `models/` so the
//! binary knows them wherever it runs.

use std::{env, fmt::Write as _, fs, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/externalscaler.proto");
    let fds = protox::compile(["proto/externalscaler.proto"], ["proto"])?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(fds)?;

    println!("cargo:rerun-if-changed=models");
    let mut entries: Vec<PathBuf> = fs::read_dir("models")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    entries.sort();
    let mut code = String::from("/// Capacity profiles shipped in `models/`, as (file name, YAML text).\npub const BUILTIN_PROFILES: &[(&str, &str)] = &[\n");
    for path in entries {
        let abs = fs::canonicalize(&path)?;
        let name = path.file_name().unwrap().to_string_lossy();
        writeln!(code, "    ({name:?}, include_str!({:?})),", abs.display())?;
    }
    code.push_str("];\n");
    fs::write(PathBuf::from(env::var("OUT_DIR")?).join("builtin_profiles.rs"), code)?;
    Ok(())
}
