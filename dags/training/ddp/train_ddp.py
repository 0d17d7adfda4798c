"""PyTorch DistributedDataParallel (gloo, CPU here) across YARN containers.

The MeLoN executor sets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and LOCAL_RANK; `init_process_group`
reads them (env://). Rank 0 prints the final loss and that all ranks agree on the weights.
"""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> int:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(20, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(rank)
    w_true = torch.randn(20, 2, generator=torch.Generator().manual_seed(42))
    for step in range(50):
        x = torch.randn(64, 20, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x), x @ w_true)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    weights = model.module.weight.detach().clone()
    gathered = [torch.zeros_like(weights) for _ in range(world)]
    dist.all_gather(gathered, weights)
    same = all(torch.allclose(gathered[0], g) for g in gathered)
    print(f"[ddp] rank {rank}/{world} loss {loss.item():.4f} replicas_identical={same}", flush=True)
    dist.destroy_process_group()
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
