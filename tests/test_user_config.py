"""The user's configuration folder: WAVEALIGN_HOME, else $XDG_CONFIG_HOME/wavealign, else ~/.config/wavealign."""

from __future__ import annotations

from pathlib import Path

from wavealign import user_config


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
