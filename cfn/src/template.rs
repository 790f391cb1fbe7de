//! The template and its sections, and the handles that reference them.
//!
//! Reference: <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/template-anatomy.html>

use std::collections::BTreeMap;
use std::marker::PhantomData;

use serde::Serialize;
use serde_json::{Map, Value as Json, json};

use crate::intrinsic::Expr;

/// A CloudFormation resource type this model knows.
pub trait Resource: Serialize {
    /// The resource type name, for example `AWS::EC2::VPC`.
    const TYPE: &'static str;
    /// The attributes `Fn::GetAtt` may read from it.
    const ATTRIBUTES: &'static [&'static str];
}

/// A resource key/value tag (the common `Tags` shape).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Tag {
    /// Tag key.
    pub key: String,
    /// Tag value.
    pub value: crate::Value<String>,
}

impl Tag {
    /// A tag with a literal or intrinsic value.
    pub fn new(key: impl Into<String>, value: impl Into<crate::Value<String>>) -> Tag {
        Tag { key: key.into(), value: value.into() }
    }
}

/// A reference to a resource that was added to a [`Template`].
///
/// Handles only come from [`Template::add`], so a reference made from one
/// names a resource that exists.
pub struct Handle<R> {
    id: String,
    _type: PhantomData<fn() -> R>,
}

impl<R> Clone for Handle<R> {
    fn clone(&self) -> Self {
        Handle { id: self.id.clone(), _type: PhantomData }
    }
}

impl<R> std::fmt::Debug for Handle<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Handle({})", self.id)
    }
}

impl<R: Resource> Handle<R> {
    /// The logical id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `{"Ref": id}`
    pub fn r#ref(&self) -> Expr {
        Expr::Ref(self.id.clone())
    }

    /// `{"Fn::GetAtt": [id, attribute]}`; the attribute is checked against
    /// [`Resource::ATTRIBUTES`] when the template is rendered.
    pub fn attr(&self, attribute: &str) -> Expr {
        Expr::GetAtt(self.id.clone(), attribute.to_owned())
    }

    /// A `DependsOn` entry naming this resource.
    pub fn dependency(&self) -> Dependency {
        Dependency(self.id.clone())
    }
}

/// A `DependsOn` entry, made from a [`Handle`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dependency(String);

/// A reference to a parameter that was added to a [`Template`].
#[derive(Clone, Debug)]
pub struct ParamHandle {
    id: String,
}

impl ParamHandle {
    /// The parameter's logical id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `{"Ref": id}`
    pub fn r#ref(&self) -> Expr {
        Expr::Ref(self.id.clone())
    }
}

/// A reference to a condition that was added to a [`Template`].
#[derive(Clone, Debug)]
pub struct ConditionHandle {
    name: String,
}

impl ConditionHandle {
    /// The condition's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `{"Fn::If": [name, then, else]}`
    pub fn then(&self, then: impl Into<Expr>, otherwise: impl Into<Expr>) -> Expr {
        Expr::If(self.name.clone(), Box::new(then.into()), Box::new(otherwise.into()))
    }

    /// `{"Fn::If": [name, then, {"Ref": "AWS::NoValue"}]}`: the property only when true.
    pub fn only(&self, then: impl Into<Expr>) -> Expr {
        self.then(then, Expr::no_value())
    }

    /// `{"Condition": name}`, for use inside another condition.
    pub fn as_expr(&self) -> Expr {
        Expr::Condition(self.name.clone())
    }
}

/// A resource's `CreationPolicy` with a resource signal.
#[derive(Clone, Debug, PartialEq)]
pub struct CreationPolicy {
    /// Signals needed for success.
    pub count: u32,
    /// How long to wait for them, in minutes.
    pub timeout_minutes: u32,
}

/// The resource attributes other than `Type` and `Properties`.
///
/// <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-product-attribute-reference.html>
#[derive(Clone, Debug, Default)]
pub struct Attributes {
    /// `DependsOn`.
    pub depends_on: Vec<Dependency>,
    /// `Condition`: the resource exists only when it holds.
    pub condition: Option<ConditionHandle>,
    /// `Metadata`.
    pub metadata: Option<Json>,
    /// `CreationPolicy`.
    pub creation_policy: Option<CreationPolicy>,
    /// `DeletionPolicy` (and the same `UpdateReplacePolicy`), for example `Retain`.
    pub deletion_policy: Option<&'static str>,
}

/// The type of a parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParameterType {
    /// `String`
    String,
    /// `Number`
    Number,
    /// An AWS-specific or SSM parameter type, for example `AWS::EC2::KeyPair::KeyName`.
    Aws(&'static str),
    /// `AWS::SSM::Parameter::Value<...>`
    SsmValue(&'static str),
}

impl ParameterType {
    fn name(&self) -> String {
        match self {
            ParameterType::String => "String".into(),
            ParameterType::Number => "Number".into(),
            ParameterType::Aws(t) => (*t).into(),
            ParameterType::SsmValue(t) => format!("AWS::SSM::Parameter::Value<{t}>"),
        }
    }
}

/// A template parameter: what the console form asks for.
///
/// <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/parameters-section-structure.html>
#[derive(Clone, Debug)]
pub struct Parameter {
    /// Its type.
    pub kind: ParameterType,
    /// The label shown in the console form.
    pub label: String,
    /// The longer description shown under the label.
    pub description: String,
    /// Default value.
    pub default: Option<Json>,
    /// `AllowedValues`.
    pub allowed_values: Vec<String>,
    /// `AllowedPattern`.
    pub allowed_pattern: Option<String>,
    /// `MinValue` (numbers).
    pub min_value: Option<i64>,
    /// `MaxValue` (numbers).
    pub max_value: Option<i64>,
    /// `ConstraintDescription`: what the console says when a constraint fails.
    pub constraint_description: Option<String>,
}

impl Parameter {
    /// A parameter of `kind` with a label and description; other fields empty.
    pub fn new(kind: ParameterType, label: impl Into<String>, description: impl Into<String>) -> Parameter {
        Parameter {
            kind,
            label: label.into(),
            description: description.into(),
            default: None,
            allowed_values: Vec::new(),
            allowed_pattern: None,
            min_value: None,
            max_value: None,
            constraint_description: None,
        }
    }

    /// Sets the default.
    pub fn default(mut self, value: impl Into<Json>) -> Parameter {
        self.default = Some(value.into());
        self
    }

    /// Sets `AllowedPattern`, and the `ConstraintDescription` the console
    /// shows (`why`) when a value does not match it.
    pub fn constrained(mut self, pattern: impl Into<String>, why: impl Into<String>) -> Parameter {
        self.allowed_pattern = Some(pattern.into());
        self.constraint_description = Some(why.into());
        self
    }

    fn to_json(&self) -> Json {
        let mut m = Map::new();
        m.insert("Type".into(), json!(self.kind.name()));
        m.insert("Description".into(), json!(self.description));
        if let Some(d) = &self.default {
            m.insert("Default".into(), d.clone());
        }
        if !self.allowed_values.is_empty() {
            m.insert("AllowedValues".into(), json!(self.allowed_values));
        }
        if let Some(p) = &self.allowed_pattern {
            m.insert("AllowedPattern".into(), json!(p));
        }
        if let Some(v) = self.min_value {
            m.insert("MinValue".into(), json!(v));
        }
        if let Some(v) = self.max_value {
            m.insert("MaxValue".into(), json!(v));
        }
        if let Some(c) = &self.constraint_description {
            m.insert("ConstraintDescription".into(), json!(c));
        }
        Json::Object(m)
    }
}

/// A stack output.
#[derive(Clone, Debug)]
pub struct Output {
    /// What it is, shown in the console's Outputs tab.
    pub description: String,
    /// Its value.
    pub value: Expr,
    /// Present only when this condition holds.
    pub condition: Option<ConditionHandle>,
}

/// A rule: assertions on parameter values checked before any resource is created.
///
/// <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/rules-section-structure.html>
#[derive(Clone, Debug)]
pub struct Rule {
    /// Each assertion with the message the console shows when it fails.
    pub assertions: Vec<(Expr, String)>,
}

pub(crate) struct Entry {
    pub(crate) type_name: &'static str,
    pub(crate) attributes: &'static [&'static str],
    pub(crate) properties: Json,
    pub(crate) attrs: Attributes,
}

/// A CloudFormation template under construction.
///
/// Nothing here fails while building: problems (a duplicate logical id, a
/// reference to something that does not exist, a limit exceeded) are collected
/// and reported by [`Template::render`], which prints nothing when any exists.
#[derive(Default)]
pub struct Template {
    pub(crate) description: String,
    pub(crate) metadata: BTreeMap<String, Json>,
    pub(crate) parameters: BTreeMap<String, Parameter>,
    pub(crate) parameter_groups: Vec<(String, Vec<String>)>,
    pub(crate) rules: BTreeMap<String, Rule>,
    pub(crate) mappings: BTreeMap<String, BTreeMap<String, BTreeMap<String, String>>>,
    pub(crate) conditions: BTreeMap<String, Expr>,
    pub(crate) resources: BTreeMap<String, Entry>,
    pub(crate) outputs: BTreeMap<String, Output>,
    pub(crate) duplicates: Vec<String>,
}

impl Template {
    /// An empty template with a description.
    pub fn new(description: impl Into<String>) -> Template {
        Template { description: description.into(), ..Template::default() }
    }

    fn claim(&mut self, id: &str) {
        let taken = self.parameters.contains_key(id)
            || self.resources.contains_key(id)
            || self.conditions.contains_key(id)
            || self.outputs.contains_key(id)
            || self.mappings.contains_key(id)
            || self.rules.contains_key(id);
        if taken {
            self.duplicates.push(id.to_owned());
        }
    }

    /// Adds a resource and returns its handle.
    pub fn add<R: Resource>(&mut self, id: &str, properties: R) -> Handle<R> {
        self.add_with(id, properties, Attributes::default())
    }

    /// Adds a resource with attributes (`DependsOn`, `Condition`, ...).
    pub fn add_with<R: Resource>(&mut self, id: &str, properties: R, attrs: Attributes) -> Handle<R> {
        self.claim(id);
        let properties = serde_json::to_value(&properties).unwrap_or_else(|e| {
            // Serializing these plain structs cannot fail; keep the reason if it ever does.
            json!({ "SerializationError": e.to_string() })
        });
        self.resources
            .insert(id.to_owned(), Entry { type_name: R::TYPE, attributes: R::ATTRIBUTES, properties, attrs });
        Handle { id: id.to_owned(), _type: PhantomData }
    }

    /// Adds a parameter and returns its handle.
    pub fn parameter(&mut self, id: &str, parameter: Parameter) -> ParamHandle {
        self.claim(id);
        self.parameters.insert(id.to_owned(), parameter);
        ParamHandle { id: id.to_owned() }
    }

    /// Groups parameters under a heading in the console form, in this order.
    pub fn parameter_group(&mut self, label: impl Into<String>, members: &[&ParamHandle]) {
        self.parameter_groups.push((label.into(), members.iter().map(|p| p.id.clone()).collect()));
    }

    /// Adds a named condition and returns its handle.
    pub fn condition(&mut self, name: &str, expr: Expr) -> ConditionHandle {
        self.claim(name);
        self.conditions.insert(name.to_owned(), expr);
        ConditionHandle { name: name.to_owned() }
    }

    /// Adds a mapping (`Mappings` section): top-level key, second-level key, value.
    pub fn mapping(&mut self, name: &str, map: BTreeMap<String, BTreeMap<String, String>>) -> String {
        self.claim(name);
        self.mappings.insert(name.to_owned(), map);
        name.to_owned()
    }

    /// Adds a rule.
    pub fn rule(&mut self, name: &str, rule: Rule) {
        self.claim(name);
        self.rules.insert(name.to_owned(), rule);
    }

    /// Adds an output.
    pub fn output(&mut self, id: &str, output: Output) {
        self.claim(id);
        self.outputs.insert(id.to_owned(), output);
    }

    /// Sets a top-level `Metadata` key.
    pub fn metadata(&mut self, key: &str, value: Json) {
        self.metadata.insert(key.to_owned(), value);
    }

    /// The number of resources so far.
    pub fn resource_count(&self) -> usize {
        self.resources.len()
    }

    /// The template as JSON, without checks (see [`Template::render`]).
    pub(crate) fn to_json(&self) -> Json {
        let mut root = Map::new();
        root.insert("AWSTemplateFormatVersion".into(), json!("2010-09-09"));
        root.insert("Description".into(), json!(self.description));

        let mut metadata: Map<String, Json> = self.metadata.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        if !self.parameters.is_empty() {
            let groups: Vec<Json> = self
                .parameter_groups
                .iter()
                .map(|(label, members)| json!({"Label": {"default": label}, "Parameters": members}))
                .collect();
            let labels: Map<String, Json> =
                self.parameters.iter().map(|(id, p)| (id.clone(), json!({"default": p.label}))).collect();
            metadata.insert(
                "AWS::CloudFormation::Interface".into(),
                json!({"ParameterGroups": groups, "ParameterLabels": labels}),
            );
        }
        if !metadata.is_empty() {
            root.insert("Metadata".into(), Json::Object(metadata));
        }
        if !self.parameters.is_empty() {
            let params: Map<String, Json> = self.parameters.iter().map(|(id, p)| (id.clone(), p.to_json())).collect();
            root.insert("Parameters".into(), Json::Object(params));
        }
        if !self.rules.is_empty() {
            let rules: Map<String, Json> = self
                .rules
                .iter()
                .map(|(name, rule)| {
                    let assertions: Vec<Json> =
                        rule.assertions.iter().map(|(e, msg)| json!({"Assert": e, "AssertDescription": msg})).collect();
                    (name.clone(), json!({"Assertions": assertions}))
                })
                .collect();
            root.insert("Rules".into(), Json::Object(rules));
        }
        if !self.mappings.is_empty() {
            root.insert("Mappings".into(), json!(self.mappings));
        }
        if !self.conditions.is_empty() {
            root.insert("Conditions".into(), json!(self.conditions));
        }
        let resources: Map<String, Json> = self.resources.iter().map(|(id, e)| (id.clone(), e.to_json())).collect();
        root.insert("Resources".into(), Json::Object(resources));
        if !self.outputs.is_empty() {
            let outputs: Map<String, Json> = self
                .outputs
                .iter()
                .map(|(id, o)| {
                    let mut m = Map::new();
                    m.insert("Description".into(), json!(o.description));
                    m.insert("Value".into(), json!(o.value));
                    if let Some(c) = &o.condition {
                        m.insert("Condition".into(), json!(c.name));
                    }
                    (id.clone(), Json::Object(m))
                })
                .collect();
            root.insert("Outputs".into(), Json::Object(outputs));
        }
        Json::Object(root)
    }
}

impl Entry {
    fn to_json(&self) -> Json {
        let mut m = Map::new();
        m.insert("Type".into(), json!(self.type_name));
        if let Some(c) = &self.attrs.condition {
            m.insert("Condition".into(), json!(c.name));
        }
        if !self.attrs.depends_on.is_empty() {
            let deps: Vec<&str> = self.attrs.depends_on.iter().map(|d| d.0.as_str()).collect();
            m.insert("DependsOn".into(), json!(deps));
        }
        if let Some(p) = self.attrs.deletion_policy {
            m.insert("DeletionPolicy".into(), json!(p));
            m.insert("UpdateReplacePolicy".into(), json!(p));
        }
        if let Some(cp) = &self.attrs.creation_policy {
            m.insert(
                "CreationPolicy".into(),
                json!({"ResourceSignal": {"Count": cp.count, "Timeout": format!("PT{}M", cp.timeout_minutes)}}),
            );
        }
        if let Some(md) = &self.attrs.metadata {
            m.insert("Metadata".into(), md.clone());
        }
        let empty = self.properties.as_object().is_some_and(|o| o.is_empty());
        if !empty {
            m.insert("Properties".into(), self.properties.clone());
        }
        Json::Object(m)
    }

    pub(crate) fn depends_on(&self) -> impl Iterator<Item = &str> {
        self.attrs.depends_on.iter().map(|d| d.0.as_str())
    }
}
