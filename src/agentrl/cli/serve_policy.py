"""`agentrl serve-policy`: the policy behind an OpenAI-compatible endpoint that records token ids and log-probs.

Not the server itself (agentrl.serve.policy.server / app). Any OpenAI-compatible agent harness
can be pointed at `http://HOST:PORT/v1` with the rollout id as its API key; the traces are read back
with `GET /rollouts/<id>/trace` (or `DELETE /rollouts/<id>`, which also closes the rollout), and
`--trace-dir` writes each closed rollout's trace as `<id>.json` too.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
from typing import Any

from agentrl.cli.args import positive_float, positive_int
from agentrl.cli.flags import add_policy_flags, policy_from_args
from agentrl.models.policy import PolicyConfig

log = logging.getLogger("agentrl.serve")
# the policy flags of `serve-policy` (agentrl.models.policy.PolicyConfig's, with its defaults; no --chat-template
# or --thinking: the harness sends its own messages and the server renders them with the model's template)
SERVE_POLICY_FLAGS = ("model", "tokenizer", "dtype", "device", "allow_download")
# --max-context-tokens when not given: this, or the model's context where that is shorter (demo-qwen3: 8192)
DEFAULT_CONTEXT_TOKENS = 16384


def register(subparsers: Any) -> None:
    """Add `serve-policy` to the agentrl command line."""
    p = subparsers.add_parser("serve-policy", help="serve the policy as OpenAI chat completions, recording "
                              "every call's token ids and sampler log-probs per rollout (API key = rollout id)",
                              description="An OpenAI-compatible /v1/chat/completions endpoint for --model (a run "
                              "folder runs/x, a checkpoint or any model train takes) that records each call's token "
                              "ids and sampler log-probs per rollout (API key = rollout id); traces at "
                              "GET /rollouts/<id>/trace.")
    model, sampling = p.add_argument_group("model"), p.add_argument_group("sampling")
    server, budgets = p.add_argument_group("server"), p.add_argument_group("rollout budgets")
    add_policy_flags(model, PolicyConfig(), only=SERVE_POLICY_FLAGS)
    from agentrl.rollout.samplers import SAMPLERS, sampler_help

    sampling.add_argument("--sampler", default="hf", choices=tuple(SAMPLERS), help=sampler_help())
    server.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    server.add_argument("--port", type=int, default=8000, help="port to bind")
    sampling.add_argument("--max-new-tokens", type=positive_int, default=512, help="completion tokens per call")
    sampling.add_argument("--max-context-tokens", type=positive_int, default=None,
                          help="prompt + completion per call (default: the model's context, at most 16384)")
    budgets.add_argument("--max-calls", type=positive_int, default=64, help="model calls per rollout")
    budgets.add_argument("--max-rollout-tokens", type=positive_int, default=32768, help="completion tokens per rollout")
    budgets.add_argument("--max-wall-s", type=positive_float, default=900.0, help="seconds per rollout")
    sampling.add_argument("--gen-batch", type=positive_int, default=16, help="requests sampled together")
    server.add_argument("--require-open", action="store_true",
                   help="refuse rollout ids not opened with POST /rollouts/<id> (default: any API key opens one)")
    server.add_argument("--max-open-rollouts", type=positive_int, default=4096,
                        help="rollouts an API key may open while others are open (each keeps its trace until "
                             "DELETE /rollouts/<id>); beyond it a new key is refused with 429")
    p.set_defaults(func=main)


def build_server(args: argparse.Namespace) -> Any:
    """The PolicyServer that `args` describe (model loaded, sampler built)."""
    from agentrl.models.device import resolve_device
    from agentrl.models.load import check_context_tokens, context_limit
    from agentrl.rollout.hf_sampler import SamplingConfig
    from agentrl.rollout.samplers import build_sampler
    from agentrl.serve.policy.server import PolicyServer, RolloutBudget

    policy = policy_from_args(args)
    model, tok = policy.load(resolve_device(policy.device))
    context = args.max_context_tokens or min(DEFAULT_CONTEXT_TOKENS, context_limit(model) or DEFAULT_CONTEXT_TOKENS)
    check_context_tokens(model, context, "--max-context-tokens", policy.model)
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, gen_batch=args.gen_batch)
    sampler = build_sampler(args.sampler, model, tok, sampling, max_batch=args.gen_batch)  # None: HF generate
    budget = RolloutBudget(max_calls=args.max_calls, max_completion_tokens=args.max_rollout_tokens,
                           max_wall_s=args.max_wall_s)
    return PolicyServer(model, tok, sampler=sampler, sampling=sampling, max_context_tokens=context,
                        budget=budget, auto_open=not args.require_open, model_name=str(policy.model),
                        max_batch=args.gen_batch, max_auto_open=args.max_open_rollouts)


def main(args: argparse.Namespace) -> int:
    """Serve until interrupted (Ctrl-C). Raises ValueError for a bad port or one already in use."""
    import uvicorn

    from agentrl.preflight import check_port_free
    from agentrl.serve.policy.app import create_app

    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be in 1..65535, got {args.port}")
    try:
        loopback = ipaddress.ip_address(args.host).is_loopback
    except ValueError:
        loopback = args.host == "localhost"
    if not loopback:
        log.warning("serve-policy: binding %s exposes the policy beyond this machine", args.host)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    check_port_free(args.host, args.port)  # before loading the model, and before saying it listens
    server = build_server(args)
    print(f"agentrl policy server: http://{args.host}:{args.port}/v1  (API key = rollout id; "
          f"traces at /rollouts/<id>/trace)", flush=True)
    try:
        uvicorn.run(create_app(server), host=args.host, port=args.port, log_level="warning", access_log=False)
    finally:
        server.close()
    return 0
