"""``nnsweep agent head`` and ``nnsweep agent join``: start the Ray nodes of a cluster."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from nnsweep.cli._args import _int_in, _readable_token_option, _SubParser
from nnsweep.cli._output import EXIT_FAILED, _usage_error
from nnsweep.core.errors import SpecError


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``nnsweep agent head`` and ``nnsweep agent join``: both run :func:`run`."""
    agent = subparsers.add_parser("agent", help="start Ray nodes: the head, or a board that joins it")
    agent_sub = agent.add_subparsers(dest="agent_command", metavar="ACTION", parser_class=_SubParser)
    agent_sub.required = True
    head = agent_sub.add_parser(
        "head",
        help="start the head node: conversions run here, and it is device `host`",
        description="Runs `ray start --head` with the resources nnsweep needs and Ray's token "
        "authentication (the token is generated if missing, kept 0600). Boards then join it.",
    )
    head.add_argument("--port", type=_int_in(1, 65535), default=6379)
    head.add_argument("--converters", type=_int_in(1, 1024), default=1, help="conversions that may run at once")
    head.add_argument("--device", default="host", help="this machine's device name (default host)")
    head.add_argument("--no-device", action="store_true", help="this machine converts but is not a device")
    head.add_argument("--block", action="store_true", help="stay in the foreground (for systemd)")
    head.add_argument(
        "--token-file",
        type=Path,
        help="the cluster's Ray auth token; generated 0600 if missing (default: $RAY_AUTH_TOKEN_PATH or "
        "~/.ray/auth_token)",
    )
    _readable_token_option(head)
    head.add_argument(
        "--dashboard-agent-port", type=_int_in(1, 65535), help="Ray's dashboard agent port (default 52365)"
    )
    head.set_defaults(handler=run)
    join = agent_sub.add_parser(
        "join",
        help="join a head as a device (run this on the board), or as a machine that converts",
        description="Runs `ray start --address HEAD:PORT` offering the resource device:NAME (and, with "
        "--converters N, N conversion slots), with Ray's token authentication (the head's token: "
        "--token-file, $RAY_AUTH_TOKEN or ~/.ray/auth_token).",
    )
    join.add_argument("--address", required=True, help="the head's HOST:PORT")
    join.add_argument("--device", help="this device's name in sweeps (omit on a machine that only converts)")
    join.add_argument(
        "--converters",
        type=_int_in(0, 1024),
        default=0,
        help="conversions this machine runs for sweeps at once, one CPU each (default 0: a board)",
    )
    join.add_argument("--machine", help="physical machine name (default: host name)")
    join.add_argument("--token-file", type=Path, help="file holding the head's Ray auth token (mode 0600)")
    join.add_argument("--dashboard-agent-port", type=_int_in(1, 65535), help="needed for a second node on one machine")
    join.add_argument("--block", action="store_true", help="stay in the foreground (for systemd)")
    _readable_token_option(join)
    join.set_defaults(handler=run)


def run(args: argparse.Namespace, cache_dir: Path) -> int:
    """Start the head or join it, as ``args.agent_command`` says."""
    return _head(args, cache_dir) if args.agent_command == "head" else _join(args, cache_dir)


def _head(args: argparse.Namespace, cache_dir: Path) -> int:
    from nnsweep.agents import check_token_file, default_token_path, ensure_token, head_command, ray_env
    from nnsweep.cli._ports import check_port_free

    try:
        cmd = head_command(
            args.port,
            args.converters,
            host_device=None if args.no_device else args.device,
            block=args.block,
            dashboard_agent_port=args.dashboard_agent_port,
        )
        check_port_free(args.port, "0.0.0.0")  # the head's GCS listens on every interface; before the token is made
        token = args.token_file or default_token_path(os.environ, Path.home())
        created = ensure_token(token)
        check_token_file(token, option="--token-file", allow_readable=args.allow_readable_token)
    except SpecError as exc:
        return _usage_error(exc, {})
    # The token is never printed: it opens the cluster to whoever reads it.
    state = "generated" if created else "existing"
    sys.stderr.write(
        f"nnsweep agent head: Ray token authentication on; {state} token in {token} (mode 0600). "
        f"Copy it to each board (e.g. scp -p) and join with --token-file.\n"
    )
    return _ray_start(cmd, ray_env(os.environ, token))


def _join(args: argparse.Namespace, cache_dir: Path) -> int:
    import time

    from nnsweep.agents import (
        check_head_answers,
        check_token_file,
        default_token_path,
        join_command,
        ray_env,
        ray_temp_dir,
        start_failure,
    )

    try:
        cmd = join_command(
            args.address,
            args.device,
            machine=args.machine,
            converters=args.converters,
            dashboard_agent_port=args.dashboard_agent_port,
            block=args.block,
        )
        token: Path | None = args.token_file
        if token is None and not os.environ.get("RAY_AUTH_TOKEN"):
            token = default_token_path(os.environ, Path.home())
        if token is not None:
            check_token_file(token, option="--token-file", allow_readable=args.allow_readable_token)
        check_head_answers(args.address)  # last: the checks that need no network come first
    except SpecError as exc:
        return _usage_error(exc, {})
    since = time.time() - 1.0  # some filesystems keep whole seconds
    code = _ray_start(cmd, ray_env(os.environ, token))
    reason = start_failure(ray_temp_dir(os.environ), since) if code != 0 else None
    if reason is not None:
        sys.stderr.write(f"nnsweep agent join: {reason}\n")
    return code


def _ray_start(cmd: list[str], env: dict[str, str]) -> int:
    import shutil
    import subprocess

    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray is None:
        sys.stderr.write("nnsweep agent: the `ray` command is not installed here\n")
        return EXIT_FAILED
    return subprocess.call([ray, *cmd[1:]], env=env)
