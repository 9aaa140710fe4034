//! The `pallet` binary: a thin shell over the library's CLI.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = pallet::cli::Cli::parse();
    match pallet::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
