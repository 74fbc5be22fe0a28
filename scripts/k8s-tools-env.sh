#!/usr/bin/env bash
# The offline validators for what cuquota ships for containers (tests/cdi/validate.py): a
# virtual environment in <target>/k8s-tools with PyPI's kubernetes-validate 1.31.0 (Kubernetes'
# OpenAPI schemas, offline) and jsonschema 4.26.0 (for the CDI schema). The first time it
# downloads ~16 MB of wheels (~107 MB on disk); later runs reuse it. Prints the venv's path.
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
venv=$target_dir/k8s-tools
pins=(kubernetes-validate==1.31.0 jsonschema==4.26.0 referencing==0.37.0)
if ! "$venv/bin/python" -c 'import jsonschema, referencing, kubernetes_validate' 2>/dev/null ||
    [ "$(cat "$venv/.pins" 2>/dev/null)" != "${pins[*]}" ]; then
    echo "== k8s-tools: downloading ~16 MB from PyPI into $venv (${pins[*]})" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "${pins[@]}"
    echo "${pins[*]}" >"$venv/.pins"
fi
echo "$venv"
