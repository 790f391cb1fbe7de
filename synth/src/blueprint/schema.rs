//! The blueprint's JSON Schema, generated from the [`super::model`] structs
//! (their doc comments are the descriptions), for editors that complete and
//! check YAML as it is typed (for example the YAML language server's
//! `# yaml-language-server: $schema=...` comment).
//!
//! The schema describes shape, defaults and simple patterns; the rules that
//! need the instance type catalog or several fields at once are only checked
//! by [`super::load`].

use super::model::Blueprint;

/// The JSON Schema (draft 2020-12) of a blueprint.
pub fn json_schema() -> serde_json::Value {
    let schema = schemars::schema_for!(Blueprint);
    schema.to_value()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_every_top_level_field_and_the_required_ones() {
        let s = json_schema();
        let props = s["properties"].as_object().expect("properties");
        for field in [
            "name",
            "region",
            "image",
            "master",
            "workers",
            "storage",
            "network",
            "access",
            "elastic",
            "timeouts",
            "formation",
            "idle",
            "tags",
        ] {
            assert!(props.contains_key(field), "{field} missing from the schema");
        }
        let required: Vec<_> = s["required"].as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
        assert_eq!(required, ["name", "master", "workers"]);
        assert_eq!(s["$defs"]["Master"]["required"], serde_json::json!(["instance_type"]));
        assert_eq!(s["$defs"]["Workers"]["required"], serde_json::json!(["count"]));
        assert_eq!(
            s["$defs"]["Workers"]["oneOf"],
            serde_json::json!([{ "required": ["instance_type"] }, { "required": ["instance_types"] }])
        );
        assert_eq!(s["$defs"]["Idle"]["required"], serde_json::json!(["after_minutes"]));
        // Issue 35: a required field has no default, not `"default": null`.
        for (def, field) in [
            (&s, "name"),
            (&s["$defs"]["Master"], "instance_type"),
            (&s["$defs"]["Workers"], "count"),
            (&s["$defs"]["Workers"], "instance_type"),
            (&s["$defs"]["Idle"], "after_minutes"),
            (&s["$defs"]["DataSource"], "from"),
        ] {
            assert!(def["properties"][field].get("default").is_none(), "{field}: {}", def["properties"][field]);
        }
        assert_eq!(s["$defs"]["Idle"]["properties"]["after_minutes"]["maximum"], 10080);
        assert_eq!(s["additionalProperties"], serde_json::Value::Bool(false));
        assert!(props["name"]["description"].as_str().unwrap().contains("lower-case"));
        let workers = &s["$defs"]["Workers"];
        assert_eq!(workers["properties"]["count"]["maximum"], 1000);
        assert_eq!(
            s["$defs"]["EfaMode"]["oneOf"]
                .as_array()
                .map(Vec::len)
                .or(s["$defs"]["EfaMode"]["enum"].as_array().map(Vec::len)),
            Some(4)
        );
        let fsx = &s["$defs"]["FsxLustre"]["properties"];
        assert_eq!(fsx["throughput_per_tib"]["enum"], serde_json::json!([125, 250, 500, 1000]));
        assert_eq!(fsx["capacity_gib"]["minimum"], 1200);
        let deployments = &s["$defs"]["FsxDeployment"]["oneOf"];
        assert_eq!(deployments[0]["const"], "scratch_2");
        assert_eq!(deployments[1]["const"], "persistent_2");
        let tags = &s["properties"]["tags"];
        let values = tags["anyOf"][0]["additionalProperties"].get("type").or(tags["additionalProperties"].get("type"));
        assert_eq!(values, Some(&serde_json::json!(["string", "number", "boolean"])), "{tags}");
    }
}
