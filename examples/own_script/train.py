"""An ordinary data-parallel training script, as `torchrun --nproc-per-node=N train.py` runs it:
nothing in it knows trainbench. trainbench's own-script example (examples/own_script.yaml) runs
it unchanged, one process per GPU, with the environment torchrun would give it.

It trains a torchvision ResNet (`--arch`, ResNet-18 by default) on synthetic images and prints
one line per step: `step 12/120 loss 6.91 1234.5 img/s` (what the grid's pattern reads), or with
`--log-style imagenet` pytorch/examples ImageNet's `Epoch: [0][ 11/120]\tTime 0.207 (0.210) ...`
(a log family trainbench reads without a pattern).
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
    p.add_argument("--arch", choices=["resnet18", "resnet50"], default="resnet18")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--log-style", choices=["plain", "imagenet"], default="plain")
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
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = getattr(torchvision.models, args.arch)(num_classes=1000).to(
        device, memory_format=memory_format)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if args.compile:
        model = torch.compile(model)
    x = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device
                    ).contiguous(memory_format=memory_format)
    y = torch.randint(0, 1000, (args.batch_size,), device=device)
    torch.backends.cuda.matmul.allow_tf32 = args.precision != "fp32"
    torch.backends.cudnn.allow_tf32 = args.precision != "fp32"
    dtype = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}.get(args.precision)
    scaler = torch.amp.GradScaler(enabled=args.precision == "amp_fp16")
    last = time.perf_counter()
    total = 0.0
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
        step_s, last = now - last, now
        total += step_s
        if rank == 0 and args.log_style == "imagenet":
            print(f"Epoch: [0][{step - 1:4d}/{args.steps}]\tTime {step_s:.3f} "
                  f"({total / step:.3f})\tData 0.000 (0.000)\tLoss {loss.item():.4e} "
                  f"({loss.item():.4e})", flush=True)
        elif rank == 0:
            rate = args.batch_size * world / step_s
            print(f"step {step}/{args.steps} loss {loss.item():.3f} {rate:.1f} img/s", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
