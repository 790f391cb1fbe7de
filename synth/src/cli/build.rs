//! `synth build`: blueprint -> template.

use std::path::PathBuf;

use super::{ExitCode, Input, output};
use crate::blueprint;

/// Arguments of `synth build`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  synth build blueprints/gpu-cluster.yaml > stack.json\n  synth build blueprints/gpu-cluster.yaml --region eu-west-1 -o stack.json\n\nThen upload stack.json in the CloudFormation console (Create stack > Upload a template file)."
)]
pub struct BuildArgs {
    #[command(flatten)]
    input: Input,

    /// Write the template to FILE (atomically) instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
}

/// The outcome of loading and compiling, shared with `validate`.
pub(super) enum Compiled {
    /// The template and everything worth telling.
    Ok { json: String, resources: usize, notes: String },
    /// Already reported on stderr.
    Failed(ExitCode),
}

/// Reads, checks and compiles the blueprint; prints warnings and problems on stderr.
pub(super) fn compile(input: &Input) -> Compiled {
    let text = match input.read() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return Compiled::Failed(ExitCode::Error);
        }
    };
    let path = input.display_path();
    let loaded = match blueprint::load(&text, &path, input.region) {
        Ok(l) => l,
        Err(problems) => {
            eprint!("{problems}");
            return Compiled::Failed(ExitCode::Invalid);
        }
    };
    let mut notes = String::new();
    if !loaded.warnings.is_empty() {
        notes.push_str(&blueprint::render_all(&loaded.warnings, &text, &path));
    }
    let template = crate::stack::compile(&loaded.spec);
    let resources = template.resource_count();
    match template.render() {
        Ok(rendered) => {
            for w in rendered.warnings {
                notes.push_str(&format!("warning: {w}\n"));
            }
            Compiled::Ok { json: rendered.json, resources, notes }
        }
        Err(e) => {
            eprintln!("error: internal error, please report it: {e}");
            Compiled::Failed(ExitCode::Error)
        }
    }
}

/// Runs `synth build`.
pub(super) fn run(args: &BuildArgs) -> ExitCode {
    let (json, notes) = match compile(&args.input) {
        Compiled::Ok { json, notes, .. } => (json, notes),
        Compiled::Failed(code) => return code,
    };
    eprint!("{notes}");
    match output::write(args.output.as_deref(), &json) {
        Ok(()) => {
            if let Some(path) = &args.output {
                eprintln!("wrote {} ({} bytes)", path.display(), json.len());
            }
            ExitCode::Success
        }
        Err(e) if output::is_broken_pipe(&e) => ExitCode::Success,
        Err(e) => {
            let target = args.output.as_ref().map_or("standard output".to_owned(), |p| p.display().to_string());
            eprintln!("error: cannot write the template to {target}: {e}");
            ExitCode::Error
        }
    }
}
