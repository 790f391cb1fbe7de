#!/usr/bin/env python3
"""Generate synth/src/deploy/create_only.rs: which properties of each resource
type the cluster templates use cannot change without replacing the resource.

A change to a property listed in a CloudFormation resource schema's
`createOnlyProperties` replaces the resource (a new physical resource, the
old one deleted). `synth deploy` and `synth diff` decide replacement from
this table as well as from what the change set reports (the local AWS of the
tests reports none). The schemas come from the cfn-lint installed in the
repository's .venv (`cfnlint/data/schemas/resources`); the resource types
are the `Type` of every resource in the template snapshots.

Usage (from anywhere):

    python3 synth/tools/gen_create_only.py [SCHEMA_DIR] [--check]

With --check nothing is written; the exit status says whether the committed
table is up to date. Only the standard library is used.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
OUT = REPO_ROOT / "synth/src/deploy/create_only.rs"
SNAPSHOTS = REPO_ROOT / "snapshots/templates"
SCHEMAS_IN_PACKAGE = Path("data/schemas/resources")
REGEN_COMMAND = "python3 synth/tools/gen_create_only.py"


# Properties the schemas do not list as create-only but that no update API
# can change, so CloudFormation replaces the resource: AWS::FSx::FileSystem
# is a legacy type whose schema lists only its top-level identity
# properties, while FSx's UpdateFileSystem takes neither a Lustre
# DeploymentType nor an ImportPath nor a StorageType
# (https://docs.aws.amazon.com/fsx/latest/APIReference/API_UpdateFileSystemLustreConfiguration.html).
EXTRA_CREATE_ONLY = {
    "AWS::FSx::FileSystem": ["LustreConfiguration/DeploymentType", "LustreConfiguration/ImportPath", "StorageType"],
}


def default_schema_dir() -> Path:
    found = sorted((REPO_ROOT / ".venv").glob("lib/python3*/site-packages/cfnlint"))
    if not found:
        sys.exit("no cfnlint in .venv: run scripts/test once (it installs the lint tools), or pass SCHEMA_DIR")
    return found[-1] / SCHEMAS_IN_PACKAGE


def template_types() -> list[str]:
    types: set[str] = set()
    for snap in SNAPSHOTS.glob("*.snap"):
        # The body after the insta header (between the first two `---` lines);
        # only resources' types: a parameter's `Type` is no resource type.
        body = snap.read_text().split("\n---\n", 1)[1]
        template = json.loads(body)
        types.update(r["Type"] for r in template.get("Resources", {}).values())
    if not types:
        sys.exit(f"no resource types found in {SNAPSHOTS}")
    return sorted(types)


def cfnlint_version(schema_dir: Path) -> str:
    # .../site-packages/cfnlint/data/schemas/resources -> site-packages
    site = schema_dir.parents[3]
    for meta in site.glob("cfn_lint-*.dist-info"):
        return meta.name[len("cfn_lint-") : -len(".dist-info")]
    return "unknown"


def render(schema_dir: Path) -> str:
    wanted = set(template_types())
    table: dict[str, list[str]] = {}
    for path in sorted(schema_dir.glob("*.json")):
        schema = json.loads(path.read_text())
        name = schema.get("typeName")
        if name in wanted:
            props = [p.removeprefix("/properties/") for p in schema.get("createOnlyProperties", [])]
            table[name] = sorted(set(props) | set(EXTRA_CREATE_ONLY.get(name, [])))
    missing = wanted - set(table)
    if missing:
        sys.exit(f"no schema for {sorted(missing)} in {schema_dir}")
    lines = [
        "//! Create-only properties of the resource types the cluster templates use:",
        "//! changing one replaces the resource. Generated from the CloudFormation",
        f"//! resource schemas that cfn-lint {cfnlint_version(schema_dir)} ships (`createOnlyProperties`), plus the",
        "//! few the schemas miss (`EXTRA_CREATE_ONLY` in the generator, with its source);",
        f"//! do not edit, regenerate with `{REGEN_COMMAND}`.",
        "",
        "/// The create-only properties of `resource_type`, as paths under",
        "/// `Properties` (`LaunchTemplate`, `DnsOptions/PrivateDnsPreference`), or",
        "/// `None` for a type the table does not know.",
        "#[rustfmt::skip]",
        "pub fn create_only(resource_type: &str) -> Option<&'static [&'static str]> {",
        "    Some(match resource_type {",
    ]
    for name in sorted(table):
        props = ", ".join(f'"{p}"' for p in table[name])
        lines.append(f'        "{name}" => &[{props}],')
    lines += ["        _ => return None,", "    })", "}", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("schema_dir", nargs="?", type=Path)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = render(args.schema_dir or default_schema_dir())
    if args.check:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            print(f"{OUT} is out of date: run {REGEN_COMMAND}", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
