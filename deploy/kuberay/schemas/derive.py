"""Write the JSON schema of one KubeRay CRD's ``v1`` version, strict, as kubeconform names it (``<kind>_v1.json``).

    python deploy/kuberay/schemas/derive.py ray.io_rayclusters.yaml ray.io_rayjobs.yaml

The CRD's ``openAPIV3Schema`` as it is, except that every object schema listing ``properties`` and saying nothing
of others gets ``additionalProperties: false`` (what ``kubeconform -strict`` and ``kubectl apply
--validate=strict`` do): a misspelt key is an error, not a field the API server silently drops.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

OPEN = ("additionalProperties", "x-kubernetes-preserve-unknown-fields")


def strict(schema: Any) -> Any:
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if "properties" in out and not any(key in out for key in OPEN):
        out["additionalProperties"] = False
    return out


def main(paths: list[str]) -> None:
    for path in paths:
        crd = yaml.safe_load(Path(path).read_text())
        (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
        target = Path(__file__).parent / f"{crd['spec']['names']['kind'].lower()}_v1.json"
        target.write_text(json.dumps(strict(version["schema"]["openAPIV3Schema"]), sort_keys=True) + "\n")
        print(target)


if __name__ == "__main__":
    main(sys.argv[1:])
