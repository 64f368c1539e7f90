"""`agentrl serve --env NAME [--tasks SOURCE] --host 127.0.0.1 --port P`: the OpenEnv-compatible env server.

Flags map one-to-one onto EnvServerConfig; the server itself is agentrl.serve.env.app.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add `serve`."""
    from agentrl.serve.env.app import EnvServerConfig

    d = EnvServerConfig()
    p = sub.add_parser(
        "serve", help="serve an environment over OpenEnv's protocol (HTTP + WebSocket sessions)",
        description="An OpenEnv-compatible environment server (OpenEnv's own app): OpenEnv's EnvClient, TRL's "
        "environment_factory (agentrl.integrations.trl.remote_trl_env_class) and `agentrl eval --env-url` talk "
        "to it. One environment and sandbox session per WebSocket session; SIGTERM drains and exits.")
    p.add_argument("--env", default=d.env, help=f"environment registry name: edit-menu, coding-tools, python-session, wordle, ... (default {d.env})")
    p.add_argument("--tasks", default="", help="task source: bugfix | mbpp | humaneval | wordle | a task JSONL "
                   "(default: mbpp for python-session, wordle for wordle, else bugfix)")
    p.add_argument("--train-size", type=int, default=d.train_size, help="cap on the train split (0: the source's)")
    p.add_argument("--eval-size", type=int, default=d.eval_size, help="held-out tasks (0: the source's default)")
    p.add_argument("--seed", type=int, default=d.seed, help="task generation / renaming seed")
    p.add_argument("--max-turns", type=int, default=d.max_turns, help="the environment's turn limit per episode")
    p.add_argument("--host", default=d.host, help="address to bind (default loopback)")
    p.add_argument("--port", type=int, default=d.port, help="port (0: any free one, printed at start)")
    p.add_argument("--max-concurrent-envs", type=int, default=d.max_concurrent_envs,
                   help="open sessions at most; the next one is refused with CAPACITY_REACHED")
    p.add_argument("--session-timeout-s", type=float, default=d.session_timeout_s,
                   help="close a session idle this long, seconds (0: never)")
    p.add_argument("--drain-timeout-s", type=float, default=d.drain_timeout_s,
                   help="on SIGTERM, how long in-flight requests may finish, seconds")
    p.set_defaults(func=serve_main)
    _extend_eval(sub)


def _extend_eval(sub: argparse._SubParsersAction) -> None:
    """Give `agentrl eval` (agentrl.rl.commands) the served-environment flags: with --env-url it scores
    --models on the server's held-out tasks (agentrl.serve.env.eval); without, it runs unchanged.
    Added from here because rl/ must not import a front end (tests/test_layers.py)."""
    ev = sub.choices.get("eval")
    if ev is None:
        return
    ev.add_argument("--env-url", default="", help="score on the held-out tasks of an `agentrl serve` server "
                    "instead of a local environment (the server's --env and --tasks apply)")
    ev.add_argument("--models", nargs="+", default=None, help="with --env-url: several models on the same tasks "
                    "in one pass, one table, paired differences against the first (default: --model)")
    ev.add_argument("--concurrency", type=int, default=16,
                    help="with --env-url: episodes (server sessions) at a time")
    local = ev.get_default("func")

    def eval_dispatch(args: argparse.Namespace) -> int:
        if args.env_url:
            return served_eval_main(args)
        if args.models:
            raise ValueError("--models needs --env-url (a served environment); locally, evaluate one --model "
                             "at a time")
        return local(args)

    ev.set_defaults(func=eval_dispatch)


def served_eval_main(args: argparse.Namespace) -> int:
    """`agentrl eval --env-url URL --models A B ...`."""
    from agentrl.rl.config import config_from_args
    from agentrl.serve.env.eval import eval_served

    cfg = config_from_args(args)
    cfg.steps = 0
    eval_served(cfg, args.env_url, args.models or [cfg.model], concurrency=args.concurrency)
    return 0


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
