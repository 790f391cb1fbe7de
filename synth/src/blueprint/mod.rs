//! The blueprint front end: YAML text in, a validated [`ClusterSpec`] (or
//! every problem with the blueprint, each with its line and column) out.
//!
//! The steps, each in its own module:
//! 1. [`document`]: `saphyr-parser` events -> a tree of nodes that know their
//!    positions (syntax errors, duplicate keys, empty files stop here);
//! 2. [`source_map`]: field path -> line and column, for later messages;
//! 3. [`deserializer`]: the tree -> the [`model`] serde structs, collecting
//!    every unknown field with a "did you mean" (a type error stops here);
//! 4. [`validate`]: every rule and default -> [`ClusterSpec`] and warnings.
//!
//! Nothing here touches files, the network or AWS; the caller reads the file
//! and passes its text and path (the path only appears in messages).

mod deserializer;
mod diagnostic;
mod document;
mod model;
mod schema;
mod source_map;
mod suggestion;
mod validate;

use std::cell::RefCell;

use serde::Deserialize;

pub use diagnostic::{Diagnostic, Diagnostics, Severity, render_all};
pub use schema::json_schema;
pub use validate::DEFAULT_SSM_PARAMETER;

use crate::region::Region;
use crate::spec::ClusterSpec;

/// A blueprint that passed every check.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The cluster, every default filled in.
    pub spec: ClusterSpec,
    /// Things the user should know that do not stop the build.
    pub warnings: Vec<Diagnostic>,
}

/// Parses and checks the blueprint `text`, read from `path`.
///
/// `region` is the region asked for on the command line: it selects the
/// region when the blueprint has none, and is an error when the blueprint
/// pins a different one. With neither, the spec is for all five regions
/// (`spec.region` is `None`) and every region-specific check runs for each.
///
/// On failure, the error holds every problem found (warnings included),
/// sorted errors first; it displays them rustc-style.
pub fn load(text: &str, path: &str, region: Option<Region>) -> Result<Loaded, Diagnostics> {
    let fail = |items: Vec<Diagnostic>| Diagnostics::new(items, text, path);
    let root = document::parse(text).map_err(|d| fail(vec![d]))?;
    let map = source_map::SourceMap::new(&root, text);

    let unknown = RefCell::new(Vec::new());
    let parsed =
        model::Blueprint::deserialize(deserializer::NodeDeserializer::root(&root, &unknown));
    let mut diagnostics = unknown.into_inner();
    let blueprint = match parsed {
        Ok(b) => b,
        Err(e) => {
            // A type error leaves no blueprint to check further; report it
            // with the unknown fields found before it.
            diagnostics.push(e.into_diagnostic(map.value("")));
            return Err(fail(diagnostics));
        }
    };

    // Unknown fields do not stop validation: the user gets both kinds of
    // problem in one run.
    let (spec, found) = validate::validate(blueprint, &map, region);
    diagnostics.extend(found);
    match spec {
        Some(spec) if diagnostics.iter().all(|d| d.severity == Severity::Warning) => Ok(Loaded {
            spec,
            warnings: diagnostics,
        }),
        _ => Err(fail(diagnostics)),
    }
}
