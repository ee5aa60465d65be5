"""BERT pretraining with nothing around it: the plain-script counterpart of
`toolkit/workloads/pytorch/bert.py` for `overhead.py`. transformers' BertModel with SDPA, the
pretraining heads with the masked-LM head on the masked positions only, the loss inside the
(compiled) module, fused AdamW (lr 1e-4, no weight decay on biases and LayerNorm), one fixed
synthetic batch. mpirun + mpi4py for ranks, DDP over NCCL; the clock is read after a device
synchronisation at both ends of the measured window. Imports nothing from the toolkit.

    python benchmarks/bare_bert.py --batch-size 256 --seq-len 128 --precision amp_bf16 --compile
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import time
from typing import Any


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--masked", type=int, default=None, help="default: 20 at 128, 80 at 512")
    p.add_argument("--precision", choices=["fp32", "tf32", "amp_bf16", "amp_fp16"],
                   default="amp_bf16")
    p.add_argument("--loss-scaling", choices=["dynamic", "static"], default="dynamic")
    p.add_argument("--static-loss-scale", type=float, default=128.0)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--profile", type=int, default=0, metavar="N")
    p.add_argument("--sdpa", choices=["auto", "flash", "efficient", "cudnn", "math"],
                   default="auto", help="SDPA backend to force (auto: torch's choice)")
    p.add_argument("--attention-dropout", type=float, default=0.1)
    p.add_argument("--sdpa-mask", action="store_true",
                   help="transformers' own sdpa attention (may pass an all-True mask)")
    args = p.parse_args()
    masked = args.masked or max(1, round(args.seq_len * 20 / 128))  # 20 at 128, 80 at 512

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
    port = None
    if rank == 0:
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
    port = comm.bcast(port, root=0)

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from transformers import BertConfig, BertForPreTraining

    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    tf32 = args.precision != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.manual_seed(1234)
    config = BertConfig(max_position_embeddings=max(512, args.seq_len),
                        attention_probs_dropout_prob=args.attention_dropout,
                        attn_implementation="sdpa")
    # As the toolkit's BERT (torch_bert.unpadded_sdpa): SDPA registered under another name gets
    # no attention mask, so the flash kernel runs (transformers' "sdpa" may build an all-True
    # mask under torch.compile, which sends dropout attention to the math path). `--sdpa-mask`
    # keeps transformers' "sdpa".
    if not args.sdpa_mask:
        from transformers import AttentionInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        AttentionInterface.register("sdpa_unpadded", sdpa_attention_forward)
    config._attn_implementation = "sdpa" if args.sdpa_mask else "sdpa_unpadded"
    pre = BertForPreTraining(config)

    class Pretraining(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert, self.cls = pre.bert, pre.cls

        def forward(self, ids: torch.Tensor, types: torch.Tensor, pos: torch.Tensor,
                    labels: torch.Tensor, nsp: torch.Tensor) -> torch.Tensor:
            out = self.bert(input_ids=ids, token_type_ids=types)
            seq = out.last_hidden_state
            picked = torch.gather(seq, 1, pos.unsqueeze(-1).expand(-1, -1, seq.size(-1)))
            logits = self.cls.predictions(picked)
            return (F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
                    + F.cross_entropy(self.cls.seq_relationship(out.pooler_output).float(), nsp))

    module = Pretraining().to(dev)
    decay = [q for q in module.parameters() if q.ndim > 1]
    no_decay = [q for q in module.parameters() if q.ndim <= 1]
    model: Any = module
    if world > 1:
        dist.init_process_group("nccl", rank=rank, world_size=world,
                                init_method=f"tcp://127.0.0.1:{port}", device_id=dev)
        model = torch.nn.parallel.DistributedDataParallel(module, device_ids=[local],
                                                          gradient_as_bucket_view=True)
    if args.compile:
        model = torch.compile(model, dynamic=False)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-4, fused=True)

    gen = torch.Generator().manual_seed(1234000 + rank)
    b, s = args.batch_size, args.seq_len
    ids = torch.randint(0, config.vocab_size, (b, s), generator=gen)
    types = torch.zeros(b, s, dtype=torch.long)
    types[:, s // 2:] = 1
    pos = torch.stack([torch.randperm(s, generator=gen)[:masked].sort().values for _ in range(b)])
    labels = torch.gather(ids, 1, pos)
    ids.scatter_(1, pos, 103)
    nsp = torch.randint(0, 2, (b,), generator=gen)
    batch = [t.to(dev) for t in (ids, types, pos, labels, nsp)]
    amp = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}.get(args.precision)
    fp16 = args.precision == "amp_fp16"
    scaler = torch.amp.GradScaler("cuda") if fp16 and args.loss_scaling == "dynamic" else None
    static = args.static_loss_scale if fp16 and args.loss_scaling == "static" else None
    params = decay + no_decay

    def sdpa_context() -> Any:
        if args.sdpa == "auto":
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION,
                            "efficient": SDPBackend.EFFICIENT_ATTENTION,
                            "cudnn": SDPBackend.CUDNN_ATTENTION,
                            "math": SDPBackend.MATH}[args.sdpa])

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None), \
                sdpa_context():
            loss = model(*batch)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            return
        if static is not None:
            (loss * static).backward()
            torch._foreach_mul_([q.grad for q in params], 1.0 / static)
        else:
            loss.backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        step()
    torch.cuda.synchronize()
    span = time.perf_counter() - t0
    spans = comm.gather(span, root=0)
    if rank == 0:
        assert spans is not None
        tput = b * world * args.iters / max(spans)
        print(json.dumps({"bare_throughput_sps": tput, "world": world, "pid": os.getpid(),
                          "compile": args.compile, "precision": args.precision,
                          "masked_positions": masked, "sdpa": args.sdpa,
                          "attention_dropout": args.attention_dropout,
                          "attention": config._attn_implementation}), flush=True)
    if args.profile:
        from _profile import print_profiles  # benchmarks/_profile.py, beside this script

        print_profiles(comm, step, args.profile)
    if world > 1:
        comm.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
