//! A small, hand-written, typed model of AWS CloudFormation.
//!
//! It covers what this project's templates use and nothing more: the template
//! sections ([`Template`]), the intrinsic functions ([`Expr`], [`Value`]), and
//! serde structs for the resource types the cluster needs ([`resources`]).
//!
//! Resources are added to a [`Template`], which hands back a typed [`Handle`];
//! references (`Ref`, `Fn::GetAtt`, `DependsOn`) are made from handles, so they
//! cannot name a resource that was never added. Before anything is printed,
//! [`Template::render`] checks every reference again (including the `${...}`
//! names inside `Fn::Sub` strings), the logical ids, and the service limits,
//! and refuses to print a template CloudFormation would reject.
//!
//! Output is deterministic: every section is an ordered map, so the same model
//! always prints the same bytes. This crate has no AWS SDK dependency.
#![deny(missing_docs)]

mod check;
mod intrinsic;
pub mod resources;
mod template;

pub use check::{LIMIT_BODY_BYTES, LIMIT_RESOURCES, LIMIT_S3_BYTES, Problem, RenderError, Rendered};
pub use intrinsic::{Expr, Pseudo, Value};
pub use template::{
    Attributes, ConditionHandle, CreationPolicy, Dependency, Handle, Output, ParamHandle, Parameter, ParameterType,
    Resource, Rule, Tag, Template,
};
