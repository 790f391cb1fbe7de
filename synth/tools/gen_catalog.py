#!/usr/bin/env python3
"""Generate synth/src/catalog/table.rs, the EC2 instance type table.

The table joins two inputs:

* which instance types are offered in each of the five supported regions,
  read from cfn-lint's per-region enum (instancetype_enum.json, itself built
  by cfn-lint from the AWS pricing API), and
* hand-maintained facts per instance family or type (accelerators, EFA,
  cluster placement groups, EFA RDMA) in synth/data/instance-families.tsv,
* and the baseline network bandwidth per type, where transcribed, in
  synth/data/instance-bandwidth.tsv (per type: it grows with the size),
* and the instance store (NVMe drives and their size) per type, or `none`
  per family, where transcribed, in synth/data/instance-storage.tsv.

Usage (from anywhere; paths default relative to the repository root):

    python3 synth/tools/gen_catalog.py [ENUM_JSON] [--date YYYY-MM-DD] [--check]

ENUM_JSON defaults to the instancetype_enum.json of the cfn-lint installed in
the repository's .venv. With --check nothing is written; the exit status says
whether the committed table is up to date. Only the standard library is used.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# The enum file inside the cfnlint package.
ENUM_IN_PACKAGE = Path("data/schemas/extensions/aws_ec2_instance/instancetype_enum.json")
DEFAULT_VENV_GLOB = "lib/python3*/site-packages/cfnlint"

FACTS = REPO_ROOT / "synth/data/instance-families.tsv"
BANDWIDTH = REPO_ROOT / "synth/data/instance-bandwidth.tsv"
STORAGE = REPO_ROOT / "synth/data/instance-storage.tsv"
OUT = REPO_ROOT / "synth/src/catalog/table.rs"

# The five regions, with the bit crate::region::Region::bit() gives each
# (1 << declaration order). The Rust tests check the two agree.
REGIONS = [
    ("us-east-1", 1),
    ("us-east-2", 2),
    ("us-west-2", 4),
    ("eu-west-1", 8),
    ("ap-southeast-2", 16),
]

ACCELERATORS = {"none": "None", "nvidia": "Nvidia", "neuron": "Neuron", "other": "Other"}
YES_NO = {"yes": True, "no": False}

DOC_AC = "https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html"
DOC_EFA = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types"
DOC_PG = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html"
DOC_NET = "https://docs.aws.amazon.com/ec2/latest/instancetypes/ (Network specifications, baseline bandwidth)"
DOC_STORE = "https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html (Instance store specifications) and the EC2 user guide's instance store volume tables"
DOC_RDMA = "aws-ofi-nccl's platform table (src/platform-aws.cpp, gdr_required) and doc/efa-env-var.md"

# Written into the generated file. Fixed text (not the arguments actually
# used) so that the output does not depend on where the inputs live.
REGEN_COMMAND = "python3 synth/tools/gen_catalog.py [path/to/cfnlint/" + ENUM_IN_PACKAGE.as_posix() + "]"


class InputError(Exception):
    """An input is missing or malformed; the message says where and why."""


def summarize(errors: list[str], limit: int = 20) -> str:
    """The first `limit` errors, one a line, and how many more there were."""
    shown = errors[:limit]
    if len(errors) > limit:
        shown.append(f"... and {len(errors) - limit} more")
    return "\n".join(shown)


@dataclass
class Facts:
    """One TSV row. None means "-": take the value from the family row."""

    accelerator: str | None
    accelerators: int | None
    efa: bool | None
    cluster_placement: bool | None
    efa_rdma: bool | None
    line: int


def default_enum_path() -> Path:
    venv = REPO_ROOT / ".venv"
    candidates = sorted(venv.glob(DEFAULT_VENV_GLOB))
    if len(candidates) != 1:
        # None, or several Python versions: which one is meant is not ours to guess.
        raise InputError(
            f"found {len(candidates)} cfn-lint installations under "
            f"{venv}/{DEFAULT_VENV_GLOB}; pass the path of instancetype_enum.json "
            f"as the first argument"
        )
    return candidates[0] / ENUM_IN_PACKAGE


def cfn_lint_version(enum_path: Path) -> str:
    # instancetype_enum.json sits at cfnlint/data/schemas/extensions/
    # aws_ec2_instance/; the package's version.py is four levels up.
    parents = enum_path.resolve().parents
    if len(parents) <= 4:
        raise InputError(f"{enum_path} is not inside a cfnlint package; cannot find its version")
    version_py = parents[4] / "version.py"
    try:
        text = version_py.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot read cfn-lint's version from {version_py}: {e}") from e
    m = re.search(r"""__version__\s*=\s*["']([^"']+)["']""", text)
    if not m:
        raise InputError(f"{version_py}: no __version__ found")
    return m.group(1)


def read_offerings(enum_path: Path) -> dict[str, int]:
    """Instance type -> OR of the bits of the regions offering it."""
    try:
        data = json.loads(enum_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read {enum_path}: {e}") from e
    offered: dict[str, int] = {}
    for code, bit in REGIONS:
        try:
            names = data[code]["enum"]
        except (KeyError, TypeError) as e:
            raise InputError(f"{enum_path}: no enum for region {code}") from e
        for name in names:
            if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9-]+\.[a-z0-9-]+", name):
                raise InputError(f"{enum_path}: odd instance type {name!r} in {code}")
            offered[name] = offered.get(name, 0) | bit
    return offered


def tsv_rows(path: Path):
    """(line number, "file:line", TAB-separated columns) of each row that
    is not blank or a # comment."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e}") from e
    for number, line in enumerate(lines, start=1):
        if line.strip() and not line.startswith("#"):
            yield number, f"{path.name}:{number}", line.split("\t")


def read_facts(path: Path) -> dict[str, Facts]:
    facts: dict[str, Facts] = {}
    errors = []
    for number, where, cols in tsv_rows(path):
        if len(cols) not in (6, 7):
            errors.append(f"{where}: expected 6 or 7 TAB-separated columns, found {len(cols)}")
            continue
        match, acc, count, efa, cpg, rdma = (c.strip() for c in cols[:6])
        is_type = "." in match
        inherit = "-" if is_type else None  # family rows must be complete

        def parse(value, table, column):
            if value == inherit:
                return None
            if value not in table:
                errors.append(f"{where}: {column} must be one of {sorted(table)}, not {value!r}")
                return None
            return table[value]

        row = Facts(
            accelerator=parse(acc, {k: k for k in ACCELERATORS}, "accelerator"),
            accelerators=None,
            efa=parse(efa, YES_NO, "efa"),
            cluster_placement=parse(cpg, YES_NO, "cluster_placement"),
            efa_rdma=parse(rdma, YES_NO, "efa_rdma"),
            line=number,
        )
        if count != inherit:
            if count.isdigit():
                row.accelerators = int(count)
            else:
                errors.append(f"{where}: accelerators must be a whole number, not {count!r}")
        if match in facts:
            errors.append(f"{where}: {match} already has a row on line {facts[match].line}")
        facts[match] = row
    if errors:
        raise InputError(summarize(errors))
    return facts


def read_bandwidth(path: Path) -> dict[str, int]:
    """Instance type -> baseline bandwidth in Mbit/s (the TSV gives Gbit/s)."""
    out: dict[str, int] = {}
    errors = []
    for _, where, cols in tsv_rows(path):
        if len(cols) != 2:
            errors.append(f"{where}: expected 2 TAB-separated columns, found {len(cols)}")
            continue
        name, gbps = (c.strip() for c in cols)
        if "." not in name:
            errors.append(f"{where}: {name!r} is not an instance type (bandwidth is per type, not per family)")
            continue
        try:
            mbps = round(float(gbps) * 1000)
        except ValueError:
            errors.append(f"{where}: bandwidth must be a number of Gbit/s, not {gbps!r}")
            continue
        if not 0 < mbps < 100_000_000:
            errors.append(f"{where}: bandwidth {gbps} Gbit/s is not plausible")
            continue
        if name in out:
            errors.append(f"{where}: {name} already has a row")
        out[name] = mbps
    if errors:
        raise InputError(summarize(errors))
    return out


def read_storage(path: Path) -> dict[str, object]:
    """Type or family -> "none" (EBS only) or (drives, GB each) of NVMe
    instance store; a name without a row is not transcribed."""
    out: dict[str, object] = {}
    errors = []
    for _, where, cols in tsv_rows(path):
        if len(cols) != 2:
            errors.append(f"{where}: expected 2 TAB-separated columns, found {len(cols)}")
            continue
        name, volumes = (c.strip() for c in cols)
        if volumes == "none":
            value: object = "none"
        else:
            m = re.fullmatch(r"(\d+) x (\d+)", volumes)
            if not m or not 0 < int(m.group(1)) <= 24 or not 0 < int(m.group(2)) < 100_000:
                errors.append(f"{where}: volumes must be `none` or `N x GB` (1-24 drives), not {volumes!r}")
                continue
            if "." not in name:
                errors.append(f"{where}: {name!r} is a family; drive counts and sizes are per type")
                continue
            value = (int(m.group(1)), int(m.group(2)))
        if name in out:
            errors.append(f"{where}: {name} already has a row")
        out[name] = value
    if errors:
        raise InputError(summarize(errors))
    return out


@dataclass
class Row:
    name: str
    accelerator: str
    accelerators: int
    efa: bool
    cluster_placement: bool
    efa_rdma: bool
    regions: int
    network_mbps: int | None = None
    instance_store: object = None


def join(offered: dict[str, int], facts: dict[str, Facts]) -> tuple[list[Row], list[str]]:
    """Rows for every offered type, and warnings about unused facts."""
    rows = []
    errors = []
    missing_families = set()
    for name in sorted(offered):
        family = name.split(".", 1)[0]
        fam = facts.get(family)
        if fam is None:
            missing_families.add(family)
            continue
        own = facts.get(name)

        def pick(field):
            value = getattr(own, field) if own is not None else None
            return getattr(fam, field) if value is None else value

        row = Row(
            name=name,
            accelerator=pick("accelerator"),
            accelerators=pick("accelerators"),
            efa=pick("efa"),
            cluster_placement=pick("cluster_placement"),
            efa_rdma=pick("efa_rdma"),
            regions=offered[name],
        )
        # A CPU type with a device count, or an accelerated type without one,
        # is a typo in the facts file.
        if (row.accelerator == "none") != (row.accelerators == 0):
            errors.append(f"{name}: accelerator {row.accelerator} with {row.accelerators} devices")
        rows.append(row)
    if missing_families:
        errors.append(
            "no row in the facts file for these families (add one; the generator "
            "does not guess): " + ", ".join(sorted(missing_families))
        )
    if errors:
        raise InputError(summarize(errors))
    families = {name.split(".", 1)[0] for name in offered}
    unused = [
        f"{m} (line {f.line}) matches no type offered in the five regions"
        for m, f in facts.items()
        if m not in (offered if "." in m else families)
    ]
    return rows, unused


def add_bandwidth(rows: list[Row], bandwidth: dict[str, int]) -> list[str]:
    """Sets each row's bandwidth; returns warnings about rows of no offered type."""
    by_name = {r.name: r for r in rows}
    unused = []
    for name, mbps in bandwidth.items():
        row = by_name.get(name)
        if row is None:
            unused.append(f"{name} in the bandwidth file is not offered in the five regions")
        else:
            row.network_mbps = mbps
    return unused


def add_storage(rows: list[Row], storage: dict[str, object]) -> list[str]:
    """Sets each row's instance store (its type row, else its family row);
    returns warnings about rows that match no offered type or family."""
    names = {r.name for r in rows}
    families = {r.name.split(".", 1)[0] for r in rows}
    for row in rows:
        own = storage.get(row.name)
        row.instance_store = own if own is not None else storage.get(row.name.split(".", 1)[0])
    return [
        f"{m} in the storage file matches no type offered in the five regions"
        for m in storage
        if m not in (names if "." in m else families)
    ]


def rust_store(value: object) -> str:
    if value is None:
        return "InstanceStore::Unknown"
    if value == "none":
        return "InstanceStore::None"
    drives, gb = value  # type: ignore[misc]
    return f"InstanceStore::Nvme {{ drives: {drives}, gb_each: {gb} }}"


def rust_string(s: str) -> str:
    return json.dumps(s)  # ASCII-only JSON strings are valid Rust string literals


def render(rows: list[Row], version: str, date: str) -> str:
    source = (
        "Regional offerings (us-east-1, us-east-2, us-west-2, eu-west-1, ap-southeast-2) "
        f"come from cfn-lint {version}, file cfnlint/{ENUM_IN_PACKAGE.as_posix()}; "
        f"accelerator counts from {DOC_AC}, EFA support from {DOC_EFA}, cluster "
        f"placement group support from {DOC_PG} and EFA RDMA support from {DOC_RDMA}, as transcribed into "
        f"synth/data/instance-families.tsv; baseline network bandwidth from {DOC_NET}, as transcribed into "
        f"synth/data/instance-bandwidth.tsv (types without a row: unknown); instance store from {DOC_STORE}, as transcribed into "
        f"synth/data/instance-storage.tsv (types without a row: unknown); the table was generated on {date}."
    )
    out = [
        "// @generated by synth/tools/gen_catalog.py. DO NOT EDIT BY HAND: edit",
        "// synth/data/instance-families.tsv, synth/data/instance-bandwidth.tsv or",
        "// synth/data/instance-storage.tsv (or update",
        "// cfn-lint) and regenerate with,",
        "// from the repository root:",
        f"//     {REGEN_COMMAND}",
        "// The path defaults to the cfn-lint in the repository's .venv.",
        "",
        "//! The generated instance type table behind [`super::lookup`]: one row per",
        "//! instance type offered in at least one of the five supported regions,",
        "//! sorted by name so that lookups can binary-search it.",
        "",
        "use super::{Accelerator, InstanceStore, InstanceType};",
        "",
        "/// Where the data comes from; re-exported as [`super::SOURCE`].",
        f"pub(super) const SOURCE: &str = {rust_string(source)};",
        "",
        f"/// {len(rows)} instance types, sorted by name. `regions` bits, from the",
        "/// rightmost (bit 0): us-east-1, us-east-2, us-west-2, eu-west-1, ap-southeast-2.",
        "#[rustfmt::skip]",
        "pub(super) static TABLE: &[InstanceType] = &[",
    ]
    for r in rows:
        out.append(
            f"    InstanceType {{ name: {rust_string(r.name)}, "
            f"accelerator: Accelerator::{ACCELERATORS[r.accelerator]}, "
            f"accelerators: {r.accelerators}, efa: {str(r.efa).lower()}, "
            f"cluster_placement: {str(r.cluster_placement).lower()}, "
            f"efa_rdma: {str(r.efa_rdma).lower()}, "
            f"network_mbps: {'None' if r.network_mbps is None else f'Some({r.network_mbps})'}, "
            f"instance_store: {rust_store(r.instance_store)}, "
            f"regions: 0b{r.regions:05b} }},"
        )
    out.append("];")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("enum", nargs="?", type=Path, help="cfn-lint's instancetype_enum.json")
    parser.add_argument("--facts", type=Path, default=FACTS, help="the facts TSV")
    parser.add_argument("--bandwidth", type=Path, default=BANDWIDTH, help="the bandwidth TSV")
    parser.add_argument("--storage", type=Path, default=STORAGE, help="the instance store TSV")
    parser.add_argument("--out", type=Path, default=OUT, help="the Rust file to write")
    parser.add_argument(
        "--date",
        default=datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        help="generation date recorded in SOURCE (default: today, UTC)",
    )
    parser.add_argument("--check", action="store_true", help="only check that --out is up to date")
    args = parser.parse_args(argv)
    try:
        datetime.date.fromisoformat(args.date)
        enum_path = args.enum if args.enum is not None else default_enum_path()
        offered = read_offerings(enum_path)
        version = cfn_lint_version(enum_path)
        facts = read_facts(args.facts)
        rows, unused = join(offered, facts)
        unused += add_bandwidth(rows, read_bandwidth(args.bandwidth))
        unused += add_storage(rows, read_storage(args.storage))
    except (InputError, ValueError) as e:
        print(f"gen_catalog: {e}", file=sys.stderr)
        return 2
    for warning in unused:
        print(f"gen_catalog: warning: {warning}", file=sys.stderr)
    text = render(rows, version, args.date)
    if args.check:
        try:
            current = args.out.read_text(encoding="utf-8")
        except OSError:
            current = None
        # The date legitimately differs between runs; compare everything else.
        def undated(s: str) -> str:
            return re.sub(r"generated on \d{4}-\d{2}-\d{2}", "generated on DATE", s)

        if current is None or undated(current) != undated(text):
            print(f"gen_catalog: {args.out} is out of date; regenerate it", file=sys.stderr)
            return 1
        print(f"gen_catalog: {args.out} is up to date ({len(rows)} types)")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"gen_catalog: wrote {len(rows)} instance types to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
