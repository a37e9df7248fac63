"""The user's configuration folder: WAVEALIGN_HOME, else $XDG_CONFIG_HOME/wavealign, else ~/.config/wavealign."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from wavealign import user_config, workloads


def test_wavealign_home_names_the_folder_and_its_parts(tmp_path, monkeypatch):
    monkeypatch.setenv("WAVEALIGN_HOME", str(tmp_path / "wa"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert user_config.home() == tmp_path / "wa"
    assert user_config.profiles_dir() == tmp_path / "wa" / "profiles"
    assert user_config.workloads_dir() == tmp_path / "wa" / "workloads"


def test_without_wavealign_home_the_xdg_config_folder_holds_it(tmp_path, monkeypatch):
    monkeypatch.delenv("WAVEALIGN_HOME", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert user_config.home() == tmp_path / "xdg" / "wavealign"


def test_without_either_it_is_under_the_homes_config_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("WAVEALIGN_HOME", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/xdg")  # the XDG specification ignores a relative one
    monkeypatch.setenv("HOME", str(tmp_path))
    assert user_config.home() == Path(tmp_path) / ".config" / "wavealign"


def test_a_generator_in_the_users_workloads_folder_wins_and_is_reread_once_changed(tmp_path, monkeypatch):
    monkeypatch.setenv("WAVEALIGN_HOME", str(tmp_path))
    packaged = workloads.generator("scene")
    assert workloads.SceneConfig.calibrated_path() == workloads.SceneConfig.CALIBRATED_PATH
    mine = tmp_path / "workloads" / workloads.SceneConfig.CALIBRATED_PATH.name
    mine.parent.mkdir()
    for objects in (3, 4):
        mine.write_text(yaml.safe_dump({"generator": {**packaged.to_dict(), "objects": objects}}))
        os.utime(mine, ns=(mine.stat().st_atime_ns, mine.stat().st_mtime_ns + objects * 1_000_000))
        assert workloads.generator("scene").objects == objects != packaged.objects
    assert workloads.generator("clusters") == workloads.GeneratorConfig.calibrated()  # the other stays packaged
    mine.write_text("generator: 3\n")
    with pytest.raises(ValueError, match="expected a mapping with a 'generator' mapping"):
        workloads.generator("scene")
