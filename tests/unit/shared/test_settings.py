"""The settings object and main.py's flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from main import build_settings, parse_args
from shared.settings import Settings, SettingsError


def test_defaults_without_environment() -> None:
    s = Settings.from_env({})
    assert (s.port, s.mode, s.max_workers, s.gpu_devices, s.device) == (8000, "both", None, None,
                                                                        "auto")
    assert s.enable_device_metrics is False


def test_jobs_at_once_are_one_per_gpu_by_default_and_max_workers_caps_them() -> None:
    default, capped = Settings.from_env({}), Settings.from_env({"MAX_WORKERS": "2"})
    assert (default.slots(8), default.slots(1), default.slots(0)) == (8, 1, 4)  # 0: CPU mode
    assert (capped.slots(8), capped.slots(1), capped.slots(0)) == (2, 1, 2)


def test_cache_dir_is_the_root_of_the_build_reference_and_jit_caches() -> None:
    s = Settings.from_env({"CACHE_DIR": "/data/cache"})
    assert (s.build_cache_dir, s.ref_cache_dir, s.jit_cache_dir) == (
        Path("/data/cache/builds"), Path("/data/cache/references"), Path("/data/cache/jit"))
    default = Settings.from_env({})
    assert default.build_cache_dir.parent == default.ref_cache_dir.parent == \
        default.jit_cache_dir.parent == Path.home() / ".cache" / "kernel_eval"


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
        ({"JOBS_PER_GPU": "0"}, "JOBS_PER_GPU must be in"),
        ({"SANDBOX": "maybe"}, "SANDBOX must be one of"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env)


def test_gpu_sharing_default_and_value() -> None:
    assert Settings.from_env({}).jobs_per_gpu == 1
    assert Settings.from_env({"JOBS_PER_GPU": "4"}).jobs_per_gpu == 4


def test_flags_override_environment() -> None:
    args = parse_args(["--port", "8123", "--mode", "fastapi", "--log-level", "DEBUG",
                       "--cupy-cache-dir", "/x"])
    s = build_settings(args, {"PORT": "9000", "SERVER_MODE": "mcp", "MAX_WORKERS": "3"})
    assert (s.port, s.mode, s.log_level, s.max_workers) == (8123, "fastapi", "debug", 3)
    assert s.cupy_cache_dir == Path("/x")


def test_operations_settings_from_environment() -> None:
    s = Settings.from_env({"LOG_FORMAT": "JSON", "MAX_QUEUED_JOBS": "50", "API_KEY": " k3y "})
    assert (s.log_format, s.max_queued_jobs, s.api_key) == ("json", 50, "k3y")
    defaults = Settings.from_env({"API_KEY": ""})
    assert (defaults.log_format, defaults.max_queued_jobs, defaults.api_key) == ("text", 1000, None)


def test_the_request_size_limit_is_read_from_the_environment_with_a_32_mib_default() -> None:
    assert Settings.from_env({"MAX_REQUEST_BYTES": "65536"}).max_request_bytes == 65536
    assert Settings.from_env({}).max_request_bytes == 32 * 2**20


def test_the_api_key_is_not_shown_in_the_settings_repr() -> None:
    assert "k3y" not in repr(Settings(api_key="k3y"))


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LOG_FORMAT": "xml"}, "LOG_FORMAT must be one of"),
        ({"MAX_QUEUED_JOBS": "0"}, "MAX_QUEUED_JOBS must be in"),
        ({"MAX_QUEUED_JOBS": "many"}, "MAX_QUEUED_JOBS must be an integer"),
        ({"MAX_REQUEST_BYTES": "10"}, "MAX_REQUEST_BYTES must be in 1024.."),
        ({"MAX_REQUEST_BYTES": "32M"}, "MAX_REQUEST_BYTES must be an integer"),
    ],
)
def test_bad_operations_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env)


def test_log_format_flag_overrides_environment() -> None:
    s = build_settings(parse_args(["--log-format", "json"]), {"LOG_FORMAT": "text"})
    assert s.log_format == "json"


def test_the_ray_executor_is_chosen_by_environment_and_needs_an_address() -> None:
    s = Settings.from_env({"EXECUTOR": "Ray", "RAY_ADDRESS": " head:6379 ", "RAY_NODE_DIR": "/n"})
    assert (s.executor, s.ray_address, s.ray_node_dir) == ("ray", "head:6379", Path("/n"))
    assert Settings.from_env({}).executor == "local"
    with pytest.raises(SettingsError, match="EXECUTOR=ray needs RAY_ADDRESS"):
        Settings.from_env({"EXECUTOR": "ray"})
    with pytest.raises(SettingsError, match="EXECUTOR must be one of local, ray"):
        Settings.from_env({"EXECUTOR": "k8s"})
