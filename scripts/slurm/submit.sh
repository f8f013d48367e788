#!/bin/bash
# Submit a tandem job to Slurm in allocation mode (docs/slurm.md).
#
#   scripts/slurm/submit.sh JOB.json [sbatch options...]
#
# Validates the spec with `tandem validate`, then runs
#   sbatch --parsable [options] --export=ALL,TANDEM_JOB_FILE=<abs path> tandem.sbatch
# and prints the Slurm job id. Options given here override the #SBATCH lines
# of the template (e.g. --gres=gpu:8 --partition=gpu --reservation=R).
# TANDEM_SBATCH_TEMPLATE selects another template.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
template="${TANDEM_SBATCH_TEMPLATE:-$here/tandem.sbatch}"
if [[ $# -lt 1 || "$1" == -h || "$1" == --help ]]; then
  sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 2
fi
job="$(realpath "$1")"
shift
[[ -r "$job" ]] || { echo "submit.sh: cannot read $job" >&2; exit 2; }
TANDEM="${TANDEM_BIN:+$TANDEM_BIN/}tandem"
if command -v "$TANDEM" >/dev/null 2>&1; then
  "$TANDEM" validate "$job" >&2 || { echo "submit.sh: $job is not a valid job spec" >&2; exit 1; }
fi
exec sbatch --parsable "$@" --export="ALL,TANDEM_JOB_FILE=$job" "$template"
