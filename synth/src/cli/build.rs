//! `synth build`: blueprint -> template.

use std::path::PathBuf;

use cli_output::{err, errln};

use super::input::Input;
use super::output::Destination;
use crate::blueprint;
use crate::exit::{ExitCode, printed};

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
    Ok {
        json: String,
        resources: usize,
        notes: String,
        /// Where the workers come from and launch, the nodes' data and the
        /// FSx for Lustre file system (`ClusterSpec::workers_summary`,
        /// `ClusterSpec::data_summary`, `ClusterSpec::fsx_summary`, `ClusterSpec::gpu_summary`).
        summary: Vec<String>,
        /// The region the template is for; `None`: all five.
        region: Option<crate::region::Region>,
        /// The cluster's image, in words, when it has no agent and the
        /// blueprint names no package (`blueprint::Loaded::missing_agent`);
        /// `None` for `synth image`'s template, which bakes the agent in.
        missing_agent: Option<String>,
    },
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
            errln!("{e}");
            return Compiled::Failed(e.code);
        }
    };
    let region = match input.region() {
        Ok(r) => r,
        Err(e) => {
            errln!("{e}");
            return Compiled::Failed(ExitCode::Error);
        }
    };
    let path = input.display_path();
    let started = std::time::Instant::now();
    let loaded = match blueprint::load(&text, &path, region) {
        Ok(l) => l,
        Err(problems) => {
            tracing::debug!(errors = problems.error_count(), elapsed = ?started.elapsed(), "the blueprint has problems");
            err!("{problems}");
            return Compiled::Failed(ExitCode::Invalid);
        }
    };
    tracing::debug!(warnings = loaded.warnings.len(), elapsed = ?started.elapsed(), "the blueprint is valid");
    let mut notes = String::new();
    if !loaded.warnings.is_empty() {
        notes.push_str(&blueprint::render_all(&loaded.warnings, &text, &path));
    }
    let missing_agent = loaded.missing_agent.filter(|_| kind == crate::TemplateKind::Cluster);
    let template = kind.compile(&loaded.spec);
    let resources = template.resource_count();
    match template.render() {
        Ok(rendered) => {
            tracing::debug!(?kind, resources, bytes = rendered.json.len(), elapsed = ?started.elapsed(), "compiled the template");
            for w in rendered.warnings {
                notes.push_str(&format!("warning: {w}\n"));
            }
            Compiled::Ok {
                json: rendered.json,
                resources,
                notes,
                region: loaded.spec.region,
                missing_agent,
                summary: std::iter::once(loaded.spec.workers_summary())
                    .chain(loaded.spec.data_summary())
                    .chain(loaded.spec.fsx_summary())
                    .chain(loaded.spec.gpu_summary())
                    .collect(),
            }
        }
        Err(e) => {
            errln!("error: internal error, please report it: {e}");
            Compiled::Failed(ExitCode::Error)
        }
    }
}

/// What the user is doing when told that the image has no agent.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Doing {
    /// `synth build`: a template, for the console.
    Build,
    /// `synth validate`: checking, before `deploy` or `build`.
    Validate,
}

/// The note that the cluster's `image` (in words) has no agent, once, in
/// the words of what the user is doing, with the next step: `synth deploy`
/// stages the package itself; a template for the console needs the lines
/// `synth stage` prints.
pub(super) fn agent_note(image: &str, region: Option<crate::region::Region>, doing: Doing) -> String {
    let region = region.map_or("REGION", |r| r.code());
    let stage = format!("packaging/build && synth stage --region {region}");
    match doing {
        Doing::Build => format!(
            "note: this template's nodes boot {image}, which has no deeplearning agent, and it names no agent \
             package: uploaded as it is, the cluster would fail to form. For the console, stage the package and \
             add the `image:` lines it prints to the blueprint, then build again:\n    {stage}\n\
             (`synth deploy` stages the package by itself.)\n"
        ),
        Doing::Validate => format!(
            "note: the nodes boot {image}, which has no deeplearning agent: `synth deploy` stages the agent \
             package and installs it at boot by itself; a template for the console needs the `image:` lines \
             that `synth stage` prints, else the cluster would fail to form:\n    {stage}\n"
        ),
    }
}

/// Runs `synth build`.
pub(super) fn run(args: &BuildArgs) -> ExitCode {
    emit(&args.input, args.output.as_deref(), crate::TemplateKind::Cluster)
}

/// Checks `-o` (before anything is read), compiles the blueprint, prints the
/// notes and writes the template to `output` (or stdout).
pub(super) fn emit(input: &Input, output: Option<&std::path::Path>, kind: crate::TemplateKind) -> ExitCode {
    let destination = match output.map(|path| Destination::check(path, input.metadata().as_ref())).transpose() {
        Ok(d) => d,
        Err(e) => {
            errln!("error: -o: {e}");
            return ExitCode::Error;
        }
    };
    let (json, notes) = match compile_with(input, kind) {
        Compiled::Ok { json, notes, missing_agent, region, .. } => {
            let note = missing_agent.map(|image| agent_note(&image, region, Doing::Build)).unwrap_or_default();
            (json, notes + &note)
        }
        Compiled::Failed(code) => return code,
    };
    err!("{notes}");
    match destination {
        None => printed(cli_output::print(&json), "the template", ExitCode::Success),
        Some(file) => match file.write(&json) {
            Ok(()) => {
                errln!("wrote {} ({} bytes)", file.path().display(), json.len());
                ExitCode::Success
            }
            Err(e) => {
                errln!("error: cannot write the template to {}: {e}", file.path().display());
                ExitCode::Error
            }
        },
    }
}
