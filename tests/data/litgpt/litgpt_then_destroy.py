"""litgpt's own command line, as its installed `litgpt` script runs it (`litgpt.__main__.main`),
then what litgpt's training scripts leave out: `torch.distributed.destroy_process_group()` while
the interpreter is still whole.

Without it, a rank of a multi-rank run can abort in the interpreter's teardown after its last
step ("terminate called without an active exception", `finetune_lora_2n1g_rank1_gloo_abort.log`):
gloo's worker threads still hold work whose tensors are freed once the interpreter is gone.
"""

import sys

import torch.distributed as dist
from litgpt.__main__ import main

if __name__ == "__main__":
    status = main()
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    sys.exit(status)
