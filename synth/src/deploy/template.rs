//! A template as CloudFormation would see it for one set of parameter
//! values: `Ref`s to parameters and pseudo parameters replaced by their
//! values, conditions evaluated, `Fn::If` and `Fn::FindInMap` decided where
//! their inputs are known. What depends on other resources (`Ref` to a
//! resource, `Fn::GetAtt`) stays as it is, so two resolved templates compare
//! equal exactly where the deployed values would.
//!
//! [`super::change`] compares two of these to decide what an update changes
//! and replaces; [`super::watch`] reads which resources a create will make.

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json};

/// A template resolved for its parameter values.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Resolved {
    /// Resources by logical id, those whose condition is false left out;
    /// `Type` and `Properties` resolved.
    pub resources: BTreeMap<String, ResolvedResource>,
}

/// One resource of a [`Resolved`] template.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ResolvedResource {
    /// Its type.
    pub resource_type: String,
    /// Its properties, resolved (an empty object when it has none).
    pub properties: Json,
    /// Its condition could not be decided (it may or may not be created).
    pub maybe: bool,
}

/// Values the pseudo parameters take.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pseudo {
    /// `AWS::Region`.
    pub region: String,
    /// `AWS::StackName`.
    pub stack_name: String,
    /// `AWS::AccountId`, when known.
    pub account_id: Option<String>,
}

/// The value of every parameter: `given` where it names one, else the
/// template's default.
pub(crate) fn parameter_values(template: &Json, given: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut values = BTreeMap::new();
    if let Some(params) = template.get("Parameters").and_then(Json::as_object) {
        for (name, p) in params {
            let value = given.get(name).cloned().or_else(|| p.get("Default").map(scalar_text));
            if let Some(v) = value {
                values.insert(name.clone(), v);
            }
        }
    }
    values
}

/// Text of a scalar JSON value as CloudFormation passes it (numbers and
/// booleans as strings).
fn scalar_text(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

struct Resolver<'a> {
    params: &'a BTreeMap<String, String>,
    pseudo: &'a Pseudo,
    mappings: &'a Map<String, Json>,
    conditions: BTreeMap<String, Option<bool>>,
}

/// Resolves `template` for the parameter values `params` (all of them: see
/// [`parameter_values`]).
pub(crate) fn resolve(template: &Json, params: &BTreeMap<String, String>, pseudo: &Pseudo) -> Resolved {
    let empty = Map::new();
    let mappings = template.get("Mappings").and_then(Json::as_object).unwrap_or(&empty);
    let mut r = Resolver { params, pseudo, mappings, conditions: BTreeMap::new() };
    if let Some(conditions) = template.get("Conditions").and_then(Json::as_object) {
        // Conditions may refer to each other; a few rounds settle any order.
        for _ in 0..conditions.len().max(1) {
            for (name, expr) in conditions {
                let value = r.condition(expr);
                r.conditions.insert(name.clone(), value);
            }
        }
    }
    let mut resources = BTreeMap::new();
    if let Some(all) = template.get("Resources").and_then(Json::as_object) {
        for (id, resource) in all {
            let condition = resource.get("Condition").and_then(Json::as_str);
            let decided = condition.map(|c| r.conditions.get(c).copied().flatten());
            if decided == Some(Some(false)) {
                continue;
            }
            let properties = resource.get("Properties").map(|p| r.value(p)).unwrap_or(Json::Object(Map::new()));
            resources.insert(
                id.clone(),
                ResolvedResource {
                    resource_type: resource.get("Type").and_then(Json::as_str).unwrap_or_default().to_owned(),
                    properties,
                    maybe: decided == Some(None),
                },
            );
        }
    }
    Resolved { resources }
}

impl Resolver<'_> {
    /// The value of a parameter or pseudo parameter, when it is one and known.
    fn reference(&self, name: &str) -> Option<String> {
        match name {
            "AWS::Region" => Some(self.pseudo.region.clone()),
            "AWS::StackName" => Some(self.pseudo.stack_name.clone()),
            "AWS::AccountId" => self.pseudo.account_id.clone(),
            "AWS::Partition" => Some("aws".to_owned()),
            "AWS::URLSuffix" => Some("amazonaws.com".to_owned()),
            _ => self.params.get(name).cloned(),
        }
    }

    fn condition(&self, expr: &Json) -> Option<bool> {
        let obj = expr.as_object()?;
        let (op, args) = obj.iter().next()?;
        let list = args.as_array();
        match op.as_str() {
            "Condition" => self.conditions.get(args.as_str()?).copied().flatten(),
            "Fn::Equals" => {
                let list = list?;
                let a = self.value(list.first()?);
                let b = self.value(list.get(1)?);
                match (a, b) {
                    (Json::String(a), Json::String(b)) => Some(a == b),
                    (a, b) if is_literal(&a) && is_literal(&b) => Some(scalar_text(&a) == scalar_text(&b)),
                    _ => None,
                }
            }
            "Fn::Not" => self.condition(list?.first()?).map(|v| !v),
            "Fn::And" => {
                let values: Vec<Option<bool>> = list?.iter().map(|c| self.condition(c)).collect();
                if values.contains(&Some(false)) {
                    Some(false)
                } else if values.iter().all(|v| *v == Some(true)) {
                    Some(true)
                } else {
                    None
                }
            }
            "Fn::Or" => {
                let values: Vec<Option<bool>> = list?.iter().map(|c| self.condition(c)).collect();
                if values.contains(&Some(true)) {
                    Some(true)
                } else if values.iter().all(|v| *v == Some(false)) {
                    Some(false)
                } else {
                    None
                }
            }
            _ => None,
        }
    }

    fn value(&self, v: &Json) -> Json {
        match v {
            Json::Array(items) => {
                Json::Array(items.iter().map(|i| self.value(i)).filter(|i| !is_no_value(i)).collect())
            }
            Json::Object(obj) if obj.len() == 1 => {
                let (key, arg) = obj.iter().next().map(|(k, a)| (k.as_str(), a)).unwrap_or(("", &Json::Null));
                match key {
                    "Ref" => match arg.as_str() {
                        Some("AWS::NoValue") => no_value(),
                        Some(name) => self.reference(name).map(Json::String).unwrap_or_else(|| v.clone()),
                        None => v.clone(),
                    },
                    "Fn::If" => {
                        let Some([cond, yes, no]) = arg.as_array().map(Vec::as_slice) else { return v.clone() };
                        match cond.as_str().and_then(|c| self.conditions.get(c).copied().flatten()) {
                            Some(true) => self.value(yes),
                            Some(false) => self.value(no),
                            None => single(key, Json::Array(vec![cond.clone(), self.value(yes), self.value(no)])),
                        }
                    }
                    "Fn::FindInMap" => {
                        let resolved = self.value(arg);
                        let keys: Option<Vec<&str>> =
                            resolved.as_array().map(|a| a.iter().filter_map(Json::as_str).collect());
                        match keys.as_deref() {
                            Some([map, top, second]) => self
                                .mappings
                                .get(*map)
                                .and_then(|m| m.get(*top))
                                .and_then(|m| m.get(*second))
                                .cloned()
                                .unwrap_or_else(|| single(key, resolved.clone())),
                            _ => single(key, resolved),
                        }
                    }
                    "Fn::Sub" => self.sub(arg),
                    _ => single(key, self.value(arg)),
                }
            }
            Json::Object(obj) => {
                let mut out = Map::new();
                for (k, item) in obj {
                    let item = self.value(item);
                    if !is_no_value(&item) {
                        out.insert(k.clone(), item);
                    }
                }
                Json::Object(out)
            }
            other => other.clone(),
        }
    }

    /// `Fn::Sub`: parameter names in the text replaced by their values; the
    /// variables map resolved. The text keeps what depends on resources.
    fn sub(&self, arg: &Json) -> Json {
        let (text, vars) = match arg {
            Json::String(s) => (s.as_str(), None),
            Json::Array(a) => (a.first().and_then(Json::as_str).unwrap_or_default(), a.get(1)),
            _ => return single("Fn::Sub", arg.clone()),
        };
        let vars = vars.map(|v| self.value(v));
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let Some(end) = rest[start..].find('}').map(|e| e + start) else {
                out.push_str(&rest[start..]);
                rest = "";
                break;
            };
            let name = &rest[start + 2..end];
            let from_vars = vars.as_ref().and_then(|v| v.get(name)).and_then(Json::as_str).map(str::to_owned);
            let known = if name.starts_with('!') || vars.as_ref().is_some_and(|v| v.get(name).is_some()) {
                from_vars
            } else {
                self.reference(name)
            };
            match known {
                Some(value) => out.push_str(&value),
                None => out.push_str(&rest[start..=end]),
            }
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        match vars {
            Some(v) => single("Fn::Sub", Json::Array(vec![Json::String(out), v])),
            None => single("Fn::Sub", Json::String(out)),
        }
    }
}

fn single(key: &str, value: Json) -> Json {
    let mut m = Map::new();
    m.insert(key.to_owned(), value);
    Json::Object(m)
}

/// The marker `AWS::NoValue` resolves to; removed from objects and arrays.
fn no_value() -> Json {
    single("Ref", Json::String("AWS::NoValue".into()))
}

fn is_no_value(v: &Json) -> bool {
    *v == no_value()
}

fn is_literal(v: &Json) -> bool {
    matches!(v, Json::String(_) | Json::Number(_) | Json::Bool(_))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pseudo() -> Pseudo {
        Pseudo { region: "us-east-1".into(), stack_name: "demo".into(), account_id: None }
    }

    #[test]
    fn parameters_conditions_and_maps_are_resolved_and_resources_are_not() {
        let template = json!({
            "Parameters": {"Count": {"Type": "Number", "Default": 4}, "Key": {"Type": "String", "Default": ""}},
            "Mappings": {"Images": {"us-east-1": {"Ami": "ami-1"}}},
            "Conditions": {"HasKey": {"Fn::Not": [{"Fn::Equals": [{"Ref": "Key"}, ""]}]}},
            "Resources": {
                "Group": {"Type": "AWS::AutoScaling::AutoScalingGroup", "Properties": {
                    "DesiredCapacity": {"Ref": "Count"},
                    "Key": {"Fn::If": ["HasKey", {"Ref": "Key"}, {"Ref": "AWS::NoValue"}]},
                    "Image": {"Fn::FindInMap": ["Images", {"Ref": "AWS::Region"}, "Ami"]},
                    "Lt": {"Fn::GetAtt": ["Template", "LatestVersionNumber"]},
                    "Text": {"Fn::Sub": ["${AWS::StackName} ${Count} ${Queue} ${!Literal}", {"Queue": {"Ref": "Q"}}]}
                }},
                "Keyed": {"Type": "AWS::EC2::KeyPair", "Condition": "HasKey"}
            }
        });
        let given = BTreeMap::from([("Count".to_owned(), "6".to_owned())]);
        let values = parameter_values(&template, &given);
        assert_eq!(values["Count"], "6");
        assert_eq!(values["Key"], "");
        let r = resolve(&template, &values, &pseudo());
        let group = &r.resources["Group"].properties;
        assert_eq!(group["DesiredCapacity"], "6");
        assert!(group.get("Key").is_none(), "{group}");
        assert_eq!(group["Image"], "ami-1");
        assert_eq!(group["Lt"], json!({"Fn::GetAtt": ["Template", "LatestVersionNumber"]}));
        assert_eq!(group["Text"], json!({"Fn::Sub": ["demo 6 ${Queue} ${!Literal}", {"Queue": {"Ref": "Q"}}]}));
        assert!(!r.resources.contains_key("Keyed"), "a false condition leaves the resource out");
    }
}
