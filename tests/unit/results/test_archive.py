"""`python -m toolkit.archive` and reading archives back: a manifest with checksums, no profiler
traces or links in it, the same summary after a round trip, and hostile archives refused before
anything is written."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from toolkit import archive, collect
from toolkit.results import archive as results_archive
from toolkit.results.archive import (
    MANIFEST_FILE,
    SUMS_FILE,
    ArchiveError,
    extract_archive,
    read_archive,
    write_archive,
)
from toolkit.results.safe_write import atomic_writer

DATA = Path(__file__).resolve().parents[2] / "data" / "results_quickstart"


@pytest.fixture
def results(tmp_path: Path) -> Path:
    root = tmp_path / "quickstart"
    shutil.copytree(DATA, root)
    return root


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()  # type: ignore[union-attr]
                if m.isreg()}


def test_archive_has_every_file_a_manifest_and_checksums(results: Path, tmp_path: Path) -> None:
    (results / "cases" / "bert_base-torch-fp32-1n1g-bs8" / "r0" / "profile").mkdir()
    (results / "cases" / "bert_base-torch-fp32-1n1g-bs8" / "r0" / "profile" / "x.json").write_text(
        "{}")
    (results / "cases" / "bert_base-torch-fp32-1n1g-bs8" / "r0" / "rank0.pt.trace.json"
     ).write_text("{}")
    (results / "cases" / "bert_base-torch-fp32-1n1g-bs8" / "r0" / "profile-rank000.json"
     ).write_text("{}")
    (results / "compile-cache" / "fxgraph").mkdir(parents=True)
    (results / "compile-cache" / "fxgraph" / "entry").write_bytes(b"compiled")
    (results / "elsewhere").symlink_to("/etc")
    (results / "link.json").symlink_to("/etc/hostname")
    dest = tmp_path / "out.tar.gz"
    assert archive.main([str(results), "--out", str(dest)]) == 0
    members = _members(dest)
    manifest = json.loads(members[f"quickstart/{MANIFEST_FILE}"])
    originals = sorted(p.relative_to(results).as_posix() for p in results.rglob("*")
                       if p.is_file() and not p.is_symlink())
    kept = sorted(manifest["files"])
    assert kept == [p for p in originals
                    if "profile/" not in p and not p.endswith((".pt.trace.json", "rank000.json"))
                    and not p.startswith("compile-cache/")]
    for name, entry in manifest["files"].items():
        data = members[f"quickstart/{name}"]
        assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    left_out = {e["path"]: e["why"] for e in manifest["excluded"]}
    assert left_out["elsewhere"] == left_out["link.json"] == "symbolic link (not followed)"
    assert left_out["cases/bert_base-torch-fp32-1n1g-bs8/r0/rank0.pt.trace.json"] == (
        "profiler trace")
    assert left_out["cases/bert_base-torch-fp32-1n1g-bs8/r0/profile-rank000.json"] == (
        "profiler trace")
    assert left_out["compile-cache/fxgraph/entry"].startswith("the grid's compile cache")
    sums = members[f"quickstart/{SUMS_FILE}"].decode().splitlines()
    assert sums == [f"{v['sha256']}  {k}" for k, v in manifest["files"].items()]


def test_existing_archive_is_not_overwritten(results: Path, tmp_path: Path, capsys) -> None:
    dest = tmp_path / "out.tar.gz"
    dest.write_bytes(b"mine")
    assert archive.main([str(results), "--out", str(dest)]) == 2
    assert dest.read_bytes() == b"mine"
    assert "exists; nothing overwritten" in capsys.readouterr().err


def test_a_directory_that_is_not_results_is_refused(tmp_path: Path, capsys) -> None:
    (tmp_path / "notes").mkdir()
    assert archive.main([str(tmp_path / "notes")]) == 2
    assert "not a results directory" in capsys.readouterr().err
    assert not (tmp_path / "notes.tar.gz").exists()


def test_round_trip_gives_the_same_summary(results: Path, tmp_path: Path) -> None:
    assert collect.main([str(results), "--no-plots", "--quiet"]) == 0
    assert archive.main([str(results)]) == 0  # default: beside it
    packed = results.parent / "quickstart.tar.gz"
    out = tmp_path / "again"
    assert collect.main(["--import-logs", str(packed), "--out", str(out), "--no-plots",
                         "--quiet"]) == 0
    assert (out / "summary.csv").read_text() == (results / "summary.csv").read_text()
    runs = (out / "runs.csv").read_text()
    assert f"{packed}:quickstart/cases/bert_base-torch-fp32-1n1g-bs8/r0" in runs


def _hostile(tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    path = tmp_path / "hostile.tar.gz"
    path.write_bytes(buffer.getvalue())
    return path


def _manifest(files: dict[str, bytes]) -> bytes:
    return json.dumps({"format": "trainbench-archive", "version": 1, "files": {
        k: {"bytes": len(v), "sha256": hashlib.sha256(v).hexdigest()}
        for k, v in files.items()}}).encode()


def _file(name: str) -> tarfile.TarInfo:
    return tarfile.TarInfo(name)


@pytest.mark.parametrize(("name", "why"), [
    ("/etc/evil", "absolute name"),
    ("g/../../evil", "'..'"),
    ("g/cases/../../evil", "'..'"),
])
def test_names_that_leave_the_target_are_refused(tmp_path: Path, name: str, why: str) -> None:
    path = _hostile(tmp_path, [(_file("g/" + MANIFEST_FILE), _manifest({})),
                               (_file(name), b"x")])
    target = tmp_path / "target"
    target.mkdir()
    with pytest.raises(ArchiveError, match=why):
        extract_archive(path, target)
    assert list(target.iterdir()) == []
    assert not (tmp_path / "evil").exists()


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE])
def test_links_and_devices_are_refused(tmp_path: Path, kind: bytes) -> None:
    link = _file("g/cases/x")
    link.type, link.linkname = kind, "/etc/passwd"
    path = _hostile(tmp_path, [(_file("g/" + MANIFEST_FILE), _manifest({})), (link, b"")])
    target = tmp_path / "target"
    target.mkdir()
    with pytest.raises(ArchiveError, match="regular files only"):
        extract_archive(path, target)
    assert list(target.iterdir()) == []


def test_altered_file_is_refused(results: Path, tmp_path: Path) -> None:
    assert archive.main([str(results)]) == 0
    packed = results.parent / "quickstart.tar.gz"
    members = _members(packed)
    name = "quickstart/cases/bert_base-torch-fp32-1n1g-bs8/r0/rank000.jsonl"
    members[name] = members[name].replace(b'"iteration":1,', b'"iteration":7,', 1)
    bad = _hostile(tmp_path, [(_file(k), v) for k, v in members.items()])
    with pytest.raises(ArchiveError, match=re.escape("rank000.jsonl: sha256 differs")):
        read_archive(bad)


def test_file_missing_from_manifest_or_archive_is_refused(tmp_path: Path) -> None:
    extra = _hostile(tmp_path, [(_file("g/" + MANIFEST_FILE), _manifest({})),
                                (_file("g/cases/x.json"), b"{}")])
    with pytest.raises(ArchiveError, match=re.escape("g/cases/x.json is not in MANIFEST.json")):
        read_archive(extra)
    missing = _hostile(tmp_path, [(_file("g/" + MANIFEST_FILE), _manifest({"a": b"1"}))])
    with pytest.raises(ArchiveError, match=re.escape("1 file(s) of MANIFEST.json missing")):
        read_archive(missing)


def test_not_an_archive_of_ours(tmp_path: Path, capsys) -> None:
    plain = _hostile(tmp_path, [(_file("g/data.txt"), b"x")])
    with pytest.raises(ArchiveError, match=re.escape("no MANIFEST.json")):
        read_archive(plain)
    assert collect.main(["--import-logs", str(plain), "--out", str(tmp_path / "o")]) == 2
    assert "no MANIFEST.json" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "o" / "runs.csv")


def test_extraction_never_reuses_a_directory(results: Path, tmp_path: Path) -> None:
    assert archive.main([str(results)]) == 0
    target = tmp_path / "target"
    (target / "quickstart").mkdir(parents=True)
    with pytest.raises(ArchiveError, match="exists"):
        extract_archive(results.parent / "quickstart.tar.gz", target)


T = TypeVar("T")


def _with_peak_memory(call: Callable[[], T]) -> tuple[T, int]:
    """What `call` returns, and Python's peak traced allocation while it ran."""
    tracemalloc.start()
    try:
        got = call()
        return got, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_archive_is_streamed_not_built_in_memory(results: Path, tmp_path: Path) -> None:
    # 24 MiB of incompressible data in one run file: the archive is written a chunk at a time,
    # so Python's peak allocation stays far below the file's size.
    big = results / "cases" / "bert_base-torch-fp32-1n1g-bs8" / "r0" / "big.bin"
    big.write_bytes(os.urandom(24 << 20))
    dest = tmp_path / "big.tar.gz"
    result, peak = _with_peak_memory(lambda: write_archive(results, dest))
    assert result.bytes > 24 << 20
    assert peak < 8 << 20, f"peak {peak} bytes"
    target = tmp_path / "target"
    target.mkdir()
    back, peak = _with_peak_memory(lambda: extract_archive(dest, target))
    assert peak < 8 << 20, f"peak {peak} bytes"
    assert (back / big.relative_to(results)).read_bytes() == big.read_bytes()


def test_file_changed_while_archiving_leaves_no_archive(results: Path, tmp_path: Path,
                                                        monkeypatch) -> None:
    real = results_archive._file_digest

    def stale(path: Path) -> tuple[int, str]:
        size, sha = real(path)
        return (size, "0" * 64) if path.name == "meta.json" else (size, sha)

    monkeypatch.setattr(results_archive, "_file_digest", stale)
    dest = tmp_path / "out.tar.gz"
    with pytest.raises(ArchiveError, match=re.escape("meta.json: changed while being archived")):
        write_archive(results, dest)
    assert not dest.exists()
    assert list(tmp_path.glob(".out.tar.gz.*")) == []  # no temporary left behind


def test_archive_over_the_size_limit_is_refused(results: Path, tmp_path: Path,
                                                capsys) -> None:
    # A legitimate archive read with a limit below its content: refused by name and limit,
    # before anything is written.
    assert archive.main([str(results)]) == 0
    packed = results.parent / "quickstart.tar.gz"
    _, _, manifest = read_archive(packed)
    total = sum(entry["bytes"] for entry in manifest["files"].values())
    target = tmp_path / "target"
    target.mkdir()
    with pytest.raises(ArchiveError) as caught:
        extract_archive(packed, target, limit_bytes=total // 2)
    message = str(caught.value)
    assert str(packed) in message and f"limit of {total // 2} bytes" in message
    assert "gzip bomb" in message
    assert list(target.iterdir()) == []
    # The limit holds for the whole unpacked stream: headers and padding count too.
    unpacked = len(gzip.decompress(packed.read_bytes()))
    with pytest.raises(ArchiveError, match="of the unpacked stream"):
        extract_archive(packed, target, limit_bytes=total + 1000)
    assert list(target.iterdir()) == []
    assert extract_archive(packed, target, limit_bytes=unpacked).name == "quickstart"


def test_gzip_bomb_is_refused_from_its_headers(tmp_path: Path, capsys) -> None:
    # A member that claims 64 GiB: refused from its header, its data never read.
    info = tarfile.TarInfo("g/cases/bomb.bin")
    info.size = 64 << 30
    bomb = tmp_path / "bomb.tar.gz"
    bomb.write_bytes(gzip.compress(info.tobuf(tarfile.PAX_FORMAT) + bytes(1 << 20)))
    with pytest.raises(ArchiveError, match=re.escape(f"{bomb}: members up to "
                                                     "'g/cases/bomb.bin' add up to")):
        read_archive(bomb)
    # 40 MiB of zeros in 40 KiB under a 16 MiB limit, through collect: exit 2, nothing written.
    zeros = tmp_path / "zeros.tar.gz"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.addfile(_file("g/" + MANIFEST_FILE), io.BytesIO(b""))
        big = _file("g/cases/zeros.bin")
        big.size = 40 << 20
        tar.addfile(big, io.BytesIO(bytes(40 << 20)))
    zeros.write_bytes(buffer.getvalue())
    assert zeros.stat().st_size < 1 << 20
    with pytest.raises(ArchiveError, match=r"limit of 16777216 bytes \(0\.0156 GiB\)"):
        read_archive(zeros, limit_bytes=16 << 20)
    assert collect.main(["--import-logs", str(bomb), "--out", str(tmp_path / "o")]) == 2
    assert "refused as a possible gzip bomb" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "o" / "runs.csv")


def test_archive_published_without_replacing_a_file_that_appeared_meanwhile(
        tmp_path: Path) -> None:
    # atomic_writer(replace=False) publishes with a hard link: a file created at the target
    # while the archive was being written is kept, and the temporary is removed.
    dest = tmp_path / "out.tar.gz"
    with pytest.raises(FileExistsError), atomic_writer(dest, root=tmp_path,
                                                       replace=False) as fh:
        fh.write(b"archive")
        dest.write_bytes(b"someone else's")
    assert dest.read_bytes() == b"someone else's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.tar.gz"]


def test_too_many_members_are_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(results_archive, "MAX_MEMBERS", 2)
    many = _hostile(tmp_path, [(_file(f"g/cases/{i}.json"), b"{}") for i in range(3)])
    with pytest.raises(ArchiveError, match="more than 2 members"):
        read_archive(many)


# ---------------------------------------------------------------------------------------------
# Header data, foreign layouts, manifests of the wrong shape and nested duplicates: a clean
# error naming the member, exit 2 from collect and nothing written; never a traceback.


def _refused_by_collect(path: Path, tmp_path: Path, capsys, message: str) -> None:
    out = tmp_path / "report"
    assert collect.main(["--import-logs", str(path), "--out", str(out), "--no-plots",
                         "--no-store"]) == 2
    err = capsys.readouterr().err
    assert message in " ".join(err.split()) and "Traceback" not in err
    assert not out.exists()


def _valid(files: dict[str, bytes], info: Callable[[str], tarfile.TarInfo] = _file
           ) -> list[tuple[tarfile.TarInfo, bytes]]:
    """Members of an archive that is right in every other respect: `g/MANIFEST.json` lists
    `files`."""
    return [(_file("g/" + MANIFEST_FILE), _manifest(files)),
            *((info("g/" + name), data) for name, data in files.items())]


def test_the_size_limit_counts_extended_headers_not_only_member_data(tmp_path: Path,
                                                                      capsys) -> None:
    def with_pax_header(name: str) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.pax_headers = {"comment": "x" * 600_000}
        return info

    files = {f"cases/{i}.json": b"{}" for i in range(4)}
    members = _valid(files, with_pax_header)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = tmp_path / "headers.tar.gz"
    path.write_bytes(buffer.getvalue())
    assert sum(len(d) for _, d in members) < 1000  # the members' data alone is far under
    with pytest.raises(ArchiveError, match=r"headers\.tar\.gz: the archive's contents would "
                                           r"reach byte \d+ of the unpacked stream"):
        read_archive(path, limit_bytes=1 << 20)
    assert read_archive(path, limit_bytes=4 << 20)[1].keys() == files.keys()


def test_a_long_name_header_over_its_limit_is_refused_before_it_is_read(tmp_path: Path,
                                                                         capsys) -> None:
    name = "g/cases/" + "n" * (2 << 20)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        tar.addfile(_file("g/" + MANIFEST_FILE), io.BytesIO(b""))
        long = _file(name)
        long.size = 1
        tar.addfile(long, io.BytesIO(b"x"))
    path = tmp_path / "longname.tar.gz"
    path.write_bytes(buffer.getvalue())
    with pytest.raises(ArchiveError, match=r"a header of \d+ bytes at byte 1024 \(a long name "
                                           r"or an extended header\), more than the limit"):
        read_archive(path)
    _refused_by_collect(path, tmp_path, capsys, "more than the limit of 1048576 bytes for one")


def test_an_archive_made_with_tar_c_dir_dot_is_refused_naming_the_member(
        results: Path, tmp_path: Path, capsys) -> None:
    import subprocess

    assert archive.main([str(results)]) == 0
    extracted = tmp_path / "x"
    extracted.mkdir()
    extract_archive(results.parent / "quickstart.tar.gz", extracted)
    dotted = tmp_path / "dotted.tar.gz"
    subprocess.run(["tar", "-C", str(extracted / "quickstart"), "-czf", str(dotted), "."],
                   check=True)
    with pytest.raises(ArchiveError, match=r"member '\./?' starts with '\.' \(an archive made "
                                           r"with `tar -C dir \.`\?\)"):
        read_archive(dotted)
    _refused_by_collect(dotted, tmp_path, capsys, "starts with '.' (an archive made with")


@pytest.mark.parametrize(("entry", "shown"), [
    ("abc", "'abc'"),
    ({"bytes": 2, "sha256": 5}, "{'bytes': 2, 'sha256': 5}"),
    ({"bytes": "2", "sha256": hashlib.sha256(b"{}").hexdigest()}, "{'bytes': '2', 'sha256'"),
    (None, "None"),
])
def test_a_manifest_of_the_wrong_shape_is_refused_naming_the_entry(
        tmp_path: Path, capsys, entry: object, shown: str) -> None:
    manifest = json.loads(_manifest({"cases/x.json": b"{}"}))
    manifest["files"]["cases/x.json"] = entry
    path = _hostile(tmp_path, [(_file("g/" + MANIFEST_FILE), json.dumps(manifest).encode()),
                               (_file("g/cases/x.json"), b"{}")])
    with pytest.raises(ArchiveError, match=re.escape(f"the entry of 'cases/x.json' is {shown}")):
        read_archive(path)
    _refused_by_collect(path, tmp_path, capsys, "the entry of 'cases/x.json' is")


@pytest.mark.parametrize(("names", "message"), [
    (["cases/x", "cases/x/y"], "member 'g/cases/x/y' is inside 'g/cases/x', which is a file"),
    (["cases/x/y", "cases/x"], "member 'g/cases/x' is a file and a folder of the same name"),
    (["cases/./x", "cases/x"], "member 'g/cases/./x' has '..', '.' or an empty part"),
    (["cases/x", "cases/x/"], "member 'g/cases/x' is a folder and a file of the same name"),
])
def test_nested_duplicates_are_refused_naming_the_member(tmp_path: Path, capsys,
                                                        names: list[str], message: str) -> None:
    members = [(_file("g/" + MANIFEST_FILE), _manifest({n: b"1" for n in names
                                                        if not n.endswith("/")}))]
    for name in names:
        info = _file("g/" + name)
        if name.endswith("/"):
            info.type = tarfile.DIRTYPE
        members.append((info, b"" if info.isdir() else b"1"))
    path = _hostile(tmp_path, members)
    target = tmp_path / "target"
    target.mkdir()
    with pytest.raises(ArchiveError, match=re.escape(message)):
        extract_archive(path, target)
    assert list(target.iterdir()) == []
    _refused_by_collect(path, tmp_path, capsys, message)


def test_files_left_out_are_summarised_per_reason(results: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Forty lock files give one line with their count, not forty lines; a lone profiler trace
    keeps its own line."""
    run = results / "cases" / "bert_base-torch-fp32-1n1g-bs8" / "r0"
    for k in range(40):
        (run / f".rank{k:03d}.lock").write_text("")
    (run / "rank0.pt.trace.json").write_text("{}")
    assert archive.main([str(results), "--out", str(tmp_path / "out.tar.gz")]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        "left out 40 files (lock or temporary file), e.g. "
        "cases/bert_base-torch-fp32-1n1g-bs8/r0/.rank000.lock",
        "left out cases/bert_base-torch-fp32-1n1g-bs8/r0/rank0.pt.trace.json: profiler trace"]
    assert "41 left out, each listed in MANIFEST.json" in out
