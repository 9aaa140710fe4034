//! The `pallet` binary: a thin shell over the library's CLI.

/// mimalloc instead of glibc malloc: the agent allocates and frees many small JSON trees per
/// watch event and pass, and glibc's malloc was 23% of its CPU at 1,000 bundles
/// (mimalloc took 9-16% off the agent's CPU in the scale benchmark, benches/scale.rs).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = pallet::cli::parse();
    match pallet::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            // Errors quote object text and servers' answers: shown, never acted on.
            let message = pallet::cli::error_message(&err);
            eprintln!("error: {}", pallet::cli::terminal::escape(&message));
            std::process::ExitCode::FAILURE
        }
    }
}
