//! The `neardup` command line (see [`cli`]).

mod cli;

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use clap::Parser;
use neardup::Error;

use cli::args::Cli;
use cli::signals::{SIGNAL, signal_name};
use cli::view::init_logging;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.quiet, cli.verbose);
    let result = cli::commands::run(cli.command, cli.quiet);
    let signal = SIGNAL.load(Ordering::SeqCst);
    if signal != 0 {
        let name = signal_name(signal);
        match &result {
            Ok(()) => eprintln!(
                "neardup: {name} arrived while the outputs were being published; they are \
                 published whole"
            ),
            Err(Error::Interrupted) => eprintln!(
                "neardup: interrupted by {name}; nothing was published and the files this run had \
                 written were removed"
            ),
            Err(e) => eprintln!(
                "neardup: error: {}\nneardup: interrupted by {name}",
                cli::view::error_message(e)
            ),
        }
        return ExitCode::from((128 + signal) as u8);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "neardup: error: {}",
                cli::view::error_message(&e)
            );
            ExitCode::from(e.exit_code() as u8)
        }
    }
}
