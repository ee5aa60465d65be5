"""A user's training script as trainbench's tests run it unchanged under `model: command`.

It reads what torchrun gives its workers (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), trains a small MLP with DistributedDataParallel over gloo when
WORLD_SIZE > 1, and prints its progress in the shape one real framework prints it
(`--log-style`):

- `megatron`: Megatron-LM's ` iteration  N/ T | consumed samples: ... | elapsed time per
  iteration (ms): ... | global batch size: ... | lm loss: ... |`, on the last rank;
- `imagenet`: pytorch/examples ImageNet's `Epoch: [0][ i/N]\tTime  t ( avg)\tData ...\tLoss ...`
  on rank 0, `i % print_freq == 0` with i 0-based, as that script prints;
- `dllogger`: DeepLearningExamples' DLLogger: the text backend's
  `DLL <date> - Epoch: 0 Iteration: i  train.loss : ...  train.total_ips : ... img/s` on stdout
  and the JSON-stream backend's `DLLL {...}` records in `--raport-file`, on rank 0;
- `plain`: `step i/N loss L speed S samples/s`, for a grid's own pattern, on rank 0.

The line shapes follow the recorded logs in tests/data/logs/{megatron,pytorch_imagenet,dllogger}.
"""

import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--iters", type=int, required=True)
    p.add_argument("--log-style", choices=["megatron", "imagenet", "dllogger", "plain"],
                   required=True)
    p.add_argument("--log-interval", type=int, default=1)
    p.add_argument("--raport-file", default=None)
    p.add_argument("--unlogged-last", type=int, default=0,
                   help="log none of the last N iterations (a profiling run that stops first)")
    p.add_argument("--fail-at", type=int, default=None, help="exit 3 at this iteration")
    p.add_argument("--hang-at", type=int, default=None, help="stop at this iteration")
    p.add_argument("--hold-until", default=None,
                   help="with --hang-at: stop there until this file exists, not for an hour")
    p.add_argument("--sleep-ms", type=float, default=2.0)
    args = p.parse_args()

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    assert int(os.environ.get("LOCAL_WORLD_SIZE", "1")) >= 1
    torch.manual_seed(1234 + rank)
    torch.set_num_threads(1)
    model: torch.nn.Module = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                                 torch.nn.Linear(64, 10))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(args.batch_size, 32)
    y = torch.randint(0, 10, (args.batch_size,))
    print(f"rank {rank}/{world} local_rank {local_rank} master "
          f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}", flush=True)
    dll = open(args.raport_file, "w") if args.raport_file and rank == 0 else None  # noqa: SIM115
    if dll is not None:
        stamp = time.time()
        dll.write("DLLL " + json.dumps({"timestamp": str(stamp), "datetime": str(
            datetime.datetime.fromtimestamp(stamp)), "type": "LOG", "step": "PARAMETER",
            "data": {"batch_size": args.batch_size, "world_size": world}}) + "\n")
    global_batch = args.batch_size * world
    last = time.time()
    total_time = 0.0
    for i in range(args.iters):
        if args.fail_at is not None and i + 1 == args.fail_at:
            print(f"RuntimeError: simulated failure at iteration {i + 1}", file=sys.stderr)
            return 3
        if args.hang_at is not None and i + 1 == args.hang_at:
            print(f"pid {os.getpid()} stops at iteration {i + 1}", flush=True)
            if args.hold_until is None:
                time.sleep(3600)
            while args.hold_until is not None and not os.path.exists(args.hold_until):
                time.sleep(0.2)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(args.sleep_ms / 1000.0)
        now = time.time()
        step_s, last = now - last, now
        total_time += step_s
        done = i + 1
        if done > args.iters - args.unlogged_last:
            continue
        if args.log_style == "megatron" and rank == world - 1 and done % args.log_interval == 0:
            print(f" iteration {done:8d}/{args.iters:8d} | consumed samples: "
                  f"{done * global_batch:12d} | elapsed time per iteration (ms): "
                  f"{step_s * 1000:.1f} | learning rate: "
                  f"1.000E-02 | global batch size: {global_batch:5d} | lm loss: {loss.item():E} |"
                  " loss scale: 1.0 | number of skipped iterations:   0 | number of nan "
                  "iterations:   0 |", flush=True)
        elif args.log_style == "imagenet" and rank == 0 and i % args.log_interval == 0:
            print(f"Epoch: [0][{i:4d}/{args.iters}]\tTime {step_s:.3f} ({total_time / done:.3f})"
                  f"\tData 0.000 (0.000)\tLoss {loss.item():.4e} ({loss.item():.4e})"
                  "\tAcc@1   0.00 (  0.00)\tAcc@5   0.00 (  0.00)", flush=True)
        elif args.log_style == "dllogger" and rank == 0 and done % args.log_interval == 0:
            stamp = datetime.datetime.now()
            print(f"DLL {stamp} - Epoch: 0 Iteration: {done}  train.loss : {loss.item():.5f}  "
                  f"train.total_ips : {global_batch / step_s:.2f} img/s", flush=True)
            if dll is not None:
                dll.write("DLLL " + json.dumps({
                    "timestamp": str(stamp.timestamp()), "datetime": str(stamp),
                    "elapsedtime": str(total_time), "type": "LOG", "step": [0, done],
                    "data": {"train.loss": loss.item(),
                             "train.total_ips": global_batch / step_s}}) + "\n")
                dll.flush()
        elif args.log_style == "plain" and rank == 0 and done % args.log_interval == 0:
            print(f"step {done}/{args.iters} loss {loss.item():.4f} speed "
                  f"{global_batch / step_s:.1f} samples/s", flush=True)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if dll is not None:
        dll.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
