//! The `pallet` binary: a thin shell over the library's CLI.

fn main() -> std::process::ExitCode {
    let cli = pallet::cli::parse();
    match pallet::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", pallet::cli::error_message(&err));
            std::process::ExitCode::FAILURE
        }
    }
}
