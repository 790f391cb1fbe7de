//! The checks a template passes before it is printed.
//!
//! Every `Ref`, `Fn::GetAtt`, `Fn::Sub` name, `DependsOn`, `Condition` and
//! `Fn::FindInMap` target must exist; logical ids must be alphanumeric; no
//! resource may depend on itself through a cycle; unused parameters and
//! conditions are flagged (cfn-lint warns about them); and the service quotas
//! hold: at most 500 resources and 1 MB of template (uploaded through S3,
//! as the console does), with a warning above 51,200 bytes, the limit for a
//! template passed inline.
//!
//! Quotas: <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html>

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value as Json;

use crate::intrinsic::Pseudo;
use crate::template::Template;

/// The most resources a template may declare.
pub const LIMIT_RESOURCES: usize = 500;
/// The largest template CloudFormation accepts from S3 (the console uploads there).
pub const LIMIT_S3_BYTES: usize = 1_048_576;
/// The largest template CloudFormation accepts inline in an API call.
pub const LIMIT_BODY_BYTES: usize = 51_200;
const LIMIT_PARAMETERS: usize = 200;
const LIMIT_OUTPUTS: usize = 200;
const LIMIT_LOGICAL_ID: usize = 255;

/// One reason a template cannot be printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Where in the template, for example `Resources.Master.Properties.SubnetId`.
    pub at: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

/// The template could not be rendered; nothing was printed.
#[derive(Debug, thiserror::Error)]
#[error("the template is not valid CloudFormation ({} problem{}): {}",
    .problems.len(), if .problems.len() == 1 { "" } else { "s" },
    .problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct RenderError {
    /// Every problem found.
    pub problems: Vec<Problem>,
}

/// A checked template.
#[derive(Clone, Debug)]
pub struct Rendered {
    /// The template, pretty-printed JSON with a trailing newline.
    pub json: String,
    /// Things worth telling the user that do not stop the template (its size).
    pub warnings: Vec<String>,
}

/// Names a `Ref` or `${}` may use in one template.
struct Names<'a> {
    t: &'a Template,
}

impl Names<'_> {
    fn is_ref_target(&self, name: &str) -> bool {
        self.t.parameters.contains_key(name)
            || self.t.resources.contains_key(name)
            || Pseudo::ALL.iter().any(|p| p.name() == name)
    }
}

struct Walker<'a> {
    names: Names<'a>,
    problems: Vec<Problem>,
    /// Parameters, conditions and mappings seen in use.
    used: BTreeSet<String>,
    /// Resource -> resources it references, for cycle detection.
    edges: BTreeMap<String, BTreeSet<String>>,
    /// The resource being walked, if any.
    current: Option<String>,
}

impl Walker<'_> {
    fn problem(&mut self, at: &str, message: String) {
        self.problems.push(Problem { at: at.to_owned(), message });
    }

    fn reference(&mut self, at: &str, name: &str, how: &str) {
        if !self.names.is_ref_target(name) {
            self.problem(at, format!("{how} names `{name}`, which is not a parameter, resource or pseudo-parameter"));
            return;
        }
        self.used.insert(name.to_owned());
        if self.names.t.resources.contains_key(name)
            && let Some(cur) = &self.current
        {
            self.edges.entry(cur.clone()).or_default().insert(name.to_owned());
        }
    }

    fn get_att(&mut self, at: &str, resource: &str, attribute: &str) {
        match self.names.t.resources.get(resource) {
            None => self.problem(at, format!("Fn::GetAtt names `{resource}`, which is not a resource")),
            Some(entry) => {
                if !entry.attributes.contains(&attribute) {
                    self.problem(
                        at,
                        format!(
                            "Fn::GetAtt asks {} `{resource}` for `{attribute}`; it has: {}",
                            entry.type_name,
                            entry.attributes.join(", ")
                        ),
                    );
                }
                if let Some(cur) = &self.current {
                    self.edges.entry(cur.clone()).or_default().insert(resource.to_owned());
                }
            }
        }
    }

    fn condition(&mut self, at: &str, name: &str) {
        if self.names.t.conditions.contains_key(name) {
            self.used.insert(name.to_owned());
        } else {
            self.problem(at, format!("condition `{name}` is not defined"));
        }
    }

    fn sub(&mut self, at: &str, text: &str, locals: &BTreeSet<String>) {
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                self.problem(at, "Fn::Sub has `${` without a closing `}`".into());
                return;
            };
            let name = &after[..end];
            rest = &after[end + 1..];
            if name.starts_with('!') {
                continue; // `${!Literal}` prints `${Literal}`.
            }
            if locals.contains(name) {
                continue;
            }
            match name.split_once('.') {
                Some((res, attr)) if !name.starts_with("AWS::") => self.get_att(at, res, attr),
                _ => self.reference(at, name, "Fn::Sub"),
            }
        }
    }

    fn walk(&mut self, at: &str, value: &Json) {
        match value {
            Json::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.walk(&format!("{at}[{i}]"), item);
                }
            }
            Json::Object(map) => {
                if map.len() == 1 {
                    let (key, arg) = map.iter().next().expect("one entry");
                    let here = format!("{at}.{key}");
                    match (key.as_str(), arg) {
                        ("Ref", Json::String(name)) => return self.reference(&here, name, "Ref"),
                        ("Fn::GetAtt", Json::Array(parts)) => {
                            if let [Json::String(r), Json::String(a)] = parts.as_slice() {
                                return self.get_att(&here, r, a);
                            }
                        }
                        ("Fn::Sub", Json::String(text)) => {
                            return self.sub(&here, text, &BTreeSet::new());
                        }
                        ("Fn::Sub", Json::Array(parts)) => {
                            if let [Json::String(text), Json::Object(vars)] = parts.as_slice() {
                                let locals = vars.keys().cloned().collect();
                                self.sub(&here, text, &locals);
                                for (k, v) in vars {
                                    self.walk(&format!("{here}.{k}"), v);
                                }
                                return;
                            }
                        }
                        ("Fn::If", Json::Array(parts)) => {
                            if let Some(Json::String(cond)) = parts.first() {
                                self.condition(&here, cond);
                                for (i, p) in parts.iter().enumerate().skip(1) {
                                    self.walk(&format!("{here}[{i}]"), p);
                                }
                                return;
                            }
                        }
                        ("Condition", Json::String(cond)) => return self.condition(&here, cond),
                        ("Fn::FindInMap", Json::Array(parts)) => {
                            if let Some(Json::String(map)) = parts.first() {
                                if self.names.t.mappings.contains_key(map) {
                                    self.used.insert(map.clone());
                                } else {
                                    self.problem(&here, format!("mapping `{map}` is not defined"));
                                }
                                for p in parts.iter().skip(1) {
                                    self.walk(&here, p);
                                }
                                return;
                            }
                        }
                        _ => {}
                    }
                }
                for (k, v) in map {
                    self.walk(&format!("{at}.{k}"), v);
                }
            }
            _ => {}
        }
    }
}

fn valid_logical_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= LIMIT_LOGICAL_ID && id.chars().all(|c| c.is_ascii_alphanumeric())
}

/// Finds one dependency cycle among resources, if any, as a path.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Active,
        Done,
    }
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Active) => {
                let start = path.iter().position(|n| n == node).unwrap_or(0);
                let mut cycle = path[start..].to_vec();
                cycle.push(node.to_owned());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.to_owned(), Mark::Active);
        path.push(node.to_owned());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, edges, marks, path) {
                return Some(c);
            }
        }
        path.pop();
        marks.insert(node.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in edges.keys() {
        if let Some(c) = visit(node, edges, &mut marks, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

impl Template {
    /// Checks the template and prints it, or returns every problem found.
    pub fn render(&self) -> Result<Rendered, RenderError> {
        let mut w = Walker {
            names: Names { t: self },
            problems: Vec::new(),
            used: BTreeSet::new(),
            edges: BTreeMap::new(),
            current: None,
        };

        for id in &self.duplicates {
            w.problem(id, "this logical id is used twice".into());
        }
        let all_ids = self
            .parameters
            .keys()
            .chain(self.resources.keys())
            .chain(self.conditions.keys())
            .chain(self.outputs.keys())
            .chain(self.mappings.keys());
        for id in all_ids {
            if !valid_logical_id(id) {
                w.problem(id, format!("logical ids must be 1 to {LIMIT_LOGICAL_ID} letters and digits"));
            }
        }
        if self.resources.is_empty() {
            w.problem("Resources", "a template needs at least one resource".into());
        }
        if self.resources.len() > LIMIT_RESOURCES {
            w.problem(
                "Resources",
                format!("{} resources; CloudFormation allows at most {LIMIT_RESOURCES}", self.resources.len()),
            );
        }
        if self.parameters.len() > LIMIT_PARAMETERS {
            w.problem("Parameters", format!("more than {LIMIT_PARAMETERS} parameters"));
        }
        if self.outputs.len() > LIMIT_OUTPUTS {
            w.problem("Outputs", format!("more than {LIMIT_OUTPUTS} outputs"));
        }

        for (name, expr) in &self.conditions {
            w.walk(&format!("Conditions.{name}"), &serde_json::to_value(expr).unwrap_or(Json::Null));
        }
        for (name, rule) in &self.rules {
            for (i, (expr, _)) in rule.assertions.iter().enumerate() {
                let json = serde_json::to_value(expr).unwrap_or(Json::Null);
                w.walk(&format!("Rules.{name}.Assertions[{i}]"), &json);
            }
        }
        for (id, entry) in &self.resources {
            w.current = Some(id.clone());
            let at = format!("Resources.{id}");
            if let Some(c) = &entry.attrs.condition {
                w.condition(&format!("{at}.Condition"), c.name());
            }
            for dep in entry.depends_on() {
                if dep == id {
                    w.problem(&format!("{at}.DependsOn"), "a resource cannot depend on itself".into());
                } else if self.resources.contains_key(dep) {
                    w.edges.entry(id.clone()).or_default().insert(dep.to_owned());
                } else {
                    w.problem(&format!("{at}.DependsOn"), format!("`{dep}` is not a resource"));
                }
            }
            w.walk(&format!("{at}.Properties"), &entry.properties);
            if let Some(md) = &entry.attrs.metadata {
                w.walk(&format!("{at}.Metadata"), md);
            }
        }
        w.current = None;
        for (id, out) in &self.outputs {
            if let Some(c) = &out.condition {
                w.condition(&format!("Outputs.{id}.Condition"), c.name());
            }
            w.walk(&format!("Outputs.{id}.Value"), &serde_json::to_value(&out.value).unwrap_or(Json::Null));
        }
        for (label, members) in &self.parameter_groups {
            for m in members {
                if !self.parameters.contains_key(m) {
                    w.problem(
                        "Metadata.AWS::CloudFormation::Interface",
                        format!("group `{label}` lists unknown parameter `{m}`"),
                    );
                }
            }
        }
        // Unused parameters and conditions are legal but confuse the console
        // user (a field that does nothing) and cfn-lint warns about them.
        for id in self.parameters.keys() {
            if !w.used.contains(id) {
                w.problem(&format!("Parameters.{id}"), "this parameter is never used".into());
            }
        }
        for name in self.conditions.keys() {
            if !w.used.contains(name) {
                w.problem(&format!("Conditions.{name}"), "this condition is never used".into());
            }
        }
        for name in self.mappings.keys() {
            if !w.used.contains(name) {
                w.problem(&format!("Mappings.{name}"), "this mapping is never used".into());
            }
        }
        if let Some(cycle) = find_cycle(&w.edges) {
            w.problem("Resources", format!("circular dependency: {}", cycle.join(" -> ")));
        }

        let mut problems = w.problems;
        let mut json = serde_json::to_string_pretty(&self.to_json()).unwrap_or_default();
        json.push('\n');
        let mut warnings = Vec::new();
        if json.len() > LIMIT_S3_BYTES {
            problems.push(Problem {
                at: "template".into(),
                message: format!("{} bytes; CloudFormation accepts at most {LIMIT_S3_BYTES}", json.len()),
            });
        } else if json.len() > LIMIT_BODY_BYTES {
            warnings.push(format!(
                "the template is {} bytes, over the {LIMIT_BODY_BYTES}-byte limit for a template passed inline; \
                 upload it as a file in the console, which passes it through S3 (`synth deploy` does the same)",
                json.len()
            ));
        }
        if problems.is_empty() { Ok(Rendered { json, warnings }) } else { Err(RenderError { problems }) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{ec2, sqs};
    use crate::{Attributes, Expr, Parameter, ParameterType, Template};

    fn queue() -> sqs::Queue {
        sqs::Queue {
            sqs_managed_sse_enabled: true,
            message_retention_period: 60,
            visibility_timeout: 30,
            receive_message_wait_time_seconds: 20,
            tags: Vec::new(),
        }
    }

    fn vpc(cidr: Expr) -> ec2::Vpc {
        ec2::Vpc { cidr_block: cidr.into(), enable_dns_hostnames: true, enable_dns_support: true, tags: Vec::new() }
    }

    fn problems(t: &Template) -> Vec<String> {
        match t.render() {
            Ok(_) => Vec::new(),
            Err(e) => e.problems.iter().map(ToString::to_string).collect(),
        }
    }

    fn assert_one(t: &Template, needle: &str) {
        let p = problems(t);
        assert!(p.len() == 1 && p[0].contains(needle), "expected one problem containing {needle:?}, got {p:?}");
    }

    #[test]
    fn a_correct_template_renders_deterministically() {
        let build = || {
            let mut t = Template::new("ok");
            let p = t.parameter("Cidr", Parameter::new(ParameterType::String, "CIDR", "range").default("10.0.0.0/16"));
            let v = t.add("Vpc", vpc(p.r#ref()));
            let q = t.add("Queue", queue());
            t.add_with(
                "Subnet",
                ec2::Subnet {
                    vpc_id: v.r#ref().into(),
                    cidr_block: Expr::sub("${Vpc.CidrBlock}").into(),
                    availability_zone: Expr::availability_zone(0).into(),
                    map_public_ip_on_launch: None,
                    tags: Vec::new(),
                },
                Attributes { depends_on: vec![q.dependency()], ..Attributes::default() },
            );
            t.render().unwrap().json
        };
        assert_eq!(build(), build());
        assert!(build().ends_with("}\n"));
    }

    #[test]
    fn a_ref_to_nothing_is_refused() {
        let mut t = Template::new("x");
        t.add("Vpc", vpc(Expr::Ref("Missing".into())));
        assert_one(&t, "`Missing`");
    }

    #[test]
    fn a_handle_from_another_template_is_refused() {
        let mut other = Template::new("other");
        let foreign = other.add("Queue", queue());
        let mut t = Template::new("x");
        t.add_with(
            "Vpc",
            vpc("10.0.0.0/16".into()),
            Attributes { depends_on: vec![foreign.dependency()], ..Attributes::default() },
        );
        assert_one(&t, "DependsOn: `Queue` is not a resource");
    }

    #[test]
    fn get_att_checks_resource_and_attribute() {
        let mut t = Template::new("x");
        let q = t.add("Queue", queue());
        t.add("Vpc", vpc(q.attr("Colour")));
        assert_one(&t, "asks AWS::SQS::Queue `Queue` for `Colour`");
        let mut t = Template::new("x");
        t.add("Vpc", vpc(Expr::GetAtt("Nope".into(), "Arn".into())));
        assert_one(&t, "`Nope`, which is not a resource");
    }

    #[test]
    fn sub_names_are_checked_and_literals_skipped() {
        let mut t = Template::new("x");
        t.add("Vpc", vpc(Expr::sub("${AWS::Region}-${!Literal}-${Ghost}")));
        assert_one(&t, "Fn::Sub names `Ghost`");
        let mut t = Template::new("x");
        t.add("Vpc", vpc(Expr::SubWith("${Local}".into(), [("Local".to_owned(), Expr::from("a"))].into())));
        assert!(problems(&t).is_empty());
        let mut t = Template::new("x");
        t.add("Vpc", vpc(Expr::sub("${Unclosed")));
        assert_one(&t, "without a closing");
    }

    #[test]
    fn conditions_must_exist_and_be_used() {
        let mut other = Template::new("other");
        let foreign = other.condition("Elsewhere", Expr::equals("a", "b"));
        let mut t = Template::new("x");
        t.add("Vpc", vpc(foreign.then("10.0.0.0/16", "10.1.0.0/16")));
        assert_one(&t, "condition `Elsewhere` is not defined");
        let mut t = Template::new("x");
        t.condition("Unused", Expr::equals("a", "b"));
        t.add("Vpc", vpc("10.0.0.0/16".into()));
        assert_one(&t, "Conditions.Unused: this condition is never used");
    }

    #[test]
    fn unused_parameters_duplicates_and_bad_ids_are_refused() {
        let mut t = Template::new("x");
        t.parameter("Lonely", Parameter::new(ParameterType::String, "l", "d"));
        t.add("Vpc", vpc("10.0.0.0/16".into()));
        assert_one(&t, "never used");
        let mut t = Template::new("x");
        t.add("Vpc", vpc("10.0.0.0/16".into()));
        t.add("Vpc", vpc("10.1.0.0/16".into()));
        assert_one(&t, "used twice");
        let mut t = Template::new("x");
        t.add("my-vpc", vpc("10.0.0.0/16".into()));
        assert_one(&t, "letters and digits");
        assert_one(&Template::new("empty"), "at least one resource");
    }

    #[test]
    fn cycles_are_refused() {
        let mut t = Template::new("x");
        t.add("A", vpc(Expr::GetAtt("B".into(), "CidrBlock".into())));
        t.add("B", vpc(Expr::Ref("A".into())));
        assert_one(&t, "circular dependency: A -> B -> A");
    }

    #[test]
    fn resource_count_and_size_limits() {
        let mut t = Template::new("x");
        for i in 0..=LIMIT_RESOURCES {
            t.add(&format!("Queue{i}"), queue());
        }
        assert_one(&t, "501 resources");

        let mut t = Template::new("x");
        t.add("Vpc", vpc("x".repeat(LIMIT_BODY_BYTES).into()));
        let rendered = t.render().unwrap();
        assert_eq!(rendered.warnings.len(), 1, "{:?}", rendered.warnings);
        assert!(rendered.warnings[0].contains("51200-byte limit"));

        let mut t = Template::new("x");
        t.add("Vpc", vpc("x".repeat(LIMIT_S3_BYTES).into()));
        assert_one(&t, "CloudFormation accepts at most 1048576");
    }
}
