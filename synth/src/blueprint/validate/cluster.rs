//! The cluster's own fields: `name` (a stack name, a prefix of every
//! resource's name), `region` (or `--region`; none: a template for all five
//! regions) and `tags` (on every resource that takes them).

use super::super::suggestion::{backticked, did_you_mean};
use super::{At, Checker, ticked};
use crate::region::Region;
use std::collections::BTreeMap;

/// We leave room under AWS's 50 tags per resource for the tags CloudFormation
/// and synth add (`aws:cloudformation:*` do not count, synth's own do).
const MAX_TAGS: usize = 40;

/// A valid name close to `name`: lower-cased, other characters turned into
/// `-`, cut to 32.
fn suggest_name(name: &str) -> Option<String> {
    let mut s: String = name
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() { c } else { '-' })
        .collect();
    s = s.trim_start_matches(|c: char| !c.is_ascii_lowercase()).to_owned();
    s.truncate(32);
    let s = s.trim_end_matches('-').to_owned();
    if s.is_empty() { None } else { Some(s) }
}

impl Checker<'_> {
    pub(super) fn name(&mut self, name: &str) {
        let pattern_ok = name.starts_with(|c: char| c.is_ascii_lowercase())
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if pattern_ok && name.len() <= 32 {
            return;
        }
        let why = if name.is_empty() {
            "is empty".to_owned()
        } else if !pattern_ok {
            "may only hold lower-case letters, digits and `-`, and must start with a letter".to_owned()
        } else {
            format!("is {} characters long; at most 32 are allowed", name.len())
        };
        let help = match suggest_name(name) {
            Some(s) if s != name => format!("the name prefixes AWS resource names, which limit length and characters; for example `name: {s}`"),
            _ => "the name prefixes AWS resource names, which limit length and characters; for example `name: resnet-training`".to_owned(),
        };
        self.error("name", At::Value, format!("{} {why}", ticked(name)), help);
    }

    pub(super) fn region(&mut self, written: Option<&str>, arg: Option<Region>) -> Option<Region> {
        let Some(text) = written else { return arg };
        match text.parse::<Region>() {
            Ok(r) => match arg {
                Some(a) if a != r => {
                    self.error(
                        "region",
                        At::Value,
                        format!("the blueprint is for `{r}`, but the build was asked for `{a}`"),
                        format!("drop the region given to the build to use `{r}`, or remove `region:` from the blueprint so it can be built for any region"),
                    );
                    Some(a)
                }
                _ => Some(r),
            },
            Err(_) => {
                let codes = Region::ALL.map(Region::code);
                let hint = match did_you_mean(text, codes) {
                    Some(close) => {
                        format!("did you mean `{close}`? Or remove `region:` to build for all five")
                    }
                    None => "remove `region:` to build one template for all five regions".to_owned(),
                };
                self.error(
                    "region",
                    At::Value,
                    format!("{} is not a supported region; supported: {}", ticked(text), backticked(codes)),
                    hint,
                );
                arg
            }
        }
    }

    pub(super) fn tags(&mut self, tags: BTreeMap<String, String>) -> BTreeMap<String, String> {
        if tags.len() > MAX_TAGS {
            self.error(
                "tags",
                At::Key,
                format!("{} tags is more than the {MAX_TAGS} allowed", tags.len()),
                "AWS allows 50 tags per resource and synth adds its own; merge or drop some",
            );
        }
        for (key, value) in &tags {
            let path = format!("tags.{key}");
            if key.to_ascii_lowercase().starts_with("aws:") {
                self.error(
                    &path,
                    At::Key,
                    format!("tag key {} starts with `aws:`, which AWS reserves for itself", ticked(key)),
                    "choose a key without the `aws:` prefix",
                );
            }
            let key_chars = key.chars().count();
            if key_chars == 0 || key_chars > 128 {
                self.error(
                    &path,
                    At::Key,
                    format!("a tag key is 1 to 128 characters; this one has {key_chars}"),
                    "shorten the key",
                );
            }
            let value_chars = value.chars().count();
            if value_chars > 256 {
                self.error(
                    &path,
                    At::Value,
                    format!("a tag value is at most 256 characters; this one has {value_chars}"),
                    "shorten the value",
                );
            }
        }
        tags
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_suggested() {
        assert_eq!(suggest_name("ResNet_Training").as_deref(), Some("resnet-training"));
        assert_eq!(suggest_name("1st cluster").as_deref(), Some("st-cluster"));
        assert_eq!(suggest_name("___"), None);
        assert_eq!(suggest_name(&"a".repeat(40)).map(|s| s.len()), Some(32));
    }
}
