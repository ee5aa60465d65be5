"""An ordinary data-parallel training script, as `torchrun --nproc-per-node=N train.py` runs it:
nothing in it knows trainbench. trainbench's own-script example (examples/own_script.yaml) runs
it unchanged, one process per GPU, with the environment torchrun would give it.

It trains torchvision's ResNet-18 (a small ResNet-50 stand-in) on synthetic images and prints
one line per step: `step 12/120 loss 6.91 1234.5 img/s` (what the grid's pattern reads).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torchvision


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=64, help="per GPU")
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--precision", choices=["fp32", "tf32", "amp_bf16", "amp_fp16"],
                   default="fp32")
    args = p.parse_args()

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo")
    model = torchvision.models.resnet18(num_classes=1000).to(device)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    y = torch.randint(0, 1000, (args.batch_size,), device=device)
    torch.backends.cuda.matmul.allow_tf32 = args.precision != "fp32"
    torch.backends.cudnn.allow_tf32 = args.precision != "fp32"
    dtype = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}.get(args.precision)
    scaler = torch.amp.GradScaler(enabled=args.precision == "amp_fp16")
    last = time.perf_counter()
    for step in range(1, args.steps + 1):
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if cuda:
            torch.cuda.synchronize()
        now = time.perf_counter()
        if rank == 0:
            rate = args.batch_size * world / (now - last)
            print(f"step {step}/{args.steps} loss {loss.item():.3f} {rate:.1f} img/s", flush=True)
        last = now
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
