//! `synth`: compiles a cluster blueprint into one CloudFormation template.
//!
//! The pipeline is: YAML text -> [`blueprint`] (parsed, every field checked,
//! errors with path, line and column) -> [`spec::ClusterSpec`] (validated,
//! defaults filled) -> [`stack`] (the typed template, built with the `cfn`
//! crate) -> JSON, checked by `cfn::Template::render` before it is printed.

pub mod catalog;
pub mod region;
pub mod spec;
