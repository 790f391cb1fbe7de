//! Intrinsic functions and pseudo-parameters, in one place.
//!
//! [`Expr`] is an intrinsic function call (or a literal inside one); [`Value`]
//! is what a resource property holds: either a literal of the property's type
//! or an [`Expr`] that CloudFormation resolves at deploy time. Setters take
//! `impl Into<Value<T>>`, so a literal and an intrinsic read the same.
//!
//! Reference: <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/intrinsic-function-reference.html>

use std::collections::BTreeMap;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

/// The pseudo-parameters CloudFormation defines in every stack.
///
/// <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/pseudo-parameter-reference.html>
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pseudo {
    /// `AWS::AccountId`
    AccountId,
    /// `AWS::NoValue`: removes the property it is used in.
    NoValue,
    /// `AWS::Partition` (`aws`, `aws-cn`, `aws-us-gov`).
    Partition,
    /// `AWS::Region`
    Region,
    /// `AWS::StackId`
    StackId,
    /// `AWS::StackName`
    StackName,
    /// `AWS::URLSuffix`
    UrlSuffix,
}

impl Pseudo {
    /// Every pseudo-parameter, for reference checks.
    pub const ALL: [Pseudo; 7] = [
        Pseudo::AccountId,
        Pseudo::NoValue,
        Pseudo::Partition,
        Pseudo::Region,
        Pseudo::StackId,
        Pseudo::StackName,
        Pseudo::UrlSuffix,
    ];

    /// The name used in `Ref` and `Fn::Sub`.
    pub fn name(self) -> &'static str {
        match self {
            Pseudo::AccountId => "AWS::AccountId",
            Pseudo::NoValue => "AWS::NoValue",
            Pseudo::Partition => "AWS::Partition",
            Pseudo::Region => "AWS::Region",
            Pseudo::StackId => "AWS::StackId",
            Pseudo::StackName => "AWS::StackName",
            Pseudo::UrlSuffix => "AWS::URLSuffix",
        }
    }

    /// `{"Ref": "AWS::..."}`
    pub fn r#ref(self) -> Expr {
        Expr::Ref(self.name().to_owned())
    }
}

/// An intrinsic function, a condition function, or a literal inside one.
///
/// Build references with the handles of [`crate::Template`]
/// (`handle.r#ref()`, `handle.attr(..)`), not with [`Expr::Ref`] directly:
/// the handle guarantees the target exists.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A literal string.
    Str(String),
    /// A literal integer.
    Int(i64),
    /// A literal boolean.
    Bool(bool),
    /// A list of expressions (a JSON array).
    List(Vec<Expr>),
    /// `{"Ref": name}`
    Ref(String),
    /// `{"Fn::GetAtt": [resource, attribute]}`
    GetAtt(String, String),
    /// `{"Fn::Sub": string}`; `${Name}` and `${Name.Attr}` are checked like `Ref`/`GetAtt`.
    Sub(String),
    /// `{"Fn::Sub": [string, {var: expr}]}`
    SubWith(String, BTreeMap<String, Expr>),
    /// `{"Fn::Join": [separator, [items]]}`
    Join(String, Vec<Expr>),
    /// `{"Fn::If": [condition, then, else]}`
    If(String, Box<Expr>, Box<Expr>),
    /// `{"Fn::Select": [index, list]}`
    Select(u32, Box<Expr>),
    /// `{"Fn::GetAZs": region}` (an empty string means the stack's region).
    GetAzs(Box<Expr>),
    /// `{"Fn::Split": [delimiter, text]}`
    Split(String, Box<Expr>),
    /// `{"Fn::Base64": value}`
    Base64(Box<Expr>),
    /// `{"Fn::FindInMap": [map, top key, second key]}`
    FindInMap(String, Box<Expr>, Box<Expr>),
    /// `{"Fn::Cidr": [block, count, bits]}`
    Cidr(Box<Expr>, u32, u32),
    /// `{"Fn::Equals": [a, b]}` (conditions and rules).
    Equals(Box<Expr>, Box<Expr>),
    /// `{"Fn::Not": [condition]}`
    Not(Box<Expr>),
    /// `{"Fn::And": [conditions]}`
    And(Vec<Expr>),
    /// `{"Fn::Or": [conditions]}`
    Or(Vec<Expr>),
    /// `{"Condition": name}`, a reference to a named condition inside another condition.
    Condition(String),
}

impl Expr {
    /// `{"Fn::Sub": text}`
    pub fn sub(text: impl Into<String>) -> Expr {
        Expr::Sub(text.into())
    }

    /// `{"Fn::Join": [sep, items]}`
    pub fn join(sep: impl Into<String>, items: impl IntoIterator<Item = Expr>) -> Expr {
        Expr::Join(sep.into(), items.into_iter().collect())
    }

    /// `{"Fn::Select": [index, {"Fn::GetAZs": ""}]}`: the stack region's n-th zone.
    pub fn availability_zone(index: u32) -> Expr {
        Expr::Select(index, Box::new(Expr::GetAzs(Box::new(Expr::Str(String::new())))))
    }

    /// `{"Fn::Base64": inner}`
    pub fn base64(inner: Expr) -> Expr {
        Expr::Base64(Box::new(inner))
    }

    /// `{"Fn::Equals": [a, b]}`
    pub fn equals(a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
        Expr::Equals(Box::new(a.into()), Box::new(b.into()))
    }

    /// `{"Fn::Not": [inner]}`
    pub fn negate(inner: Expr) -> Expr {
        Expr::Not(Box::new(inner))
    }

    /// `{"Ref": "AWS::NoValue"}`
    pub fn no_value() -> Expr {
        Pseudo::NoValue.r#ref()
    }
}

impl From<&str> for Expr {
    fn from(s: &str) -> Expr {
        Expr::Str(s.to_owned())
    }
}

impl From<String> for Expr {
    fn from(s: String) -> Expr {
        Expr::Str(s)
    }
}

impl From<i64> for Expr {
    fn from(n: i64) -> Expr {
        Expr::Int(n)
    }
}

impl From<bool> for Expr {
    fn from(b: bool) -> Expr {
        Expr::Bool(b)
    }
}

/// Serializes `{"<key>": value}`.
fn single<S: Serializer, V: Serialize + ?Sized>(s: S, key: &str, value: &V) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(1))?;
    map.serialize_entry(key, value)?;
    map.end()
}

impl Serialize for Expr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Expr::Str(v) => s.serialize_str(v),
            Expr::Int(v) => s.serialize_i64(*v),
            Expr::Bool(v) => s.serialize_bool(*v),
            Expr::List(items) => items.serialize(s),
            Expr::Ref(name) => single(s, "Ref", name),
            Expr::GetAtt(res, attr) => single(s, "Fn::GetAtt", &[res, attr]),
            Expr::Sub(text) => single(s, "Fn::Sub", text),
            Expr::SubWith(text, vars) => single(s, "Fn::Sub", &(text, vars)),
            Expr::Join(sep, items) => single(s, "Fn::Join", &(sep, items)),
            Expr::If(cond, a, b) => single(s, "Fn::If", &(cond, a, b)),
            // CloudFormation documents the index of Fn::Select as a string.
            Expr::Select(i, list) => single(s, "Fn::Select", &(i.to_string(), list)),
            Expr::GetAzs(region) => single(s, "Fn::GetAZs", region),
            Expr::Split(sep, text) => single(s, "Fn::Split", &(sep, text)),
            Expr::Base64(inner) => single(s, "Fn::Base64", inner),
            Expr::FindInMap(map, a, b) => single(s, "Fn::FindInMap", &(map, a, b)),
            Expr::Cidr(block, count, bits) => single(s, "Fn::Cidr", &(block, count, bits)),
            Expr::Equals(a, b) => single(s, "Fn::Equals", &(a, b)),
            Expr::Not(inner) => single(s, "Fn::Not", &[inner]),
            Expr::And(items) => single(s, "Fn::And", items),
            Expr::Or(items) => single(s, "Fn::Or", items),
            Expr::Condition(name) => single(s, "Condition", name),
        }
    }
}

/// A property value: a literal of type `T`, or an intrinsic resolved at deploy time.
#[derive(Clone, Debug, PartialEq)]
pub enum Value<T> {
    /// A literal known when the template is built.
    Lit(T),
    /// An intrinsic function CloudFormation resolves.
    Expr(Expr),
}

impl<T: Serialize> Serialize for Value<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Lit(v) => v.serialize(s),
            Value::Expr(e) => e.serialize(s),
        }
    }
}

impl<T: Default> Default for Value<T> {
    fn default() -> Self {
        Value::Lit(T::default())
    }
}

impl<T> From<Expr> for Value<T> {
    fn from(e: Expr) -> Self {
        Value::Expr(e)
    }
}

impl From<&str> for Value<String> {
    fn from(s: &str) -> Self {
        Value::Lit(s.to_owned())
    }
}

impl From<String> for Value<String> {
    fn from(s: String) -> Self {
        Value::Lit(s)
    }
}

impl From<&String> for Value<String> {
    fn from(s: &String) -> Self {
        Value::Lit(s.clone())
    }
}

macro_rules! literal_value {
    ($($t:ty),*) => {$(
        impl From<$t> for Value<$t> {
            fn from(v: $t) -> Self {
                Value::Lit(v)
            }
        }
    )*};
}
literal_value!(bool, u16, u32, u64, i64);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn intrinsics_serialize_to_their_cloudformation_form() {
        let cases = [
            (Expr::Ref("Vpc".into()), json!({"Ref": "Vpc"})),
            (Expr::GetAtt("Fs".into(), "Arn".into()), json!({"Fn::GetAtt": ["Fs", "Arn"]})),
            (Expr::sub("${AWS::Region}"), json!({"Fn::Sub": "${AWS::Region}"})),
            (
                Expr::SubWith("${A}".into(), BTreeMap::from([("A".into(), Expr::Ref("B".into()))])),
                json!({"Fn::Sub": ["${A}", {"A": {"Ref": "B"}}]}),
            ),
            (
                Expr::join(",", [Expr::from("a"), Expr::Ref("B".into())]),
                json!({"Fn::Join": [",", ["a", {"Ref": "B"}]]}),
            ),
            (
                Expr::If("C".into(), Box::new("x".into()), Box::new(Expr::no_value())),
                json!({"Fn::If": ["C", "x", {"Ref": "AWS::NoValue"}]}),
            ),
            (Expr::availability_zone(1), json!({"Fn::Select": ["1", {"Fn::GetAZs": ""}]})),
            (
                Expr::Select(1, Box::new(Expr::Split("s3://".into(), Box::new(Expr::Ref("Url".into()))))),
                json!({"Fn::Select": ["1", {"Fn::Split": ["s3://", {"Ref": "Url"}]}]}),
            ),
            (Expr::base64("x".into()), json!({"Fn::Base64": "x"})),
            (
                Expr::FindInMap("M".into(), Box::new(Pseudo::Region.r#ref()), Box::new("ami".into())),
                json!({"Fn::FindInMap": ["M", {"Ref": "AWS::Region"}, "ami"]}),
            ),
            (Expr::Cidr(Box::new("10.0.0.0/16".into()), 4, 14), json!({"Fn::Cidr": ["10.0.0.0/16", 4, 14]})),
            (
                Expr::negate(Expr::equals(Expr::Ref("P".into()), "")),
                json!({"Fn::Not": [{"Fn::Equals": [{"Ref": "P"}, ""]}]}),
            ),
            (
                Expr::And(vec![Expr::Condition("A".into()), Expr::Condition("B".into())]),
                json!({"Fn::And": [{"Condition": "A"}, {"Condition": "B"}]}),
            ),
        ];
        for (expr, expected) in cases {
            assert_eq!(serde_json::to_value(&expr).unwrap(), expected, "{expr:?}");
        }
    }

    #[test]
    fn values_serialize_as_literal_or_intrinsic() {
        let lit: Value<u32> = 3.into();
        let expr: Value<u32> = Expr::Ref("Count".into()).into();
        assert_eq!(serde_json::to_value(&lit).unwrap(), json!(3));
        assert_eq!(serde_json::to_value(&expr).unwrap(), json!({"Ref": "Count"}));
    }
}
