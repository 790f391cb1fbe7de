//! `synth`: compiles a cluster blueprint into one CloudFormation template.
//!
//! The pipeline is: YAML text -> [`blueprint`] (parsed, every field checked,
//! errors with path, line and column) -> [`spec::ClusterSpec`] (validated,
//! defaults filled) -> [`stack`] (the typed template, built with the `cfn`
//! crate) -> JSON, checked by `cfn::Template::render` before it is printed.

// Public: what the binary (`cli`), the integration tests and benches
// (`blueprint`, `region`) and the end-to-end crate (`deploy`) use; the rest
// is the crate's own.
pub mod blueprint;
mod catalog;
pub mod cli;
pub mod deploy;
mod exit;
mod image_build;
pub mod region;
mod spec;
mod stack;

use region::Region;

/// A template built from a blueprint.
#[derive(Clone, Debug)]
pub struct Built {
    /// The CloudFormation template, pretty JSON ending in a newline.
    pub json: String,
    /// Things the user should know that do not stop the build.
    pub warnings: Vec<String>,
}

/// Which template a blueprint becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplateKind {
    /// The cluster ([`stack`], `synth build`).
    Cluster,
    /// The Image Builder pipeline that bakes the agent into the blueprint's image ([`image_build`], `synth image`).
    Image,
}

impl TemplateKind {
    /// The template for `spec`.
    pub fn compile(self, spec: &spec::ClusterSpec) -> cfn::Template {
        match self {
            TemplateKind::Cluster => stack::compile(spec),
            TemplateKind::Image => image_build::compile(spec),
        }
    }
}

/// Why a blueprint did not become a template.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The blueprint has problems; the message lists every one, with file, line and column.
    #[error("{0}")]
    Blueprint(String),
    /// The compiled template broke a CloudFormation rule (a bug in synth, not in the blueprint).
    #[error("internal error: {0}")]
    Template(#[from] cfn::RenderError),
}

/// Builds the template for the blueprint text `source` read from `path`
/// (the path is only used in messages). `region` overrides the blueprint's
/// `region` field; `None` keeps it (no region at all builds a template for
/// all five supported regions).
pub fn build(source: &str, path: &str, region: Option<Region>) -> Result<Built, BuildError> {
    build_with(source, path, region, TemplateKind::Cluster)
}

/// Like [`build`], but the EC2 Image Builder template that bakes the agent
/// into the blueprint's base image ([`image_build`], `synth image`).
pub fn build_image(source: &str, path: &str, region: Option<Region>) -> Result<Built, BuildError> {
    build_with(source, path, region, TemplateKind::Image)
}

fn build_with(source: &str, path: &str, region: Option<Region>, kind: TemplateKind) -> Result<Built, BuildError> {
    let loaded = blueprint::load(source, path, region).map_err(|d| BuildError::Blueprint(d.render()))?;
    let rendered = kind.compile(&loaded.spec).render()?;
    let mut warnings: Vec<String> = loaded.warnings.iter().map(|w| w.render(source, path)).collect();
    warnings.extend(rendered.warnings);
    Ok(Built { json: rendered.json, warnings })
}
