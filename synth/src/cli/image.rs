//! `synth image`: blueprint -> EC2 Image Builder template that bakes the
//! deeplearning agent into the blueprint's base image ([`crate::image_build`]).

use std::path::PathBuf;

use super::build::emit;
use super::input::Input;
use crate::exit::ExitCode;

/// Arguments of `synth image`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  packaging/build\n  aws s3 cp $CARGO_TARGET_DIR/package/deeplearning-agent_*.deb s3://my-bucket/\n  synth image blueprints/gpu-cluster.yaml > image.json\n\nCreate a stack from image.json (parameters: the package's S3 URL and SHA-256), run the\npipeline (the StartBuild output), then use `image: { ssm_parameter: /deeplearning/<name>/ami-id }`."
)]
pub struct ImageArgs {
    #[command(flatten)]
    input: Input,

    /// Write the template to FILE (atomically) instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
}

/// Runs `synth image`.
pub(super) fn run(args: &ImageArgs) -> ExitCode {
    emit(&args.input, args.output.as_deref(), crate::TemplateKind::Image)
}
