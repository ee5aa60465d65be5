"""`python -m toolkit.container build`: a podman image for running cases in a container on this
machine, made from Debian's packages alone (no registry), and the container block that runs a
case in it with this machine's Python environment.

    python -m toolkit.container build [--image NAME] [--rebuild]
"""

from __future__ import annotations

import argparse
import sys

import yaml

from toolkit import PROJECT_ROOT, interruptible
from toolkit.launch.podman_image import DEFAULT_IMAGE, ImageError, build, host_python_mounts


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trainbench container", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the image with mmdebstrap and podman import (about "
                                     "a minute; apt-get installs podman and mmdebstrap when "
                                     "missing)")
    b.add_argument("--image", default=DEFAULT_IMAGE, help=f"image name (default {DEFAULT_IMAGE})")
    b.add_argument("--rebuild", action="store_true", help="build even when the image exists")
    return p


@interruptible
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        built = build(args.image, rebuild=args.rebuild)
    except (ImageError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if built is None:
        print(f"{args.image} exists (--rebuild builds it again)")
    else:
        print(f"built {built.image} ({built.digest}) in {built.seconds:.0f} s")
    block = {"container": {"runtime": "podman", "image": args.image,
                           "python": sys.executable, "mounts": host_python_mounts()}}
    print("a case runs in it, with this machine's Python environment "
          f"(the project {PROJECT_ROOT} and the results directory are mounted), with:")
    print(yaml.safe_dump(block, sort_keys=False).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
