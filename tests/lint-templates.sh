#!/usr/bin/env bash
# Lints CloudFormation templates with cfn-lint (all five regions), checkov,
# and every IAM policy in them with parliament (tests/lint-iam.py):
#  - every insta snapshot in SNAPSHOT_DIR (default: snapshots/templates, the
#    cluster templates, and snapshots/images, the `synth image` templates), whose
#    body (after the YAML header between `---` lines) is the template;
#  - the templates `synth build` makes from freshly generated random blueprints
#    (synth/examples/random_blueprints.rs). A generated blueprint is valid by
#    construction, so `synth build` rejecting one is a failure too.
# Any cfn-lint error or warning, any failed checkov check, any parliament
# finding (its community auditors included), a template that does not parse, or
# no snapshots at all fails the run (exit 1). Before the templates, parliament
# must find the three mistakes planted in tests/fixtures/lint-iam/findings.json,
# so a lint that silently checks nothing fails too. Then the deploying user's
# policy: synth/src/deploy/resource_permissions.json must be what
# scripts/deployer-permissions makes (--check), must cover every resource type
# of those templates, and parliament must find nothing in what `synth policy`
# prints.
#
# Usage: tests/lint-templates.sh [SNAPSHOT_DIR]
# Environment:
#   LINT_SEED          seed for the random blueprints (default: new each run, printed)
#   LINT_RANDOM_COUNT  how many random blueprints (default 25; 0 skips them)
#   CARGO_TARGET_DIR   as for cargo
# cfn-lint and checkov come from the repository's .venv (scripts/test makes it),
# else from PATH.
set -euo pipefail

REGIONS=(us-east-1 us-east-2 us-west-2 eu-west-1 ap-southeast-2)

die() { printf 'lint-templates: %s\n' "$*" >&2; exit 1; }

# A directory given on the command line is relative to the caller's directory.
if [ $# -gt 0 ]; then
  snap_dir=$(cd "$1" 2>/dev/null && pwd) || die "no such directory: $1"
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
snap_dir=${snap_dir:-$root/snapshots/templates}
seed=${LINT_SEED:-$(( $(date +%Y%m%d) * 100000 + RANDOM ))}
random_count=${LINT_RANDOM_COUNT:-25}

if [ -x "$root/.venv/bin/cfn-lint" ]; then
  PATH="$root/.venv/bin:$PATH"
fi
command -v cfn-lint >/dev/null || die "cfn-lint not found (scripts/test installs it into .venv)"
command -v checkov >/dev/null || die "checkov not found (scripts/test installs it into .venv)"
command -v python3 >/dev/null && python3 -c 'import parliament' 2>/dev/null ||
  die "parliament not found for python3 (scripts/test installs it into .venv)"

work=$(mktemp -d "${TMPDIR:-/tmp}/lint-templates.XXXXXX")
failed=0
cleanup() {
  if [ "$failed" = 0 ]; then rm -rf "$work"; else printf 'lint-templates: files kept in %s\n' "$work" >&2; fi
}
trap cleanup EXIT
mkdir -p "$work/templates" "$work/blueprints" "$work/errors"

# 1. Snapshot bodies: everything after the second `---` line.
shopt -s nullglob
snaps=("$snap_dir"/*.snap)
if [ "$snap_dir" = "$root/snapshots/templates" ]; then snaps+=("$root"/snapshots/images/*.snap); fi
[ ${#snaps[@]} -gt 0 ] || die "no .snap files in $snap_dir: nothing to lint"
for snap in "${snaps[@]}"; do
  # Image and cluster snapshots share names (gpu-cluster@us-east-1.snap): keep
  # the directory in the file name so neither overwrites the other.
  name="$(basename "$(dirname "$snap")")-$(basename "$snap" .snap)"
  awk 'n >= 2 { print; next } /^---[[:space:]]*$/ { n++ }' "$snap" >"$work/templates/$name.json"
done

# The synth binary and its examples as `cargo test --workspace` builds them
# (it builds every binary and example), so that after the tests nothing is
# compiled again: `cargo build -p synth` resolves other features and
# compiled tokio, the AWS SDK and synth a second time. Sets target_dir and synth.
find_synth() {
  [ -n "${synth:-}" ] && return 0
  cargo test --quiet --locked --workspace --no-run
  # The target directory as cargo sees it (CARGO_TARGET_DIR, config, or default).
  target_dir=$(cargo metadata --format-version 1 --no-deps --locked |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
  synth=$target_dir/debug/synth
  [ -x "$synth" ] || die "synth binary not found at $synth"
}

# 2. Random blueprints, built by the synth binary.
built=0
if [ "$random_count" -gt 0 ]; then
  echo "random blueprints: $random_count, seed $seed (LINT_SEED=$seed reproduces them)"
  find_synth
  "$target_dir/debug/examples/random_blueprints" --seed "$seed" --count "$random_count" --out "$work/blueprints"
  for bp in "$work/blueprints"/*.yaml; do
    name=$(basename "$bp" .yaml)
    if "$synth" build "$bp" >"$work/templates/$name.json" 2>"$work/errors/$name.txt"; then
      built=$((built + 1))
    else
      failed=1
      rm -f "$work/templates/$name.json"
      printf '\nFAIL: synth build rejected generated blueprint %s (LINT_SEED=%s):\n' "$name" "$seed"
      sed 's/^/    /' "$work/errors/$name.txt"
      echo "  blueprint:"
      sed 's/^/    /' "$bp"
    fi
  done
fi

templates=("$work/templates"/*.json)
echo "templates: ${#snaps[@]} snapshots from ${snap_dir#"$root"/}, $built from random blueprints"

# 3. Every template must be a JSON object with Resources; count resources so
# checkov's resource count can prove it read every template (checkov skips a
# file it cannot parse with only a "parsing error" in its summary).
resources=$(python3 - "${templates[@]}" <<'PY'
import json, os, sys
total, bad = 0, 0
for path in sys.argv[1:]:
    try:
        if os.path.getsize(path) == 0:
            raise ValueError("empty file")
        with open(path) as f:
            doc = json.load(f)
        total += len(doc["Resources"])
    except (ValueError, KeyError, TypeError) as e:
        bad += 1
        print(f"FAIL: {os.path.basename(path)}: not a CloudFormation JSON template ({type(e).__name__}: {e})", file=sys.stderr)
print(total)
sys.exit(1 if bad else 0)
PY
) || failed=1

# 4. cfn-lint. Its exit code is a bitmask: 2 error, 4 warning, 8 informational;
# anything but 0 or 8 fails (1 is a crash or bad usage).
rc=0
out=$(cfn-lint --format parseable --regions "${REGIONS[@]}" -- "${templates[@]}" 2>&1) || rc=$?
findings=$(grep -cE ':[EW][0-9]{4}:' <<<"$out" || true)
if [ -n "$out" ]; then
  printf '%s\n' "$out" | sed "s|$work/templates/||"
fi
if (( (rc & ~8) != 0 || findings > 0 )); then
  failed=1
  echo "FAIL: cfn-lint: ${#templates[@]} templates, $findings findings (exit code $rc)"
else
  echo "cfn-lint: ${#templates[@]} templates, 0 findings"
fi

# 5. checkov. It exits 1 when a check fails; the JSON summary has the counts.
rc=0
checkov -d "$work/templates" --framework cloudformation --skip-download --compact --quiet \
  -o cli -o json --output-file-path "console,$work/checkov.json" >"$work/checkov.txt" 2>&1 || rc=$?
summary=$(python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
print(s["passed"], s["failed"], s["parsing_errors"], s["resource_count"])' "$work/checkov.json" 2>/dev/null) ||
  summary="0 0 0 0"
read -r passed check_failed parse_errors seen <<<"$summary"
if (( rc != 0 || check_failed > 0 || parse_errors > 0 )) || [ "$seen" != "${resources:-}" ]; then
  failed=1
  sed "s|$work/templates/||" "$work/checkov.txt"
  echo "FAIL: checkov: ${#templates[@]} templates, $passed passed, $check_failed failed," \
    "$parse_errors parsing errors, $seen of ${resources:-?} resources seen (exit code $rc)"
else
  echo "checkov: ${#templates[@]} templates, $passed passed, 0 failed"
fi

# 6. parliament on every IAM policy: first the planted mistakes (a wrong
# resource type, a misspelt action, s3:GetObject on "*"), which must give
# exactly three findings, then the templates, which must give none.
rc=0
out=$(python3 "$root/tests/lint-iam.py" "$root/tests/fixtures/lint-iam/findings.json" 2>&1) || rc=$?
if [ "$rc" != 1 ] || ! grep -q '^parliament: 1 templates, 1 policies, 3 findings$' <<<"$out"; then
  failed=1
  printf '%s\n' "$out"
  echo "FAIL: parliament did not find the 3 planted findings in tests/fixtures/lint-iam/findings.json (exit code $rc)"
fi
# parliament (tests/lint-iam.py) on FILES; WHAT names them in the failure.
lint_iam() {
  local what=$1 rc=0 out
  shift
  out=$(python3 "$root/tests/lint-iam.py" "$@" 2>&1) || rc=$?
  printf '%s\n' "$out" | sed "s|$work/templates/||; s|$work/||"
  if [ "$rc" != 0 ]; then
    failed=1
    echo "FAIL: parliament: findings in $what (exit code $rc)"
  fi
}
lint_iam "the templates' IAM policies" "${templates[@]}"

# 7. The deploying user's policy (`synth policy`): its table of what
# CloudFormation needs per resource type is what scripts/deployer-permissions
# makes from the pinned cfn-lint and parliament, it covers every resource
# type of every template above, and parliament finds nothing in it.
if ! python3 "$root/scripts/deployer-permissions" --check; then
  failed=1
  echo "FAIL: synth/src/deploy/resource_permissions.json is stale: run scripts/deployer-permissions"
fi
if ! python3 - "$root/synth/src/deploy/resource_permissions.json" "${templates[@]}" <<'PY'
import json, os, sys
covered = json.load(open(sys.argv[1]))["types"]
missing = set()
for path in sys.argv[2:]:
    for resource in json.load(open(path)).get("Resources", {}).values():
        if resource["Type"] not in covered and not os.path.basename(path).startswith("images-"):
            missing.add(resource["Type"])
for t in sorted(missing):
    print(f"FAIL: {t} is in a template but not in resource_permissions.json: add a snapshot that has it, then run scripts/deployer-permissions")
sys.exit(1 if missing else 0)
PY
then
  failed=1
fi
find_synth
policies=()
for part in calls resources; do
  "$synth" policy --part "$part" >"$work/policy-$part-everything.json" &&
    "$synth" policy --part "$part" --stack-name-prefix resnet --region eu-west-1 >"$work/policy-$part-scoped.json" ||
    { failed=1; echo "FAIL: synth policy --part $part"; }
  policies+=("$work/policy-$part-everything.json" "$work/policy-$part-scoped.json")
done
lint_iam "the policy synth policy prints" "${policies[@]}"

if [ "$failed" != 0 ]; then
  [ "$random_count" -gt 0 ] && echo "random blueprints came from LINT_SEED=$seed"
  exit 1
fi
