//! The `collsim` binary: parse the command line, run it, map errors to exit status 2.

use clap::Parser;

fn main() {
    let cli = collsim::cli::Cli::parse();
    if let Err(err) = collsim::cli::run(cli) {
        let message = err.to_string().replace('\n', " ");
        eprintln!("error: {message}");
        std::process::exit(match err {
            collsim::Error::Input(_) => 2,
            collsim::Error::Io { .. } => 1,
        });
    }
}
