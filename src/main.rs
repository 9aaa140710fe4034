//! The `pallet` binary: a thin shell over the library's CLI.

/// mimalloc instead of glibc malloc: the agent allocates and frees many small JSON trees per
/// watch event and pass, and glibc's malloc took about a quarter of its CPU at 1,000 bundles
/// (mimalloc took 9-16% off the agent's CPU in the scale benchmark, benches/scale.rs).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    pallet::cli::complete_from_env();
    let cli = pallet::cli::parse();
    match pallet::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            let exit = pallet::cli::exit::status_of(&err);
            if !pallet::cli::exit::is_quiet(&err) {
                // Errors quote object text and servers' answers: shown, never acted on.
                let message = pallet::cli::error_message(&err);
                eprintln!("error: {}", pallet::cli::terminal::escape(&message));
            }
            std::process::ExitCode::from(exit.code())
        }
    }
}
