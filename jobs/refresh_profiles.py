"""Fit the adaptive-skip profile per hardware from a sweep, evaluate it held out, register it in MLflow.

    wavealign refresh-profiles --hardware h200 run_root=wavealign-runs
    wavealign refresh-profiles --hardware a40,h100 --split method          # one profile per hardware
    wavealign refresh-profiles --fetch DIR [--alias current]                # registry -> DIR for the runtime

Its own options are flags; where the results are is the sweep config's (``run_root=DIR``,
``mlflow.tracking_uri=URI``), given as Hydra overrides as ``wavealign sweep`` takes them.

For each hardware: pair every mask's original-order cell with its forced WaveAlign cell (cells of that
hardware only, and of its default backend where the results have some, or ``--backend``), fit
``wavealign.skip``'s log-linear models, evaluate them on held-out sequence lengths (or methods), log an
MLflow run (params, metrics, evaluation table and plot, the profile), register the profile as
``wavealign-skip-<hw>`` with alias ``current``, and install it where the runtime reads it before the packaged
profiles (``<hw>.yaml`` in the user's folder, ``wavealign.user_config.profiles_dir()``: ``~/.config/wavealign/profiles``
unless ``WAVEALIGN_HOME`` or ``XDG_CONFIG_HOME`` say otherwise; or ``--profile-dir``/``WAVEALIGN_PROFILE_DIR``).
``--fetch DIR`` downloads every ``models:/wavealign-skip-<hw>@<alias>`` into DIR (packaged profiles where
none is registered); run a sweep with ``WAVEALIGN_PROFILE_DIR=DIR`` to decide with them.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.run_root import RunRoot

EXTRAS = ("sweep",)
SPLITS = ("seq_len", "method")  # hold out by sequence length or by method


@dataclass
class FitOutcome:
    """One hardware's fit: where its profile went, its held-out metrics and MLflow ids."""

    hardware: str
    profile_path: Path | None
    metrics: dict[str, float] = field(default_factory=dict)
    run_id: str | None = None
    model_version: int | None = None
    out_dir: Path | None = None


def parser():
    """Its flags, beside the sweep config's overrides that say where the results are."""
    import argparse

    from jobs.arguments import Parser
    from orchestrator.config_compose import override_keys

    def names(value: str) -> list[str]:
        return [v.strip() for v in value.split(",") if v.strip()]

    parser = Parser("refresh-profiles", __doc__, config_paths=override_keys)
    parser.add_argument("--hardware", type=names, metavar="ID[,ID...]",
                        help="GPU ids to fit (default: every hardware with paired cells in the results)")
    parser.add_argument("--backend", type=names, metavar="NAME[,NAME...]",
                        help="the backends whose cells a fit uses (default: the hardware's default backend if it "
                             "has cells)")
    parser.add_argument("--split", choices=SPLITS, default="seq_len", help="hold out by %(choices)s")
    parser.add_argument("--include-simulated", action="store_true", help="fit from simulated cells too")
    parser.add_argument("--register", action=argparse.BooleanOptionalAction, default=True,
                        help="register the profile in MLflow's model registry")
    parser.add_argument("--alias", default="current", help="the registry alias set, or fetched (default: %(default)s)")
    parser.add_argument("--install", action=argparse.BooleanOptionalAction, default=True,
                        help="install the profile where the runtime reads it")
    parser.add_argument("--profile-dir", help="install there instead (default: wavealign.skip.profile_dir())")
    parser.add_argument("--out", help="local copy of the evaluation (default: <run_root>/skip-fits/<hw>-<utc time>/)")
    parser.add_argument("--experiment", default="wavealign-skip", help="the MLflow experiment of the fits")
    parser.add_argument("--fetch", metavar="DIR", help="download every registered profile at --alias into DIR")
    return parser


def parse_args(argv: list[str]) -> dict[str, Any]:
    """Its flags, with ``run_root`` and ``tracking_uri`` from the sweep config its overrides compose."""
    from orchestrator import config
    from wavealign import hardware as hardware_registry

    parsed = parser().parse_args(argv)
    for name in parsed.hardware or []:
        hardware_registry.get(name)  # a ValueError naming the unknown id and the known ones
    cfg = config.load(parsed.overrides)
    args = {k: v for k, v in vars(parsed).items() if k != "overrides"}
    return {**args, "run_root": cfg.run_root, "tracking_uri": cfg.mlflow.tracking_uri}


def _tracking_uri(args: dict[str, Any]) -> str:
    from orchestrator import tracking

    return args["tracking_uri"] or tracking.default_tracking_uri(args["run_root"])


def _code_version() -> dict[str, str | None]:
    import wavealign
    from wavealign import environment

    return {"wavealign_version": wavealign.__version__, "git_sha": environment.git_sha()}


def _experiment_id(client, name: str, runs: Path, tracking_uri: str) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    local = not tracking_uri.startswith(("http://", "https://", "databricks"))
    location = RunRoot(runs).artifact_uri if local else None
    return client.create_experiment(name, artifact_location=location)


def fit_backends(frame, hardware: str, args: dict[str, Any]) -> list[str] | None:
    """The backends whose cells a fit uses: ``backend=``, else the hardware's default backend where the
    results have cells of it (a profile decides for the kernel the hardware runs by default), else all."""
    from wavealign import hardware as hardware_registry

    if args["backend"]:
        return list(args["backend"])
    default = hardware_registry.get(hardware).default_backend
    has_default = ((frame["hardware"] == hardware) & (frame["backend"] == default)).any()
    return [default] if has_default else None


def _provenance(frame, pairs, hardware: str, args: dict[str, Any], metrics: dict[str, float],
                run_id: str) -> dict[str, Any]:
    """Where a fitted profile came from: sweeps, cells, date, hardware, code versions, evaluation, MLflow."""
    from analysis import profiles

    runs = Path(args["run_root"])
    measured = frame.loc[frame["hardware"] == hardware, "git_sha"].dropna().unique() if "git_sha" in frame else []
    return {
        "fitted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "hardware": hardware,
        "runs": str(runs.resolve()) if runs.is_dir() else str(runs),
        "sweeps": sorted(str(s) for s in pairs["sweep_id"].dropna().unique()) if "sweep_id" in pairs else [],
        "cells": len(pairs), "include_simulated": args["include_simulated"],
        "backends": sorted(pairs["backend"].dropna().unique().tolist()) if "backend" in pairs else [],
        "model": "log-linear (analysis.skipfit)", **_code_version(), "measured_git_shas": sorted(measured),
        "evaluation": {"split": args["split"], **{k: round(float(v), 6) for k, v in metrics.items()}},
        "mlflow": {"tracking_uri": args["_tracking_uri"], "run_id": run_id,
                   "registered_model": profiles.model_name(hardware) if args["register"] else None},
    }


def _write_evaluation(out_dir: Path, evaluation, hardware: str) -> None:
    import matplotlib.pyplot as plt

    from analysis import skipfit

    evaluation.table.to_csv(out_dir / "evaluation.csv", index=False)
    fig = skipfit.evaluation_figure(evaluation, hardware)
    fig.savefig(out_dir / "evaluation.png", dpi=110)
    plt.close(fig)


def _log_fit(client, run_id: str, out_dir: Path, profile, metrics: dict[str, float], args: dict[str, Any]) -> None:
    """Params, metrics, the evaluation table and plot, and the profile (``profile/``) on the fit's run."""
    from mlflow.entities import Metric, Param

    from analysis import profiles, skipfit
    from wavealign import skip

    now = int(time.time() * 1000)
    params = {"hardware": profile.hardware, "split": args["split"], "include_simulated": args["include_simulated"],
              "ridge": skipfit.RIDGE, "features": ",".join(skip.MODEL_FEATURES), "cells": profile.provenance["cells"],
              "sweeps": ",".join(profile.provenance["sweeps"])[:5000], "profile_version": profile.version,
              "backends": ",".join(profile.provenance["backends"])}
    client.log_batch(run_id, params=[Param(k, str(v)) for k, v in params.items()],
                     metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items() if v == v])  # v == v: not NaN
    client.log_artifact(run_id, str(out_dir / "evaluation.csv"))
    client.log_artifact(run_id, str(out_dir / "evaluation.png"))
    client.log_artifacts(run_id, str(out_dir / profiles.PROFILE_ARTIFACT_DIR), profiles.PROFILE_ARTIFACT_DIR)


def fit_one(frame, hardware: str, args: dict[str, Any], client, experiment_id: str | None) -> FitOutcome:
    """Fit, evaluate, record, register and install one hardware's profile."""
    from analysis import profiles, skipfit
    from wavealign import skip

    pairs = skipfit.paired_cells(frame, hardware, args["include_simulated"], fit_backends(frame, hardware, args))
    if len(pairs) < 2:
        hint = "" if args["include_simulated"] else " (simulated cells count only with --include-simulated)"
        raise ValueError(f"hardware={hardware}: {len(pairs)} paired (original, forced WaveAlign) cells in "
                         f"{args['run_root']}; need >= 2{hint}")
    evaluation = skipfit.evaluate(pairs, hardware, split=args["split"])
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out_dir = Path(args["out"] or Path(args["run_root"]) / "skip-fits" / f"{hardware}-{stamp}")
    out_dir.mkdir(parents=True, exist_ok=True)
    run_id = client.create_run(experiment_id, run_name=f"skip-fit-{hardware}-{stamp}",
                               tags={"wavealign.kind": "skip-fit", "wavealign.hardware": hardware}).info.run_id
    outcome = FitOutcome(hardware=hardware, profile_path=None, metrics=evaluation.metrics, run_id=run_id,
                         out_dir=out_dir)
    try:
        # the registry version this fit will become, written into the profile it registers
        version = str(profiles.next_version(client, hardware)) if args["register"] else f"unregistered-{stamp}"
        provenance = _provenance(frame, pairs, hardware, args, evaluation.metrics, run_id)
        profile = skipfit.fit_profile(pairs, hardware, provenance, version)
        chooser = fit_chooser(frame, hardware, outcome.metrics)
        if chooser:
            profile = dataclasses.replace(profile, chooser=chooser)
        profile.save(out_dir / profiles.PROFILE_ARTIFACT_DIR / f"{hardware}.yaml")
        _write_evaluation(out_dir, evaluation, hardware)
        _log_fit(client, run_id, out_dir, profile, evaluation.metrics, args)
        if args["register"]:
            outcome.model_version = profiles.register(client, run_id, hardware, args["alias"])
    except Exception:
        client.set_terminated(run_id, "FAILED")
        raise
    client.set_terminated(run_id, "FINISHED")
    if args["install"]:
        folder = Path(args["profile_dir"]) if args["profile_dir"] else skip.profile_dir()
        outcome.profile_path = profile.save(folder / f"{hardware}.yaml")
    return outcome


def fit_chooser(frame, hardware: str, metrics: dict[str, float]) -> dict[str, dict]:
    """The order chooser's corrections on ``hardware``, per backend whose groups hold its predictions (an ``auto``
    cell's, ``analysis.chooserfit``), each scored with its methods held out into ``metrics``."""
    from analysis import chooserfit

    section = {}
    for backend in sorted(frame.loc[frame.hardware == hardware, "backend"].dropna().unique()):
        rows = chooserfit.chooser_rows(frame, hardware, backend)
        if rows.group_id.nunique() < 2:
            continue
        section[backend] = chooserfit.fit(rows)
        _, held_out = chooserfit.evaluate(rows)
        metrics.update({f"chooser_{backend}_{name}": value for name, value in held_out.items()})
    return section


def _fetch(args: dict[str, Any]) -> int:
    from analysis import profiles

    uri = _tracking_uri(args)
    sources = profiles.materialise(args["fetch"], uri, args["alias"])
    for hardware, source in sorted(sources.items()):
        print(f"{hardware}: {source}")
    print(f"profiles in {Path(args['fetch']).resolve()}; use them with WAVEALIGN_PROFILE_DIR={args['fetch']}")
    return 0


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args["fetch"]:
        return _fetch(args)
    import analysis
    from analysis import skipfit
    from wavealign import hardware as hardware_registry

    frame = analysis.load(args["run_root"], tracking_uri=args["tracking_uri"])
    known = set(hardware_registry.names())
    hardware = args["hardware"] or sorted(h for h in frame["hardware"].dropna().unique() if h in known and len(
        skipfit.paired_cells(frame, h, args["include_simulated"], fit_backends(frame, h, args))) >= 2)
    if not hardware:
        raise ValueError(f"run_root={args['run_root']}: no hardware there has paired original/WaveAlign cells; "
                         "expected the run root of a sweep with both variants")
    from mlflow.tracking import MlflowClient

    uri = args["_tracking_uri"] = _tracking_uri(args)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    experiment_id = _experiment_id(client, args["experiment"], Path(args["run_root"]), uri)
    failures = 0
    for hw in hardware:
        try:
            outcome = fit_one(frame, hw, args, client, experiment_id)
        except ValueError as exc:
            print(f"wavealign refresh-profiles: {hw}: {' '.join(str(exc).split())}", file=sys.stderr)
            failures += 1
            continue
        m = outcome.metrics
        print(f"{hw}: {int(m['cells'])} held-out cells, accuracy {m['accuracy']:.1%}, regret {m['regret_pct']:.2f}% "
              f"of oracle time, total time {abs(m['vs_best_fixed_pct']):.2f}% "
              f"{'below' if m['vs_best_fixed_pct'] < 0 else 'above'} the better fixed policy "
              f"({'goal met' if m['goal_met'] else 'goal NOT met'})")
        for key, value in sorted(m.items()):
            if key.startswith("chooser_") and key.endswith("_fitted"):
                backend = key.removeprefix("chooser_").removesuffix("_within_1pct_fitted")
                bare = m.get(f"chooser_{backend}_within_1pct_simulator", float("nan"))
                print(f"  order chooser on {backend}: {value:.0%} of held-out groups within 1 % of the measured best "
                      f"(the simulator alone: {bare:.0%})")
        if outcome.model_version is not None:
            print(f"  registered {outcome.hardware} as wavealign-skip-{hw} version {outcome.model_version} "
                  f"@{args['alias']} (run {outcome.run_id})")
        if outcome.profile_path is not None:
            print(f"  installed {outcome.profile_path}")
        print(f"  evaluation: {outcome.out_dir}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
