//! The `foresight` binary: a thin edge over the library's command line.

use std::process::ExitCode;

use clap::Parser;

/// glibc gives each new thread that allocates its own malloc arena, up to 8
/// per core, and each keeps what it freed. The server's short-lived blocking
/// threads (history flushes, forecast fits) then grew its memory by ~9 MiB a
/// minute in the 10-minute soak (`cargo bench --bench soak`, README); with
/// two arenas it levels off within a few minutes.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: called first thing in main, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

fn main() -> ExitCode {
    limit_malloc_arenas();
    foresight::cli::run(foresight::cli::Cli::parse())
}
