//! Programs from outside the crate that some tests drive. A plain
//! `cargo test` on a machine without them skips those tests with a message
//! on stderr; `scripts/test` installs them and sets
//! `FORESIGHT_REQUIRE_TOOLS=1`, under which a missing one fails the test, so
//! CI cannot pass by skipping.

use std::path::Path;

/// Something a test needs from outside the crate.
#[derive(Debug, Clone, Copy)]
pub enum Tool {
    /// An executable on `PATH`, and the Debian package that has it.
    Program(&'static str, &'static str),
    /// A path under the repository that a setup step makes, and that step.
    Made(&'static str, &'static str),
    /// An absolute path, and the Debian package that has it.
    File(&'static str, &'static str),
}

pub const PROMETHEUS: Tool = Tool::Program("prometheus", "the Debian package `prometheus`");
pub const PROMTOOL: Tool = Tool::Program("promtool", "the Debian package `prometheus`");
pub const VICTORIA_METRICS: Tool = Tool::Program("victoria-metrics", "the Debian package `victoria-metrics`");
pub const PRLIMIT: Tool = Tool::Program("prlimit", "the Debian package `util-linux`");
pub const NODE: Tool = Tool::Program("node", "the Debian package `nodejs`");
pub const CHROMIUM: Tool = Tool::File("/usr/bin/chromium", "the Debian package `chromium`");
pub const PLAYWRIGHT: Tool = Tool::Made("tests/ui/node_modules/playwright-core", "`npm ci` in tests/ui");
pub const TEST_VENV: Tool = Tool::Made(".venv/bin/python", "the test venv (`python3 -m venv .venv`)");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| is_executable(&dir.join(program))))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether everything in `tools` is here. When not: `false` after a
/// message naming what is missing and where it comes from, or a panic
/// under `FORESIGHT_REQUIRE_TOOLS`.
pub fn have(test: &str, tools: &[Tool]) -> bool {
    let missing: Vec<String> = tools
        .iter()
        .filter_map(|t| match *t {
            Tool::Program(name, from) => (!on_path(name)).then(|| format!("`{name}` ({from})")),
            Tool::Made(path, from) => (!root().join(path).exists()).then(|| format!("{path} ({from})")),
            Tool::File(path, from) => (!Path::new(path).exists()).then(|| format!("{path} ({from})")),
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    let msg = format!("{test}: needs {}; ./scripts/test installs it", missing.join(", "));
    assert!(std::env::var_os("FORESIGHT_REQUIRE_TOOLS").is_none(), "{msg}");
    // Straight to stderr: the harness captures `eprintln!` of passing tests.
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "skipped {msg}");
    false
}
