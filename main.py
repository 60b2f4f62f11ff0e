"""Start the Kernel Evaluation Server.

    python main.py [--host H] [--port P] [--log-level L] [--log-format text|json]
                   [--mode fastapi|mcp|both] [--reload] [--cupy-cache-dir DIR]

Flags override the environment (HOST, PORT, LOG_LEVEL, LOG_FORMAT, SERVER_MODE, GPU_DEVICE,
MAX_WORKERS, ENABLE_DEVICE_METRICS, CUPY_KERNEL_CACHE_DIR, …; see README).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from shared.log_format import configure_logging, uvicorn_log_config
from shared.settings import Settings, SettingsError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Kernel Evaluation Server")
    parser.add_argument("--host", help="address to bind (env HOST, default 0.0.0.0)")
    parser.add_argument("--port", type=int, help="port (env PORT, default 8000)")
    parser.add_argument(
        "--log-level", type=str.lower, choices=["debug", "info", "warning", "error"],
        help="log verbosity (env LOG_LEVEL, default info)",
    )
    parser.add_argument(
        "--log-format", choices=["text", "json"],
        help="text lines, or one JSON object per line (env LOG_FORMAT, default text)",
    )
    parser.add_argument(
        "--mode", choices=["fastapi", "mcp", "both"],
        help="REST API, MCP at /mcp, or both on one port (env SERVER_MODE, default both)",
    )
    parser.add_argument("--reload", action="store_true", help="restart on code changes (dev)")
    parser.add_argument(
        "--cupy-cache-dir", type=Path, help="CuPy kernel cache (env CUPY_KERNEL_CACHE_DIR)"
    )
    return parser.parse_args(argv)


def build_settings(args: argparse.Namespace, environ: dict[str, str] | None = None) -> Settings:
    return Settings.from_env(environ).with_overrides(
        host=args.host, port=args.port, log_level=args.log_level, log_format=args.log_format,
        mode=args.mode, cupy_cache_dir=args.cupy_cache_dir,
    )


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    args = parse_args(argv)
    try:
        settings = build_settings(args)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    if args.reload:
        # The reloader re-imports the app in a new process: hand the flags over as env vars.
        os.environ.update(
            HOST=settings.host, PORT=str(settings.port), LOG_LEVEL=settings.log_level,
            LOG_FORMAT=settings.log_format, SERVER_MODE=settings.mode,
            CUPY_KERNEL_CACHE_DIR=str(settings.cupy_cache_dir),
        )
        uvicorn.run(
            "app:app_from_env", factory=True, reload=True, host=settings.host,
            port=settings.port, log_level=settings.log_level,
            log_config=uvicorn_log_config(settings.log_format),
        )
        return 0
    from app import create_app

    uvicorn.run(create_app(settings), host=settings.host, port=settings.port,
                log_level=settings.log_level, log_config=uvicorn_log_config(settings.log_format))
    return 0


if __name__ == "__main__":
    sys.exit(main())
