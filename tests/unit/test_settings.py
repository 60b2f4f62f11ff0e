"""The settings object and main.py's flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from main import build_settings, parse_args
from shared.settings import Settings, SettingsError


def test_defaults_without_environment() -> None:
    s = Settings.from_env({})
    assert (s.port, s.mode, s.max_workers, s.gpu_devices, s.device) == (8000, "both", 4, None, "auto")
    assert s.enable_device_metrics is False


def test_environment_is_read() -> None:
    s = Settings.from_env({
        "PORT": "9000", "GPU_DEVICE": "1,3", "MAX_WORKERS": "2", "ENABLE_DEVICE_METRICS": "true",
        "LOG_LEVEL": "DEBUG", "CUPY_KERNEL_CACHE_DIR": "/c", "MCP_ALLOWED_HOSTS": "a.example:443, b",
    })
    assert s.port == 9000 and s.gpu_devices == (1, 3) and s.max_workers == 2
    assert s.enable_device_metrics and s.log_level == "debug" and s.cupy_cache_dir == Path("/c")
    assert s.mcp_allowed_hosts == ("a.example:443", "b")
    assert Settings.from_env({"GPU_DEVICE": "all"}).gpu_devices is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PORT": "http"}, "PORT must be an integer"),
        ({"PORT": "70000"}, "PORT must be in"),
        ({"GPU_DEVICE": "zero"}, "GPU_DEVICE"),
        ({"ENABLE_DEVICE_METRICS": "maybe"}, "true or false"),
        ({"SERVER_MODE": "grpc"}, "SERVER_MODE must be one of"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env)


def test_flags_override_environment() -> None:
    args = parse_args(["--port", "8123", "--mode", "fastapi", "--log-level", "DEBUG",
                       "--cupy-cache-dir", "/x"])
    s = build_settings(args, {"PORT": "9000", "SERVER_MODE": "mcp", "MAX_WORKERS": "3"})
    assert (s.port, s.mode, s.log_level, s.max_workers) == (8123, "fastapi", "debug", 3)
    assert s.cupy_cache_dir == Path("/x")
