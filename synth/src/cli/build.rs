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

/// Reads, checks and compiles the blueprint into the cluster template;
/// prints warnings and problems on stderr.
pub(super) fn compile(input: &Input) -> Compiled {
    compile_with(input, crate::TemplateKind::Cluster)
}

/// Reads and checks the blueprint, and compiles it into the template of `kind`.
pub(super) fn compile_with(input: &Input, kind: crate::TemplateKind) -> Compiled {
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
    let warnings: Vec<_> = loaded.warnings.into_iter().filter(|w| kind.keeps(w)).collect();
    if !warnings.is_empty() {
        notes.push_str(&blueprint::render_all(&warnings, &text, &path));
    }
    let template = kind.compile(&loaded.spec);
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
    emit(compile(&args.input), args.output.as_deref())
}

/// Prints the notes and writes the template to `output` (or stdout).
pub(super) fn emit(compiled: Compiled, output: Option<&std::path::Path>) -> ExitCode {
    let (json, notes) = match compiled {
        Compiled::Ok { json, notes, .. } => (json, notes),
        Compiled::Failed(code) => return code,
    };
    eprint!("{notes}");
    match output::write(output, &json) {
        Ok(()) => {
            if let Some(path) = output {
                eprintln!("wrote {} ({} bytes)", path.display(), json.len());
            }
            ExitCode::Success
        }
        Err(e) if output::is_broken_pipe(&e) => ExitCode::Success,
        Err(e) => {
            let target = output.map_or("standard output".to_owned(), |p| p.display().to_string());
            eprintln!("error: cannot write the template to {target}: {e}");
            ExitCode::Error
        }
    }
}
