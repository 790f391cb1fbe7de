//! `synth schema`: the blueprint's JSON Schema.

use crate::exit::{ExitCode, printed};

/// Arguments of `synth schema`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "For VS Code's YAML extension, save it and add to a blueprint's first line:\n  # yaml-language-server: $schema=./blueprint.schema.json"
)]
pub struct SchemaArgs {}

/// Runs `synth schema`.
pub(super) fn run(_args: &SchemaArgs) -> ExitCode {
    let mut text = serde_json::to_string_pretty(&crate::blueprint::json_schema()).unwrap_or_default();
    text.push('\n');
    printed(cli_output::print(&text), "the schema", ExitCode::Success)
}
