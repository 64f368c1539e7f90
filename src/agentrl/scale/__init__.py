"""Scale-out on existing engines: torchrun + FSDP2 data parallelism, rollout worker processes, Ray actors.

Not a distributed runtime of our own: process groups, sharding, state dicts and collectives are
torch.distributed's (gloo on CPU, NCCL on GPU); actors and scheduling are Ray's (the optional
`agentrl[ray]` extra). The maths and the schedule are agentrl.rl's, unchanged.
"""
