"""PyTorch DistributedDataParallel (gloo on CPU, nccl on GPUs) across YARN containers.

Started either way MeLoN starts a PyTorch job: ``python train_ddp.py`` with the env:// rendezvous (the executor
sets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK), or under torchrun (``launcher: torchrun``), which
sets them itself. Each rank trains on its shard of data.py's set; at the end every rank prints its rank, its loss
and whether all replicas hold the same weights. With a declared output ``model``, the first process of each
container (LOCAL_RANK 0) saves the weights to ``$MELON_OUTPUT_MODEL/model.pt``: the replicas are identical, and
whichever container publishes the output has them (under torchrun, node ranks follow the rendezvous, not roles).
"""

import argparse
import os

import torch
import torch.distributed as dist
from data import TRAIN_SEED, build_model, make
from torch.nn.parallel import DistributedDataParallel


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2048)
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    print(f"[ddp] RANK={os.environ['RANK']} WORLD_SIZE={os.environ['WORLD_SIZE']} LOCAL_RANK={local_rank}", flush=True)
    torch.manual_seed(0)
    model = DistributedDataParallel(build_model().to(device), device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = make(args.samples, TRAIN_SEED)
    x, y = x[rank::world].to(device), y[rank::world].to(device)  # this rank's shard
    order = torch.Generator().manual_seed(rank)
    for epoch in range(args.epochs):
        for batch in torch.randperm(len(x), generator=order).split(64):
            loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"[ddp] rank {rank} epoch {epoch} loss {loss.item():.4f}", flush=True)
    weights = torch.cat([p.detach().flatten() for p in model.module.parameters()])
    gathered = [torch.zeros_like(weights) for _ in range(world)]
    dist.all_gather(gathered, weights)
    same = all(torch.allclose(gathered[0], g) for g in gathered)
    print(f"[ddp] rank {rank}/{world} loss {loss.item():.4f} replicas_identical={same}", flush=True)
    out = os.environ.get("MELON_OUTPUT_MODEL")
    if out and local_rank == 0:
        torch.save(model.module.state_dict(), os.path.join(out, "model.pt"))
    dist.destroy_process_group()
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
