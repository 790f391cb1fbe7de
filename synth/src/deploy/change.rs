//! What an update changes, and what it replaces: the change set as
//! CloudFormation reports it, checked against the two templates.
//!
//! AWS's change set says, per resource, Add / Modify / Remove and whether a
//! modification replaces it (True / Conditional / False). The local AWS of
//! the tests (moto) says no more than the action, and misses changes that
//! come only from parameter values. So [`preview`] also compares the stack's
//! current template with the new one, each resolved for its parameter values
//! ([`super::template`]): a changed property listed in the resource type's
//! create-only properties ([`super::create_only`]) replaces the resource; a
//! property that refers to a replaced resource changes with it, and one that
//! reads an attribute of a modified resource may (a launch template's
//! `LatestVersionNumber` always does). The two views are merged, keeping
//! the more severe replacement.
//!
//! [`Preview::refusals`] names the replacements and removals that would
//! destroy data: the master instance (its root volume goes with it), the
//! EFS file system, the VPC its mount targets are in, the FSx for Lustre
//! file system.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value as Json;

use super::create_only::create_only;
use super::port::Change;
use super::template::{Pseudo, Resolved, resolve};

/// Whether a change replaces the resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Replacement {
    /// Updated in place.
    No,
    /// Replaced if a value only known at update time changes.
    Conditional,
    /// Replaced: a new physical resource, the old one deleted.
    Yes,
}

impl Replacement {
    fn from_aws(text: Option<&str>) -> Replacement {
        match text {
            Some("True") | Some("Always") => Replacement::Yes,
            Some("Conditional") | Some("Conditionally") => Replacement::Conditional,
            _ => Replacement::No,
        }
    }
}

/// Added, modified or removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Action {
    /// A new resource.
    Add,
    /// An existing resource changes (maybe by replacement).
    Modify,
    /// The resource is deleted.
    Remove,
}

/// One property that changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PropertyChange {
    /// Its path under `Properties` (`LaunchTemplate`, `Tags`).
    pub path: String,
    /// Whether this change replaces the resource.
    pub replaces: Replacement,
    /// The resource whose change this one follows, when it is not in the template text itself.
    pub follows: Option<String>,
    /// What changes inside it, old → new, in the blueprint's field where
    /// there is one ([`ValueChange`]); empty when only the change set
    /// reported it, or it follows another resource.
    pub values: Vec<ValueChange>,
}

/// One value that changes inside a property: its path under the
/// property, the blueprint field it comes from (when synth knows it), the
/// old and new values as shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ValueChange {
    /// `LaunchTemplateData.InstanceType`.
    pub path: String,
    /// `master.instance_type`.
    pub field: Option<&'static str>,
    /// The old value, shown.
    pub old: String,
    /// The new value, shown.
    pub new: String,
}

impl ValueChange {
    /// `master.instance_type: p3.2xlarge → p3.8xlarge`, else the path.
    pub(crate) fn render(&self) -> String {
        let name = self.field.unwrap_or(&self.path);
        format!("{name}: {} → {}", self.old, self.new)
    }
}

/// At most this many values are shown per property.
const MAX_VALUES: usize = 3;

/// The values that differ between `old` and `new` under `path`, leaf by
/// leaf (objects by key, lists of one length by index), at most
/// [`MAX_VALUES`], for the resource `id`.
fn value_changes(id: &str, path: &str, old: Option<&Json>, new: Option<&Json>, out: &mut Vec<ValueChange>) {
    let field = |path: &str| field_of(id, path.rsplit(['.', '[']).next().unwrap_or(path));
    let how = Walk { limit: MAX_VALUES, absent_is_empty: false, field: &field };
    walk(path, old, new, &how, out);
}

/// How [`walk`] compares two JSON values.
struct Walk<'a> {
    /// At most this many changes.
    limit: usize,
    /// Whether a missing or null side counts as an empty object against an
    /// object (a blueprint section added or removed is listed field by
    /// field), rather than as one change (a property's `{…}` appearing).
    absent_is_empty: bool,
    /// The blueprint field a changed value's path stands for, if one does.
    field: &'a dyn Fn(&str) -> Option<&'static str>,
}

/// Pushes onto `out` the leaves that differ between `old` and `new` under
/// `path` (`a.b`, `a[0]`): objects by key, lists of one length by index,
/// anything else as one change, until `how.limit`.
fn walk(path: &str, old: Option<&Json>, new: Option<&Json>, how: &Walk<'_>, out: &mut Vec<ValueChange>) {
    if out.len() >= how.limit || old == new {
        return;
    }
    let under = |key: &str| if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") };
    let empty = serde_json::Map::new();
    let is_object = |v: Option<&Json>| matches!(v, Some(Json::Object(_)));
    if is_object(old) || is_object(new) {
        let object = |v| as_object(v, &empty, how.absent_is_empty);
        if let (Some(o), Some(n)) = (object(old), object(new)) {
            let keys: BTreeSet<&String> = o.keys().chain(n.keys()).collect();
            for k in keys {
                walk(&under(k), o.get(k), n.get(k), how, out);
            }
            return;
        }
    }
    if let (Some(Json::Array(o)), Some(Json::Array(n))) = (old, new)
        && o.len() == n.len()
    {
        for (i, (a, b)) in o.iter().zip(n).enumerate() {
            walk(&format!("{path}[{i}]"), Some(a), Some(b), how, out);
        }
        return;
    }
    out.push(ValueChange { path: path.to_owned(), field: (how.field)(path), old: shown(old), new: shown(new) });
}

/// `v` as an object: itself, or `empty` for a missing or null value when
/// `absent_is_empty`.
fn as_object<'a>(
    v: Option<&'a Json>,
    empty: &'a serde_json::Map<String, Json>,
    absent_is_empty: bool,
) -> Option<&'a serde_json::Map<String, Json>> {
    match v {
        Some(Json::Object(m)) => Some(m),
        None | Some(Json::Null) if absent_is_empty => Some(empty),
        _ => None,
    }
}

/// A value in a line: text as it is (cut at 60 characters), numbers and
/// booleans as JSON, a structure as `{…}` or `[…]`.
fn shown(value: Option<&Json>) -> String {
    match value {
        None | Some(Json::Null) => "(none)".to_owned(),
        Some(Json::String(s)) if s.chars().count() > 60 => format!("{}…", s.chars().take(59).collect::<String>()),
        Some(Json::String(s)) => s.clone(),
        Some(Json::Object(_)) => "{…}".to_owned(),
        Some(Json::Array(_)) => "[…]".to_owned(),
        Some(other) => other.to_string(),
    }
}

/// The blueprint field a template value of resource `id` comes from, for
/// the values a user changes in the blueprint (the leaf's name).
fn field_of(id: &str, leaf: &str) -> Option<&'static str> {
    let master = id.starts_with("Master");
    let workers = id.starts_with("Worker");
    Some(match leaf {
        "InstanceType" if master => "master.instance_type",
        "InstanceType" if workers => "workers.instance_type",
        "ImageId" => "image",
        "VolumeSize" => "storage.root_volume_gb",
        "KeyName" => "access.ssh.key_name",
        "CidrBlock" if id == "Vpc" => "network.vpc_cidr",
        "DesiredCapacity" if workers => "workers.count",
        "MinSize" if workers => "workers.min",
        "MaxSize" if workers => "workers.max",
        "PerformanceMode" | "ThroughputMode" | "Encrypted" => "storage.efs",
        "StorageCapacity" => "storage.fsx_lustre.capacity_gib",
        "DeploymentType" => "storage.fsx_lustre.deployment",
        _ => return None,
    })
}

/// One resource that changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ResourceChange {
    /// Logical id.
    pub logical_id: String,
    /// Type.
    pub resource_type: String,
    /// Added, modified or removed.
    pub action: Action,
    /// Whether it is replaced (for a modification).
    pub replacement: Replacement,
    /// The properties that change.
    pub properties: Vec<PropertyChange>,
    /// The change set listed it.
    pub reported: bool,
}

/// An update, resource by resource.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Preview {
    /// The changes, by logical id.
    pub changes: Vec<ResourceChange>,
    /// The old template has EFS mount targets (its VPC holds a file system's access).
    has_efs: bool,
    /// The blueprint's fields that change, old → new, from the two
    /// templates' records ([`blueprint_changes`]); empty when the stack's
    /// template has none (made by an older synth).
    pub blueprint: Vec<ValueChange>,
}

/// At most this many blueprint fields are listed.
const MAX_FIELDS: usize = 20;

/// The blueprint's fields that change between the blueprints the two
/// templates record (`Metadata.synth.blueprint`, written by
/// `stack/parameters.rs`), leaf by leaf with their dotted paths
/// (`workers.count: 2 → 4`), at most [`MAX_FIELDS`]; empty when either has
/// no record.
fn blueprint_changes<'a>(old: &'a Json, new: &'a Json) -> Vec<ValueChange> {
    let record = |t: &'a Json| t.pointer("/Metadata/synth/blueprint");
    let (Some(old), Some(new)) = (record(old), record(new)) else { return Vec::new() };
    let mut out = Vec::new();
    walk("", Some(old), Some(new), &Walk { limit: MAX_FIELDS, absent_is_empty: true, field: &|_| None }, &mut out);
    out
}

/// A change that would destroy data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The resource.
    pub logical_id: String,
    /// Its type.
    pub resource_type: String,
    /// What it holds.
    pub holds: &'static str,
    /// "replaced", "maybe replaced", "deleted".
    pub fate: &'static str,
    /// Why, in words.
    pub because: String,
}

/// The two templates (old as deployed, new to deploy), each with all its
/// parameter values, and the change set's own changes.
pub(crate) fn preview(
    old: (&Json, &BTreeMap<String, String>),
    new: (&Json, &BTreeMap<String, String>),
    pseudo: &Pseudo,
    reported: &[Change],
) -> Preview {
    let before = resolve(old.0, old.1, pseudo);
    let after = resolve(new.0, new.1, pseudo);
    let mut changes = local_changes(&before, &after);
    for c in reported {
        let action = match c.action.as_str() {
            "Add" => Action::Add,
            "Remove" => Action::Remove,
            _ => Action::Modify,
        };
        let entry = changes.entry(c.logical_id.clone()).or_insert_with(|| ResourceChange {
            logical_id: c.logical_id.clone(),
            resource_type: c.resource_type.clone(),
            action,
            replacement: Replacement::No,
            properties: Vec::new(),
            reported: true,
        });
        entry.reported = true;
        entry.replacement = entry.replacement.max(Replacement::from_aws(c.replacement.as_deref()));
        for (name, recreation) in &c.details {
            let replaces = Replacement::from_aws(Some(recreation));
            match entry.properties.iter_mut().find(|p| p.path == *name) {
                Some(p) => p.replaces = p.replaces.max(replaces),
                None => entry.properties.push(PropertyChange {
                    path: name.clone(),
                    replaces,
                    follows: None,
                    values: Vec::new(),
                }),
            }
        }
    }
    let has_efs = before.resources.values().any(|r| r.resource_type == "AWS::EFS::MountTarget");
    Preview { changes: changes.into_values().collect(), has_efs, blueprint: blueprint_changes(old.0, new.0) }
}

/// The changes the templates alone show.
fn local_changes(before: &Resolved, after: &Resolved) -> BTreeMap<String, ResourceChange> {
    let mut changes: BTreeMap<String, ResourceChange> = BTreeMap::new();
    let ids: BTreeSet<&String> = before.resources.keys().chain(after.resources.keys()).collect();
    for id in ids {
        let change = |action, resource_type: &str| ResourceChange {
            logical_id: id.clone(),
            resource_type: resource_type.to_owned(),
            action,
            replacement: Replacement::No,
            properties: Vec::new(),
            reported: false,
        };
        match (before.resources.get(id), after.resources.get(id)) {
            (None, Some(n)) => {
                changes.insert(id.clone(), change(Action::Add, &n.resource_type));
            }
            (Some(o), None) => {
                changes.insert(id.clone(), change(Action::Remove, &o.resource_type));
            }
            (Some(o), Some(n)) if o.resource_type != n.resource_type => {
                let mut c = change(Action::Modify, &n.resource_type);
                c.replacement = Replacement::Yes;
                c.properties.push(PropertyChange {
                    path: "Type".into(),
                    replaces: Replacement::Yes,
                    follows: None,
                    values: Vec::new(),
                });
                changes.insert(id.clone(), c);
            }
            (Some(o), Some(n)) => {
                let paths = differing(&o.properties, &n.properties);
                if !paths.is_empty() {
                    let mut c = change(Action::Modify, &n.resource_type);
                    for path in paths {
                        let replaces = if replaces(&n.resource_type, &path, &o.properties, &n.properties) {
                            Replacement::Yes
                        } else {
                            Replacement::No
                        };
                        let mut values = Vec::new();
                        value_changes(id, &path, o.properties.get(&path), n.properties.get(&path), &mut values);
                        c.properties.push(PropertyChange { path, replaces, follows: None, values });
                    }
                    c.replacement = c.properties.iter().map(|p| p.replaces).max().unwrap_or(Replacement::No);
                    changes.insert(id.clone(), c);
                }
            }
            (None, None) => {}
        }
    }
    // Changes that follow from others: a property naming a replaced resource
    // (its `Ref` is a new id) or reading an attribute of a changed one.
    // Each round can only add or raise changes, so this ends.
    for _ in 0..=after.resources.len() {
        let mut grew = false;
        for (id, n) in &after.resources {
            if !before.resources.contains_key(id) {
                continue;
            }
            let Some(props) = n.properties.as_object() else { continue };
            for (key, value) in props {
                for (target, attribute) in references(value) {
                    let Some(t) = changes.get(&target) else { continue };
                    let effect = match (attribute.as_deref(), t.action, t.replacement) {
                        (_, Action::Add | Action::Remove, _) => None,
                        (_, _, Replacement::Yes) => Some(Replacement::Yes),
                        (_, _, Replacement::Conditional) => Some(Replacement::Conditional),
                        (None, _, Replacement::No) => None,
                        (Some("LatestVersionNumber"), _, _) if t.resource_type == "AWS::EC2::LaunchTemplate" => {
                            Some(Replacement::Yes)
                        }
                        (Some(a), _, Replacement::No) if fixed_for_life(&t.resource_type, a) => None,
                        (Some(_), _, _) => Some(Replacement::Conditional),
                    };
                    let Some(certainty) = effect else { continue };
                    // `certainty` says how sure the value changes; whether that replaces depends on the property.
                    let replaces = if is_create_only(&n.resource_type, key) { certainty } else { Replacement::No };
                    let c = changes.entry(id.clone()).or_insert_with(|| ResourceChange {
                        logical_id: id.clone(),
                        resource_type: n.resource_type.clone(),
                        action: Action::Modify,
                        replacement: Replacement::No,
                        properties: Vec::new(),
                        reported: false,
                    });
                    match c.properties.iter_mut().find(|p| p.path == *key) {
                        Some(p) if p.replaces >= replaces => {}
                        Some(p) => {
                            p.replaces = replaces;
                            p.follows.get_or_insert(target.clone());
                            grew = true;
                        }
                        None => {
                            c.properties.push(PropertyChange {
                                path: key.clone(),
                                replaces,
                                follows: Some(target.clone()),
                                values: Vec::new(),
                            });
                            grew = true;
                        }
                    }
                    if replaces > c.replacement {
                        c.replacement = replaces;
                        grew = true;
                    }
                }
            }
        }
        if !grew {
            break;
        }
    }
    changes
}

/// Attributes a resource keeps for its whole life, whatever an in-place
/// update changes: an FSx file system's DNS name and Lustre mount name
/// (the nodes' configs read them, so a new throughput tier or a larger
/// file system must not look like new user data and a new master).
fn fixed_for_life(resource_type: &str, attribute: &str) -> bool {
    matches!((resource_type, attribute), ("AWS::FSx::FileSystem", "DNSName" | "LustreMountName" | "ResourceARN"))
}

/// Top-level property names whose values differ.
fn differing(old: &Json, new: &Json) -> Vec<String> {
    let empty = serde_json::Map::new();
    let o = old.as_object().unwrap_or(&empty);
    let n = new.as_object().unwrap_or(&empty);
    let keys: BTreeSet<&String> = o.keys().chain(n.keys()).collect();
    keys.into_iter().filter(|k| o.get(*k) != n.get(*k)).cloned().collect()
}

fn is_create_only(resource_type: &str, key: &str) -> bool {
    create_only(resource_type).unwrap_or_default().iter().any(|p| p.split('/').next() == Some(key))
}

/// Whether the change of top-level property `key` touches a create-only path.
fn replaces(resource_type: &str, key: &str, old: &Json, new: &Json) -> bool {
    create_only(resource_type).unwrap_or_default().iter().any(|path| {
        let mut parts = path.split('/');
        if parts.next() != Some(key) {
            return false;
        }
        let pointer: String = path.split('/').map(|p| format!("/{p}")).collect();
        old.pointer(&pointer) != new.pointer(&pointer)
    })
}

/// The resources a value refers to: `(logical id, None)` for `Ref`,
/// `(logical id, Some(attribute))` for `Fn::GetAtt`, and the variables of
/// `Fn::Sub` text (`${Name}`, `${Name.Attribute}`).
fn references(value: &Json) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    collect(value, &mut out);
    out
}

fn collect(value: &Json, out: &mut Vec<(String, Option<String>)>) {
    match value {
        Json::Array(items) => items.iter().for_each(|i| collect(i, out)),
        Json::Object(obj) => {
            if obj.len() == 1 {
                if let Some(Json::String(target)) = obj.get("Ref") {
                    out.push((target.clone(), None));
                    return;
                }
                if let Some(att) = obj.get("Fn::GetAtt") {
                    let parts: Vec<String> = match att {
                        Json::Array(a) => a.iter().filter_map(|p| p.as_str().map(str::to_owned)).collect(),
                        Json::String(s) => s.splitn(2, '.').map(str::to_owned).collect(),
                        _ => Vec::new(),
                    };
                    if let [target, attribute] = parts.as_slice() {
                        out.push((target.clone(), Some(attribute.clone())));
                    }
                    return;
                }
                if let Some(sub) = obj.get("Fn::Sub") {
                    let (text, vars) = match sub {
                        Json::String(s) => (s.as_str(), None),
                        Json::Array(a) => (a.first().and_then(Json::as_str).unwrap_or_default(), a.get(1)),
                        _ => ("", None),
                    };
                    for name in sub_names(text) {
                        if vars.is_some_and(|v| v.get(&name).is_some()) {
                            continue;
                        }
                        match name.split_once('.') {
                            Some((t, a)) => out.push((t.to_owned(), Some(a.to_owned()))),
                            None => out.push((name, None)),
                        }
                    }
                    if let Some(v) = vars {
                        collect(v, out);
                    }
                    return;
                }
            }
            obj.values().for_each(|v| collect(v, out));
        }
        _ => {}
    }
}

/// The `${...}` names of `Fn::Sub` text (not the `${!literal}` ones).
fn sub_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let Some(end) = rest[start..].find('}') else { break };
        let name = &rest[start + 2..start + end];
        if !name.starts_with('!') {
            names.push(name.to_owned());
        }
        rest = &rest[start + end + 1..];
    }
    names
}

/// What a resource of this type holds that a replacement or removal destroys.
fn holds_data(resource_type: &str, has_efs: bool) -> Option<&'static str> {
    match resource_type {
        "AWS::EC2::Instance" => Some("the master instance: its root volume is deleted with it"),
        "AWS::EFS::FileSystem" => Some("the shared EFS file system and every file on it"),
        "AWS::FSx::FileSystem" => {
            Some("the FSx for Lustre file system and every file written to it (what it imported from S3 stays in S3)")
        }
        "AWS::EC2::VPC" if has_efs => Some("the VPC the EFS file system's mount targets are in"),
        _ => None,
    }
}

impl Preview {
    /// The changes that would destroy data.
    pub(crate) fn refusals(&self) -> Vec<Refusal> {
        let mut out = Vec::new();
        for c in &self.changes {
            let Some(holds) = holds_data(&c.resource_type, self.has_efs) else { continue };
            let fate = match (c.action, c.replacement) {
                (Action::Remove, _) => "deleted",
                (Action::Modify, Replacement::Yes) => "replaced",
                (Action::Modify, Replacement::Conditional) => "maybe replaced",
                _ => continue,
            };
            let because = if c.action == Action::Remove {
                "it is no longer in the template".to_owned()
            } else {
                let reasons: Vec<String> = c
                    .properties
                    .iter()
                    .filter(|p| p.replaces > Replacement::No)
                    .map(|p| {
                        // What the user changed: the values of this
                        // property, or of the resource it follows.
                        let values = match &p.follows {
                            Some(t) => self.values_of(t),
                            None => p.values.iter().map(ValueChange::render).collect(),
                        };
                        let values = if values.is_empty() { String::new() } else { format!(": {}", values.join(", ")) };
                        match &p.follows {
                            Some(t) => format!("{} changes with {t} (create-only property){values}", p.path),
                            None => format!("{} changes (create-only property){values}", p.path),
                        }
                    })
                    .collect();
                let because = if reasons.is_empty() { "the change set says so".to_owned() } else { reasons.join("; ") };
                // Said in the blueprint's words where synth knows no field
                // for the template's values: what changed in the blueprint.
                let named = c.properties.iter().any(|p| p.values.iter().any(|v| v.field.is_some()));
                if named || self.blueprint.is_empty() {
                    because
                } else {
                    let fields: Vec<String> = self.blueprint.iter().map(ValueChange::render).collect();
                    format!("{because}; the blueprint changes {}", fields.join(", "))
                }
            };
            out.push(Refusal {
                logical_id: c.logical_id.clone(),
                resource_type: c.resource_type.clone(),
                holds,
                fate,
                because,
            });
        }
        out
    }

    /// Every value that changes in the resource `id`, rendered.
    fn values_of(&self, id: &str) -> Vec<String> {
        self.changes
            .iter()
            .filter(|c| c.logical_id == id)
            .flat_map(|c| c.properties.iter().flat_map(|p| p.values.iter().map(ValueChange::render)))
            .collect()
    }

    /// The changes, one line each: `+` added, `~` modified in place, `!`
    /// replaced, `?` maybe replaced, `-` removed; then the counts.
    pub(crate) fn render(&self, stack: &str) -> String {
        let fields = if self.blueprint.is_empty() {
            String::new()
        } else {
            let lines: Vec<String> = self.blueprint.iter().map(|v| format!("  {}\n", v.render())).collect();
            format!("Blueprint changes:\n{}", lines.concat())
        };
        format!("{fields}{}", self.render_resources(stack))
    }

    fn render_resources(&self, stack: &str) -> String {
        if self.changes.is_empty() {
            return format!("Stack {stack}: no resource changes.\n");
        }
        let width = self.changes.iter().map(|c| c.logical_id.len()).max().unwrap_or(0);
        let type_width = self.changes.iter().map(|c| c.resource_type.len()).max().unwrap_or(0);
        let mut lines = Vec::new();
        let (mut add, mut modify, mut replace, mut remove) = (0, 0, 0, 0);
        for c in &self.changes {
            let (mark, note) = match (c.action, c.replacement) {
                (Action::Add, _) => {
                    add += 1;
                    ("+", "added".to_owned())
                }
                (Action::Remove, _) => {
                    remove += 1;
                    ("-", "DELETED".to_owned())
                }
                (Action::Modify, r) => {
                    let props: Vec<String> = c
                        .properties
                        .iter()
                        .map(|p| {
                            let mut s = p.path.clone();
                            if !p.values.is_empty() {
                                let values: Vec<String> = p.values.iter().map(ValueChange::render).collect();
                                s.push_str(&format!(" [{}]", values.join(", ")));
                            }
                            if p.replaces > Replacement::No {
                                s.push_str(" (create-only)");
                            }
                            if let Some(t) = &p.follows {
                                s.push_str(&format!(" <- {t}"));
                            }
                            s
                        })
                        .collect();
                    let props = if props.is_empty() { "properties not reported".to_owned() } else { props.join(", ") };
                    match r {
                        Replacement::Yes => {
                            replace += 1;
                            ("!", format!("REPLACED: {props}"))
                        }
                        Replacement::Conditional => {
                            replace += 1;
                            ("?", format!("MAY BE REPLACED: {props}"))
                        }
                        Replacement::No => {
                            modify += 1;
                            ("~", props)
                        }
                    }
                }
            };
            let origin = if c.reported { "" } else { "  (from the templates; the change set did not list it)" };
            lines.push(format!(
                "  {mark} {:width$}  {:type_width$}  {note}{origin}",
                c.logical_id,
                c.resource_type,
                width = width,
                type_width = type_width
            ));
        }
        format!(
            "Stack {stack}: {add} to add, {modify} to change in place, {replace} to replace, {remove} to delete\n{}\n",
            lines.join("\n")
        )
    }
}

impl Refusal {
    /// One line: what, what happens to it, why.
    pub(crate) fn render(&self) -> String {
        format!(
            "{} ({}) would be {}: it is {}. Because {}",
            self.logical_id, self.resource_type, self.fate, self.holds, self.because
        )
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::deploy::template::parameter_values;
    use crate::stack::tests::sample;

    fn pseudo() -> Pseudo {
        Pseudo { region: "us-east-1".into(), stack_name: "demo".into(), account_id: Some("123456789012".into()) }
    }

    fn template(spec: &crate::spec::ClusterSpec) -> Json {
        serde_json::from_str(&crate::stack::compile(spec).render().unwrap().json).unwrap()
    }

    /// The preview of deploying `new` over a stack made from `old`, with no change set.
    fn between(old: &Json, new: &Json, old_given: &[(&str, &str)], new_given: &[(&str, &str)]) -> Preview {
        let given = |g: &[(&str, &str)]| g.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let old_params = parameter_values(old, &given(old_given));
        let new_params = parameter_values(new, &given(new_given));
        preview((old, &old_params), (new, &new_params), &pseudo(), &[])
    }

    fn summary(p: &Preview) -> Vec<(String, Action, Replacement)> {
        p.changes.iter().map(|c| (c.logical_id.clone(), c.action, c.replacement)).collect()
    }

    /// Resizing the cluster, in the blueprint or by parameter, changes the
    /// worker group and the workers' launch template, never the master.
    #[test]
    fn resizing_the_cluster_leaves_the_master_alone() {
        let base = sample();
        let old = template(&base);
        let mut resized = base.clone();
        resized.workers.count = 6;
        resized.workers.min = 2;
        resized.workers.max = 10;
        resized.workers.instance_type = "p3.8xlarge".into();
        let cases = [
            (template(&resized), vec![]),
            (old.clone(), vec![("WorkerCount", "7"), ("MinWorkers", "3"), ("MaxWorkers", "9")]),
            (old.clone(), vec![("WorkerInstanceType", "p3.8xlarge")]),
        ];
        for (new, given) in cases {
            let p = between(&old, &new, &[], &given);
            assert!(p.refusals().is_empty(), "{}", p.render("demo"));
            for c in &p.changes {
                assert!(!c.logical_id.starts_with("Master"), "{}", p.render("demo"));
                assert_eq!(c.replacement, Replacement::No, "{}", p.render("demo"));
            }
            assert!(p.changes.iter().any(|c| c.logical_id == "WorkerGroup"), "{}", p.render("demo"));
        }
    }

    /// A table of blueprint changes and what they replace.
    #[test]
    fn table_of_replacements() {
        let base = sample();
        let old = template(&base);
        type Edit = fn(&mut crate::spec::ClusterSpec);
        type Case = (&'static str, Edit, Vec<(&'static str, Action, Replacement)>);
        let cases: Vec<Case> = vec![
            (
                "master type",
                |s| s.master.instance_type = "p3.8xlarge".into(),
                vec![
                    ("MasterInstance", Action::Modify, Replacement::Yes),
                    ("MasterLaunchTemplate", Action::Modify, Replacement::No),
                ],
            ),
            (
                "root volume",
                |s| s.root_volume_gb = 300,
                vec![
                    ("MasterInstance", Action::Modify, Replacement::Yes),
                    ("MasterLaunchTemplate", Action::Modify, Replacement::No),
                    ("WorkerGroup", Action::Modify, Replacement::No),
                    ("WorkerLaunchTemplate", Action::Modify, Replacement::No),
                ],
            ),
            (
                "vpc cidr",
                |s| s.network = crate::spec::NetworkSpec::New { vpc_cidr: "10.1.0.0/16".parse().unwrap() },
                vec![],
            ),
        ];
        for (name, edit, expected) in cases {
            let mut spec = base.clone();
            edit(&mut spec);
            let p = between(&old, &template(&spec), &[], &[]);
            let got = summary(&p);
            for (id, action, replacement) in &expected {
                assert!(
                    got.contains(&(id.to_string(), *action, *replacement)),
                    "{name}: {id} {action:?} {replacement:?} not in\n{}",
                    p.render("demo")
                );
            }
            if name == "vpc cidr" {
                let refused: Vec<String> = p.refusals().iter().map(|r| r.logical_id.clone()).collect();
                assert!(
                    refused.contains(&"Vpc".to_owned()) || refused.iter().any(|r| r.contains("Vpc")),
                    "{refused:?}\n{}",
                    p.render("demo")
                );
                assert!(refused.contains(&"MasterInstance".to_owned()), "{refused:?}");
            }
        }
    }

    #[test]
    fn the_master_replacement_is_refused_with_its_reason() {
        let base = sample();
        let old = template(&base);
        let mut spec = base.clone();
        spec.master.instance_type = "p3.8xlarge".into();
        let p = between(&old, &template(&spec), &[], &[]);
        let refusals = p.refusals();
        assert_eq!(refusals.len(), 1, "{refusals:?}");
        let line = refusals[0].render();
        assert!(
            line.starts_with("MasterInstance (AWS::EC2::Instance) would be replaced: it is the master instance"),
            "{line}"
        );
        assert!(line.contains("LaunchTemplate changes with MasterLaunchTemplate (create-only property)"), "{line}");
        let text = p.render("demo");
        assert!(text.contains("! MasterInstance"), "{text}");
        assert!(text.contains("REPLACED: LaunchTemplate (create-only) <- MasterLaunchTemplate"), "{text}");
        assert!(text.starts_with("Stack demo: 0 to add, 2 to change in place, 1 to replace, 0 to delete"), "{text}");
        assert!(text.contains("~ MasterElasticIp"), "the address follows the new instance: {text}");
        // Issue 35: in the blueprint's words, old → new.
        let from = &base.master.instance_type;
        let said = format!("master.instance_type: {from} → p3.8xlarge");
        assert!(line.contains(&format!("(create-only property): {said}")), "{line}");
        assert!(text.contains(&format!("LaunchTemplateData [{said}")), "{text}");
    }

    /// FSx cannot change a Lustre file system's deployment type or import
    /// path in place: the file system would be replaced, and what was
    /// written to it lost, so the update is refused; a new throughput tier
    /// is an in-place change.
    #[test]
    fn a_new_fsx_deployment_or_import_replaces_the_file_system_and_is_refused() {
        use crate::spec::{FsxDeployment, FsxSpec, S3Prefix};
        let mut base = sample();
        base.fsx = Some(FsxSpec {
            deployment: FsxDeployment::Persistent2,
            capacity_gib: 1200,
            import: None,
            mount: "/fsx".into(),
            throughput_per_tib: Some(125),
        });
        let old = template(&base);
        let edit = |f: fn(&mut FsxSpec)| {
            let mut s = base.clone();
            f(s.fsx.as_mut().unwrap());
            between(&old, &template(&s), &[], &[])
        };
        for p in [
            edit(|f| {
                f.deployment = FsxDeployment::Scratch2;
                f.throughput_per_tib = None;
            }),
            edit(|f| {
                f.deployment = FsxDeployment::Scratch2;
                f.throughput_per_tib = None;
                f.import = Some(S3Prefix { bucket: "b".into(), prefix: String::new() });
            }),
        ] {
            let refused: Vec<String> = p.refusals().iter().map(Refusal::render).collect();
            assert!(
                refused.iter().any(|r| r.starts_with("FsxFileSystem (AWS::FSx::FileSystem) would be replaced")),
                "{refused:?}\n{}",
                p.render("demo")
            );
        }
        let p = edit(|f| f.throughput_per_tib = Some(500));
        assert!(p.refusals().is_empty(), "{}", p.render("demo"));
        assert!(
            summary(&p).contains(&("FsxFileSystem".into(), Action::Modify, Replacement::No)),
            "{}",
            p.render("demo")
        );
    }

    #[test]
    fn the_change_set_is_merged_keeping_the_more_severe() {
        let old = template(&sample());
        let reported = vec![
            Change {
                action: "Modify".into(),
                logical_id: "FileSystem".into(),
                resource_type: "AWS::EFS::FileSystem".into(),
                replacement: Some("True".into()),
                details: vec![("PerformanceMode".into(), "Always".into())],
            },
            Change {
                action: "Remove".into(),
                logical_id: "Gone".into(),
                resource_type: "AWS::SQS::Queue".into(),
                replacement: None,
                details: vec![],
            },
        ];
        let params = parameter_values(&old, &BTreeMap::new());
        let p = preview((&old, &params), (&old, &params), &pseudo(), &reported);
        assert_eq!(
            summary(&p),
            vec![
                ("FileSystem".into(), Action::Modify, Replacement::Yes),
                ("Gone".into(), Action::Remove, Replacement::No)
            ]
        );
        let refusals = p.refusals();
        assert_eq!(refusals.len(), 1);
        assert!(refusals[0].render().contains("PerformanceMode changes"), "{:?}", refusals[0]);
    }

    /// Issue 35: `synth diff` speaks in the blueprint's fields, old → new,
    /// from the blueprints the two templates record, for every field (not
    /// only those whose template value synth maps back); a refusal whose
    /// template values name no field says what changed in the blueprint.
    #[test]
    fn the_blueprints_fields_that_change_are_listed_old_to_new() {
        let load = |text: &str| crate::blueprint::load(text, "b.yaml", Some(crate::region::Region::UsEast1)).unwrap();
        let before = "name: demo\nmaster: { instance_type: p3.2xlarge }\n\
                      workers: { instance_type: p3.16xlarge, count: 2 }\nstorage: { root_volume_gb: 200 }\n";
        let after = "name: demo\nmaster: { instance_type: p3.2xlarge }\n\
                     workers: { instance_type: p3.16xlarge, count: 4 }\nstorage: { root_volume_gb: 300 }\n\
                     idle: { after_minutes: 30, action: scale_workers }\n";
        let (old, new) = (template(&load(before).spec), template(&load(after).spec));
        let fields: Vec<String> = blueprint_changes(&old, &new).iter().map(ValueChange::render).collect();
        assert_eq!(
            fields,
            [
                "idle.action: (none) → scale_workers",
                "idle.after_minutes: (none) → 30",
                "storage.root_volume_gb: 200 → 300",
                "workers.count: 2 → 4"
            ]
        );
        let p = between(&old, &new, &[], &[]);
        let text = p.render("demo");
        assert!(text.starts_with("Blueprint changes:\n  idle.action: (none) → scale_workers\n"), "{text}");
        assert!(text.contains("\nStack demo: "), "{text}");
        // The root volume replaces the master; the template value names the
        // field already, so the refusal says no more.
        let refusals = p.refusals();
        assert!(refusals.iter().any(|r| r.logical_id == "MasterInstance"), "{refusals:?}");
        // A template without the record (an older synth's): no field list.
        let mut bare = old.clone();
        bare["Metadata"]["synth"].as_object_mut().unwrap().remove("blueprint");
        assert!(blueprint_changes(&bare, &new).is_empty());
        assert!(between(&bare, &new, &[], &[]).render("demo").starts_with("Stack demo: "));
    }

    #[test]
    fn no_change_is_empty_and_says_so() {
        let old = template(&sample());
        let p = between(&old, &old, &[], &[]);
        assert!(p.changes.is_empty(), "{}", p.render("demo"));
        assert_eq!(p.render("demo"), "Stack demo: no resource changes.\n");
    }

    #[test]
    fn references_include_sub_variables_and_getatt_strings() {
        let v =
            json!({"a": {"Fn::Sub": ["${A} ${B.Arn} ${!C} ${D}", {"D": {"Ref": "E"}}]}, "b": {"Fn::GetAtt": "F.G"}});
        let mut r = references(&v);
        r.sort();
        assert_eq!(
            r,
            vec![
                ("A".into(), None),
                ("B".into(), Some("Arn".into())),
                ("E".into(), None),
                ("F".into(), Some("G".into()))
            ]
        );
    }

    /// Every resource type the templates use is in the generated table (else
    /// regenerate it: `python3 synth/tools/gen_create_only.py`).
    #[test]
    fn the_create_only_table_knows_every_type() {
        for (name, spec) in crate::stack::tests::variants() {
            for (id, resource) in template(&spec)["Resources"].as_object().unwrap() {
                let ty = resource["Type"].as_str().unwrap();
                assert!(create_only(ty).is_some(), "{name}: {id} {ty}");
            }
        }
    }
}
