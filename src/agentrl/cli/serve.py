"""`agentrl serve --env NAME [--tasks SOURCE] --host 127.0.0.1 --port P`: the OpenEnv-compatible env server.

Flags map one-to-one onto EnvServerConfig; the server itself is agentrl.serve.env.app.
"""

from __future__ import annotations

import argparse

from agentrl.cli.args import non_negative_float, non_negative_int, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    """Add `serve`."""
    from agentrl.serve.env.app import EnvServerConfig

    d = EnvServerConfig()
    p = sub.add_parser(
        "serve", help="serve an environment over OpenEnv's protocol (HTTP + WebSocket sessions)",
        description="An OpenEnv-compatible environment server (OpenEnv's own app): OpenEnv's EnvClient, TRL's "
        "environment_factory (agentrl.integrations.trl.remote_trl_env_class) and `agentrl eval --env-url` talk "
        "to it. One environment (with its own sandbox workers) per WebSocket session; SIGTERM drains and exits.")
    tasks, server = p.add_argument_group("tasks and environment"), p.add_argument_group("server")
    tasks.add_argument("--env", default=d.env, help=f"environment registry name: edit-menu, coding-tools, python-session, wordle, ... (default {d.env})")
    tasks.add_argument("--tasks", default="", help="task source: bugfix | mbpp | humaneval | wordle | a task JSONL "
                   "(default: mbpp for python-session, wordle for wordle, else bugfix)")
    tasks.add_argument("--train-size", type=non_negative_int, default=d.train_size, help="cap on the train split (0: the source's)")
    tasks.add_argument("--eval-size", type=non_negative_int, default=d.eval_size, help="held-out tasks (0: the source's default)")
    tasks.add_argument("--seed", type=int, default=d.seed, help="task generation / renaming seed")
    tasks.add_argument("--max-turns", type=positive_int, default=d.max_turns, help="the environment's turn limit per episode")
    server.add_argument("--host", default=d.host, help="address to bind (default loopback)")
    server.add_argument("--port", type=int, default=d.port, help="port (0: any free one, printed at start)")
    server.add_argument("--max-concurrent-envs", type=positive_int, default=d.max_concurrent_envs,
                   help="open sessions at most; the next one is refused with CAPACITY_REACHED")
    server.add_argument("--session-timeout-s", type=non_negative_float, default=d.session_timeout_s,
                   help="close a session idle this long, seconds (0: never)")
    server.add_argument("--drain-timeout-s", type=non_negative_float, default=d.drain_timeout_s,
                   help="on SIGTERM, how long in-flight requests may finish, seconds")
    p.set_defaults(func=serve_main)


def serve_main(args: argparse.Namespace) -> int:
    """CLI entry of `agentrl serve`."""
    import logging

    from agentrl.serve.env.app import EnvServerConfig, run_server

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = EnvServerConfig(env=args.env, tasks=args.tasks, train_size=args.train_size, eval_size=args.eval_size,
                          seed=args.seed, max_turns=args.max_turns, host=args.host, port=args.port,
                          max_concurrent_envs=args.max_concurrent_envs,
                          session_timeout_s=args.session_timeout_s or None, drain_timeout_s=args.drain_timeout_s)

    def ready(host: str, port: int) -> None:
        print(f"agentrl serve: listening on http://{host}:{port}", flush=True)

    return run_server(cfg, ready=ready)
