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

/// Let a report command die of SIGPIPE like other Unix tools when its
/// reader closes early; Rust ignores the signal, so `println!` would panic.
fn default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called from main before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    limit_malloc_arenas();
    let cli = foresight::cli::Cli::parse();
    if cli.is_report() {
        default_sigpipe();
    }
    foresight::cli::run(cli)
}
