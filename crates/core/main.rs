//! The `neardup` program: the command line ([`neardup::cli::run`]) with this process's
//! arguments, exiting with its code.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(neardup::cli::run(std::env::args_os()))
}
