//! The `collsim` binary: parse the command line, run it, map errors to exit status 2.

use clap::Parser;

fn main() {
    let cli = collsim::cli::Cli::parse();
    if let Err(err) = collsim::cli::run(cli) {
        let message = err.to_string().replace('\n', " ");
        eprintln!("error: {message}");
        // Everything the user gave or asked for (including outputs that cannot be written) is
        // exit 2; a broken invariant of collsim itself is 70 (EX_SOFTWARE).
        std::process::exit(match err {
            collsim::Error::Input(_) | collsim::Error::Io { .. } => 2,
            collsim::Error::Internal(_) => 70,
        });
    }
}
